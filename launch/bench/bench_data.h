/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Random inputs for the benchmark. Weights are drawn directly as valid codes of the
 * format (no f32 master copy), so a DeepSeek-V3 layer (11 G parameters) is made in
 * seconds on every core; dequantized weights have a magnitude near 0.02, activations
 * are N(0, 1), so outputs stay well inside bf16 range.
 */
#ifndef HM_BENCH_DATA_H
#define HM_BENCH_DATA_H

#include <stdint.h>

#include "quant.h"

/* Allocates w for fmt and (experts, n, k) and fills it with random codes and scales. */
hm_status hm_bench_random_weights(hm_host_weights *w, const hm_quant_format *fmt, int64_t experts, int64_t n,
                                  int64_t k, uint64_t seed);
/* count bf16 values of N(0, scale), as raw 16-bit words. */
hm_status hm_bench_random_bf16(uint16_t *dst, int64_t count, float scale, uint64_t seed);
/* count f32 values of N(0, scale) (a sum of four uniforms), on every core. */
hm_status hm_bench_random_normal(float *dst, int64_t count, float scale, uint64_t seed);
/* count f32 values uniform in [lo, hi). */
void hm_bench_random_f32(float *dst, int64_t count, float lo, float hi, uint64_t seed);
/* A splitmix64 step: the one generator of the bench, reproducible from --seed. */
uint64_t hm_bench_rng(uint64_t *state);

#endif
