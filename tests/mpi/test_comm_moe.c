/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The whole MoE layer across 8 ranks against the single-rank layer (mpirun -np 8, host
 * backend): each rank builds an hm_moe_layer from only its shard (its experts, its TP
 * slice of the intermediate dimension), runs it as the expert compute between dispatch
 * and combine, and must match the layer that holds every expert, for EP8, TP8, EP4xTP2
 * and EP2xTP4, balanced and skewed routing, contiguous and masked layouts.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hm_test.h"
#include "numfmt.h"

#define HIDDEN 128
#define INTER 64
#define EXPERTS 16
#define TOP_K 4
#define MAX_TOKENS 10

static hm_comm_world world;
static hm_engine *engine;
static hm_stream *stream;
static float *full_gate_up, *full_down;

static hm_moe_layer *make_layer(int64_t experts, int64_t inter, int top_k, const float *gate_up,
                                const float *down) {
  hm_moe_config cfg = HM_MOE_CONFIG_INIT;
  cfg.hidden = HIDDEN;
  cfg.intermediate = inter;
  cfg.router.experts = experts;
  cfg.router.top_k = top_k;
  HM_ASSERT_OK(hm_quant_scheme_parse("bf16", &cfg.scheme));
  hm_moe_layer *layer = NULL;
  HM_ASSERT_OK(hm_moe_layer_create(engine, &cfg, &layer));
  HM_ASSERT_OK(hm_moe_layer_quantize(layer, gate_up, down));
  HM_ASSERT_OK(hm_moe_layer_transform(layer, stream));
  return layer;
}

typedef struct tokens {
  int64_t count;
  uint16_t x[MAX_TOKENS * HIDDEN];
  int32_t ids[MAX_TOKENS * TOP_K];
  float w[MAX_TOKENS * TOP_K];
} tokens;

static void make_tokens(uint64_t seed, bool skewed, tokens *t) {
  hm_rng rng;
  hm_rng_seed(&rng, seed * 7919u + (uint64_t)world.rank);
  t->count = world.rank == 3 ? 0 : 1 + (int64_t)(hm_rng_next(&rng) % MAX_TOKENS);
  for (int64_t i = 0; i < t->count; i++) {
    for (int c = 0; c < HIDDEN; c++) t->x[i * HIDDEN + c] = hm_bf16_from_f32(hm_rng_normal(&rng));
    for (int j = 0; j < TOP_K; j++) {
      /* Skewed: experts 0..5 only, i.e. the first EP group or two. */
      t->ids[i * TOP_K + j] =
          (int32_t)((i + (int64_t)world.rank + j * (skewed ? 1 : 3)) % (skewed ? 6 : EXPERTS));
      t->w[i * TOP_K + j] = hm_rng_uniform(&rng, 0.1f, 1.0f);
    }
    if (i % 3 == 1) t->ids[i * TOP_K + 1] = -1;
  }
}

/* The single-rank layer on this rank's tokens. */
static void reference(const tokens *t, uint16_t *y) {
  if (t->count == 0) return;
  hm_moe_layer *layer = make_layer(EXPERTS, INTER, TOP_K, full_gate_up, full_down);
  hm_moe_forward_args a = {t->count, t->x, NULL, t->ids, t->w, y};
  HM_ASSERT_OK(hm_moe_layer_forward(layer, &a, stream));
  HM_ASSERT_OK(hm_stream_synchronize(stream));
  hm_moe_layer_destroy(layer);
}

/* The rank's own layer, top-1 over its local experts: each dispatched row goes to its expert. */
static hm_status run_local_layer(void *user, int index, const hm_comm_expert_batch *b, hm_stream *s) {
  (void)index;
  hm_moe_layer *layer = user;
  int32_t *ids = malloc(sizeof(int32_t) * (size_t)(b->rows + 1));
  float *w = malloc(sizeof(float) * (size_t)(b->rows + 1));
  for (int64_t r = 0; r < b->rows; r++) ids[r] = -1, w[r] = 1.0f;
  for (int64_t j = 0; j < b->local_experts; j++)
    for (int64_t r = 0; r < b->host_expert_counts[j]; r++) ids[b->host_expert_offsets[j] + r] = (int32_t)j;
  hm_moe_forward_args a = {b->rows, b->x, NULL, ids, w, b->y};
  hm_status st = hm_moe_layer_forward(layer, &a, s);
  if (st == HM_OK) st = hm_stream_synchronize(s);
  free(ids);
  free(w);
  return st;
}

/* Without TP the rows take the same path as in the single layer: the same bits. TP adds
 * one bf16 rounding of each partial. */
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

static void layer_matches_single_rank(void **state) {
  (void)state;
  const int shapes[][2] = {{8, 1}, {1, 8}, {4, 2}, {2, 4}};
  for (size_t i = 0; i < sizeof(shapes) / sizeof(shapes[0]); i++) {
    hm_comm_config cfg = HM_COMM_CONFIG_INIT;
    cfg.ep = shapes[i][0], cfg.tp = shapes[i][1], cfg.experts = EXPERTS, cfg.hidden = HIDDEN;
    cfg.intermediate = INTER, cfg.top_k = TOP_K, cfg.max_tokens = MAX_TOKENS;
    cfg.layout = i % 2 ? HM_COMM_LAYOUT_MASKED : HM_COMM_LAYOUT_CONTIGUOUS;
    hm_comm *comm = NULL;
    HM_ASSERT_OK(hm_comm_create_mpi(engine, &cfg, &comm));
    hm_comm_plan p;
    HM_ASSERT_OK(hm_comm_get_plan(comm, &p));
    float *gu = malloc(sizeof(float) * (size_t)(p.local_experts * 2 * p.local_intermediate * HIDDEN));
    float *dn = malloc(sizeof(float) * (size_t)(p.local_experts * HIDDEN * p.local_intermediate));
    HM_ASSERT_OK(hm_comm_shard_gate_up(&p, HIDDEN, full_gate_up, gu));
    HM_ASSERT_OK(hm_comm_shard_down(&p, HIDDEN, full_down, dn));
    hm_moe_layer *local = make_layer(p.local_experts, p.local_intermediate, 1, gu, dn);
    hm_comm_batch *batch = NULL;
    HM_ASSERT_OK(hm_comm_batch_create(comm, &batch));
    for (int skewed = 0; skewed < 2; skewed++) {
      static tokens t;
      static uint16_t y[MAX_TOKENS * HIDDEN], want[MAX_TOKENS * HIDDEN];
      make_tokens(5 + (uint64_t)skewed, skewed, &t);
      reference(&t, want);
      hm_comm_tokens in = {t.count, t.x, t.ids, t.w};
      hm_comm_expert_batch eb;
      HM_ASSERT_OK(hm_comm_dispatch(batch, &in, stream, &eb));
      HM_ASSERT_OK(run_local_layer(local, 0, &eb, stream));
      HM_ASSERT_OK(hm_comm_combine(batch, y, stream));
      char what[64];
      snprintf(what, sizeof(what), "EP%d x TP%d %s", p.ep, p.tp, skewed ? "skewed" : "balanced");
      check(&t, y, want, p.tp == 1 ? 0 : 1e-2, what);
    }
    hm_comm_batch_destroy(batch);
    hm_moe_layer_destroy(local);
    free(gu);
    free(dn);
    hm_comm_destroy(comm);
  }
}

int main(int argc, char **argv) {
  engine = hm_test_mpi_host_engine(&argc, &argv, &world);
  if (engine == NULL) return 1;
  if (hm_stream_create(engine, &stream) != HM_OK) {
    fprintf(stderr, "FAIL: rank %d stream: %s\n", world.rank, hm_last_error());
    return 1;
  }
  hm_rng rng;
  hm_rng_seed(&rng, 2024);
  size_t gu = (size_t)EXPERTS * 2 * INTER * HIDDEN, dn = (size_t)EXPERTS * HIDDEN * INTER;
  full_gate_up = malloc(sizeof(float) * gu);
  full_down = malloc(sizeof(float) * dn);
  hm_rng_fill_normal(&rng, full_gate_up, gu, 0.09f);
  hm_rng_fill_normal(&rng, full_down, dn, 0.125f);
  const struct CMUnitTest tests[] = {cmocka_unit_test(layer_matches_single_rank)};
  int failed = cmocka_run_group_tests(tests, NULL, NULL);
  free(full_gate_up);
  free(full_down);
  hm_stream_destroy(stream);
  hm_engine_destroy(engine);
  if (failed) return 1;
  hm_shutdown();
  return 0;
}
