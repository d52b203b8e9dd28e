/* SPDX-License-Identifier: Apache-2.0 */
/* Routing plan: counts, packing order, group layouts, and the pieces each exchange moves. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "route.h"

#define HM_ROUTE_HEADER 2 /* status, tokens; then one count per expert */

static int64_t round_up(int64_t x, int64_t m) {
  return (x + m - 1) / m * m;
}

hm_status hm_route_init(struct hm_route *r, const hm_comm *c) {
  memset(r, 0, sizeof(*r));
  const hm_comm_plan *p = &c->plan;
  r->world = p->world;
  r->rank = p->rank;
  r->ep = p->ep;
  r->tp = p->tp;
  r->ep_rank = p->ep_rank;
  r->tp_rank = p->tp_rank;
  r->top_k = c->cfg.top_k;
  r->experts = p->experts;
  r->local_experts = p->local_experts;
  r->block_m = c->cfg.block_m;
  r->max_m = c->cfg.max_m;
  r->max_tokens = c->cfg.max_tokens;
  r->layout = c->cfg.layout;
  size_t slots = (size_t)(r->max_tokens * r->top_k), e = (size_t)r->experts, w = (size_t)r->world;
  r->ids = calloc(slots, sizeof(int32_t));
  r->send_src = calloc(slots, sizeof(int32_t));
  r->slot_pos = calloc(slots, sizeof(int32_t));
  r->msg = calloc(HM_ROUTE_HEADER + e, sizeof(int32_t));
  r->counts = calloc(w * (HM_ROUTE_HEADER + e), sizeof(int32_t));
  r->packed_start = calloc(e, sizeof(int64_t));
  r->seg_start = calloc(w * e, sizeof(int64_t));
  r->group_rows = calloc((size_t)r->ep, sizeof(int64_t));
  r->offsets = calloc((size_t)r->local_experts + 1, sizeof(int32_t));
  r->expert_counts = calloc((size_t)r->local_experts, sizeof(int32_t));
  if (!r->ids || !r->send_src || !r->slot_pos || !r->msg || !r->counts || !r->packed_start || !r->seg_start ||
      !r->group_rows || !r->offsets || !r->expert_counts) {
    hm_route_free(r);
    HM_FAIL(HM_OUT_OF_MEMORY, "routing plan for %lld tokens x %d slots", (long long)r->max_tokens, r->top_k);
  }
  return HM_OK;
}

void hm_route_free(struct hm_route *r) {
  free(r->ids);
  free(r->send_src);
  free(r->slot_pos);
  free(r->msg);
  free(r->counts);
  free(r->packed_start);
  free(r->seg_start);
  free(r->group_rows);
  free(r->offsets);
  free(r->expert_counts);
  free(r->dispatch_send.v);
  free(r->dispatch_recv.v);
  free(r->combine_send.v);
  free(r->combine_recv.v);
  memset(r, 0, sizeof(*r));
}

size_t hm_route_msg_bytes(const struct hm_route *r) {
  return (HM_ROUTE_HEADER + (size_t)r->experts) * sizeof(int32_t);
}

/* Count of rows rank s sends to expert e. */
static int64_t count_of(const struct hm_route *r, int s, int64_t e) {
  return r->counts[(size_t)s * (HM_ROUTE_HEADER + (size_t)r->experts) + HM_ROUTE_HEADER + (size_t)e];
}

static bool check_ids(struct hm_route *r) {
  int64_t slots = r->tokens * r->top_k;
  for (int64_t i = 0; i < slots; i++) {
    int32_t e = r->ids[i];
    if (e == -1 || (e >= 0 && e < r->experts)) continue;
    r->local_status = HM_INVALID_ARGUMENT;
    snprintf(r->local_error, sizeof(r->local_error),
             "rank %d: token %lld slot %lld has expert id %d, not in [0, %lld) or -1", r->rank,
             (long long)(i / r->top_k), (long long)(i % r->top_k), (int)e, (long long)r->experts);
    return false;
  }
  return true;
}

void hm_route_local(struct hm_route *r, int64_t tokens) {
  int32_t *count = r->msg + HM_ROUTE_HEADER;
  memset(r->msg, 0, hm_route_msg_bytes(r));
  r->tokens = tokens;
  r->n_send = 0;
  r->local_status = HM_OK;
  r->local_error[0] = '\0';
  if (!check_ids(r)) {
    r->msg[0] = (int32_t)r->local_status;
    return;
  }
  int64_t slots = tokens * r->top_k;
  for (int64_t i = 0; i < slots; i++)
    if (r->ids[i] >= 0) count[r->ids[i]]++;
  /* Packed by expert, so each expert's rows (and each group's) are one run. */
  int64_t start = 0;
  for (int64_t e = 0; e < r->experts; e++) {
    r->packed_start[e] = start;
    start += count[e];
  }
  r->n_send = start;
  int64_t *fill = r->seg_start; /* scratch until hm_route_global */
  memset(fill, 0, (size_t)r->experts * sizeof(int64_t));
  for (int64_t i = 0; i < slots; i++) {
    int32_t e = r->ids[i];
    if (e < 0) {
      r->slot_pos[i] = -1;
      continue;
    }
    int64_t pos = r->packed_start[e] + fill[e]++;
    r->slot_pos[i] = (int32_t)pos;
    r->send_src[pos] = (int32_t)(i / r->top_k);
  }
  r->msg[1] = (int32_t)tokens;
}

static hm_status check_statuses(const struct hm_route *r) {
  for (int s = 0; s < r->world; s++) {
    hm_status st = (hm_status)r->counts[(size_t)s * (HM_ROUTE_HEADER + (size_t)r->experts)];
    if (st == HM_OK) continue;
    if (s == r->rank) HM_FAIL(r->local_status, "%s", r->local_error);
    HM_FAIL(HM_REMOTE, "rank %d: rank %d reported a bad dispatch input (%s); its log says which", r->rank, s,
            hm_status_str(st));
  }
  return HM_OK;
}

/* Group layouts from the counts; identical on every rank. */
static hm_status lay_out_groups(struct hm_route *r) {
  int64_t el = r->local_experts;
  for (int g = 0; g < r->ep; g++) {
    int64_t row = 0;
    for (int64_t j = 0; j < el; j++) {
      int64_t e = g * el + j, n = 0;
      int64_t seg = r->layout == HM_COMM_LAYOUT_MASKED ? j * r->max_m : row;
      for (int s = 0; s < r->world; s++) {
        r->seg_start[(size_t)s * (size_t)r->experts + (size_t)e] = seg + n;
        n += count_of(r, s, e);
      }
      if (r->layout == HM_COMM_LAYOUT_MASKED && n > r->max_m)
        HM_FAIL(HM_INVALID_ARGUMENT, "rank %d: expert %lld receives %lld rows, more than max_m %lld", r->rank,
                (long long)e, (long long)n, (long long)r->max_m);
      row = seg + round_up(n, r->block_m);
      if (g == r->ep_rank) {
        r->offsets[j] = (int32_t)seg;
        r->expert_counts[j] = (int32_t)n;
      }
    }
    r->group_rows[g] = r->layout == HM_COMM_LAYOUT_MASKED ? el * r->max_m : row;
  }
  r->offsets[el] = (int32_t)r->group_rows[r->ep_rank];
  return HM_OK;
}

static hm_status push(hm_pieces *p, int peer, int64_t row, int64_t rows) {
  if (rows <= 0) return HM_OK;
  if (p->n == p->cap) {
    int cap = p->cap ? 2 * p->cap : 64;
    hm_piece *v = realloc(p->v, (size_t)cap * sizeof(*v));
    if (v == NULL) HM_FAIL(HM_OUT_OF_MEMORY, "%d transfer pieces", cap);
    p->v = v;
    p->cap = cap;
  }
  p->v[p->n++] = (hm_piece){peer, row, rows};
  return HM_OK;
}

static int64_t seg_of(const struct hm_route *r, int s, int64_t e) {
  return r->seg_start[(size_t)s * (size_t)r->experts + (size_t)e];
}

/* Per peer, both sides list pieces by expert, then by row: the order transports match in. */
static hm_status dispatch_pieces(struct hm_route *r) {
  int64_t el = r->local_experts;
  for (int g = 0; g < r->ep; g++)
    for (int t = 0; t < r->tp; t++)
      for (int64_t j = 0; j < el; j++) {
        int64_t e = g * el + j;
        HM_CHECK(push(&r->dispatch_send, g * r->tp + t, r->packed_start[e], count_of(r, r->rank, e)));
      }
  for (int64_t j = 0; j < el; j++) {
    int64_t e = r->ep_rank * el + j;
    for (int s = 0; s < r->world; s++)
      HM_CHECK(push(&r->dispatch_recv, s, seg_of(r, s, e), count_of(r, s, e)));
  }
  return HM_OK;
}

static hm_status combine_send_pieces(struct hm_route *r) {
  int64_t el = r->local_experts;
  int64_t chunk = hm_route_padded_rows(r, r->ep_rank) / r->tp;
  int64_t lo = r->tp_rank * chunk, hi = lo + chunk;
  for (int64_t j = 0; j < el; j++) {
    int64_t e = r->ep_rank * el + j;
    for (int s = 0; s < r->world; s++) {
      int64_t a = seg_of(r, s, e), b = a + count_of(r, s, e);
      if (a < lo) a = lo;
      if (b > hi) b = hi;
      HM_CHECK(push(&r->combine_send, s, a, b - a));
    }
  }
  return HM_OK;
}

/* A segment may straddle TP chunks: each part comes back from the chunk's owner. */
static hm_status combine_recv_pieces(struct hm_route *r) {
  for (int64_t e = 0; e < r->experts; e++) {
    int g = (int)(e / r->local_experts);
    int64_t chunk = hm_route_padded_rows(r, g) / r->tp;
    int64_t o = seg_of(r, r->rank, e), end = o + count_of(r, r->rank, e);
    for (int64_t a = o; a < end;) {
      int64_t t = a / chunk, b = (t + 1) * chunk < end ? (t + 1) * chunk : end;
      HM_CHECK(push(&r->combine_recv, g * r->tp + (int)t, r->packed_start[e] + (a - o), b - a));
      a = b;
    }
  }
  return HM_OK;
}

hm_status hm_route_global(struct hm_route *r) {
  HM_CHECK(check_statuses(r));
  HM_CHECK(lay_out_groups(r));
  r->dispatch_send.n = r->dispatch_recv.n = r->combine_send.n = r->combine_recv.n = 0;
  HM_CHECK(dispatch_pieces(r));
  HM_CHECK(combine_send_pieces(r));
  return combine_recv_pieces(r);
}

int64_t hm_route_padded_rows(const struct hm_route *r, int g) {
  return round_up(r->group_rows[g], r->tp);
}

int64_t hm_route_my_rows(const struct hm_route *r) {
  return r->group_rows[r->ep_rank];
}
