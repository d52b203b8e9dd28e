/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Checking before timing (nccl-tests -c): outputs of one run against the host
 * reference, counted as #wrong elements.
 */
#ifndef HM_BENCH_CHECK_H
#define HM_BENCH_CHECK_H

#include <stdint.h>

#include "humming.h"

/*
 * An element is wrong if it is not finite or |out - ref| > tol * (|ref| + rms of its
 * ref row): relative where values are large, and scaled by the row where a sum cancels.
 */
int64_t hm_bench_count_wrong(const float *out, const float *ref, int64_t rows, int64_t n, double tol);
/* Tolerance for a scheme: bf16 outputs of 16-bit paths, looser with 8-bit activations. */
double hm_bench_tolerance(const hm_quant_scheme *scheme);
/* Rows to check out of rows, each costing flops_per_row, within the reference's budget (>= 1). */
int64_t hm_bench_sample_rows(int64_t rows, double flops_per_row, bool cuda);

#endif
