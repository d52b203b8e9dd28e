/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The distributed MoE layer (hm_moe_dist) across 8 ranks against the single-rank layer
 * (mpirun -np 8, host backend): every rank's tokens must come out as the layer holding
 * every expert gives them, for EP8, TP8, EP4xTP2 and EP2xTP4, contiguous and masked
 * layouts, balanced and skewed routing (most ranks receive nothing), masked slots and a
 * rank without tokens; weights from full f32 or from canonical shards; the router and
 * shared experts; the fp8 payload. A rank whose config differs fails every rank.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "hm_test.h"
#include "numfmt.h"
#include "quant.h"

#define HIDDEN 128
#define INTER 64
#define EXPERTS 16
#define TOP_K 4
#define MAX_TOKENS 10
#define EMPTY_RANK 3

static hm_comm_world world;
static hm_engine *engine;
static hm_stream *stream;

/* Weights of the whole layer, the same on every rank. */
typedef struct weights {
  int64_t inter;
  float *gate_up, *down;               /* (E, 2I, H), (E, H, I) */
  float *shared_gate_up, *shared_down; /* (2I, H), (H, I): one shared expert of width I */
} weights;

static void weights_make(int64_t inter, uint64_t seed, weights *w) {
  hm_rng rng;
  hm_rng_seed(&rng, seed);
  size_t gu = (size_t)(EXPERTS * 2 * inter * HIDDEN), dn = (size_t)(EXPERTS * HIDDEN * inter);
  w->inter = inter;
  w->gate_up = malloc(sizeof(float) * gu);
  w->down = malloc(sizeof(float) * dn);
  w->shared_gate_up = malloc(sizeof(float) * (size_t)(2 * inter * HIDDEN));
  w->shared_down = malloc(sizeof(float) * (size_t)(HIDDEN * inter));
  hm_rng_fill_normal(&rng, w->gate_up, gu, 0.09f);
  hm_rng_fill_normal(&rng, w->down, dn, 0.125f);
  hm_rng_fill_normal(&rng, w->shared_gate_up, (size_t)(2 * inter * HIDDEN), 0.09f);
  hm_rng_fill_normal(&rng, w->shared_down, (size_t)(HIDDEN * inter), 0.125f);
}

static void weights_free(weights *w) {
  free(w->gate_up), free(w->down), free(w->shared_gate_up), free(w->shared_down);
}

typedef struct variant {
  const char *scheme;
  bool shared; /* one shared expert */
  bool router; /* route from logits rather than given ids */
} variant;

static hm_moe_config layer_config(const variant *v, int64_t inter) {
  hm_moe_config cfg = HM_MOE_CONFIG_INIT;
  cfg.hidden = HIDDEN;
  cfg.intermediate = inter;
  cfg.router.experts = EXPERTS;
  cfg.router.top_k = TOP_K;
  cfg.router.renormalize = v->router;
  cfg.shared_experts = v->shared ? 1 : 0;
  HM_ASSERT_OK(hm_quant_scheme_parse(v->scheme, &cfg.scheme));
  return cfg;
}

static hm_moe_layer *single_rank_layer(const variant *v, const weights *w) {
  hm_moe_config cfg = layer_config(v, w->inter);
  hm_moe_layer *layer = NULL;
  HM_ASSERT_OK(hm_moe_layer_create(engine, &cfg, &layer));
  HM_ASSERT_OK(hm_moe_layer_quantize(layer, w->gate_up, w->down));
  if (v->shared) HM_ASSERT_OK(hm_moe_layer_quantize_shared(layer, w->shared_gate_up, w->shared_down));
  HM_ASSERT_OK(hm_moe_layer_transform(layer, stream));
  return layer;
}

/* bf16 codes of f32 weights (n, k) per expert: the canonical contract of an unquantized layer. */
static hm_host_weights canonical_bf16(const float *src, int64_t experts, int64_t n, int64_t k) {
  hm_quant_scheme bf16;
  HM_ASSERT_OK(hm_quant_scheme_parse("bf16", &bf16));
  hm_host_weights out;
  HM_ASSERT_OK(hm_host_weights_alloc(&out, &bf16.weight, experts, n, k));
  HM_ASSERT_OK(hm_quantize_weights(src, &out));
  return out;
}

/* This rank's shard, sliced from the f32 weights and handed over in the canonical contract. */
static void load_canonical_shard(hm_moe_dist *d, const hm_comm_plan *p, const weights *w) {
  int64_t le = p->local_experts, li = p->local_intermediate;
  float *gu = malloc(sizeof(float) * (size_t)(le * 2 * li * HIDDEN));
  float *dn = malloc(sizeof(float) * (size_t)(le * HIDDEN * li));
  HM_ASSERT_OK(hm_comm_shard_gate_up(p, HIDDEN, w->gate_up, gu));
  HM_ASSERT_OK(hm_comm_shard_down(p, HIDDEN, w->down, dn));
  hm_host_weights cgu = canonical_bf16(gu, le, 2 * li, HIDDEN), cdn = canonical_bf16(dn, le, HIDDEN, li);
  hm_weights_view vgu = hm_host_weights_view(&cgu), vdn = hm_host_weights_view(&cdn);
  HM_ASSERT_OK(hm_moe_dist_load_shard(d, &vgu, &vdn));
  hm_host_weights_free(&cgu), hm_host_weights_free(&cdn);
  free(gu), free(dn);
}

static hm_moe_dist *dist_layer(hm_comm *comm, const variant *v, const weights *w, bool canonical) {
  hm_moe_config cfg = layer_config(v, w->inter);
  hm_moe_dist *d = NULL;
  HM_ASSERT_OK(hm_moe_dist_create(engine, comm, &cfg, &d));
  hm_comm_plan p;
  HM_ASSERT_OK(hm_comm_get_plan(comm, &p));
  if (canonical)
    load_canonical_shard(d, &p, w);
  else
    HM_ASSERT_OK(hm_moe_dist_quantize(d, w->gate_up, w->down));
  if (v->shared) HM_ASSERT_OK(hm_moe_dist_quantize_shared(d, w->shared_gate_up, w->shared_down));
  HM_ASSERT_OK(hm_moe_dist_transform(d, stream));
  return d;
}

typedef struct tokens {
  int64_t count;
  uint16_t x[MAX_TOKENS * HIDDEN];
  int32_t ids[MAX_TOKENS * TOP_K];
  float w[MAX_TOKENS * TOP_K];
  float logits[MAX_TOKENS * EXPERTS];
} tokens;

/* Per (seed, rank); skewed: experts 0..5 only, the first EP group or two; one rank has none. */
static void make_tokens(uint64_t seed, bool skewed, tokens *t) {
  hm_rng rng;
  hm_rng_seed(&rng, seed * 7919u + (uint64_t)world.rank);
  t->count = world.rank == EMPTY_RANK ? 0 : 1 + (int64_t)(hm_rng_next(&rng) % MAX_TOKENS);
  for (int64_t i = 0; i < t->count; i++) {
    for (int c = 0; c < HIDDEN; c++) t->x[i * HIDDEN + c] = hm_bf16_from_f32(hm_rng_normal(&rng));
    for (int e = 0; e < EXPERTS; e++) t->logits[i * EXPERTS + e] = 2.0f * hm_rng_normal(&rng);
    for (int j = 0; j < TOP_K; j++) {
      t->ids[i * TOP_K + j] =
          (int32_t)((i + (int64_t)world.rank + j * (skewed ? 1 : 3)) % (skewed ? 6 : EXPERTS));
      t->w[i * TOP_K + j] = hm_rng_uniform(&rng, 0.1f, 1.0f);
    }
    if (i % 3 == 1) t->ids[i * TOP_K + 1] = -1;
  }
}

static hm_moe_forward_args args_of(const variant *v, tokens *t, uint16_t *y) {
  hm_moe_forward_args a = {.tokens = t->count, .x = t->x, .y = y};
  if (v->router)
    a.router_logits = t->logits;
  else
    a.topk_ids = t->ids, a.topk_weights = t->w;
  return a;
}

/* Without TP a row takes the same path as in the single layer: the same bits. TP adds one
 * bf16 rounding of each partial; fp8 rows are quantized by dispatch rather than the layer. */
static void check(const tokens *t, const uint16_t *got, const uint16_t *want, double tol, const char *what) {
  size_t n = (size_t)t->count * HIDDEN;
  float *g = malloc(sizeof(float) * (n + 1)), *r = malloc(sizeof(float) * (n + 1));
  for (size_t i = 0; i < n; i++) g[i] = hm_bf16_to_f32(got[i]), r[i] = hm_bf16_to_f32(want[i]);
  double err = n ? hm_rel_error(g, r, n) : 0;
  free(g);
  free(r);
  if (!(err <= tol))
    fail_msg("rank %d %s: relative error %g > %g against the single-rank layer", world.rank, what, err, tol);
}

typedef struct shape {
  int ep, tp;
  hm_comm_layout layout;
  hm_comm_payload payload;
} shape;

static hm_comm *make_comm(const shape *s, int64_t inter) {
  hm_comm_config cfg = HM_COMM_CONFIG_INIT;
  cfg.ep = s->ep, cfg.tp = s->tp, cfg.experts = EXPERTS, cfg.hidden = HIDDEN;
  cfg.intermediate = inter, cfg.top_k = TOP_K, cfg.max_tokens = MAX_TOKENS;
  cfg.layout = s->layout, cfg.payload = s->payload;
  cfg.block_m = s->layout == HM_COMM_LAYOUT_CONTIGUOUS ? 4 : 0;
  hm_comm *comm = NULL;
  HM_ASSERT_OK(hm_comm_create_mpi(engine, &cfg, &comm));
  return comm;
}

/* Both routings through the distributed layer against the single-rank layer on each rank's tokens. */
static void run_case(const shape *s, const variant *v, const weights *w, bool canonical, double tol) {
  hm_comm *comm = make_comm(s, w->inter);
  hm_moe_dist *d = dist_layer(comm, v, w, canonical);
  hm_moe_layer *single = single_rank_layer(v, w);
  for (int skewed = 0; skewed < 2; skewed++) {
    static tokens t;
    static uint16_t y[MAX_TOKENS * HIDDEN], want[MAX_TOKENS * HIDDEN];
    make_tokens(5 + (uint64_t)skewed, skewed, &t);
    hm_moe_forward_args ref = args_of(v, &t, want), got = args_of(v, &t, y);
    HM_ASSERT_OK(hm_moe_layer_forward(single, &ref, stream));
    HM_ASSERT_OK(hm_moe_dist_forward(d, &got, stream));
    HM_ASSERT_OK(hm_stream_synchronize(stream));
    char what[128];
    snprintf(what, sizeof(what), "EP%d x TP%d %s %s %s%s%s", s->ep, s->tp,
             s->layout == HM_COMM_LAYOUT_MASKED ? "masked" : "contiguous", v->scheme,
             skewed ? "skewed" : "balanced", v->shared ? " +shared" : "", v->router ? " routed" : "");
    check(&t, y, want, tol, what);
  }
  hm_moe_layer_destroy(single);
  hm_moe_dist_destroy(d);
  hm_comm_destroy(comm);
}

static const int shapes[][2] = {{8, 1}, {1, 8}, {4, 2}, {2, 4}};

static void every_shape_and_layout(void **state) {
  (void)state;
  weights w;
  weights_make(INTER, 2024, &w);
  const variant v = {"bf16", false, false};
  for (size_t i = 0; i < HM_ARRAY_SIZE(shapes); i++)
    for (int masked = 0; masked < 2; masked++) {
      shape s = {shapes[i][0], shapes[i][1], masked ? HM_COMM_LAYOUT_MASKED : HM_COMM_LAYOUT_CONTIGUOUS,
                 HM_COMM_PAYLOAD_BF16};
      run_case(&s, &v, &w, false, s.tp == 1 ? 0 : 1e-2);
    }
  weights_free(&w);
}

/* Weights handed over as canonical shards; the router picks the experts; one shared expert. */
static void router_shared_and_canonical_shards(void **state) {
  (void)state;
  weights w;
  weights_make(INTER, 77, &w);
  const variant v = {"bf16", true, true};
  for (size_t i = 0; i < HM_ARRAY_SIZE(shapes); i++) {
    shape s = {shapes[i][0], shapes[i][1], i % 2 ? HM_COMM_LAYOUT_MASKED : HM_COMM_LAYOUT_CONTIGUOUS,
               HM_COMM_PAYLOAD_BF16};
    run_case(&s, &v, &w, true, s.tp == 1 ? 0 : 1e-2);
  }
  weights_free(&w);
}

/* fp8 rows from dispatch feed w8a8-fp8 experts directly (128x128 weight blocks need I = 128). */
static void fp8_payload(void **state) {
  (void)state;
  weights w;
  weights_make(128, 31, &w);
  const variant v = {"w8a8-fp8", false, false};
  shape s = {8, 1, HM_COMM_LAYOUT_CONTIGUOUS, HM_COMM_PAYLOAD_FP8};
  run_case(&s, &v, &w, false, 2e-2);
  weights_free(&w);
}

/* Rank 5 asks for another activation, then rank 2 for a layer its communicator does not fit. */
static void a_differing_rank_fails_every_rank(void **state) {
  (void)state;
  shape s = {4, 2, HM_COMM_LAYOUT_CONTIGUOUS, HM_COMM_PAYLOAD_BF16};
  hm_comm *comm = make_comm(&s, INTER);
  variant v = {"bf16", false, false};
  hm_moe_config cfg = layer_config(&v, INTER);
  if (world.rank == 5) cfg.activation = HM_MOE_ACT_GELU_MUL;
  hm_moe_dist *d = NULL;
  assert_int_equal(hm_moe_dist_create(engine, comm, &cfg, &d), HM_INVALID_ARGUMENT);
  assert_null(d);
  assert_non_null(
      strstr(hm_last_error(), "MoE config mismatch: rank 5 has activation=1, rank 0 has activation=0"));
  cfg = layer_config(&v, INTER);
  if (world.rank == 2) cfg.intermediate = 2 * INTER;
  hm_status st = hm_moe_dist_create(engine, comm, &cfg, &d);
  assert_int_equal(st, world.rank == 2 ? HM_INVALID_ARGUMENT : HM_REMOTE);
  assert_non_null(strstr(hm_last_error(), "rank 2 could not make its MoE shard"));
  assert_non_null(strstr(hm_last_error(), "intermediate=128, its communicator intermediate=64"));
  hm_comm_destroy(comm);
}

int main(int argc, char **argv) {
  engine = hm_test_mpi_host_engine(&argc, &argv, &world);
  if (engine == NULL) return 1;
  if (hm_stream_create(engine, &stream) != HM_OK) {
    fprintf(stderr, "FAIL: rank %d stream: %s\n", world.rank, hm_last_error());
    return 1;
  }
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(every_shape_and_layout),
      cmocka_unit_test(router_shared_and_canonical_shards),
      cmocka_unit_test(fp8_payload),
      cmocka_unit_test(a_differing_rank_fails_every_rank),
  };
  int failed = cmocka_run_group_tests(tests, NULL, NULL);
  hm_stream_destroy(stream);
  hm_engine_destroy(engine);
  if (failed) return 1;
  hm_shutdown();
  return 0;
}
