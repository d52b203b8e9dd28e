/* SPDX-License-Identifier: Apache-2.0 */
/* Helpers shared by the test programs: cmocka, random data, error norms, skips. */
#ifndef HM_TEST_H
#define HM_TEST_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
/* cmocka needs the includes above before its own header. */
#include <cmocka.h>

#include "humming.h"

/* The exit code ctest reads as "skipped" (SKIP_RETURN_CODE). */
#define HM_TEST_SKIP 77

/* Fails the current cmocka test with the library's last error if st is not HM_OK. */
#define HM_ASSERT_OK(expr)                                                              \
  do {                                                                                  \
    hm_status hm_t_st_ = (expr);                                                        \
    if (hm_t_st_ != HM_OK) fail_msg("%s -> %s: %s", #expr, hm_status_str(hm_t_st_), hm_last_error()); \
  } while (0)

/* A small deterministic generator, so a failure can be replayed from its seed. */
typedef struct hm_rng {
  uint64_t state;
} hm_rng;

void hm_rng_seed(hm_rng *rng, uint64_t seed);
uint64_t hm_rng_next(hm_rng *rng);
/* Uniform in [lo, hi). */
float hm_rng_uniform(hm_rng *rng, float lo, float hi);
/* Standard normal (Box-Muller). */
float hm_rng_normal(hm_rng *rng);
void hm_rng_fill_uniform(hm_rng *rng, float *x, size_t n, float lo, float hi);
void hm_rng_fill_normal(hm_rng *rng, float *x, size_t n, float scale);
/* A seed from time and pid, printed; HM_TEST_SEED=<printed seed> replays a failed run. */
uint64_t hm_test_seed(const char *test_name);

/* ||out - ref|| / ||ref|| in double; +inf if out holds a NaN or Inf. */
double hm_rel_error(const float *out, const float *ref, size_t n);

/*
 * Median milliseconds of `reps` calls of fn(ctx, call) on stream, each between two CUDA
 * events, after `warmup` calls timed the same way and dropped; call counts all of them
 * from 0, so that fn can rotate over copies of its weights (cold in L2).
 */
float hm_test_median_ms(hm_engine *engine, hm_stream *stream, int warmup, int reps,
                        void (*fn)(void *ctx, int call), void *ctx);

/* A layer config of n outputs and k inputs over experts, top_k rows a token, quantized as
 * `quant` names it (hm_quant_scheme_parse; fails the test if it does not parse). */
hm_layer_config hm_test_layer_config(const char *quant, int64_t n, int64_t k, int64_t experts, int top_k);

/* An engine on the host backend (fails the test if it cannot be made). */
hm_engine *hm_test_host_engine(void);
/*
 * An engine on the CUDA backend, or NULL after printing "SKIP: <reason>" when there is
 * no usable device; main() then returns HM_TEST_SKIP. HM_TEST_FILTER (a cmocka pattern,
 * "ring_staged*") limits the binary's run to the cases it matches.
 */
hm_engine *hm_test_cuda_engine_or_skip(void);

/*
 * Start of a multi-rank test program: MPI (through hm_comm_mpi_init) and a host engine
 * tagged with the rank. NULL after printing "FAIL: ..."; main() then returns 1.
 */
hm_engine *hm_test_mpi_host_engine(int *argc, char ***argv, hm_comm_world *world);

#endif
