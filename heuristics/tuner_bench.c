/* SPDX-License-Identifier: Apache-2.0 */
/* Buffers, routing metadata and timing of the tuner (see tuner_bench.h). */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "engine.h"
#include "heuristics/tuner_bench.h"
#include "kernels/transform.h"

#define TUNER_MAX_WEIGHT_BYTES ((size_t)8 << 30)
#define WARMUP_LAUNCHES 3
/* Byte of every buffer: 0x3c3c is a small normal bf16/f16 value, 0x3c3c3c3c a small normal
 * f32 and 0x3c a normal fp8 e4m3 code, so no NaN or denormal path is timed. */
#define FILL_BYTE 0x3c

static hm_status alloc_filled(hm_engine *e, size_t bytes, void **out) {
  *out = NULL;
  if (bytes == 0) return HM_OK;
  HM_CHECK(hm_mem_alloc(e, bytes, out));
  return hm_engine_memset(e, *out, FILL_BYTE, bytes, NULL);
}

static hm_status weight_sizes(const hm_engine *e, const hm_layer_config *lc, hm_transform_sizes *sz) {
  const hm_transform_desc d = hm_transform_desc_of(lc, e->arch);
  return hm_transform_sizes_of(&d, sz);
}

static hm_status alloc_weights(hm_tuner_bench *b, size_t l2_bytes) {
  hm_transform_sizes sz;
  HM_CHECK(weight_sizes(b->engine, b->layer, &sz));
  const size_t one = sz.weight_bytes + sz.scale_bytes + sz.zero_bytes;
  size_t copies = one >= 2 * l2_bytes ? 1 : 2 * l2_bytes / (one ? one : 1) + 1;
  if (copies > HM_TUNER_MAX_COPIES) copies = HM_TUNER_MAX_COPIES;
  while (copies > 1 && copies * one > TUNER_MAX_WEIGHT_BYTES) copies--;
  b->copies = (int)copies;
  const size_t e = (size_t)b->layer->experts;
  void *bias = NULL, *global_scale = NULL;
  if (b->layer->bias) HM_CHECK(alloc_filled(b->engine, e * (size_t)b->layer->n * 2, &bias));
  if (b->layer->scheme.weight.global_scale) HM_CHECK(alloc_filled(b->engine, e * 4, &global_scale));
  for (int i = 0; i < b->copies; i++) {
    hm_gemm_operands *o = &b->ops[i];
    o->bias = bias;
    o->global_scale = global_scale;
    HM_CHECK(alloc_filled(b->engine, sz.weight_bytes, (void **)&o->weight));
    HM_CHECK(alloc_filled(b->engine, sz.scale_bytes, (void **)&o->scales));
    HM_CHECK(alloc_filled(b->engine, sz.zero_bytes, (void **)&o->zeros));
  }
  return HM_OK;
}

/* Activation scales a row of A carries: none for 16-bit activations. */
static int64_t act_scales_per_row(const hm_layer_config *lc) {
  switch (lc->scheme.act_scale) {
    case HM_ACT_SCALE_TOKEN: return 1;
    case HM_ACT_SCALE_GROUP128: return (lc->k + 127) / 128;
    default: return 0;
  }
}

hm_status hm_tuner_bench_create(hm_engine *engine, const hm_layer_config *layer, hm_gemm_type type,
                                int64_t max_valid_m, size_t l2_bytes, hm_tuner_bench *out) {
  HM_CHECK_NOT_NULL(engine);
  HM_CHECK_NOT_NULL(layer);
  HM_CHECK_NOT_NULL(out);
  memset(out, 0, sizeof(*out));
  if (type != HM_GEMM_DENSE && type != HM_GEMM_INDEXED)
    HM_FAIL(HM_UNSUPPORTED, "the tuner times dense and indexed GEMMs, not %s", hm_gemm_type_name(type));
  out->engine = engine;
  out->layer = layer;
  out->type = type;
  out->top_k = type == HM_GEMM_INDEXED && layer->top_k > 1 ? layer->top_k : 1;
  hm_status ret = HM_OK;
  const int64_t a_rows = (max_valid_m + out->top_k - 1) / out->top_k;
  HM_CHECK_GOTO(hm_stream_create(engine, &out->stream), fail);
  HM_CHECK_GOTO(alloc_weights(out, l2_bytes), fail);
  HM_CHECK_GOTO(alloc_filled(engine, (size_t)(a_rows * layer->k) * 2, &out->a), fail);
  HM_CHECK_GOTO(alloc_filled(engine, (size_t)(a_rows * act_scales_per_row(layer)) * sizeof(float),
                             (void **)&out->a_scale),
                fail);
  HM_CHECK_GOTO(hm_mem_alloc(engine, (size_t)(max_valid_m * layer->n) * 2, &out->c), fail);
  return HM_OK;
fail:
  hm_tuner_bench_destroy(out);
  return ret;
}

static void free_meta(hm_tuner_bench *b) {
  hm_mem_free(b->engine, b->sorted_ids);
  hm_mem_free(b->engine, b->expert_ids);
  hm_mem_free(b->engine, b->num_padded);
  b->sorted_ids = b->expert_ids = b->num_padded = NULL;
  b->meta_block_m = 0;
}

void hm_tuner_bench_destroy(hm_tuner_bench *b) {
  if (b == NULL || b->engine == NULL) return;
  free_meta(b);
  for (int i = 0; i < b->copies; i++) {
    hm_mem_free(b->engine, (void *)b->ops[i].weight);
    hm_mem_free(b->engine, (void *)b->ops[i].scales);
    hm_mem_free(b->engine, (void *)b->ops[i].zeros);
  }
  if (b->copies > 0) {
    hm_mem_free(b->engine, (void *)b->ops[0].bias);
    hm_mem_free(b->engine, (void *)b->ops[0].global_scale);
  }
  hm_mem_free(b->engine, b->a);
  hm_mem_free(b->engine, b->a_scale);
  hm_mem_free(b->engine, b->c);
  hm_mem_free(b->engine, b->workspace);
  hm_stream_destroy(b->stream);
  memset(b, 0, sizeof(*b));
}

/* Token t's slot s goes to a distinct expert per token, spread uniformly by a multiplicative hash. */
static int64_t expert_of(int64_t token, int slot, int64_t experts) {
  const uint64_t h = (uint64_t)token * 2654435761u;
  return (int64_t)((h + (uint64_t)slot) % (uint64_t)experts);
}

/* Indexed metadata for m tokens padded to block_m: sorted ids, expert per block, rows in use. */
static hm_status build_meta(hm_tuner_bench *b, int64_t m, int block_m) {
  if (b->meta_block_m == block_m && b->meta_m == m) return HM_OK;
  free_meta(b);
  const int64_t e = b->layer->experts, slots = m * b->top_k;
  hm_status ret = HM_OK;
  int64_t *count = calloc((size_t)e, sizeof(*count));
  int64_t *start = calloc((size_t)e + 1, sizeof(*start));
  int32_t *ids = NULL, *blocks = NULL;
  if (count == NULL || start == NULL) HM_FAIL_GOTO(HM_OUT_OF_MEMORY, done, "routing counts");
  for (int64_t s = 0; s < slots; s++) count[expert_of(s / b->top_k, (int)(s % b->top_k), e)]++;
  for (int64_t x = 0; x < e; x++) start[x + 1] = start[x] + (count[x] + block_m - 1) / block_m * block_m;
  const int64_t padded = start[e];
  ids = malloc((size_t)(padded ? padded : 1) * sizeof(*ids));
  blocks = malloc((size_t)(padded / block_m + 1) * sizeof(*blocks));
  if (ids == NULL || blocks == NULL) HM_FAIL_GOTO(HM_OUT_OF_MEMORY, done, "routing ids");
  for (int64_t i = 0; i < padded; i++) ids[i] = (int32_t)slots;
  for (int64_t x = 0; x < e; x++)
    for (int64_t i = start[x]; i < start[x + 1]; i += block_m) blocks[i / block_m] = (int32_t)x;
  memset(count, 0, (size_t)e * sizeof(*count));
  for (int64_t s = 0; s < slots; s++) {
    const int64_t x = expert_of(s / b->top_k, (int)(s % b->top_k), e);
    ids[start[x] + count[x]++] = (int32_t)s;
  }
  const int32_t used = (int32_t)padded;
  HM_CHECK_GOTO(hm_mem_alloc(b->engine, (size_t)(padded ? padded : 1) * 4, (void **)&b->sorted_ids), done);
  HM_CHECK_GOTO(hm_mem_alloc(b->engine, (size_t)(padded / block_m + 1) * 4, (void **)&b->expert_ids), done);
  HM_CHECK_GOTO(hm_mem_alloc(b->engine, 4, (void **)&b->num_padded), done);
  HM_CHECK_GOTO(hm_mem_upload(b->engine, b->sorted_ids, ids, (size_t)padded * 4), done);
  HM_CHECK_GOTO(hm_mem_upload(b->engine, b->expert_ids, blocks, (size_t)(padded / block_m) * 4), done);
  HM_CHECK_GOTO(hm_mem_upload(b->engine, b->num_padded, &used, 4), done);
  b->max_padded = padded;
  b->meta_block_m = block_m;
  b->meta_m = m;
done:
  free(count);
  free(start);
  free(ids);
  free(blocks);
  return ret;
}

static hm_status ensure_workspace(hm_tuner_bench *b, const hm_gemm_config *cfg) {
  const size_t bytes = hm_gemm_workspace_bytes(cfg, b->engine->sm_count);
  if (bytes <= b->workspace_bytes) return HM_OK;
  /* Kernels leave the counters zero, so one zeroed buffer of the largest size serves all. */
  hm_mem_free(b->engine, b->workspace);
  b->workspace = NULL;
  b->workspace_bytes = 0;
  HM_CHECK(hm_mem_alloc(b->engine, bytes, &b->workspace));
  b->workspace_bytes = bytes;
  return hm_engine_memset(b->engine, b->workspace, 0, bytes, NULL);
}

static hm_status make_args(hm_tuner_bench *b, const hm_gemm_config *cfg, int64_t valid_m, hm_gemm_args *args) {
  memset(args, 0, sizeof(*args));
  args->type = b->type;
  args->a = b->a;
  args->a_scale = b->a_scale;
  args->c = b->c;
  args->m = valid_m;
  if (b->type != HM_GEMM_INDEXED) return HM_OK;
  args->m = (valid_m + b->top_k - 1) / b->top_k;
  HM_CHECK(build_meta(b, args->m, cfg->tuning.bm));
  args->sorted_ids = b->sorted_ids;
  args->expert_ids = b->expert_ids;
  args->num_padded = b->num_padded;
  args->max_padded = b->max_padded;
  args->block_m = cfg->tuning.bm;
  args->top_k = b->top_k;
  args->a_rows_per_token = b->top_k;
  return HM_OK;
}

static int compare_float(const void *x, const void *y) {
  const float a = *(const float *)x, b = *(const float *)y;
  return (a > b) - (a < b);
}

static hm_status time_reps(hm_tuner_bench *b, hm_kernel *k, const hm_gemm_config *cfg, const hm_gemm_args *args,
                           int reps, float *ms, hm_event *t0, hm_event *t1) {
  const int sms = b->engine->sm_count;
  for (int i = 0; i < WARMUP_LAUNCHES; i++)
    HM_CHECK(hm_gemm_launch(k, cfg, sms, &b->ops[i % b->copies], args, b->workspace, b->stream));
  for (int i = 0; i < reps; i++) {
    HM_CHECK(hm_event_record(t0, b->stream));
    HM_CHECK(hm_gemm_launch(k, cfg, sms, &b->ops[(i + WARMUP_LAUNCHES) % b->copies], args, b->workspace, b->stream));
    HM_CHECK(hm_event_record(t1, b->stream));
    HM_CHECK(hm_event_elapsed_ms(t0, t1, &ms[i]));
  }
  return HM_OK;
}

hm_status hm_tuner_bench_time(hm_tuner_bench *b, hm_kernel *kernel, const hm_gemm_config *cfg, int64_t valid_m,
                              int reps, double *median_us) {
  HM_CHECK_NOT_NULL(b);
  HM_CHECK_NOT_NULL(kernel);
  HM_CHECK_NOT_NULL(median_us);
  if (reps < 1) HM_FAIL(HM_INVALID_ARGUMENT, "reps %d", reps);
  hm_gemm_args args;
  HM_CHECK(ensure_workspace(b, cfg));
  HM_CHECK(make_args(b, cfg, valid_m, &args));
  hm_status ret = HM_OK;
  hm_event *t0 = NULL, *t1 = NULL;
  float *ms = calloc((size_t)reps, sizeof(*ms));
  if (ms == NULL) HM_FAIL(HM_OUT_OF_MEMORY, "%d timings", reps);
  HM_CHECK_GOTO(hm_event_create(b->engine, &t0), done);
  HM_CHECK_GOTO(hm_event_create(b->engine, &t1), done);
  HM_CHECK_GOTO(time_reps(b, kernel, cfg, &args, reps, ms, t0, t1), done);
  qsort(ms, (size_t)reps, sizeof(*ms), compare_float);
  *median_us = 1e3 * ms[reps / 2];
done:
  hm_event_destroy(t0);
  hm_event_destroy(t1);
  free(ms);
  return ret;
}
