/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Helpers of the device GEMM tests: a case (format, types, shape), its random weights
 * and activations, the reference on the host and the layer on the device with C
 * poisoned by NaN bytes first, and the comparison (every element the reference writes
 * must be written, no other, and ||out-ref||/||ref|| within the case's bound).
 */
#ifndef TEST_GEMM_UTIL_H
#define TEST_GEMM_UTIL_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "engine.h"
#include "hm_test.h"
#include "numfmt.h"
#include "quant.h"
#include "ref_gemm.h"

typedef struct gt_case {
  const char *name;
  hm_quant_format fmt;
  hm_dtype act, out;
  bool bias;
  int64_t n, k, experts;
  bool batch_invariant;
} gt_case;

/* A weight format: group 0 = per channel; F16/BF16 weights take no scales. */
static inline hm_quant_format gt_format(hm_dtype weight, int group, bool zero_point, hm_dtype scale) {
  hm_quant_format f = {weight, scale, group ? HM_SCALE_GROUP : HM_SCALE_CHANNEL, group, 0, zero_point, false};
  if (weight == HM_F16 || weight == HM_BF16) {
    f.scale = weight;
    f.scale_kind = HM_SCALE_NONE;
    f.group_k = 0;
  }
  return f;
}

static inline void *gt_alloc(size_t bytes) {
  void *p = calloc(bytes ? bytes : 1, 1);
  assert_non_null(p);
  return p;
}

/* Random values of dtype (through f32), rows x cols. */
static inline void *gt_random(hm_rng *rng, hm_dtype dtype, int64_t count, float scale) {
  float *f = gt_alloc((size_t)count * sizeof(float));
  hm_rng_fill_normal(rng, f, (size_t)count, scale);
  void *q = gt_alloc((size_t)count * 2);
  HM_ASSERT_OK(hm_convert_from_f32(dtype, f, q, count));
  free(f);
  return q;
}

/* The weights of a case, quantized on the host, and its bias in the output type. */
typedef struct gt_layer_data {
  hm_host_weights w;
  void *bias;
} gt_layer_data;

static inline void gt_layer_data_make(hm_rng *rng, const gt_case *c, gt_layer_data *d) {
  memset(d, 0, sizeof(*d));
  const int64_t count = c->experts * c->n * c->k;
  float *src = gt_alloc((size_t)count * sizeof(float));
  hm_rng_fill_normal(rng, src, (size_t)count, 0.05f);
  HM_ASSERT_OK(hm_host_weights_alloc(&d->w, &c->fmt, c->experts, c->n, c->k));
  HM_ASSERT_OK(hm_quantize_weights(src, &d->w));
  free(src);
  if (c->bias) d->bias = gt_random(rng, c->out, c->experts * c->n, 0.5f);
}

static inline void gt_layer_data_free(gt_layer_data *d) {
  hm_host_weights_free(&d->w);
  free(d->bias);
}

/* A layer of cfg with host weights w and bias (or NULL), loaded and transformed. */
static inline hm_layer *gt_layer_loaded(hm_engine *e, const hm_layer_config *cfg, const hm_host_weights *w,
                                        void *bias) {
  hm_layer *l = NULL;
  HM_ASSERT_OK(hm_layer_create(e, cfg, &l));
  hm_weights_view v = hm_host_weights_view(w);
  v.bias = bias;
  HM_ASSERT_OK(hm_layer_load(l, &v));
  HM_ASSERT_OK(hm_layer_transform(l, NULL));
  return l;
}

static inline hm_layer *gt_layer_make(hm_engine *e, const gt_case *c, const gt_layer_data *d) {
  hm_layer_config cfg = HM_LAYER_CONFIG_INIT;
  cfg.n = c->n;
  cfg.k = c->k;
  cfg.experts = c->experts;
  cfg.scheme.weight = c->fmt;
  cfg.scheme.act = c->act;
  cfg.scheme.act_scale = HM_ACT_SCALE_NONE;
  cfg.out = c->out;
  cfg.bias = c->bias;
  cfg.batch_invariant = c->batch_invariant;
  return gt_layer_loaded(e, &cfg, &d->w, d->bias);
}

/* The reference into a NaN-poisoned c_ref (c_rows x N of the output type). */
static inline void gt_reference(const gt_case *c, const gt_layer_data *d, const hm_gemm_args *host_args,
                                int64_t c_rows, void *c_ref) {
  memset(c_ref, 0xff, (size_t)(c_rows * c->n) * 2);
  hm_ref_gemm_problem p = {.w = &d->w, .act = c->act, .act_scale = HM_ACT_SCALE_NONE, .out = c->out,
                           .bias = d->bias, .args = *host_args, .threads = 0};
  p.args.c = c_ref;
  HM_ASSERT_OK(hm_ref_gemm(&p));
}

/* Device copy of a host array (NULL stays NULL). */
static inline void *gt_upload(hm_engine *e, const void *src, size_t bytes) {
  if (src == NULL || bytes == 0) return NULL;
  void *d = NULL;
  HM_ASSERT_OK(hm_mem_alloc(e, bytes, &d));
  HM_ASSERT_OK(hm_mem_upload(e, d, src, bytes));
  return d;
}

/*
 * Compares a device result with the reference: NaN-for-NaN (rows the layout does not
 * cover stay poisoned on both sides), finite elsewhere; returns the relative error.
 */
static inline double gt_compare(const void *out, const void *ref, int64_t count, hm_dtype dtype, int64_t n,
                                const char *what) {
  double num = 0, den = 0;
  int64_t unwritten = 0, stray = 0;
  for (int64_t i = 0; i < count; i++) {
    const float o = hm_load_f32(dtype, out, i), r = hm_load_f32(dtype, ref, i);
    if (isnan(r)) {
      if (!isnan(o) && stray++ < 3) printf("  %s: stray write at row %lld col %lld\n", what, (long long)(i / n), (long long)(i % n));
      continue;
    }
    if (!isfinite(o)) {
      if (unwritten++ < 3) printf("  %s: row %lld col %lld not written (%g)\n", what, (long long)(i / n), (long long)(i % n), o);
      continue;
    }
    num += ((double)o - r) * ((double)o - r);
    den += (double)r * r;
  }
  if (unwritten || stray) {
    printf("  %s: %lld unwritten, %lld stray of %lld\n", what, (long long)unwritten, (long long)stray, (long long)count);
    return INFINITY;
  }
  return den > 0 ? sqrt(num / den) : sqrt(num);
}

/* Tolerance: weights rounded to the activation type, and output rounding on both sides. */
static inline double gt_tolerance(const gt_case *c) {
  return (c->act == HM_BF16 || c->out == HM_BF16) ? 1.2e-2 : 3e-3;
}

/* What runs the GEMM once its args point at device buffers. */
typedef void (*gt_run_fn)(void *ctx, const hm_gemm_args *device_args);

/* Bytes past its allocation's start (16-byte aligned) that C begins at: 4 takes the
 * kernels' paths for a C the tensor maps cannot describe. */
static int gt_c_skew;

/* A test's teardown: C aligned again, whether the test passed or not. */
static inline int gt_c_unskew(void **state) {
  (void)state;
  gt_c_skew = 0;
  return 0;
}

/* Runs fn on device buffers from host_args, C poisoned; downloads C. */
static inline void gt_device_run_with(hm_engine *e, gt_run_fn fn, void *ctx, const hm_gemm_args *host_args,
                                      int64_t a_rows, int64_t k, int64_t c_rows, int64_t n, int64_t experts,
                                      void *c_out) {
  hm_gemm_args a = *host_args;
  const size_t meta = (size_t)experts * 4, c_bytes = (size_t)(c_rows * n) * 2;
  a.a = gt_upload(e, host_args->a, (size_t)(a_rows * k) * 2);
  void *dc = NULL;
  HM_ASSERT_OK(hm_mem_alloc(e, c_bytes + 16 + (size_t)gt_c_skew, &dc));
  HM_ASSERT_OK(hm_engine_memset(e, dc, 0xff, c_bytes + 16 + (size_t)gt_c_skew, NULL));
  a.c = (char *)dc + gt_c_skew;
  a.expert_offsets = gt_upload(e, host_args->expert_offsets, meta + 4);
  a.expert_counts = gt_upload(e, host_args->expert_counts, meta);
  const int64_t padded = host_args->type == HM_GEMM_INDEXED ? host_args->max_padded : 0;
  a.sorted_ids = gt_upload(e, host_args->sorted_ids, (size_t)padded * 4);
  a.expert_ids = gt_upload(e, host_args->expert_ids,
                           host_args->block_m > 0 ? (size_t)((padded + host_args->block_m - 1) / host_args->block_m) * 4 : 0);
  a.num_padded = gt_upload(e, host_args->num_padded, 4);
  a.topk_weights = gt_upload(e, host_args->topk_weights, (size_t)(host_args->m * host_args->top_k) * 4);
  fn(ctx, &a);
  HM_ASSERT_OK(hm_mem_download(e, c_out, a.c, c_bytes));
  unsigned char tail[16];
  HM_ASSERT_OK(hm_mem_download(e, tail, (char *)a.c + c_bytes, 16));
  for (int i = 0; i < 16; i++) assert_int_equal(tail[i], 0xff); /* nothing written past C */
  hm_mem_free(e, (void *)a.a);
  hm_mem_free(e, dc);
  hm_mem_free(e, (void *)a.expert_offsets);
  hm_mem_free(e, (void *)a.expert_counts);
  hm_mem_free(e, (void *)a.sorted_ids);
  hm_mem_free(e, (void *)a.expert_ids);
  hm_mem_free(e, (void *)a.num_padded);
  hm_mem_free(e, (void *)a.topk_weights);
}

static inline void gt_forward(void *layer, const hm_gemm_args *device_args) {
  HM_ASSERT_OK(hm_layer_forward(layer, device_args, NULL));
}

/* Runs the layer on device buffers from host_args, C poisoned; downloads C. */
static inline void gt_device_run(hm_engine *e, hm_layer *l, const hm_gemm_args *host_args, int64_t a_rows, int64_t k,
                                 int64_t c_rows, int64_t n, int64_t experts, void *c_out) {
  gt_device_run_with(e, gt_forward, l, host_args, a_rows, k, c_rows, n, experts, c_out);
}

#endif
