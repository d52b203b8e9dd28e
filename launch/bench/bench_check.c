/* SPDX-License-Identifier: Apache-2.0 */
/* Counting wrong elements against the reference, and how much of a big output to check. */
#include <math.h>

#include "bench/bench_check.h"

/* Host reference flops per check: a few seconds of the 2-core CI machine, more next to a GPU. */
#define HOST_CHECK_FLOPS 2e9
#define GPU_CHECK_FLOPS 2e10

int64_t hm_bench_count_wrong(const float *out, const float *ref, int64_t rows, int64_t n, double tol) {
  int64_t wrong = 0;
  for (int64_t r = 0; r < rows; r++) {
    const float *o = out + r * n, *x = ref + r * n;
    double sq = 0;
    for (int64_t j = 0; j < n; j++) sq += (double)x[j] * x[j];
    double rms = sqrt(sq / (double)n);
    for (int64_t j = 0; j < n; j++) {
      double d = fabs((double)o[j] - x[j]);
      if (!isfinite(o[j]) || d > tol * (fabs(x[j]) + rms)) wrong++;
    }
  }
  return wrong;
}

/*
 * An element is wrong when it is off by more than a fraction of its row's scale. The
 * GPU and the host round intermediates (gate_up output, activation) to bf16 at
 * different points, which leaves a normwise error near 5e-3 and a per-element tail
 * a few times that; a real fault (wrong expert, row or scale) is off by the whole
 * row scale. 1/16 sits between the two; 8-bit activations, quantized independently
 * on both sides, get twice that.
 */
double hm_bench_tolerance(const hm_quant_scheme *scheme) {
  bool act8 = scheme->act == HM_F8E4M3 || scheme->act == HM_I8;
  return act8 ? 1.0 / 8 : 1.0 / 16;
}

int64_t hm_bench_sample_rows(int64_t rows, double flops_per_row, bool cuda) {
  double budget = cuda ? GPU_CHECK_FLOPS : HOST_CHECK_FLOPS;
  if (flops_per_row <= 0 || rows * flops_per_row <= budget) return rows;
  int64_t n = (int64_t)(budget / flops_per_row);
  return n < 1 ? 1 : n;
}
