/* SPDX-License-Identifier: Apache-2.0 */
/* A GEMM of the model with random weights and routed inputs, ready to time and to check. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench_data.h"
#include "bench/bench_gemm.h"
#include "check.h"
#include "dtype.h"
#include "layer_internal.h"

bool hm_bench_act8(const hm_quant_scheme *scheme) {
  return scheme->act == HM_F8E4M3 || scheme->act == HM_I8;
}

static int64_t act_scale_count(const hm_quant_scheme *s, int64_t rows, int64_t k) {
  if (s->act_scale == HM_ACT_SCALE_TOKEN) return rows;
  if (s->act_scale == HM_ACT_SCALE_GROUP128) return rows * ((k + 127) / 128);
  return 0;
}

double hm_bench_weight_bytes(const hm_quant_format *fmt, int64_t n, int64_t k) {
  return 4.0 * (double)hm_quant_qweight_words(fmt, n, k) +
         (double)hm_quant_scale_count(fmt, n, k) * hm_quant_scale_bytes(fmt) +
         4.0 * (double)hm_quant_zero_words(fmt, n, k) + (fmt->global_scale ? 4.0 : 0.0);
}

double hm_bench_act_bytes(const hm_quant_scheme *scheme, int64_t rows, int64_t k) {
  return (double)rows * (double)k * hm_dtype_bits(scheme->act) / 8.0 +
         4.0 * (double)act_scale_count(scheme, rows, k);
}

static bool is_moe(const hm_bench_gemm_shape *s) {
  return s->type != HM_GEMM_DENSE;
}

static int64_t valid_rows(const hm_bench_gemm_shape *s, int64_t tokens) {
  return tokens * s->top_k;
}

double hm_bench_gemm_flops(const hm_bench_gemm_shape *shape, int64_t tokens) {
  return 2.0 * (double)valid_rows(shape, tokens) * (double)shape->n * (double)shape->k;
}

/* Indexed gate_up gathers each token row once per slot, but from L2: count it once. */
double hm_bench_gemm_bytes(const hm_bench_gemm_shape *shape, const hm_quant_scheme *scheme,
                           const hm_bench_gemm_inputs *in) {
  int64_t valid = valid_rows(shape, in->tokens);
  int64_t active = is_moe(shape) ? hm_bench_active_experts(in->ids, valid, shape->experts) : 1;
  int64_t a_rows = shape->type == HM_GEMM_INDEXED && !shape->down ? in->tokens : valid;
  return (double)active * hm_bench_weight_bytes(&scheme->weight, shape->n, shape->k) +
         hm_bench_act_bytes(scheme, a_rows, shape->k) + 2.0 * (double)valid * (double)shape->n;
}

hm_status hm_bench_gemm_layer_create(hm_bench *b, const hm_bench_gemm_shape *shape,
                                     const hm_quant_scheme *scheme, uint64_t seed, hm_plan_source plan,
                                     hm_bench_gemm_layer *out) {
  memset(out, 0, sizeof(*out));
  out->scheme = *scheme;
  hm_layer_config cfg = HM_LAYER_CONFIG_INIT;
  cfg.n = shape->n;
  cfg.k = shape->k;
  cfg.experts = shape->experts;
  cfg.top_k = shape->experts > 1 ? shape->top_k : 1;
  cfg.scheme = *scheme;
  cfg.out = HM_BF16;
  /* --acc f16 is the quantized layer's (bench_args.c); the bf16 baseline has no such option. */
  cfg.fp16_accumulate = b->o.fp16_accumulate && scheme->act == HM_F8E4M3;
  hm_status ret = HM_OK;
  HM_CHECK(hm_bench_random_weights(&out->w, &scheme->weight, shape->experts, shape->n, shape->k, seed));
  HM_CHECK_GOTO(hm_layer_create(b->engine, &cfg, &out->layer), fail);
  HM_CHECK_GOTO(hm_layer_set_plan_source(out->layer, plan), fail);
  hm_weights_view view = hm_host_weights_view(&out->w);
  HM_CHECK_GOTO(hm_layer_load(out->layer, &view), fail);
  HM_CHECK_GOTO(hm_layer_transform(out->layer, b->stream), fail);
  HM_CHECK_GOTO(hm_stream_synchronize(b->stream), fail);
  return HM_OK;
fail:
  hm_bench_gemm_layer_destroy(out);
  return ret;
}

void hm_bench_gemm_layer_destroy(hm_bench_gemm_layer *l) {
  hm_layer_destroy(l->layer);
  hm_host_weights_free(&l->w);
  l->layer = NULL;
}

hm_status hm_bench_gemm_inputs_make(const hm_bench_gemm_shape *shape, int64_t tokens, uint64_t seed,
                                    hm_bench_gemm_inputs *out) {
  memset(out, 0, sizeof(*out));
  out->tokens = tokens;
  out->rows_count = shape->down ? tokens * shape->top_k : tokens;
  size_t slots = (size_t)(tokens * shape->top_k);
  out->ids = malloc(slots * sizeof(int32_t));
  out->weights = malloc(slots * sizeof(float));
  out->rows = malloc((size_t)(out->rows_count * shape->k) * sizeof(float));
  hm_status ret = HM_OK;
  if (out->ids == NULL || out->weights == NULL || out->rows == NULL)
    HM_FAIL_GOTO(HM_OUT_OF_MEMORY, fail, "inputs of %lld tokens", (long long)tokens);
  HM_CHECK_GOTO(
      hm_bench_random_topk(tokens, shape->top_k, shape->experts, shape->shared, seed, out->ids, out->weights),
      fail);
  HM_CHECK_GOTO(hm_bench_random_normal(out->rows, out->rows_count * shape->k, 1.0f, seed + 7), fail);
  return HM_OK;
fail:
  hm_bench_gemm_inputs_free(out);
  return ret;
}

void hm_bench_gemm_inputs_free(hm_bench_gemm_inputs *in) {
  free(in->ids);
  free(in->weights);
  free(in->rows);
  memset(in, 0, sizeof(*in));
}

static hm_moe_layout moe_layout_of(hm_gemm_type type) {
  switch (type) {
    case HM_GEMM_GROUPED_CONTIGUOUS: return HM_MOE_LAYOUT_CONTIGUOUS;
    case HM_GEMM_GROUPED_MASKED: return HM_MOE_LAYOUT_MASKED;
    default: return HM_MOE_LAYOUT_INDEXED;
  }
}

/* The logical row of slot id: its own row for down, its token's for gate_up. */
static int64_t logical_row(const hm_bench_gemm_shape *s, int64_t id) {
  return s->down ? id : id / s->top_k;
}

/* Rows of A as the layout stores them: grouped layouts copy each routed row into its segment. */
static hm_status expand_rows(const hm_bench_gemm_shape *s, const hm_bench_gemm_inputs *in,
                             const hm_bench_gemm_run *run, float **out, int64_t *rows) {
  bool grouped = s->type == HM_GEMM_GROUPED_CONTIGUOUS || s->type == HM_GEMM_GROUPED_MASKED;
  *rows = grouped ? run->host_align.sizes.rows : in->rows_count;
  *out = in->rows;
  if (!grouped) return HM_OK;
  float *a = calloc((size_t)(*rows * s->k), sizeof(float));
  if (a == NULL) HM_FAIL(HM_OUT_OF_MEMORY, "expanded A of %lld rows", (long long)*rows);
  const int32_t *row_of = run->host_align.arrays.row_of;
  for (int64_t id = 0; id < in->tokens * s->top_k; id++) {
    if (row_of[id] < 0) continue;
    memcpy(a + (int64_t)row_of[id] * s->k, in->rows + logical_row(s, id) * s->k,
           (size_t)s->k * sizeof(float));
  }
  *out = a;
  return HM_OK;
}

/* Quantizes f32 rows on the host as the scheme's activations and uploads them (and their scales). */
static hm_status upload_act(hm_engine *engine, const hm_quant_scheme *s, const float *x, int64_t rows,
                            int64_t k, void **a, float **a_scale) {
  size_t q_bytes = (size_t)(rows * k) * (size_t)hm_dtype_bits(s->act) / 8;
  size_t scale_bytes = (size_t)act_scale_count(s, rows, k) * sizeof(float);
  void *q = malloc(q_bytes ? q_bytes : 1);
  float *scales = scale_bytes ? malloc(scale_bytes) : NULL;
  hm_status ret = HM_OK;
  void *dev_scale = NULL;
  if (q == NULL || (scale_bytes && scales == NULL)) HM_FAIL_GOTO(HM_OUT_OF_MEMORY, done, "activations");
  HM_CHECK_GOTO(hm_quantize_activations(x, rows, k, s->act, s->act_scale, q, scales), done);
  HM_CHECK_GOTO(hm_mem_alloc(engine, q_bytes, a), done);
  HM_CHECK_GOTO(hm_mem_upload(engine, *a, q, q_bytes), done);
  HM_CHECK_GOTO(hm_mem_alloc(engine, scale_bytes, &dev_scale), done);
  *a_scale = dev_scale;
  HM_CHECK_GOTO(hm_mem_upload(engine, dev_scale, scales, scale_bytes), done);
done:
  free(q);
  free(scales);
  return ret;
}

static void fill_args(const hm_bench_gemm_shape *s, const hm_bench_gemm_inputs *in, hm_bench_gemm_run *run) {
  hm_gemm_args *g = &run->args;
  const hm_moe_alignment *d = &run->dev_align.arrays;
  memset(g, 0, sizeof(*g));
  g->type = s->type;
  g->a = run->a;
  g->a_scale = run->a_scale;
  g->c = run->c;
  g->m = in->tokens;
  g->routing_ready = s->down; /* as the MoE layer launches its down GEMM (moe/layer_forward.c) */
  if (s->type == HM_GEMM_INDEXED) {
    g->sorted_ids = d->sorted_ids;
    g->expert_ids = d->expert_ids;
    g->num_padded = d->num_padded;
    g->max_padded = run->dev_align.sizes.max_padded;
    g->block_m = run->block_m;
    g->top_k = s->top_k;
    g->a_rows_per_token = s->down ? 1 : s->top_k;
    g->topk_weights = s->down ? run->topk_weights : NULL;
  } else if (s->type == HM_GEMM_GROUPED_CONTIGUOUS) {
    g->m = run->dev_align.sizes.rows;
    g->block_m = run->block_m;
    g->expert_offsets = d->expert_offsets;
    g->expert_counts = d->expert_counts;
    g->routed_rows = run->routed_rows;
  } else if (s->type == HM_GEMM_GROUPED_MASKED) {
    g->m = run->dev_align.config.max_m;
    g->expert_counts = d->expert_counts;
    g->routed_rows = run->routed_rows;
  }
}

static hm_status make_routing(hm_bench *b, const hm_bench_gemm_shape *s, const hm_bench_gemm_inputs *in,
                              hm_bench_gemm_run *run) {
  size_t slots = (size_t)(in->tokens * s->top_k);
  HM_CHECK(hm_bench_align_host(b->host, moe_layout_of(s->type), in->tokens, s->experts, s->top_k,
                               run->block_m, in->ids, &run->host_align));
  HM_CHECK(hm_bench_align_upload(b->engine, &run->host_align, &run->dev_align));
  if (s->type != HM_GEMM_INDEXED || !s->down) return HM_OK;
  void *w = NULL;
  HM_CHECK(hm_mem_alloc(b->engine, slots * sizeof(float), &w));
  run->topk_weights = w;
  return hm_mem_upload(b->engine, w, in->weights, slots * sizeof(float));
}

hm_status hm_bench_gemm_run_make(hm_bench *b, const hm_bench_gemm_shape *shape, const hm_bench_gemm_layer *l,
                                 const hm_bench_gemm_inputs *in, hm_bench_gemm_run *out) {
  memset(out, 0, sizeof(*out));
  out->engine = b->engine;
  out->layer = l->layer;
  out->block_m = is_moe(shape) ? hm_layer_block_m(l->layer, valid_rows(shape, in->tokens)) : 0;
  out->routed_rows = valid_rows(shape, in->tokens);
  hm_status ret = HM_OK;
  float *rows = NULL;
  int64_t a_rows = 0;
  if (is_moe(shape)) HM_CHECK_GOTO(make_routing(b, shape, in, out), fail);
  HM_CHECK_GOTO(expand_rows(shape, in, out, &rows, &a_rows), fail);
  HM_CHECK_GOTO(upload_act(b->engine, &l->scheme, rows, a_rows, shape->k, &out->a, &out->a_scale), fail);
  bool grouped = shape->type == HM_GEMM_GROUPED_CONTIGUOUS || shape->type == HM_GEMM_GROUPED_MASKED;
  out->c_rows = grouped ? out->host_align.sizes.rows : valid_rows(shape, in->tokens);
  HM_CHECK_GOTO(hm_mem_alloc(b->engine, (size_t)(out->c_rows * shape->n) * 2, &out->c), fail);
  fill_args(shape, in, out);
  if (rows != in->rows) free(rows);
  return HM_OK;
fail:
  if (rows != in->rows) free(rows);
  hm_bench_gemm_run_free(b, out);
  return ret;
}

void hm_bench_gemm_run_free(hm_bench *b, hm_bench_gemm_run *run) {
  hm_bench_align_free(b->host, &run->host_align);
  hm_bench_align_free(b->engine, &run->dev_align);
  hm_mem_free(b->engine, run->a);
  hm_mem_free(b->engine, run->a_scale);
  hm_mem_free(b->engine, run->c);
  hm_mem_free(b->engine, run->topk_weights);
  memset(run, 0, sizeof(*run));
}

hm_status hm_bench_gemm_forward(void *ctx, hm_stream *stream) {
  hm_bench_gemm_run *run = ctx;
  return hm_layer_forward(run->layer, &run->args, stream);
}

/*
 * The layer's own choice (hm_layer_kernel_config), as forward picks it; on the host,
 * where the reference runs, the kernel a GPU of the device profile would run.
 */
void hm_bench_kernel_name(const hm_layer *layer, const hm_gemm_args *args, char *buf, size_t len) {
  hm_gemm_config cfg;
  const bool host = layer->engine->kind != HM_BACKEND_CUDA;
  if (hm_layer_kernel_config(layer, args, &cfg, NULL) != HM_OK) {
    snprintf(buf, len, args->type == HM_GEMM_INDEXED ? "host_bm%d" : "host", args->block_m);
    return;
  }
  const hm_gemm_tuning *k = &cfg.tuning;
  snprintf(buf, len, "%sbm%d_bn%d_bk%d_s%d%s%s%s", host ? "host:" : "", k->bm, k->bn, k->bk, k->stages,
           k->stream_k ? "_sk" : "", k->mma == HM_MMA_WGMMA ? "_wg" : "", k->ws ? "_ws" : "");
}
