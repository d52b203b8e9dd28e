/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The cuBLAS baseline (bf16, or fp8 through torch._scaled_mm for fp8 schemes):
 * launch/baseline_torch.py, run through popen with the same shapes, sizes and iteration
 * counts, prints JSON that is merged into our rows.
 */
#ifndef HM_BENCH_TORCH_H
#define HM_BENCH_TORCH_H

#include "bench/bench.h"
#include "bench/bench_gemm.h"

/* Per-M times (o.m order) of the kernel shape in torch, or NULL (with a warning) if it cannot run. */
double *hm_bench_torch_kernel(hm_bench *b, const hm_bench_gemm_shape *shape);
/* Per-M times of a bf16 MoE layer of the model in torch (loop over experts), or NULL. */
double *hm_bench_torch_layer(hm_bench *b);
void hm_bench_torch_free(double *us);

#endif
