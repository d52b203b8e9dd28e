/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The routing plan of dispatch and combine, all ranks simulated in one process: two
 * ranks exchange one message per direction (or none) and its sizes match, rows
 * scattered from the messages land in their expert's segment on every TP rank of the
 * owner group, and after a simulated reduce-scatter and the gather each (token, slot)
 * gets its own row back, for EP8, TP8, EP4xTP2, EP2xTP4.
 */
#include <stdlib.h>
#include <string.h>

#include "comm/route.h"
#include "hm_test.h"

#define WORLD 8
#define EXPERTS 16
#define TOP_K 4
#define MAX_TOKENS 12

struct sim {
  int ep, tp;
  hm_comm_layout layout;
  int block_m;
  int64_t max_m;
  hm_comm comm[WORLD];
  struct hm_route route[WORLD];
};

static void sim_init(struct sim *s, int ep, int tp, hm_comm_layout layout, int block_m, int64_t max_m) {
  memset(s, 0, sizeof(*s));
  s->ep = ep, s->tp = tp, s->layout = layout, s->block_m = block_m, s->max_m = max_m;
  for (int r = 0; r < WORLD; r++) {
    hm_comm *c = &s->comm[r];
    c->cfg = (hm_comm_config)HM_COMM_CONFIG_INIT;
    c->cfg.top_k = TOP_K, c->cfg.block_m = block_m, c->cfg.max_m = max_m, c->cfg.max_tokens = MAX_TOKENS;
    c->cfg.layout = layout;
    c->plan = (hm_comm_plan){.rank = r,
                             .world = WORLD,
                             .ep = ep,
                             .tp = tp,
                             .ep_rank = r / tp,
                             .tp_rank = r % tp,
                             .experts = EXPERTS,
                             .local_experts = EXPERTS / ep,
                             .first_expert = (r / tp) * (EXPERTS / ep)};
    HM_ASSERT_OK(hm_route_init(&s->route[r], c));
  }
}

static void sim_free(struct sim *s) {
  for (int r = 0; r < WORLD; r++) hm_route_free(&s->route[r]);
}

/* Distinct experts per token, some slots masked; skewed: only experts 0..3. */
static int64_t random_tokens(hm_rng *rng, int32_t *ids, bool skewed) {
  int64_t tokens = (int64_t)(hm_rng_next(rng) % (MAX_TOKENS + 1));
  int span = skewed ? 4 : EXPERTS;
  for (int64_t t = 0; t < tokens; t++) {
    for (int j = 0; j < TOP_K; j++) {
      int32_t e;
      bool again;
      do {
        e = (int32_t)(hm_rng_next(rng) % (uint64_t)span);
        again = false;
        for (int i = 0; i < j; i++) again |= ids[t * TOP_K + i] == e;
      } while (again);
      ids[t * TOP_K + j] = e;
    }
    if (hm_rng_next(rng) % 5 == 0) ids[t * TOP_K + hm_rng_next(rng) % TOP_K] = -1;
  }
  return tokens;
}

/* Phase 1 on every rank, the all-gather, phase 2 on every rank. */
static hm_status sim_route(struct sim *s, hm_status *per_rank) {
  for (int r = 0; r < WORLD; r++) hm_route_local(&s->route[r], s->route[r].tokens);
  size_t bytes = hm_route_msg_bytes(&s->route[0]);
  for (int r = 0; r < WORLD; r++)
    for (int q = 0; q < WORLD; q++)
      memcpy((char *)s->route[r].counts + bytes * (size_t)q, s->route[q].msg, bytes);
  hm_status first = HM_OK;
  for (int r = 0; r < WORLD; r++) {
    per_rank[r] = hm_route_global(&s->route[r]);
    if (first == HM_OK) first = per_rank[r];
  }
  return first;
}

/* One piece a peer at most, peers in order, and what a sends to b is what b expects from a. */
static void check_one_message(const hm_pieces *p) {
  for (int i = 1; i < p->n; i++) assert_true(p->v[i - 1].peer < p->v[i].peer);
  for (int i = 0; i < p->n; i++) assert_true(p->v[i].rows > 0);
}

static const hm_piece *piece_with(const hm_pieces *p, int peer) {
  for (int i = 0; i < p->n; i++)
    if (p->v[i].peer == peer) return &p->v[i];
  return NULL;
}

/* Row value on the wire: sender, token, expert; exact in double through /tp and the sum. */
static double row_value(int s, int64_t t, int64_t e) {
  return (double)(s * 100000 + t * 100 + e);
}

/* Moves each message: dst[b][recv row + k] = src[a][send row + k]. */
static void move(struct sim *s, bool combine, double **src, double **dst) {
  for (int a = 0; a < WORLD; a++) {
    const hm_pieces *send = combine ? &s->route[a].combine_send : &s->route[a].dispatch_send;
    check_one_message(send);
    for (int b = 0; b < WORLD; b++) {
      const hm_pieces *recv = combine ? &s->route[b].combine_recv : &s->route[b].dispatch_recv;
      check_one_message(recv);
      const hm_piece *out = piece_with(send, b), *in = piece_with(recv, a);
      assert_true((out == NULL) == (in == NULL));
      if (out == NULL) continue;
      assert_int_equal(out->rows, in->rows);
      for (int64_t k = 0; k < out->rows; k++) dst[b][in->row + k] = src[a][out->row + k];
    }
  }
}

static double **alloc_rows(int64_t rows) {
  double **v = calloc(WORLD, sizeof(*v));
  assert_non_null(v);
  for (int r = 0; r < WORLD; r++) {
    v[r] = calloc((size_t)rows + 1, sizeof(double));
    assert_non_null(v[r]);
  }
  return v;
}

static void free_rows(double **v) {
  for (int r = 0; r < WORLD; r++) free(v[r]);
  free(v);
}

/* Every expert segment holds its expert's rows; TP ranks of a group hold the same layout. */
static void check_layouts(struct sim *s, double **layout) {
  for (int r = 0; r < WORLD; r++) {
    const struct hm_route *rt = &s->route[r];
    for (int64_t j = 0; j < rt->local_experts; j++) {
      int64_t e = rt->ep_rank * rt->local_experts + j;
      if (s->layout == HM_COMM_LAYOUT_CONTIGUOUS) assert_int_equal(rt->offsets[j] % s->block_m, 0);
      for (int64_t i = 0; i < rt->expert_counts[j]; i++) {
        double v = layout[r][rt->offsets[j] + i];
        assert_int_equal((int64_t)v % 100, e);
        assert_true(v == layout[rt->ep_rank * s->tp][rt->offsets[j] + i]);
      }
    }
  }
}

static void run_case(struct sim *s, hm_rng *rng, bool skewed) {
  int64_t cap = WORLD * MAX_TOKENS * TOP_K + EXPERTS * (s->block_m + s->max_m) + WORLD;
  for (int r = 0; r < WORLD; r++) s->route[r].tokens = random_tokens(rng, s->route[r].ids, skewed);
  hm_status st[WORLD];
  HM_ASSERT_OK(sim_route(s, st));
  double **packed = alloc_rows(cap), **staged = alloc_rows(cap), **layout = alloc_rows(cap);
  double **gathered = alloc_rows(cap), **back = alloc_rows(cap);
  for (int r = 0; r < WORLD; r++) {
    const struct hm_route *rt = &s->route[r];
    for (int64_t p = 0; p < rt->n_send; p++) {
      int64_t t = rt->send_src[p], e = 0;
      for (int j = 0; j < TOP_K; j++)
        if (rt->slot_pos[t * TOP_K + j] == p) e = rt->ids[t * TOP_K + j];
      packed[r][p] = row_value(r, t, e);
    }
  }
  move(s, false, packed, staged);
  for (int r = 0; r < WORLD; r++)
    for (int64_t i = 0; i < s->route[r].n_recv; i++) layout[r][s->route[r].recv_dst[i]] = staged[r][i];
  check_layouts(s, layout);
  /* Each TP rank holds a 1/tp partial; the owner of a chunk holds the sum after reduce-scatter. */
  double **summed = alloc_rows(cap);
  for (int r = 0; r < WORLD; r++) {
    const struct hm_route *rt = &s->route[r];
    int64_t chunk = hm_route_padded_rows(rt, rt->ep_rank) / s->tp;
    for (int64_t i = rt->tp_rank * chunk; i < (rt->tp_rank + 1) * chunk; i++)
      for (int q = 0; q < s->tp; q++) summed[r][i] += layout[rt->ep_rank * s->tp + q][i] / s->tp;
  }
  for (int r = 0; r < WORLD; r++)
    for (int64_t i = 0; i < s->route[r].n_back; i++) gathered[r][i] = summed[r][s->route[r].back_src[i]];
  move(s, true, gathered, back);
  for (int r = 0; r < WORLD; r++) {
    const struct hm_route *rt = &s->route[r];
    for (int64_t i = 0; i < rt->tokens * TOP_K; i++) {
      if (rt->ids[i] < 0) {
        assert_int_equal(rt->combine_pos[i], -1);
        continue;
      }
      assert_true(back[r][rt->combine_pos[i]] == row_value(r, i / TOP_K, rt->ids[i]));
    }
  }
  free_rows(packed), free_rows(staged), free_rows(layout), free_rows(gathered), free_rows(back);
  free_rows(summed);
}

static void every_shape_and_layout(void **state) {
  (void)state;
  hm_rng rng;
  hm_rng_seed(&rng, hm_test_seed("comm_route"));
  const int shapes[][2] = {{8, 1}, {1, 8}, {4, 2}, {2, 4}};
  for (size_t i = 0; i < HM_ARRAY_SIZE(shapes); i++)
    for (int variant = 0; variant < 3; variant++)
      for (int rep = 0; rep < 6; rep++) {
        struct sim s;
        hm_comm_layout layout = variant == 2 ? HM_COMM_LAYOUT_MASKED : HM_COMM_LAYOUT_CONTIGUOUS;
        sim_init(&s, shapes[i][0], shapes[i][1], layout, variant == 1 ? 4 : 1, WORLD * MAX_TOKENS);
        run_case(&s, &rng, rep % 2 == 1);
        sim_free(&s);
      }
}

static void masked_overflow_fails_everywhere(void **state) {
  (void)state;
  struct sim s;
  sim_init(&s, 8, 1, HM_COMM_LAYOUT_MASKED, 1, 3);
  for (int r = 0; r < WORLD; r++) {
    s.route[r].tokens = 1;
    for (int j = 0; j < TOP_K; j++) s.route[r].ids[j] = j;
  }
  hm_status st[WORLD];
  assert_int_equal(sim_route(&s, st), HM_INVALID_ARGUMENT);
  for (int r = 0; r < WORLD; r++) assert_int_equal(st[r], HM_INVALID_ARGUMENT);
  assert_non_null(strstr(hm_last_error(), "receives 8 rows, more than max_m 3"));
  sim_free(&s);
}

static void bad_id_named_on_every_rank(void **state) {
  (void)state;
  struct sim s;
  sim_init(&s, 4, 2, HM_COMM_LAYOUT_CONTIGUOUS, 1, 0);
  for (int r = 0; r < WORLD; r++) {
    s.route[r].tokens = 2;
    for (int j = 0; j < 2 * TOP_K; j++) s.route[r].ids[j] = j % TOP_K;
  }
  s.route[3].ids[5] = 99;
  hm_status st[WORLD];
  for (int r = 0; r < WORLD; r++) hm_route_local(&s.route[r], s.route[r].tokens);
  assert_non_null(strstr(s.route[3].local_error, "token 1 slot 1 has expert id 99"));
  sim_route(&s, st);
  for (int r = 0; r < WORLD; r++) assert_int_equal(st[r], r == 3 ? HM_INVALID_ARGUMENT : HM_REMOTE);
  assert_non_null(strstr(hm_last_error(), "rank 3 reported a bad dispatch input"));
  sim_free(&s);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(every_shape_and_layout),
      cmocka_unit_test(masked_overflow_fails_everywhere),
      cmocka_unit_test(bad_id_named_on_every_rank),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
