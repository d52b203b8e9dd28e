/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Expert- and tensor-parallel MoE over the host transport (mpirun -np 8): tokens are
 * dispatched, each rank runs a SiLU-gated FFN with only its shard of the weights (its
 * experts, its TP slice of the intermediate dimension), and combine must give every
 * rank the single-rank result for its tokens. EP8, TP8, EP4xTP2 and EP2xTP4; balanced
 * and skewed routing (most ranks receive nothing); ranks with no tokens; masked slots;
 * bf16 and fp8 payloads; contiguous and masked layouts; the overlapped pipeline; TP
 * all-reduce and reduce-scatter; the benchmark's check.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "hm_test.h"
#include "numfmt.h"

#define HIDDEN 128
#define INTER 32
#define EXPERTS 16
#define TOP_K 4
#define MAX_TOKENS 12

static hm_comm_world world;
static hm_engine *engine;
static float *full_gate_up, *full_down; /* the same on every rank */

typedef struct tokens {
  int64_t count;
  uint16_t x[MAX_TOKENS * HIDDEN];
  int32_t ids[MAX_TOKENS * TOP_K];
  float w[MAX_TOKENS * TOP_K];
} tokens;

typedef struct expert_shard {
  hm_comm_plan plan;
  hm_dtype out;
  float *gate_up, *down;
} expert_shard;

static float silu(float v) {
  return v / (1.0f + expf(-v));
}

/* y = down * (silu(gate x) * (up x)) for one expert's weights of inter rows. */
static void ffn(const float *gate_up, const float *down, int64_t inter, const float *x, float *y) {
  float h[INTER];
  for (int64_t i = 0; i < inter; i++) {
    float g = 0, u = 0;
    for (int c = 0; c < HIDDEN; c++) {
      g += gate_up[i * HIDDEN + c] * x[c];
      u += gate_up[(inter + i) * HIDDEN + c] * x[c];
    }
    h[i] = silu(g) * u;
  }
  for (int c = 0; c < HIDDEN; c++) {
    float s = 0;
    for (int64_t i = 0; i < inter; i++) s += down[c * inter + i] * h[i];
    y[c] = s;
  }
}

/* What the fp8 payload does to a row: e4m3 with one scale per 128, amax / 448. */
static void quantize_dequantize(float *x) {
  float amax = 0;
  for (int c = 0; c < HIDDEN; c++) amax = fmaxf(amax, fabsf(x[c]));
  float s = amax / 448.0f;
  for (int c = 0; c < HIDDEN; c++) x[c] = s > 0 ? hm_e4m3_to_f32(hm_e4m3_from_f32(x[c] / s)) * s : 0;
}

static void reference(const tokens *t, hm_comm_payload payload, float *ref) {
  memset(ref, 0, sizeof(float) * (size_t)t->count * HIDDEN);
  for (int64_t i = 0; i < t->count; i++) {
    float x[HIDDEN], y[HIDDEN];
    for (int c = 0; c < HIDDEN; c++) x[c] = hm_bf16_to_f32(t->x[i * HIDDEN + c]);
    if (payload == HM_COMM_PAYLOAD_FP8) quantize_dequantize(x);
    for (int j = 0; j < TOP_K; j++) {
      int32_t e = t->ids[i * TOP_K + j];
      if (e < 0) continue;
      ffn(full_gate_up + (size_t)e * 2 * INTER * HIDDEN, full_down + (size_t)e * HIDDEN * INTER, INTER, x, y);
      for (int c = 0; c < HIDDEN; c++) ref[i * HIDDEN + c] += t->w[i * TOP_K + j] * y[c];
    }
  }
}

static float load_row_elem(const hm_comm_expert_batch *b, int64_t row, int c) {
  if (b->x_dtype == HM_BF16) return hm_bf16_to_f32(((const uint16_t *)b->x)[row * HIDDEN + c]);
  return hm_e4m3_to_f32(((const uint8_t *)b->x)[row * HIDDEN + c]) *
         b->x_scale[row * (HIDDEN / 128) + c / 128];
}

/* The experts of this rank, with only its shard: partial sums over its TP slice. */
static hm_status run_experts(void *user, int index, const hm_comm_expert_batch *b, hm_stream *stream) {
  (void)index, (void)stream;
  const expert_shard *s = user;
  int64_t li = s->plan.local_intermediate;
  for (int64_t j = 0; j < b->local_experts; j++) {
    const float *gu = s->gate_up + (size_t)j * 2 * (size_t)li * HIDDEN,
                *dn = s->down + (size_t)j * HIDDEN * (size_t)li;
    for (int64_t r = b->host_expert_offsets[j]; r < b->host_expert_offsets[j] + b->host_expert_counts[j];
         r++) {
      float x[HIDDEN], y[HIDDEN];
      for (int c = 0; c < HIDDEN; c++) x[c] = load_row_elem(b, r, c);
      ffn(gu, dn, li, x, y);
      for (int c = 0; c < HIDDEN; c++) {
        if (s->out == HM_F32)
          ((float *)b->y)[r * HIDDEN + c] = y[c];
        else
          ((uint16_t *)b->y)[r * HIDDEN + c] = hm_bf16_from_f32(y[c]);
      }
    }
  }
  return HM_OK;
}

/* Deterministic per (seed, rank); skewed: only experts 0..3; rank 6 never has tokens. */
static void make_tokens(uint64_t seed, bool skewed, tokens *t) {
  hm_rng rng;
  hm_rng_seed(&rng, seed * 1000003u + (uint64_t)world.rank);
  t->count = world.rank == 6 ? 0 : 1 + (int64_t)(hm_rng_next(&rng) % MAX_TOKENS);
  int span = skewed ? 4 : EXPERTS;
  for (int64_t i = 0; i < t->count; i++) {
    for (int c = 0; c < HIDDEN; c++) t->x[i * HIDDEN + c] = hm_bf16_from_f32(hm_rng_uniform(&rng, -1, 1));
    for (int j = 0; j < TOP_K; j++) {
      bool again;
      do {
        t->ids[i * TOP_K + j] = (int32_t)(hm_rng_next(&rng) % (uint64_t)span);
        again = false;
        for (int q = 0; q < j; q++) again |= t->ids[i * TOP_K + q] == t->ids[i * TOP_K + j];
      } while (again);
      t->w[i * TOP_K + j] = hm_rng_uniform(&rng, 0.1f, 1.0f);
    }
    if (hm_rng_next(&rng) % 4 == 0) t->ids[i * TOP_K + hm_rng_next(&rng) % TOP_K] = -1;
  }
}

static void shard_for(hm_comm *comm, hm_dtype out, expert_shard *s) {
  HM_ASSERT_OK(hm_comm_get_plan(comm, &s->plan));
  s->out = out;
  size_t li = (size_t)s->plan.local_intermediate, el = (size_t)s->plan.local_experts;
  s->gate_up = malloc(sizeof(float) * el * 2 * li * HIDDEN);
  s->down = malloc(sizeof(float) * el * HIDDEN * li);
  assert_non_null(s->gate_up);
  assert_non_null(s->down);
  HM_ASSERT_OK(hm_comm_shard_gate_up(&s->plan, HIDDEN, full_gate_up, s->gate_up));
  HM_ASSERT_OK(hm_comm_shard_down(&s->plan, HIDDEN, full_down, s->down));
}

/* Engine copies of a micro-batch's tokens. */
typedef struct device_tokens {
  hm_comm_tokens t;
  void *x, *ids, *w, *y;
} device_tokens;

static void upload(const tokens *t, hm_dtype out, device_tokens *d) {
  size_t n = (size_t)MAX_TOKENS;
  HM_ASSERT_OK(hm_mem_alloc(engine, n * HIDDEN * 2, &d->x));
  HM_ASSERT_OK(hm_mem_alloc(engine, n * TOP_K * 4, &d->ids));
  HM_ASSERT_OK(hm_mem_alloc(engine, n * TOP_K * 4, &d->w));
  HM_ASSERT_OK(hm_mem_alloc(engine, n * HIDDEN * (out == HM_F32 ? 4 : 2), &d->y));
  HM_ASSERT_OK(hm_mem_upload(engine, d->x, t->x, n * HIDDEN * 2));
  HM_ASSERT_OK(hm_mem_upload(engine, d->ids, t->ids, n * TOP_K * 4));
  HM_ASSERT_OK(hm_mem_upload(engine, d->w, t->w, n * TOP_K * 4));
  d->t = (hm_comm_tokens){t->count, d->x, d->ids, d->w};
}

static void release(device_tokens *d) {
  hm_mem_free(engine, d->x);
  hm_mem_free(engine, d->ids);
  hm_mem_free(engine, d->w);
  hm_mem_free(engine, d->y);
}

static void check_result(const tokens *t, hm_comm_payload payload, hm_dtype out, const device_tokens *d,
                         const char *what) {
  float ref[MAX_TOKENS * HIDDEN], got[MAX_TOKENS * HIDDEN];
  reference(t, payload, ref);
  size_t n = (size_t)t->count * HIDDEN;
  for (size_t i = 0; i < n; i++)
    got[i] = out == HM_F32 ? ((float *)d->y)[i] : hm_bf16_to_f32(((uint16_t *)d->y)[i]);
  double err = hm_rel_error(got, ref, n), tol = out == HM_F32 ? 1e-5 : 1e-2;
  if (!(err <= tol)) fail_msg("rank %d %s: relative error %g > %g", world.rank, what, err, tol);
}

typedef struct variant {
  hm_comm_payload payload;
  hm_dtype out;
  hm_comm_layout layout;
  int block_m;
} variant;

static hm_comm *make_comm(int ep, int tp, const variant *v) {
  hm_comm_config cfg = HM_COMM_CONFIG_INIT;
  cfg.ep = ep, cfg.tp = tp, cfg.experts = EXPERTS, cfg.hidden = HIDDEN, cfg.intermediate = INTER;
  cfg.top_k = TOP_K, cfg.max_tokens = MAX_TOKENS, cfg.payload = v->payload, cfg.combine_dtype = v->out;
  cfg.layout = v->layout, cfg.block_m = v->block_m;
  hm_comm *comm = NULL;
  HM_ASSERT_OK(hm_comm_create_mpi(engine, &cfg, &comm));
  return comm;
}

static void dispatch_and_combine(hm_comm *comm, const variant *v, const expert_shard *s, bool skewed,
                                 const char *what) {
  tokens t;
  make_tokens(skewed ? 11 : 7, skewed, &t);
  device_tokens d;
  upload(&t, v->out, &d);
  hm_comm_batch *batch = NULL;
  HM_ASSERT_OK(hm_comm_batch_create(comm, &batch));
  hm_comm_expert_batch eb;
  HM_ASSERT_OK(hm_comm_dispatch(batch, &d.t, NULL, &eb));
  if (v->layout == HM_COMM_LAYOUT_MASKED) assert_int_equal(eb.rows, eb.local_experts * eb.max_m);
  HM_ASSERT_OK(run_experts((void *)s, 0, &eb, NULL));
  HM_ASSERT_OK(hm_comm_combine(batch, d.y, NULL));
  check_result(&t, v->payload, v->out, &d, what);
  hm_comm_batch_destroy(batch);
  release(&d);
}

static const int shapes[][2] = {{8, 1}, {1, 8}, {4, 2}, {2, 4}};
static const variant variants[] = {
    {HM_COMM_PAYLOAD_BF16, HM_F32, HM_COMM_LAYOUT_CONTIGUOUS, 1},
    {HM_COMM_PAYLOAD_FP8, HM_F32, HM_COMM_LAYOUT_MASKED, 0},
    {HM_COMM_PAYLOAD_BF16, HM_BF16, HM_COMM_LAYOUT_CONTIGUOUS, 4},
};

static void every_shape_matches_one_rank(void **state) {
  (void)state;
  for (size_t i = 0; i < HM_ARRAY_SIZE(shapes); i++)
    for (size_t k = 0; k < HM_ARRAY_SIZE(variants); k++) {
      hm_comm *comm = make_comm(shapes[i][0], shapes[i][1], &variants[k]);
      expert_shard s;
      shard_for(comm, variants[k].out, &s);
      char what[96];
      for (int skewed = 0; skewed < 2; skewed++) {
        snprintf(what, sizeof(what), "EP%d x TP%d variant %zu %s", shapes[i][0], shapes[i][1], k,
                 skewed ? "skewed" : "balanced");
        dispatch_and_combine(comm, &variants[k], &s, skewed, what);
      }
      free(s.gate_up);
      free(s.down);
      hm_comm_destroy(comm);
    }
}

static void overlapped_micro_batches(void **state) {
  (void)state;
  enum { MICRO = 3 };
  for (size_t i = 0; i < HM_ARRAY_SIZE(shapes); i++) {
    const variant *v = &variants[0];
    hm_comm *comm = make_comm(shapes[i][0], shapes[i][1], v);
    expert_shard s;
    shard_for(comm, v->out, &s);
    tokens t[MICRO];
    device_tokens d[MICRO];
    hm_comm_tokens in[MICRO];
    void *y[MICRO];
    for (int m = 0; m < MICRO; m++) {
      make_tokens(100 + (uint64_t)m, m == 1, &t[m]);
      upload(&t[m], v->out, &d[m]);
      in[m] = d[m].t;
      y[m] = d[m].y;
    }
    hm_stream *stream = NULL;
    HM_ASSERT_OK(hm_stream_create(engine, &stream));
    HM_ASSERT_OK(hm_comm_run_overlapped(comm, in, y, MICRO, run_experts, &s, stream));
    HM_ASSERT_OK(hm_stream_synchronize(stream));
    for (int m = 0; m < MICRO; m++) {
      check_result(&t[m], v->payload, v->out, &d[m], "overlapped");
      release(&d[m]);
    }
    hm_stream_destroy(stream);
    free(s.gate_up);
    free(s.down);
    hm_comm_destroy(comm);
  }
}

static void tp_reductions(void **state) {
  (void)state;
  enum { COUNT = 24 };
  for (size_t i = 0; i < HM_ARRAY_SIZE(shapes); i++) {
    hm_comm *comm = make_comm(shapes[i][0], shapes[i][1], &variants[0]);
    hm_comm_plan p;
    HM_ASSERT_OK(hm_comm_get_plan(comm, &p));
    float f[COUNT], want[COUNT];
    uint16_t h[COUNT];
    for (int k = 0; k < COUNT; k++) {
      f[k] = 0.25f * (float)world.rank + (float)k;
      h[k] = hm_bf16_from_f32(f[k]);
      want[k] = 0;
      for (int q = 0; q < p.tp; q++) want[k] += 0.25f * (float)(p.ep_rank * p.tp + q) + (float)k;
    }
    HM_ASSERT_OK(hm_comm_tp_all_reduce(comm, f, COUNT, HM_F32, NULL));
    HM_ASSERT_OK(hm_comm_tp_reduce_scatter(comm, h, COUNT, HM_BF16, NULL));
    for (int k = 0; k < COUNT; k++) assert_true(f[k] == want[k]);
    int chunk = COUNT / p.tp;
    for (int k = p.tp_rank * chunk; k < (p.tp_rank + 1) * chunk; k++)
      assert_true(hm_bf16_to_f32(h[k]) == want[k]);
    assert_int_equal(hm_comm_tp_reduce_scatter(comm, h, p.tp == 1 ? -1 : COUNT + 1, HM_BF16, NULL),
                     HM_INVALID_ARGUMENT);
    hm_comm_destroy(comm);
  }
}

/* The benchmark's own check (identity experts) passes on every shape, both payloads. */
static void benchmark_rows_are_right(void **state) {
  (void)state;
  for (size_t i = 0; i < HM_ARRAY_SIZE(shapes); i++) {
    hm_comm *comm = make_comm(shapes[i][0], shapes[i][1], &variants[2]);
    hm_comm_bench_row rows[8];
    int n = 0;
    HM_ASSERT_OK(hm_comm_bench(comm, 1, 8, 2, 1, rows, 8, &n));
    assert_int_equal(n, 8);
    for (int r = 0; r < n; r++) {
      assert_int_equal(rows[r].tokens, 1 << (r % 4));
      assert_int_equal(rows[r].payload, r < 4 ? HM_COMM_PAYLOAD_BF16 : HM_COMM_PAYLOAD_FP8);
      assert_int_equal(rows[r].wrong, 0);
      assert_true(rows[r].dispatch_bytes > 0 && rows[r].dispatch_us > 0 && rows[r].alltoall_gbps > 0);
    }
    hm_comm_destroy(comm);
  }
}

static void make_weights(void) {
  hm_rng rng;
  hm_rng_seed(&rng, 42);
  size_t gu = (size_t)EXPERTS * 2 * INTER * HIDDEN, dn = (size_t)EXPERTS * HIDDEN * INTER;
  full_gate_up = malloc(sizeof(float) * gu);
  full_down = malloc(sizeof(float) * dn);
  hm_rng_fill_normal(&rng, full_gate_up, gu, 0.09f);
  hm_rng_fill_normal(&rng, full_down, dn, 0.18f);
}

int main(int argc, char **argv) {
  engine = hm_test_mpi_host_engine(&argc, &argv, &world);
  if (engine == NULL) return 1;
  make_weights();
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(every_shape_matches_one_rank),
      cmocka_unit_test(overlapped_micro_batches),
      cmocka_unit_test(tp_reductions),
      cmocka_unit_test(benchmark_rows_are_right),
  };
  int failed = cmocka_run_group_tests(tests, NULL, NULL);
  free(full_gate_up);
  free(full_down);
  hm_engine_destroy(engine);
  if (failed) return 1; /* no MPI_Finalize: a peer may be gone */
  hm_shutdown();
  return 0;
}
