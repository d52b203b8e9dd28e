/* SPDX-License-Identifier: Apache-2.0 */
/* Buffers, routing metadata and timing of the tuner (see tuner_bench.h). */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "engine.h"
#include "heuristics/tuner_bench.h"
#include "heuristics/tuner_routing.h"
#include "kernels/transform.h"

#define TUNER_MAX_WEIGHT_BYTES ((size_t)8 << 30)
#define WARMUP_LAUNCHES 3
/* Byte of every buffer: 0x3c3c is a small normal bf16/f16 value, 0x3c3c3c3c a small normal
 * f32 and 0x3c a normal fp8 e4m3 code, so no NaN or denormal path is timed. */
#define FILL_BYTE 0x3c
/* Activations and output of one shape: dense DeepSeek-V3 gate_up at 65536 rows takes 5.8 GB;
 * masked launches, max_m rows for every expert, outgrow it first. */
#define TUNER_MAX_ACT_BYTES ((size_t)8 << 30)

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

/* Rows of A and C a launch at valid_m reads and writes; padded: the contiguous layout's rows;
 * a_rows_per_token: an indexed launch's (1 where A holds a row per slot). */
static void rows_of(const hm_layer_config *lc, hm_gemm_type type, int64_t valid_m, int64_t padded,
                    int a_rows_per_token, int64_t *a_rows, int64_t *c_rows) {
  const int top_k = hm_choose_token_rows(lc, type);
  const int64_t tokens = (valid_m + top_k - 1) / top_k;
  switch (type) {
    case HM_GEMM_INDEXED: *a_rows = tokens * top_k / a_rows_per_token, *c_rows = tokens * top_k; return;
    case HM_GEMM_GROUPED_CONTIGUOUS: *a_rows = *c_rows = padded; return;
    case HM_GEMM_GROUPED_MASKED: *a_rows = *c_rows = lc->experts * tokens; return;
    default: *a_rows = *c_rows = valid_m; return;
  }
}

/* Bytes of rows of A (16-bit activations at most) and of C (16-bit output). */
static size_t a_bytes(const hm_layer_config *lc, int64_t rows) {
  return (size_t)(rows * lc->k) * 2;
}

static size_t c_bytes(const hm_layer_config *lc, int64_t rows) {
  return (size_t)(rows * lc->n) * 2;
}

bool hm_tuner_bench_fits(const hm_layer_config *layer, hm_gemm_type type, int64_t valid_m) {
  int64_t a_rows, c_rows;
  /* Indexed launches at their largest, a row of A per slot; contiguous segments padded to the
   * tallest tile. */
  rows_of(layer, type, valid_m, valid_m + layer->experts * (HM_CHOOSE_MAX_BM - 1), 1, &a_rows, &c_rows);
  return a_bytes(layer, a_rows) + c_bytes(layer, c_rows) <= TUNER_MAX_ACT_BYTES;
}

hm_status hm_tuner_bench_create(hm_engine *engine, const hm_tune_request *req, size_t l2_bytes,
                                hm_tuner_bench *out) {
  HM_CHECK_NOT_NULL(engine);
  HM_CHECK_NOT_NULL(req);
  HM_CHECK_NOT_NULL(req->layer);
  HM_CHECK_NOT_NULL(out);
  memset(out, 0, sizeof(*out));
  out->engine = engine;
  out->layer = req->layer;
  out->type = req->type;
  out->top_k = hm_choose_token_rows(req->layer, req->type);
  out->shared = req->type == HM_GEMM_DENSE ? 0 : req->shared;
  out->a_rows_per_token = req->a_per_slot ? 1 : out->top_k;
  out->routing_ready = req->a_per_slot;
  hm_status ret = HM_OK;
  HM_CHECK_GOTO(hm_stream_create(engine, &out->stream), fail);
  HM_CHECK_GOTO(alloc_weights(out, l2_bytes), fail);
  return HM_OK;
fail:
  hm_tuner_bench_destroy(out);
  return ret;
}

static void free_meta(hm_tuner_bench *b) {
  hm_mem_free(b->engine, b->sorted_ids);
  hm_mem_free(b->engine, b->expert_ids);
  hm_mem_free(b->engine, b->num_padded);
  hm_mem_free(b->engine, b->expert_counts);
  hm_mem_free(b->engine, b->expert_offsets);
  b->sorted_ids = b->expert_ids = b->num_padded = b->expert_counts = b->expert_offsets = NULL;
  b->meta_block = 0;
}

static void free_buffer(hm_engine *e, hm_tuner_buffer *buf) {
  hm_mem_free(e, buf->ptr);
  buf->ptr = NULL;
  buf->bytes = 0;
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
  free_buffer(b->engine, &b->a);
  free_buffer(b->engine, &b->a_scale);
  free_buffer(b->engine, &b->c);
  free_buffer(b->engine, &b->workspace);
  hm_stream_destroy(b->stream);
  memset(b, 0, sizeof(*b));
}

/* Grows buf to at least bytes; fill: the whole buffer at FILL_BYTE (kernels read it), else
 * zero when it is new (a Stream-K workspace whose counters kernels leave at zero). */
static hm_status ensure_buffer(hm_engine *e, hm_tuner_buffer *buf, size_t bytes, bool fill) {
  if (bytes <= buf->bytes) return HM_OK;
  free_buffer(e, buf);
  HM_CHECK(hm_mem_alloc(e, bytes, &buf->ptr));
  buf->bytes = bytes;
  return hm_engine_memset(e, buf->ptr, fill ? FILL_BYTE : 0, bytes, NULL);
}

static hm_status upload_i32(hm_engine *e, const int32_t *host, int64_t count, int32_t **out) {
  HM_CHECK(hm_mem_alloc(e, (size_t)(count > 0 ? count : 1) * sizeof(int32_t), (void **)out));
  return hm_mem_upload(e, *out, host, (size_t)count * sizeof(int32_t));
}

/* Puts what the bench's layout reads of r on the device. */
static hm_status upload_routing(hm_tuner_bench *b, const hm_tuner_routing *r) {
  const int64_t padded = r->starts[r->experts];
  const int32_t used = (int32_t)padded;
  switch (b->type) {
    case HM_GEMM_INDEXED:
      HM_CHECK(upload_i32(b->engine, r->sorted_ids, padded, &b->sorted_ids));
      HM_CHECK(upload_i32(b->engine, r->block_experts, padded / r->block, &b->expert_ids));
      return upload_i32(b->engine, &used, 1, &b->num_padded);
    case HM_GEMM_GROUPED_CONTIGUOUS:
      HM_CHECK(upload_i32(b->engine, r->starts, r->experts + 1, &b->expert_offsets));
      return upload_i32(b->engine, r->counts, r->experts, &b->expert_counts);
    case HM_GEMM_GROUPED_MASKED: return upload_i32(b->engine, r->counts, r->experts, &b->expert_counts);
    default: return HM_OK;
  }
}

/* The routing of tokens padded to block on the device, unless it is already there. */
static hm_status ensure_routing(hm_tuner_bench *b, int64_t tokens, int block) {
  if (b->meta_block == block && b->meta_m == tokens) return HM_OK;
  free_meta(b);
  hm_tuner_routing r;
  HM_CHECK(hm_tuner_routing_make(tokens, b->top_k, b->layer->experts, b->shared, block, &r));
  const hm_status st = upload_routing(b, &r);
  b->max_padded = r.starts[r.experts];
  hm_tuner_routing_free(&r);
  HM_CHECK(st);
  b->meta_block = block;
  b->meta_m = tokens;
  return HM_OK;
}

static hm_status ensure_workspace(hm_tuner_bench *b, const hm_gemm_config *cfg) {
  /* Kernels leave the counters zero, so one zeroed buffer of the largest size serves all. */
  return ensure_buffer(b->engine, &b->workspace, hm_gemm_workspace_bytes(cfg, b->engine->sm_count), false);
}

/* The layout's metadata, as the MoE layer passes it (moe/layer_forward.c): indexed and
 * contiguous rows padded to the kernel's block, masked launches of max_m = tokens rows an
 * expert; each MoE launch names the rows routed, from which the kernel table picks. The
 * routing is uploaded before the timed launches, so the down GEMM's may say it is ready. */
static hm_status layout_args(hm_tuner_bench *b, const hm_gemm_config *cfg, int64_t tokens,
                             hm_gemm_args *args) {
  const int bm = cfg->tuning.bm;
  HM_CHECK(ensure_routing(b, tokens, b->type == HM_GEMM_GROUPED_MASKED ? 1 : bm));
  args->m = tokens;
  args->routing_ready = b->routing_ready;
  switch (b->type) {
    case HM_GEMM_INDEXED:
      args->sorted_ids = b->sorted_ids;
      args->expert_ids = b->expert_ids;
      args->num_padded = b->num_padded;
      args->max_padded = b->max_padded;
      args->block_m = bm;
      args->top_k = b->top_k;
      args->a_rows_per_token = b->a_rows_per_token;
      return HM_OK;
    case HM_GEMM_GROUPED_CONTIGUOUS:
      args->m = b->max_padded;
      args->expert_offsets = b->expert_offsets;
      args->block_m = bm;
      break;
    default: break;
  }
  args->expert_counts = b->expert_counts;
  args->routed_rows = tokens * b->top_k;
  return HM_OK;
}

static hm_status make_args(hm_tuner_bench *b, const hm_gemm_config *cfg, int64_t valid_m, hm_gemm_args *args) {
  memset(args, 0, sizeof(*args));
  args->type = b->type;
  args->m = valid_m;
  if (b->type != HM_GEMM_DENSE) HM_CHECK(layout_args(b, cfg, (valid_m + b->top_k - 1) / b->top_k, args));
  int64_t a_rows, c_rows;
  rows_of(b->layer, b->type, valid_m, b->max_padded, b->a_rows_per_token, &a_rows, &c_rows);
  HM_CHECK(ensure_buffer(b->engine, &b->a, a_bytes(b->layer, a_rows), true));
  HM_CHECK(ensure_buffer(b->engine, &b->a_scale,
                         (size_t)(a_rows * act_scales_per_row(b->layer)) * sizeof(float), true));
  HM_CHECK(ensure_buffer(b->engine, &b->c, c_bytes(b->layer, c_rows), false));
  args->a = b->a.ptr;
  args->a_scale = b->a_scale.ptr;
  args->c = b->c.ptr;
  return HM_OK;
}

static int compare_float(const void *x, const void *y) {
  const float a = *(const float *)x, b = *(const float *)y;
  return (a > b) - (a < b);
}

/* Launch j of the run: warm-ups first, then reps x chain timed ones, each on the next weight copy. */
static hm_status launch_nth(hm_tuner_bench *b, hm_kernel *k, const hm_gemm_config *cfg,
                            const hm_gemm_args *args, int j) {
  return hm_gemm_launch(k, cfg, b->engine->sm_count, &b->ops[j % b->copies], args, b->workspace.ptr,
                        b->stream);
}

static hm_status time_reps(hm_tuner_bench *b, hm_kernel *k, const hm_gemm_config *cfg,
                           const hm_gemm_args *args, int reps, int chain, float *ms, hm_event *t0,
                           hm_event *t1) {
  int j = 0;
  for (; j < WARMUP_LAUNCHES; j++) HM_CHECK(launch_nth(b, k, cfg, args, j));
  for (int i = 0; i < reps; i++) {
    HM_CHECK(hm_event_record(t0, b->stream));
    for (int c = 0; c < chain; c++, j++) HM_CHECK(launch_nth(b, k, cfg, args, j));
    HM_CHECK(hm_event_record(t1, b->stream));
    HM_CHECK(hm_event_elapsed_ms(t0, t1, &ms[i]));
    ms[i] /= (float)chain;
  }
  return HM_OK;
}

hm_status hm_tuner_bench_time(hm_tuner_bench *b, hm_kernel *kernel, const hm_gemm_config *cfg,
                              int64_t valid_m, int reps, int chain, double *median_us) {
  HM_CHECK_NOT_NULL(b);
  HM_CHECK_NOT_NULL(kernel);
  HM_CHECK_NOT_NULL(median_us);
  if (reps < 1 || chain < 1) HM_FAIL(HM_INVALID_ARGUMENT, "reps %d, chain %d", reps, chain);
  hm_gemm_args args;
  HM_CHECK(ensure_workspace(b, cfg));
  HM_CHECK(make_args(b, cfg, valid_m, &args));
  hm_status ret = HM_OK;
  hm_event *t0 = NULL, *t1 = NULL;
  float *ms = calloc((size_t)reps, sizeof(*ms));
  if (ms == NULL) HM_FAIL(HM_OUT_OF_MEMORY, "%d timings", reps);
  HM_CHECK_GOTO(hm_event_create(b->engine, &t0), done);
  HM_CHECK_GOTO(hm_event_create(b->engine, &t1), done);
  HM_CHECK_GOTO(time_reps(b, kernel, cfg, &args, reps, chain, ms, t0, t1), done);
  qsort(ms, (size_t)reps, sizeof(*ms), compare_float);
  *median_us = 1e3 * ms[reps / 2];
done:
  hm_event_destroy(t0);
  hm_event_destroy(t1);
  free(ms);
  return ret;
}
