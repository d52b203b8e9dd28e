/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The tuner without a GPU: on a fake sm_90 driver whose memory is the host's, hm_tuner_run
 * compiles its real candidates with NVRTC, and every launch it makes is checked instead of
 * run. What reaches a launch must be what the MoE layer passes (moe/layer_forward.c): the
 * activation, output and tensor-map extents inside the bench's buffers, masked counts of
 * at most max_m rows with a fused shared expert holding every token, contiguous segments
 * padded to the kernel's block, indexed slot ids each routed once, activation scales for
 * every row of 8-bit activations. W4A16 in three layouts, fp8 with 1x128 scales and MXFP4 in
 * the grouped ones. So the GPU half of the tuner (test_tuner) meets no argument it has not
 * passed here.
 */
#include <malloc.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "cuda_driver.h"
#include "heuristics/tuner.h"
#include "hm_fake_cuda.h"
#include "hm_test.h"
#include "kernels/gemm_launch.h"

#define OUT_BYTES 2 /* bf16 output */

static struct {
  hm_layer_config lc;
  hm_gemm_type type;
  int shared;
  int launches, encodes, failures;
  char first_failure[256];
} run;

__attribute__((format(printf, 1, 2))) static void fail_launch(const char *fmt, ...) {
  if (run.failures++ > 0) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(run.first_failure, sizeof(run.first_failure), fmt, ap);
  va_end(ap);
}

/* Whether the host allocation at p holds bytes (the fake's memory is the host backend's). */
static bool holds(const void *p, size_t bytes) {
  return p != NULL && malloc_usable_size((void *)p) >= bytes;
}

static void check_masked(const hm_gemm_kernel_params *p, const int32_t *counts) {
  const int64_t experts = run.lc.experts;
  int64_t sum = 0;
  for (int64_t e = 0; e < experts; e++) {
    if (counts[e] < 0 || counts[e] > p->m)
      fail_launch("masked: expert %lld has %d rows of max_m %lld", (long long)e, counts[e], (long long)p->m);
    sum += counts[e];
  }
  if (sum != (int64_t)p->m * run.lc.top_k)
    fail_launch("masked: %lld rows routed for %lld tokens", (long long)sum, (long long)p->m);
  for (int s = 0; s < run.shared; s++)
    if (counts[experts - 1 - s] != p->m)
      fail_launch("masked: shared expert holds %d of %lld tokens", counts[experts - 1 - s], (long long)p->m);
}

static void check_contiguous(const hm_gemm_kernel_params *p, const int32_t *offsets, const int32_t *counts) {
  if (offsets[0] != 0) fail_launch("contiguous: first segment at %d", offsets[0]);
  for (int64_t e = 0; e < run.lc.experts; e++) {
    const int32_t width = offsets[e + 1] - offsets[e];
    if (width < counts[e] || width % p->block_m != 0)
      fail_launch("contiguous: expert %lld holds %d rows in a segment of %d (block %d)", (long long)e,
                  counts[e], width, p->block_m);
  }
  if (offsets[run.lc.experts] > p->m)
    fail_launch("contiguous: %d padded rows past m %lld", offsets[run.lc.experts], (long long)p->m);
}

static void check_indexed(const hm_gemm_kernel_params *p) {
  const int32_t padded = p->num_padded[0], slots = (int32_t)(p->m * p->top_k);
  if (padded % p->block_m != 0 || !holds(p->sorted_ids, (size_t)padded * 4) ||
      !holds(p->expert_ids, (size_t)(padded / p->block_m) * 4)) {
    fail_launch("indexed: %d padded rows in blocks of %d outgrow the metadata", padded, p->block_m);
    return;
  }
  char *seen = calloc((size_t)slots + 1, 1);
  if (seen == NULL) {
    fail_launch("indexed: no memory to check %d slots", slots);
    return;
  }
  for (int32_t i = 0; i < padded; i++) {
    const int32_t id = p->sorted_ids[i];
    if (id < 0 || id > slots || (id < slots && seen[id]++))
      fail_launch("indexed: slot id %d at row %d of %d slots", id, i, slots);
    if (p->expert_ids[i / p->block_m] < 0 || p->expert_ids[i / p->block_m] >= run.lc.experts)
      fail_launch("indexed: block %d of expert %d", i / p->block_m, p->expert_ids[i / p->block_m]);
  }
  for (int32_t s = 0; s < slots; s++)
    if (!seen[s]) fail_launch("indexed: slot %d of %d not routed", s, slots);
  free(seen);
}

/* Rows of A and C the launch reads and writes, by the layout's contract (kernels/gemm_launch.h). */
static void rows_of(const hm_gemm_kernel_params *p, int64_t *a_rows, int64_t *c_rows) {
  switch (run.type) {
    case HM_GEMM_GROUPED_MASKED: *a_rows = *c_rows = (int64_t)p->m * run.lc.experts; return;
    case HM_GEMM_INDEXED:
      *a_rows = (int64_t)p->m * p->top_k / p->a_rows_per_token, *c_rows = (int64_t)p->m * p->top_k;
      return;
    default: *a_rows = *c_rows = p->m; return;
  }
}

static CUresult check_launch(const CUlaunchConfig *cfg, CUfunction f, void **args, void **extra) {
  (void)cfg, (void)f, (void)extra;
  const hm_gemm_kernel_params *p = args[0];
  run.launches++;
  int64_t a_rows, c_rows;
  rows_of(p, &a_rows, &c_rows);
  const size_t act_bytes = (size_t)hm_dtype_bits(run.lc.scheme.act) / 8;
  if (!holds(p->a, (size_t)(a_rows * run.lc.k) * act_bytes) ||
      !holds(p->c, (size_t)(c_rows * run.lc.n) * OUT_BYTES))
    fail_launch("%s: %lld A rows or %lld C rows outgrow the buffers", hm_gemm_type_name(run.type),
                (long long)a_rows, (long long)c_rows);
  const int64_t scales = run.lc.scheme.act_scale == HM_ACT_SCALE_GROUP128 ? (run.lc.k + 127) / 128
                         : run.lc.scheme.act_scale == HM_ACT_SCALE_TOKEN  ? 1
                                                                          : 0;
  if (scales > 0 && !holds(p->a_scale, (size_t)(a_rows * scales) * sizeof(float)))
    fail_launch("%s: %lld A rows of %lld activation scales outgrow the buffer", hm_gemm_type_name(run.type),
                (long long)a_rows, (long long)scales);
  if (run.type == HM_GEMM_GROUPED_MASKED) check_masked(p, p->expert_counts);
  if (run.type == HM_GEMM_GROUPED_CONTIGUOUS) check_contiguous(p, p->expert_offsets, p->expert_counts);
  if (run.type == HM_GEMM_INDEXED) check_indexed(p);
  return CUDA_SUCCESS;
}

static CUresult check_encode(CUtensorMap *map, CUtensorMapDataType type, cuuint32_t rank, void *address,
                             const cuuint64_t *dims, const cuuint64_t *strides, const cuuint32_t *box,
                             const cuuint32_t *steps, CUtensorMapInterleave interleave,
                             CUtensorMapSwizzle swizzle, CUtensorMapL2promotion l2,
                             CUtensorMapFloatOOBfill fill) {
  (void)map, (void)type, (void)rank, (void)box, (void)steps, (void)interleave, (void)swizzle, (void)l2,
      (void)fill;
  run.encodes++;
  if (!holds(address, (size_t)(dims[1] * strides[0])))
    fail_launch("tensor map of %llu rows of %llu bytes outgrows the activations", (unsigned long long)dims[1],
                (unsigned long long)strides[0]);
  return CUDA_SUCCESS;
}

static CUresult driver_version(int *v) {
  *v = 13000;
  return CUDA_SUCCESS;
}

static hm_engine engine;

static int setup(void **state) {
  (void)state;
  setenv("HUMMING_DEVICE_PROFILE", "h200", 1);
  hm_fake_cuda_install();
  hm_cu.cuLaunchKernelEx = check_launch;
  hm_cu.cuTensorMapEncodeTiled = check_encode;
  hm_cu.cuDriverGetVersion = driver_version;
  engine = hm_fake_cuda_engine(90);
  return 0;
}

static int teardown(void **state) {
  (void)state;
  hm_shutdown();
  return 0;
}

/* Tunes a small layer of 8 experts, 2 rows a token, in one layout; every launch checked. */
static void tune_checked(const char *quant, hm_gemm_type type, int chain, int shared, bool a_per_slot) {
  memset(&run, 0, sizeof(run));
  run.lc = hm_test_layer_config(quant, 512, 1024, 8, 2);
  run.type = type;
  run.shared = shared;
  const hm_tune_request req = {&run.lc, type, 1, 1, chain, shared, a_per_slot, 0};
  hm_tune_result *r = malloc(sizeof(*r));
  assert_non_null(r);
  HM_ASSERT_OK(hm_tuner_run(&engine, &req, r));
  printf("# %s %s: %d buckets, %d launches, %d tensor maps\n", quant, hm_gemm_type_name(type), r->count,
         run.launches, run.encodes);
  if (run.failures > 0)
    fail_msg("%d checks failed over the launches; first: %s", run.failures, run.first_failure);
  int timed = 0;
  for (int b = 0; b < hm_choose_bucket_count(); b++) {
    int64_t lo, hi;
    hm_choose_bucket(&run.lc, type, b, &lo, &hi);
    timed += hm_tuner_bucket_timed(&run.lc, type, lo, hi);
  }
  assert_int_equal(r->count, timed);
  for (int i = 0; i < r->count; i++) {
    assert_true(r->buckets[i].tuned_us <= r->buckets[i].heuristic_us);
    assert_int_equal(r->entries[i].chain, chain);
  }
  assert_true(run.launches >= r->count * chain);
  free(r);
}

static void masked_launches_with_a_shared_expert(void **state) {
  (void)state;
  tune_checked("w4a16", HM_GEMM_GROUPED_MASKED, 2, 1, false);
}

static void contiguous_launches(void **state) {
  (void)state;
  tune_checked("w4a16", HM_GEMM_GROUPED_CONTIGUOUS, 1, 1, false);
}

/* gate_up gathers a token's row for each of its slots; down reads a row per slot. */
static void indexed_launches(void **state) {
  (void)state;
  tune_checked("w4a16", HM_GEMM_INDEXED, 1, 0, false);
  tune_checked("w4a16", HM_GEMM_INDEXED, 1, 0, true);
}

/* fp8 with 1x128 activation scales (their buffer too) on the warp-specialized TMA tiles. */
static void fp8_block_scaled_grouped_launches(void **state) {
  (void)state;
  tune_checked("w8a8-fp8", HM_GEMM_GROUPED_MASKED, 2, 1, false);
  tune_checked("w8a8-fp8", HM_GEMM_GROUPED_CONTIGUOUS, 1, 1, false);
}

/* MXFP4 weights, fp8 activations with a scale a token. */
static void w4a8_masked_launches(void **state) {
  (void)state;
  tune_checked("w4a8-mxfp4", HM_GEMM_GROUPED_MASKED, 2, 1, false);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(masked_launches_with_a_shared_expert, setup, teardown),
      cmocka_unit_test_setup_teardown(contiguous_launches, setup, teardown),
      cmocka_unit_test_setup_teardown(indexed_launches, setup, teardown),
      cmocka_unit_test_setup_teardown(fp8_block_scaled_grouped_launches, setup, teardown),
      cmocka_unit_test_setup_teardown(w4a8_masked_launches, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
