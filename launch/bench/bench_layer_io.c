/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Inputs of a MoE layer forward (random x and router logits) and its check: a token's
 * output depends only on its own x and logits, so a sample of tokens run through the
 * same layer on the host backend is a full check of those rows.
 */
#include <stdlib.h>
#include <string.h>

#include <mpi.h>

#include "bench/bench_align.h"
#include "bench/bench_check.h"
#include "bench/bench_data.h"
#include "bench/bench_layer.h"
#include "bench/bench_moe.h"
#include "bench/bench_moe_dist.h"
#include "check.h"
#include "numfmt.h"

/* Logits spread like a trained router's: a few experts stand out per token. */
#define LOGIT_SCALE 2.0f

/* Experts any rank's tokens pick: the sharded layer reads each of them once, somewhere. */
static hm_status active_over_ranks(const int32_t *ids, int64_t count, int64_t experts, int64_t *active) {
  int *picked = calloc((size_t)experts, sizeof(int));
  if (picked == NULL) HM_FAIL(HM_OUT_OF_MEMORY, "%lld expert flags", (long long)experts);
  for (int64_t i = 0; i < count; i++)
    if (ids[i] >= 0 && ids[i] < experts) picked[ids[i]] = 1;
  MPI_Allreduce(MPI_IN_PLACE, picked, (int)experts, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  *active = 0;
  for (int64_t e = 0; e < experts; e++) *active += picked[e];
  free(picked);
  return HM_OK;
}

static hm_status count_active(hm_bench *b, const hm_moe_config *c, const float *bias,
                              hm_bench_layer_inputs *in) {
  size_t slots = (size_t)(in->tokens * c->router.top_k);
  int32_t *ids = malloc(slots * sizeof(int32_t));
  float *w = malloc(slots * sizeof(float));
  hm_status ret = HM_OK;
  if (ids == NULL || w == NULL)
    HM_FAIL_GOTO(HM_OUT_OF_MEMORY, done, "routing of %lld tokens", (long long)in->tokens);
  HM_CHECK_GOTO(hm_moe_route(b->host, &c->router, in->tokens, in->logits_host,
                             c->router.correction_bias ? bias : NULL, ids, w, b->host_stream),
                done);
  if (hm_bench_dist(b))
    HM_CHECK_GOTO(active_over_ranks(ids, (int64_t)slots, c->router.experts, &in->active_experts), done);
  else
    in->active_experts = hm_bench_active_experts(ids, (int64_t)slots, c->router.experts);
done:
  free(ids);
  free(w);
  return ret;
}

static hm_status upload_inputs(hm_bench *b, hm_bench_layer_inputs *in) {
  size_t x_bytes = (size_t)(in->tokens * in->hidden) * 2, l_bytes = (size_t)(in->tokens * in->experts) * 4;
  void *logits = NULL;
  HM_CHECK(hm_mem_alloc(b->engine, x_bytes, &in->x));
  HM_CHECK(hm_mem_alloc(b->engine, x_bytes, &in->y));
  HM_CHECK(hm_mem_alloc(b->engine, l_bytes, &logits));
  in->logits = logits;
  HM_CHECK(hm_mem_upload(b->engine, in->x, in->x_host, x_bytes));
  return hm_mem_upload(b->engine, in->logits, in->logits_host, l_bytes);
}

hm_status hm_bench_layer_inputs_make(hm_bench *b, const hm_moe_config *c, const float *router_bias,
                                     int64_t tokens, uint64_t seed, hm_bench_layer_inputs *out) {
  memset(out, 0, sizeof(*out));
  out->tokens = tokens;
  out->hidden = c->hidden;
  out->experts = c->router.experts;
  out->x_host = malloc((size_t)(tokens * c->hidden) * 2);
  out->logits_host = malloc((size_t)(tokens * out->experts) * sizeof(float));
  hm_status ret = HM_OK;
  if (out->x_host == NULL || out->logits_host == NULL)
    HM_FAIL_GOTO(HM_OUT_OF_MEMORY, fail, "inputs of %lld tokens", (long long)tokens);
  HM_CHECK_GOTO(hm_bench_random_bf16(out->x_host, tokens * c->hidden, 1.0f, seed), fail);
  HM_CHECK_GOTO(hm_bench_random_normal(out->logits_host, tokens * out->experts, LOGIT_SCALE, seed + 1), fail);
  HM_CHECK_GOTO(count_active(b, c, router_bias, out), fail);
  HM_CHECK_GOTO(upload_inputs(b, out), fail);
  out->args.tokens = tokens;
  out->args.x = out->x;
  out->args.router_logits = out->logits;
  out->args.y = out->y;
  return HM_OK;
fail:
  hm_bench_layer_inputs_free(b, out);
  return ret;
}

void hm_bench_layer_inputs_free(hm_bench *b, hm_bench_layer_inputs *in) {
  free(in->x_host);
  free(in->logits_host);
  hm_mem_free(b->engine, in->x);
  hm_mem_free(b->engine, in->y);
  hm_mem_free(b->engine, in->logits);
  memset(in, 0, sizeof(*in));
}

int64_t hm_bench_layer_sample(const hm_bench *b, const hm_moe_config *c, int64_t tokens) {
  return hm_bench_sample_rows(tokens, hm_bench_moe_flops(c, 1), b->cuda);
}

/* The sampled tokens' inputs, in host memory (the host engine's memory). */
struct sample {
  int64_t tokens;
  int64_t *token;
  uint16_t *x, *y_ref, *y_dev;
  float *logits;
};

static hm_status sample_make(const hm_bench *b, const hm_moe_config *c, const hm_bench_layer_inputs *in,
                             struct sample *s) {
  int64_t h = c->hidden, e = c->router.experts;
  s->tokens = hm_bench_layer_sample(b, c, in->tokens);
  s->token = malloc((size_t)s->tokens * sizeof(int64_t));
  s->x = malloc((size_t)(s->tokens * h) * 2);
  s->y_ref = malloc((size_t)(s->tokens * h) * 2);
  s->y_dev = malloc((size_t)(s->tokens * h) * 2);
  s->logits = malloc((size_t)(s->tokens * e) * sizeof(float));
  if (!s->token || !s->x || !s->y_ref || !s->y_dev || !s->logits) HM_FAIL(HM_OUT_OF_MEMORY, "check sample");
  for (int64_t i = 0; i < s->tokens; i++) {
    int64_t t = i * in->tokens / s->tokens;
    s->token[i] = t;
    memcpy(s->x + i * h, in->x_host + t * h, (size_t)h * 2);
    memcpy(s->logits + i * e, in->logits_host + t * e, (size_t)e * sizeof(float));
  }
  return HM_OK;
}

static void sample_free(struct sample *s) {
  free(s->token), free(s->x), free(s->y_ref), free(s->y_dev), free(s->logits);
}

static hm_status download_rows(hm_bench *b, const hm_bench_layer_inputs *in, struct sample *s) {
  size_t row = (size_t)in->hidden * 2;
  for (int64_t i = 0; i < s->tokens; i++)
    HM_CHECK(hm_mem_download(b->engine, (char *)s->y_dev + (size_t)i * row,
                             (const char *)in->y + s->token[i] * row, row));
  return HM_OK;
}

static hm_status compare(const hm_moe_config *c, const struct sample *s, int64_t *wrong) {
  size_t n = (size_t)(s->tokens * c->hidden);
  float *ref = malloc(n * sizeof(float)), *out = malloc(n * sizeof(float));
  hm_status ret = HM_OK;
  if (ref == NULL || out == NULL) HM_FAIL_GOTO(HM_OUT_OF_MEMORY, done, "check rows");
  HM_CHECK_GOTO(hm_convert_to_f32(HM_BF16, s->y_ref, ref, (int64_t)n), done);
  HM_CHECK_GOTO(hm_convert_to_f32(HM_BF16, s->y_dev, out, (int64_t)n), done);
  *wrong = hm_bench_count_wrong(out, ref, s->tokens, c->hidden, hm_bench_tolerance(&c->scheme));
done:
  free(ref);
  free(out);
  return ret;
}

hm_status hm_bench_layer_check(hm_bench *b, const hm_moe_config *c, const hm_bench_moe *layer,
                               hm_moe_layer *ref, const hm_bench_layer_inputs *in, int64_t *wrong) {
  HM_CHECK(hm_bench_moe_forward(layer, &in->args, b->stream));
  HM_CHECK(hm_stream_synchronize(b->stream));
  struct sample s;
  memset(&s, 0, sizeof(s));
  hm_status ret = HM_OK;
  HM_CHECK_GOTO(sample_make(b, c, in, &s), done);
  hm_moe_forward_args args = {.tokens = s.tokens, .x = s.x, .router_logits = s.logits, .y = s.y_ref};
  HM_CHECK_GOTO(hm_moe_layer_forward(ref, &args, b->host_stream), done);
  HM_CHECK_GOTO(hm_stream_synchronize(b->host_stream), done);
  HM_CHECK_GOTO(download_rows(b, in, &s), done);
  HM_CHECK_GOTO(compare(c, &s, wrong), done);
done:
  sample_free(&s);
  return ret;
}
