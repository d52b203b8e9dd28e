#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The ctypes module with torch on a GPU: the embedding path end to end.

A DeepSeek-like layer (H=1024, I=512, E=32, top-8, sigmoid grouped router with a
correction bias, one shared expert, w4a16) is made from torch tensors on cuda in the
canonical contract, loaded from device memory (the tensors are freed before transform),
and run on a torch stream that is not the default one, with torch's pointers:
  - routed by the GPU router from logits, against the host backend on the same weights;
  - with caller top-k ids (some -1), against the host backend and against a torch
    reference over the dequantized weights, rounded to bf16 where the layer rounds;
  - captured in a torch CUDA graph after reserve and a warm-up, replayed on new inputs.
Exits 77 (skip) without torch or a CUDA device. HUMMING_LIBHUMMING names the library.
"""
import os
import sys

try:
    import torch
except ImportError:
    print("SKIP: torch is not installed")
    sys.exit(77)
if not torch.cuda.is_available():
    print("SKIP: torch sees no CUDA device")
    sys.exit(77)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
import humming_moe as hm  # noqa: E402

H, I, E, TOP_K, G = 1024, 512, 32, 8, 128
BOUND = 2e-2  # w4a16 through bf16 intermediates (the C GPU layer test's bound)
CONFIG = {"hidden": H, "intermediate": I, "experts": E, "top_k": TOP_K, "scoring": "sigmoid", "groups": 8,
          "topk_group": 4, "correction_bias": True, "renormalize": True, "scaling": 2.5, "shared_experts": 1,
          "scheme": "w4a16"}
torch.backends.cuda.matmul.allow_tf32 = False
failures = []


def check(name, err, bound):
    ok = err <= bound
    print(f"# {name:<44} rel_err {err:.3g} (bound {bound:g}) {'OK' if ok else 'WRONG'}")
    if not ok:
        failures.append(name)


def rel_error(got, want):
    got, want = got.float().cpu(), want.float().cpu()
    return ((got - want).norm() / want.norm()).item()


def pack_last(codes):
    """u4 codes (..., L) -> int32 words (..., L/8), code i of a word at bits 4i (LSB first)."""
    c = codes.to(torch.int64).reshape(*codes.shape[:-1], codes.shape[-1] // 8, 8)
    words = (c << (torch.arange(8, device=c.device, dtype=torch.int64) * 4)).sum(-1)
    return torch.where(words >= 2**31, words - 2**32, words).to(torch.int32).contiguous()


class W4A16:
    """Canonical w4a16 weights (experts, n, k) on cuda, and their dequantized f32 values."""

    def __init__(self, gen, experts, n, k):
        dev = "cuda"
        q = torch.randint(0, 16, (experts, n, k), generator=gen, device=dev, dtype=torch.int32)
        z = torch.randint(7, 10, (experts, k // G, n), generator=gen, device=dev, dtype=torch.int32)
        s = ((0.5 + torch.rand(experts, n, k // G, generator=gen, device=dev)) * 0.25 / k**0.5).to(torch.bfloat16)
        self.arrays = {"qweight": pack_last(q), "scales": s.contiguous(), "zeros": pack_last(z)}
        zk = z.transpose(1, 2).repeat_interleave(G, dim=2).float()
        self.dequantized = (q.float() - zk) * s.float().repeat_interleave(G, dim=2)

    def cpu(self):
        return {k: v.cpu() for k, v in self.arrays.items()}


def expert_ffn(x, gate_up, down):
    """f32 math, bf16 after gate_up, after SiLU(g)*u and after down, as the layer rounds."""
    h1 = (x @ gate_up.T).bfloat16().float()
    h2 = (torch.nn.functional.silu(h1[:, :I]) * h1[:, I:]).bfloat16().float()
    return (h2 @ down.T).bfloat16().float()


def torch_reference(x, ids, weights, w):
    xf = x.float()
    y = expert_ffn(xf, w["sgu"].dequantized[0], w["sdn"].dequantized[0])
    for e in ids.unique().tolist():
        if e < 0:
            continue
        t, j = (ids == e).nonzero(as_tuple=True)
        out = expert_ffn(xf[t], w["gu"].dequantized[e], w["dn"].dequantized[e])
        y.index_add_(0, t, out * weights[t, j, None])
    return y.bfloat16()


def make_layers(gen, gpu, host):
    w = {"gu": W4A16(gen, E, 2 * I, H), "dn": W4A16(gen, E, H, I), "sgu": W4A16(gen, 1, 2 * I, H),
         "sdn": W4A16(gen, 1, H, I)}
    bias = (torch.rand(E, generator=gen, device="cuda") - 0.5) * 0.1
    layer = hm.MoeLayer(gpu, CONFIG)
    # Weights straight from torch's device memory; copies done on return, so torch may free them.
    arrays = {k: dict(v.arrays) for k, v in w.items()}
    layer.load(arrays["gu"], arrays["dn"])
    layer.load_shared(arrays["sgu"], arrays["sdn"])
    layer.set_router_bias(bias)
    torch.cuda.current_stream().synchronize()  # the bias is copied on the stream
    del arrays
    for v in w.values():
        v.arrays = {k: t.cpu() for k, t in v.arrays.items()}
    torch.cuda.empty_cache()
    layer.transform()
    ref = hm.MoeLayer(host, CONFIG)
    ref.load(w["gu"].arrays, w["dn"].arrays)
    ref.load_shared(w["sgu"].arrays, w["sdn"].arrays)
    ref.set_router_bias(bias.cpu())
    ref.transform()
    return layer, ref, w


def caller_routing(gen, tokens):
    ids = torch.stack([torch.randperm(E, generator=gen, device="cuda")[:TOP_K] for _ in range(tokens)]).to(torch.int32)
    ids[torch.rand(tokens, TOP_K, generator=gen, device="cuda") < 0.05] = -1
    weights = torch.rand(tokens, TOP_K, generator=gen, device="cuda") * 0.9 + 0.1
    return ids.contiguous(), weights.contiguous()


def host_forward(ref, x, **routing):
    y = torch.empty_like(x, device="cpu")
    ref.forward(x.cpu(), y, **{k: v.cpu() for k, v in routing.items()})
    return y


def main():
    gen = torch.Generator(device="cuda")
    seed = int(os.environ.get("HUMMING_TEST_SEED", torch.seed() % (1 << 31)))
    gen.manual_seed(seed)
    device = torch.cuda.current_device()
    gpu, host = hm.Engine(device=device), hm.Engine(backend="host")
    print(f"# test_python_torch seed {seed}: {gpu.device_name} (torch cuda:{device}), humming {hm.version()}")
    if gpu.backend != "cuda" or gpu.device != device:
        print(f"FAIL: engine on {gpu.backend} device {gpu.device}, torch on cuda:{device}")
        return 1
    layer, ref, w = make_layers(gen, gpu, host)
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        for tokens in (1, 64, 300):
            x = torch.randn(tokens, H, generator=gen, device="cuda").to(torch.bfloat16)
            logits = torch.randn(tokens, E, generator=gen, device="cuda")
            y = torch.empty_like(x)
            layer.forward(x, y, router_logits=logits)  # on torch's current stream: `stream`
            stream.synchronize()
            check(f"T={tokens} router logits vs host", rel_error(y, host_forward(ref, x, router_logits=logits)), BOUND)

        x = torch.randn(64, H, generator=gen, device="cuda").to(torch.bfloat16)
        ids, weights = caller_routing(gen, 64)
        y = torch.empty_like(x)
        layer.forward(x, y, topk_ids=ids, topk_weights=weights)
        want_torch = torch_reference(x, ids.long(), weights, w)
        stream.synchronize()
        check("T=64 caller ids vs host", rel_error(y, host_forward(ref, x, topk_ids=ids, topk_weights=weights)), BOUND)
        check("T=64 caller ids vs torch f32 reference", rel_error(y, want_torch), BOUND)
    if torch.cuda.current_device() != device:
        failures.append("torch's current device changed")

    # Decode step in a torch CUDA graph: reserve, warm up, capture, replay on new inputs.
    tokens = 8
    x = torch.randn(tokens, H, generator=gen, device="cuda").to(torch.bfloat16)
    ids, weights = caller_routing(gen, tokens)
    y = torch.empty_like(x)
    layer.reserve(tokens)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        layer.forward(x, y, topk_ids=ids, topk_weights=weights)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        layer.forward(x, y, topk_ids=ids, topk_weights=weights)
    x.copy_(torch.randn(tokens, H, generator=gen, device="cuda").to(torch.bfloat16))
    new_ids, new_weights = caller_routing(gen, tokens)
    ids.copy_(new_ids)
    weights.copy_(new_weights)
    graph.replay()
    eager = torch.empty_like(x)
    layer.forward(x, eager, topk_ids=ids, topk_weights=weights)
    torch.cuda.synchronize()
    check("T=8 graph replay vs eager", rel_error(y, eager), 1e-3)
    check("T=8 graph replay vs host", rel_error(y, host_forward(ref, x, topk_ids=ids, topk_weights=weights)), BOUND)

    del graph
    layer.close(), ref.close()
    gpu.close(), host.close()
    hm.shutdown()
    if failures:
        print(f"FAIL: {', '.join(failures)}")
        return 1
    print("# all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
