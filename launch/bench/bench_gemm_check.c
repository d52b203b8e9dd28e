/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The check of a GEMM run: one forward, then hm_ref_gemm on a sample of its tokens
 * (all of them when the reference can afford it) and #wrong over their output rows.
 * Activations are quantized on the host by the same function that made the device's,
 * row by row, so the reference sees exactly the inputs the kernel saw.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench_check.h"
#include "bench/bench_gemm.h"
#include "check.h"
#include "dtype.h"
#include "numfmt.h"
#include "ref_gemm.h"

/* The host-side inputs of the reference for the sampled tokens. */
struct ref_inputs {
  int64_t tokens; /* sampled */
  int64_t *token; /* [tokens] index of each sampled token */
  int32_t *ids;   /* [tokens, top_k] */
  float *weights;
  void *a; /* quantized rows */
  float *a_scale;
  float *c; /* [tokens * top_k, N] f32 */
  hm_bench_align align;
};

static void ref_free(hm_bench *b, struct ref_inputs *r) {
  free(r->token), free(r->ids), free(r->weights), free(r->a), free(r->a_scale), free(r->c);
  hm_bench_align_free(b->host, &r->align);
  memset(r, 0, sizeof(*r));
}

static hm_status ref_alloc(const hm_bench_gemm_shape *s, const hm_quant_scheme *q, struct ref_inputs *r,
                           float **rows, int64_t *a_rows) {
  int64_t slots = r->tokens * s->top_k;
  *a_rows = s->down ? slots : r->tokens;
  int64_t groups = q->act_scale == HM_ACT_SCALE_GROUP128 ? (s->k + 127) / 128 : 1;
  r->token = malloc((size_t)r->tokens * sizeof(int64_t));
  r->ids = malloc((size_t)slots * sizeof(int32_t));
  r->weights = malloc((size_t)slots * sizeof(float));
  r->a = malloc((size_t)(*a_rows * s->k) * 2 + 1);
  r->a_scale = malloc((size_t)(*a_rows * groups) * sizeof(float));
  r->c = malloc((size_t)(slots * s->n) * sizeof(float));
  *rows = malloc((size_t)(*a_rows * s->k) * sizeof(float));
  if (!r->token || !r->ids || !r->weights || !r->a || !r->a_scale || !r->c || !*rows)
    HM_FAIL(HM_OUT_OF_MEMORY, "reference inputs of %lld tokens", (long long)r->tokens);
  return HM_OK;
}

/* Tokens spread evenly over the run; their routing and rows copied out of the inputs. */
static hm_status ref_prepare(hm_bench *b, const hm_bench_gemm_shape *s, const hm_quant_scheme *q,
                             const hm_bench_gemm_inputs *in, struct ref_inputs *r) {
  r->tokens = hm_bench_sample_rows(in->tokens, 2.0 * s->top_k * (double)s->n * (double)s->k, b->cuda);
  float *rows = NULL;
  int64_t a_rows = 0;
  hm_status ret = HM_OK;
  HM_CHECK_GOTO(ref_alloc(s, q, r, &rows, &a_rows), done);
  int64_t per_token = s->down ? s->top_k : 1;
  for (int64_t i = 0; i < r->tokens; i++) {
    int64_t t = i * in->tokens / r->tokens;
    r->token[i] = t;
    memcpy(r->ids + i * s->top_k, in->ids + t * s->top_k, (size_t)s->top_k * sizeof(int32_t));
    memcpy(r->weights + i * s->top_k, in->weights + t * s->top_k, (size_t)s->top_k * sizeof(float));
    memcpy(rows + i * per_token * s->k, in->rows + t * per_token * s->k,
           (size_t)(per_token * s->k) * sizeof(float));
  }
  HM_CHECK_GOTO(hm_quantize_activations(rows, a_rows, s->k, q->act, q->act_scale, r->a, r->a_scale), done);
  if (s->type != HM_GEMM_DENSE)
    HM_CHECK_GOTO(hm_bench_align_host(b->host, HM_MOE_LAYOUT_INDEXED, r->tokens, s->experts, s->top_k, 16,
                                      r->ids, &r->align),
                  done);
done:
  free(rows);
  return ret;
}

static hm_status ref_compute(const hm_bench_gemm_shape *s, const hm_bench_gemm_layer *l,
                             const hm_bench_gemm_run *run, struct ref_inputs *r) {
  hm_ref_gemm_problem p;
  memset(&p, 0, sizeof(p));
  p.w = &l->w;
  p.act = l->scheme.act;
  p.act_scale = l->scheme.act_scale;
  p.out = HM_F32;
  hm_gemm_args *g = &p.args;
  g->type = s->type == HM_GEMM_DENSE ? HM_GEMM_DENSE : HM_GEMM_INDEXED;
  g->m = r->tokens;
  g->a = r->a;
  g->a_scale = p.act_scale == HM_ACT_SCALE_NONE ? NULL : r->a_scale;
  g->c = r->c;
  if (g->type == HM_GEMM_INDEXED) {
    g->sorted_ids = r->align.arrays.sorted_ids;
    g->expert_ids = r->align.arrays.expert_ids;
    g->num_padded = r->align.arrays.num_padded;
    g->max_padded = r->align.sizes.max_padded;
    g->block_m = r->align.config.block_m;
    g->top_k = s->top_k;
    g->a_rows_per_token = s->down ? 1 : s->top_k;
    g->topk_weights = run->args.topk_weights ? r->weights : NULL;
  }
  return hm_ref_gemm(&p);
}

/* The device row holding slot j of sampled token i. */
static int64_t device_row(const hm_bench_gemm_shape *s, const hm_bench_gemm_run *run, int64_t token, int j) {
  int64_t id = token * s->top_k + j;
  if (s->type == HM_GEMM_DENSE || s->type == HM_GEMM_INDEXED) return id;
  return run->host_align.arrays.row_of[id];
}

static hm_status compare(hm_bench *b, const hm_bench_gemm_shape *s, const hm_bench_gemm_run *run,
                         const struct ref_inputs *r, double tol, int64_t *wrong) {
  uint16_t *raw = malloc((size_t)s->n * 2);
  float *out = malloc((size_t)s->n * sizeof(float));
  hm_status ret = HM_OK;
  *wrong = 0;
  if (raw == NULL || out == NULL) HM_FAIL_GOTO(HM_OUT_OF_MEMORY, done, "check row");
  for (int64_t i = 0; i < r->tokens; i++) {
    for (int j = 0; j < s->top_k; j++) {
      int64_t row = device_row(s, run, r->token[i], j);
      const float *ref = r->c + (i * s->top_k + j) * s->n;
      if (row < 0) {
        *wrong += s->n; /* a routed slot the layout dropped */
        continue;
      }
      HM_CHECK_GOTO(hm_mem_download(b->engine, raw, (const char *)run->c + row * s->n * 2, (size_t)s->n * 2),
                    done);
      HM_CHECK_GOTO(hm_convert_to_f32(HM_BF16, raw, out, s->n), done);
      *wrong += hm_bench_count_wrong(out, ref, 1, s->n, tol);
    }
  }
done:
  free(raw);
  free(out);
  return ret;
}

hm_status hm_bench_gemm_check(hm_bench *b, const hm_bench_gemm_shape *shape, const hm_bench_gemm_layer *l,
                              const hm_bench_gemm_inputs *in, hm_bench_gemm_run *run, int64_t *wrong) {
  HM_CHECK(hm_bench_gemm_forward(run, b->stream));
  HM_CHECK(hm_stream_synchronize(b->stream));
  struct ref_inputs r;
  memset(&r, 0, sizeof(r));
  hm_status ret = HM_OK;
  HM_CHECK_GOTO(ref_prepare(b, shape, &l->scheme, in, &r), done);
  HM_CHECK_GOTO(ref_compute(shape, l, run, &r), done);
  HM_CHECK_GOTO(compare(b, shape, run, &r, hm_bench_tolerance(&l->scheme), wrong), done);
done:
  ref_free(b, &r);
  return ret;
}
