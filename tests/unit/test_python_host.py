#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The ctypes module (python/humming_moe.py) on the host backend, with no numpy or torch.

A tiny w4a16 MoE layer is built in Python in the canonical contract (u4 codes packed
LSB-first along K, bf16 scales and u4 zero points per 128 columns, zeros packed along
N), loaded through the module from ctypes arrays, and run with router logits and with
caller top-k ids; a direct Python loop over the unpacked codes, rounding to bf16 where
the layer does, is the reference. Then the bf16 scheme through quantize, presets, the
torch tensor protocol (a stand-in over ctypes arrays), the struct mirrors, and refused
calls. HUMMING_LIBHUMMING names the library.
"""
import ctypes
import math
import os
import random
import struct
import sys
import time
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
import humming_moe as hm  # noqa: E402

H, I, E, TOP_K, T, G = 128, 128, 4, 2, 3, 128
SEED = int(os.environ.get("HUMMING_TEST_SEED", time.time_ns() % (1 << 31)))
print(f"# test_python_host seed {SEED} (HUMMING_TEST_SEED replays it)")


def bf16_bits(x):
    b = struct.unpack("<I", struct.pack("<f", x))[0]
    return ((b + 0x7FFF + ((b >> 16) & 1)) >> 16) & 0xFFFF


def bf16_value(bits):
    return struct.unpack("<f", struct.pack("<I", bits << 16))[0]


def bf16(x):
    return bf16_value(bf16_bits(x))


def u32_array(values):
    return (ctypes.c_uint32 * len(values))(*values)


def u16_array(values):
    return (ctypes.c_uint16 * len(values))(*values)


def f32_array(values):
    return (ctypes.c_float * len(values))(*values)


class W4A16:
    """Random codes, scales and zero points of (E, N, K), packed and dequantized."""

    def __init__(self, rng, n, k):
        self.n, self.k, groups = n, k, k // G
        self.q = [[[rng.randrange(16) for _ in range(k)] for _ in range(n)] for _ in range(E)]
        self.s = [[[bf16_bits(rng.uniform(0.5, 1.5) * 0.25 / math.sqrt(k)) for _ in range(groups)] for _ in range(n)]
                  for _ in range(E)]
        self.z = [[[rng.choice((7, 8, 9)) for _ in range(n)] for _ in range(groups)] for _ in range(E)]

    def arrays(self):
        qweight, scales, zeros = [], [], []
        for e in range(E):
            for row in self.q[e]:
                qweight += [sum(row[w * 8 + i] << (4 * i) for i in range(8)) for w in range(self.k // 8)]
            for row in self.s[e]:
                scales += row
            for row in self.z[e]:
                zeros += [sum(row[w * 8 + i] << (4 * i) for i in range(8)) for w in range(self.n // 8)]
        return {"qweight": u32_array(qweight), "scales": u16_array(scales), "zeros": u32_array(zeros)}

    def dequantized(self, e):
        return [[(self.q[e][n][k] - self.z[e][k // G][n]) * bf16_value(self.s[e][n][k // G]) for k in range(self.k)]
                for n in range(self.n)]


def softmax_topk(logits, renormalize):
    m = max(logits)
    p = [math.exp(v - m) for v in logits]
    total = sum(p)
    p = [v / total for v in p]
    ids = sorted(range(E), key=lambda e: (-logits[e], e))[:TOP_K]
    w = [p[e] for e in ids]
    if renormalize:
        w = [v / sum(w) for v in w]
    return ids, w


def expert(gate_up, down, x):
    """One expert on one token: bf16 after gate_up, after SiLU(g)*u and after down."""
    h1 = [bf16(sum(a * b for a, b in zip(row, x))) for row in gate_up]
    h2 = [bf16(g / (1.0 + math.exp(-g)) * u) for g, u in zip(h1[:I], h1[I:])]
    return [bf16(sum(a * b for a, b in zip(row, h2))) for row in down]


def reference(gate_up, down, x_rows, ids, weights):
    y = []
    for t, x in enumerate(x_rows):
        acc = [0.0] * H
        for e, w in zip(ids[t], weights[t]):
            if e < 0:
                continue
            out = expert(gate_up[e], down[e], x)
            acc = [a + w * o for a, o in zip(acc, out)]
        y += [bf16(v) for v in acc]
    return y


def rel_error(got, want):
    num = sum((g - w) ** 2 for g, w in zip(got, want))
    den = sum(w * w for w in want)
    return math.sqrt(num / den)


class FakeTensor:
    """The part of torch.Tensor the module reads, over a ctypes array."""

    class Device:
        def __init__(self, spec):
            self.type, _, index = spec.partition(":")
            self.index = int(index) if index else None

    def __init__(self, array, dtype, device="cpu", contiguous=True):
        self.array, self.dtype, self.device, self.contiguous = array, dtype, self.Device(device), contiguous

    def data_ptr(self):
        return ctypes.addressof(self.array)

    def numel(self):
        return len(self.array)

    def element_size(self):
        return ctypes.sizeof(self.array._type_)

    def is_contiguous(self):
        return self.contiguous


class HostModule(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.rng = random.Random(SEED)
        cls.eng = hm.Engine(backend="host")
        cls.x_bits = [bf16_bits(cls.rng.gauss(0, 1)) for _ in range(T * H)]
        cls.x_rows = [[bf16_value(b) for b in cls.x_bits[t * H:(t + 1) * H]] for t in range(T)]
        cls.logits = [cls.rng.gauss(0, 1) for _ in range(T * E)]

    @classmethod
    def tearDownClass(cls):
        cls.eng.close()

    def forward(self, layer, **routing):
        y = u16_array([0] * (T * H))
        layer.forward(u16_array(self.x_bits), y, **routing)
        self.eng.synchronize()
        return [bf16_value(b) for b in y]

    def test_w4a16_load_matches_python_loop(self):
        gu, dn = W4A16(self.rng, 2 * I, H), W4A16(self.rng, H, I)
        layer = hm.MoeLayer(self.eng, {"hidden": H, "intermediate": I, "experts": E, "top_k": TOP_K,
                                       "scoring": "softmax", "renormalize": True, "scheme": "w4a16"})
        layer.load(gu.arrays(), dn.arrays())
        layer.transform()
        gate_up = [gu.dequantized(e) for e in range(E)]
        down = [dn.dequantized(e) for e in range(E)]

        routed = [softmax_topk(self.logits[t * E:(t + 1) * E], True) for t in range(T)]
        want = reference(gate_up, down, self.x_rows, [r[0] for r in routed], [r[1] for r in routed])
        got = self.forward(layer, router_logits=f32_array(self.logits))
        err = rel_error(got, want)
        print(f"# w4a16, router logits: rel_err {err:.3g}")
        self.assertLess(err, 1e-2)
        self.assertEqual(layer.stats()["tokens"], T)

        ids = [[self.rng.randrange(E), -1] for _ in range(T)]
        weights = [[self.rng.uniform(0.1, 1.0), 0.5] for _ in range(T)]
        want = reference(gate_up, down, self.x_rows, ids, weights)
        got = self.forward(layer, topk_ids=(ctypes.c_int32 * (T * TOP_K))(*sum(ids, [])),
                           topk_weights=f32_array(sum(weights, [])))
        err = rel_error(got, want)
        print(f"# w4a16, caller ids with -1: rel_err {err:.3g}")
        self.assertLess(err, 1e-2)
        layer.close()

    def test_bf16_quantize_matches_python_loop(self):
        # bf16-representable f32 weights: "quantizing" to the bf16 scheme keeps them exactly.
        gate_up = [[[bf16(self.rng.gauss(0, 1) / math.sqrt(H)) for _ in range(H)] for _ in range(2 * I)]
                   for _ in range(E)]
        down = [[[bf16(self.rng.gauss(0, 1) / math.sqrt(I)) for _ in range(I)] for _ in range(H)] for _ in range(E)]
        flat = lambda w: f32_array([v for m in w for row in m for v in row])  # noqa: E731
        layer = hm.MoeLayer(self.eng, hidden=H, intermediate=I, experts=E, top_k=TOP_K, layout="masked")
        layer.quantize(flat(gate_up), flat(down))
        layer.transform()
        routed = [softmax_topk(self.logits[t * E:(t + 1) * E], False) for t in range(T)]
        want = reference(gate_up, down, self.x_rows, [r[0] for r in routed], [r[1] for r in routed])
        got = self.forward(layer, router_logits=f32_array(self.logits))
        err = rel_error(got, want)
        print(f"# bf16 via quantize, masked layout: rel_err {err:.3g}")
        self.assertLess(err, 1e-2)
        self.assertEqual(layer.stats()["layout"], "masked")
        layer.close()

    def test_presets_and_sizes(self):
        cfg = hm.moe_config("deepseek-v3", scheme="w4a16")
        self.assertEqual((cfg.hidden, cfg.intermediate, cfg.router.experts, cfg.router.top_k), (7168, 2048, 256, 8))
        self.assertEqual(cfg.scheme.weight.group_k, 128)
        layer = hm.MoeLayer(self.eng, hidden=H, intermediate=I, experts=E, top_k=TOP_K, scheme="w4a16")
        gu, dn = layer.weights_bytes()
        self.assertEqual(gu, {"qweight": E * 2 * I * H // 2, "scales": E * 2 * I * (H // G) * 2,
                              "zeros": E * (H // G) * 2 * I // 2, "global_scale": 0})
        self.assertEqual(dn["qweight"], E * H * I // 2)
        layer.close()

    def test_refusals_name_the_value(self):
        with self.assertRaisesRegex(ValueError, "unknown MoE config key"):
            hm.moe_config({"hiden": 4})
        with self.assertRaisesRegex(ValueError, "layout='diagonal'"):
            hm.moe_config(layout="diagonal")
        with self.assertRaises(hm.Error) as ctx:
            hm.moe_config("no-such-model")
        self.assertEqual(ctx.exception.status_name, "INVALID_ARGUMENT")
        self.assertIn("no-such-model", ctx.exception.message)

        layer = hm.MoeLayer(self.eng, hidden=H, intermediate=I, experts=E, top_k=TOP_K, scheme="w4a16")
        gu, dn = W4A16(self.rng, 2 * I, H).arrays(), W4A16(self.rng, H, I).arrays()
        short = dict(gu, qweight=u32_array([0] * 8))
        with self.assertRaisesRegex(ValueError, r"gate_up\['qweight'\]: 32 bytes, expected"):
            layer.load(short, dn)
        with self.assertRaisesRegex(ValueError, r"down\['zeros'\] is required"):
            layer.load(gu, {k: v for k, v in dn.items() if k != "zeros"})
        with self.assertRaisesRegex(ValueError, "dtype f32, expected i32"):
            layer.load(dict(gu, qweight=f32_array([0.0] * (len(gu["qweight"])))), dn)
        y = u16_array([0] * H)
        with self.assertRaises(hm.Error) as ctx:
            layer.forward(u16_array([0] * H), y, router_logits=f32_array([0.0] * E))
        self.assertEqual(ctx.exception.status_name, "NOT_READY")
        self.assertIn("transform", ctx.exception.message)
        with self.assertRaisesRegex(ValueError, "router_logits: 4 bytes"):
            layer.forward(u16_array([0] * H), y, router_logits=f32_array([0.0]))
        with self.assertRaisesRegex(TypeError, "data_ptr"):
            layer.forward([0] * H, y, router_logits=f32_array([0.0] * E))
        layer.close()
        with self.assertRaisesRegex(ValueError, "closed"):
            layer.transform()

    def test_torch_like_tensors(self):
        layer = hm.MoeLayer(self.eng, hidden=H, intermediate=I, experts=E, top_k=TOP_K, scheme="w4a16")
        layer.load(W4A16(self.rng, 2 * I, H).arrays(), W4A16(self.rng, H, I).arrays())
        layer.transform()
        want = self.forward(layer, router_logits=f32_array(self.logits))
        x = FakeTensor(u16_array(self.x_bits), "torch.bfloat16")
        y = FakeTensor(u16_array([0] * (T * H)), "torch.bfloat16")
        layer.forward(x, y, router_logits=FakeTensor(f32_array(self.logits), "torch.float32"))
        self.assertEqual([bf16_value(b) for b in y.array], want)
        logits_on_gpu = FakeTensor(f32_array(self.logits), "torch.float32", "cuda:0")
        with self.assertRaisesRegex(ValueError, "router_logits: in cuda:0, expected host memory"):
            layer.forward(x, y, router_logits=logits_on_gpu)
        with self.assertRaisesRegex(ValueError, "x: dtype f16, expected bf16"):
            layer.forward(FakeTensor(x.array, "torch.float16"), y, router_logits=f32_array(self.logits))
        with self.assertRaisesRegex(ValueError, "y: the tensor must be contiguous"):
            layer.forward(x, FakeTensor(y.array, "torch.bfloat16", contiguous=False), router_logits=logits_on_gpu)
        layer.close()

    def test_engine_close_closes_its_layers(self):
        eng = hm.Engine(backend="host")
        layer = hm.MoeLayer(eng, hidden=H, intermediate=I, experts=E, top_k=TOP_K)
        eng.close()
        with self.assertRaisesRegex(ValueError, "MoE layer is closed"):
            layer.transform()
        with self.assertRaisesRegex(ValueError, "engine is closed"):
            hm.MoeLayer(eng, hidden=H, intermediate=I, experts=E, top_k=TOP_K)

    def test_nccl_unique_id(self):
        try:
            first, second = hm.nccl_unique_id(), hm.nccl_unique_id()
        except hm.Error as e:  # a machine without libnccl: the error says so
            self.assertIn(e.status_name, ("UNSUPPORTED", "NCCL"), str(e))
            self.assertIn("NCCL", e.message)
            return
        self.assertEqual((len(first), len(second)), (128, 128))
        self.assertNotEqual(first, second)

    def test_mirrors_match_the_library(self):
        for name, cls in hm._MIRRORS.items():
            self.assertEqual(hm._lib.hm_abi_sizeof(name.encode()), ctypes.sizeof(cls), name)
        self.assertTrue(hm.version())
        self.assertEqual(self.eng.backend, "host")
        self.assertIsNone(self.eng.device)


if __name__ == "__main__":
    unittest.main(verbosity=2)
