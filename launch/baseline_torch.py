#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""cuBLAS bf16 baselines for humming-moe-bench (--baseline torch).

Times, with torch on the GPU, what a framework without quantized MoE kernels does:
  kernel  the expert GEMM of the bench's kernel mode: for M tokens routed top-k over E
          experts, one bf16 matmul per active expert over its gathered rows (dense: one
          matmul of M rows); with --fp8, torch._scaled_mm (cuBLASLt fp8 e4m3, row-wise
          scales for A and column-wise for W) in place of each matmul
  layer   a bf16 MoE layer: softmax top-k routing, per-expert gate_up, SiLU*up, down,
          weighted scatter-add back to the tokens
  --chain R  (kernel) R forwards back to back per timed run, as the bench's --chain:
          over R distinct weight tensors (dense) or R distinct routings of the one expert
          tensor (MoE); the time is per forward
Timing follows the bench: CUDA events, warm-up, L2 flushed before each run, median.
Prints one JSON document on stdout: {"versions": {...}, "rows": [{"m": M, "time_us": t}, ...]}.
"""
import argparse
import json
import sys


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--mode", choices=["kernel", "layer"], required=True)
    p.add_argument("--n", type=int, default=0, help="kernel: output features")
    p.add_argument("--k", type=int, default=0, help="kernel: input features")
    p.add_argument("--down", action="store_true", help="kernel: A holds one row per (token, slot)")
    p.add_argument("--fp8", action="store_true", help="kernel: fp8 e4m3 operands through torch._scaled_mm")
    p.add_argument("--hidden", type=int, default=0, help="layer: H")
    p.add_argument("--intermediate", type=int, default=0, help="layer: I per expert")
    p.add_argument("--experts", type=int, required=True)
    p.add_argument("--top-k", type=int, required=True)
    p.add_argument("--chain", type=int, default=1, help="kernel: forwards back to back per timed run")
    p.add_argument("--m", required=True, help="comma-separated token counts")
    p.add_argument("--iters", type=int, default=100)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--device", type=int, default=0)
    p.add_argument("--seed", type=int, default=1234)
    return p.parse_args()


def random_routing(torch, tokens, experts, top_k, gen, device):
    """Distinct experts per token, uniform, like the bench's own routing."""
    scores = torch.rand(tokens, experts, generator=gen, device=device)
    ids = scores.topk(top_k, dim=1).indices
    weights = torch.rand(tokens, top_k, generator=gen, device=device) + 0.5
    return ids, weights / weights.sum(dim=1, keepdim=True)


def expert_groups(torch, ids, experts):
    """(expert, slot indices) for every expert with rows, slots flattened as t*top_k+j."""
    flat = ids.reshape(-1)
    order = torch.argsort(flat, stable=True)
    counts = torch.bincount(flat, minlength=experts).tolist()
    groups, start = [], 0
    for e, c in enumerate(counts):
        if c:
            groups.append((e, order[start:start + c]))
        start += c
    return groups


def time_us(torch, fn, iters, warmup, flush):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    samples = []
    for _ in range(iters):
        flush.zero_()
        start.record()
        fn()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) * 1e3)
    samples.sort()
    return samples[len(samples) // 2]


def scaled_mm(torch):
    """A matmul of fp8 A [M, K] (row scales sa [M, 1]) by fp8 W [N, K] (column scales sw [1, N])."""
    def mm(a, sa, w, sw):
        return torch._scaled_mm(a, w.t(), scale_a=sa, scale_b=sw, out_dtype=torch.bfloat16)
    return mm


def kernel_fn(torch, a, w, groups, top_k, dense, down, fp8):
    """The kernel mode's GEMM: per active expert, its gathered rows times its weights.

    fp8 times what an fp8 framework path does: the gathered rows are already fp8 with their
    scales (the quantization is not timed, as in the bench's kernel mode)."""
    if fp8:
        mm = scaled_mm(torch)
        sa = torch.ones(a.shape[0], 1, device=a.device, dtype=torch.float32)
        sw = torch.ones(1, w.shape[1], device=a.device, dtype=torch.float32)
        if dense:
            return lambda: mm(a, sa, w[0], sw)

        def run_fp8():
            for e, slots in groups:
                rows = slots if down else slots // top_k
                # Gathered as bytes: index_select is not defined for every fp8 dtype.
                a_e = a.view(torch.uint8).index_select(0, rows).view(a.dtype)
                mm(a_e, sa.index_select(0, rows), w[e], sw)
        return run_fp8
    if dense:
        return lambda: torch.matmul(a, w[0].t())

    def run():
        for e, slots in groups:
            torch.matmul(a.index_select(0, slots if down else slots // top_k), w[e].t())
    return run


def chained(fns):
    """The chain's members back to back: one timed run."""
    def run():
        for fn in fns:
            fn()
    return run


def layer_fn(torch, x, w13, w2, ids, weights, groups, top_k):
    """A bf16 MoE layer as frameworks write it without fused kernels."""
    inter = w2.shape[2]
    flat_w = weights.reshape(-1, 1).to(x.dtype)

    def run():
        y = torch.zeros_like(x)
        for e, slots in groups:
            tok = slots // top_k
            h = torch.matmul(x.index_select(0, tok), w13[e].t())
            h = torch.nn.functional.silu(h[:, :inter]) * h[:, inter:]
            y.index_add_(0, tok, torch.matmul(h, w2[e].t()) * flat_w.index_select(0, slots))
        return y
    return run


def main():
    args = parse_args()
    try:
        import torch
    except ImportError:
        print("baseline_torch.py: torch is not installed", file=sys.stderr)
        return 1
    if not torch.cuda.is_available():
        print("baseline_torch.py: no CUDA device for torch", file=sys.stderr)
        return 1
    device = torch.device("cuda", args.device)
    torch.cuda.set_device(device)
    gen = torch.Generator(device=device)
    gen.manual_seed(args.seed)
    bf16 = torch.bfloat16
    flush = torch.empty(256 << 20, dtype=torch.uint8, device=device)
    dense = args.mode == "kernel" and args.experts == 1
    fp8 = args.mode == "kernel" and args.fp8
    # Dense members read distinct weights; MoE members share the experts (GBs) and differ by routing.
    chain = args.chain if args.mode == "kernel" else 1
    if args.mode == "kernel":
        ws = []
        for _ in range(chain if dense else 1):
            w = torch.randn(args.experts, args.n, args.k, generator=gen, device=device, dtype=bf16) * 0.02
            ws.append(w.to(torch.float8_e4m3fn) if fp8 else w)
    else:
        h, i = args.hidden, args.intermediate
        w13 = torch.randn(args.experts, 2 * i, h, generator=gen, device=device, dtype=bf16) * 0.02
        w2 = torch.randn(args.experts, h, i, generator=gen, device=device, dtype=bf16) * 0.02
    rows = []
    for m in (int(v) for v in args.m.split(",")):
        fns = []
        for j in range(chain):
            ids, weights = random_routing(torch, m, args.experts, args.top_k, gen, device)
            groups = expert_groups(torch, ids, args.experts)
            if args.mode == "kernel":
                a_rows = m * args.top_k if args.down and not dense else m
                a = torch.randn(a_rows, args.k, generator=gen, device=device, dtype=bf16)
                if fp8:
                    a = a.to(torch.float8_e4m3fn)
                fns.append(kernel_fn(torch, a, ws[j % len(ws)], groups, args.top_k, dense, args.down, fp8))
            else:
                x = torch.randn(m, args.hidden, generator=gen, device=device, dtype=bf16)
                fns.append(layer_fn(torch, x, w13, w2, ids, weights, groups, args.top_k))
        t = time_us(torch, chained(fns), args.iters, args.warmup, flush)
        rows.append({"m": m, "time_us": t / chain})
    versions = {"torch": torch.__version__, "cuda": torch.version.cuda,
                "cublas_device": torch.cuda.get_device_name(device)}
    json.dump({"versions": versions, "rows": rows}, sys.stdout)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
