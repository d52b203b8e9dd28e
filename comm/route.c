/* SPDX-License-Identifier: Apache-2.0 */
/* Routing plan: counts, packing order, group layouts, one piece a peer, and the row maps. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "route.h"

#define HM_ROUTE_HEADER 2 /* status, tokens; then one count per expert */

static int64_t round_up(int64_t x, int64_t m) {
  return (x + m - 1) / m * m;
}

static void copy_shape(struct hm_route *r, const hm_comm *c) {
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
}

hm_status hm_route_init(struct hm_route *r, const hm_comm *c) {
  memset(r, 0, sizeof(*r));
  copy_shape(r, c);
  size_t slots = (size_t)(r->max_tokens * r->top_k), e = (size_t)r->experts, w = (size_t)r->world;
  /* Each peer sends at most all its slots to this rank, and each comes back once. */
  size_t group_slots = w * slots;
  r->ids = calloc(slots, sizeof(int32_t));
  r->send_src = calloc(slots, sizeof(int32_t));
  r->slot_pos = calloc(slots, sizeof(int32_t));
  r->msg = calloc(HM_ROUTE_HEADER + e, sizeof(int32_t));
  r->counts = calloc(w * (HM_ROUTE_HEADER + e), sizeof(int32_t));
  r->packed_start = calloc(e + 1, sizeof(int64_t));
  r->seg_start = calloc(w * e, sizeof(int64_t));
  r->group_rows = calloc((size_t)r->ep, sizeof(int64_t));
  r->offsets = calloc((size_t)r->local_experts + 1, sizeof(int32_t));
  r->expert_counts = calloc((size_t)r->local_experts, sizeof(int32_t));
  r->recv_dst = calloc(group_slots, sizeof(int32_t));
  r->back_src = calloc(group_slots, sizeof(int32_t));
  r->back_pos = calloc(slots, sizeof(int32_t));
  r->combine_pos = calloc(slots, sizeof(int32_t));
  r->fill = calloc(w, sizeof(int64_t));
  hm_pieces *lists[4] = {&r->dispatch_send, &r->dispatch_recv, &r->combine_send, &r->combine_recv};
  bool lists_ok = true;
  for (int i = 0; i < 4; i++) lists_ok &= (lists[i]->v = calloc(w, sizeof(hm_piece))) != NULL;
  if (!lists_ok || !r->ids || !r->send_src || !r->slot_pos || !r->msg || !r->counts || !r->packed_start ||
      !r->seg_start || !r->group_rows || !r->offsets || !r->expert_counts || !r->recv_dst || !r->back_src ||
      !r->back_pos || !r->combine_pos || !r->fill) {
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
  free(r->recv_dst);
  free(r->back_src);
  free(r->back_pos);
  free(r->combine_pos);
  free(r->fill);
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
  r->packed_start[r->experts] = start;
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

static void push(hm_pieces *p, int peer, int64_t row, int64_t rows) {
  if (rows > 0) p->v[p->n++] = (hm_piece){peer, row, rows};
}

static int64_t seg_of(const struct hm_route *r, int s, int64_t e) {
  return r->seg_start[(size_t)s * (size_t)r->experts + (size_t)e];
}

/* To every TP rank of each group: the group's run of packed rows. */
static void dispatch_send_pieces(struct hm_route *r) {
  int64_t el = r->local_experts;
  for (int g = 0; g < r->ep; g++) {
    int64_t lo = r->packed_start[g * el], hi = r->packed_start[(g + 1) * el];
    for (int t = 0; t < r->tp; t++) push(&r->dispatch_send, g * r->tp + t, lo, hi - lo);
  }
}

/* From each rank: its rows of this group's experts in expert order, scattered into their segments. */
static void dispatch_recv_pieces(struct hm_route *r) {
  int64_t el = r->local_experts, i = 0;
  for (int s = 0; s < r->world; s++) {
    int64_t start = i;
    for (int64_t j = 0; j < el; j++) {
      int64_t e = r->ep_rank * el + j, seg = seg_of(r, s, e);
      for (int64_t k = 0; k < count_of(r, s, e); k++) r->recv_dst[i++] = (int32_t)(seg + k);
    }
    push(&r->dispatch_recv, s, start, i - start);
  }
  r->n_recv = i;
}

/* To each home rank: its rows inside the chunk this rank owns, gathered in expert order. */
static void combine_send_pieces(struct hm_route *r) {
  int64_t el = r->local_experts, i = 0;
  int64_t chunk = hm_route_padded_rows(r, r->ep_rank) / r->tp;
  int64_t lo = r->tp_rank * chunk, hi = lo + chunk;
  for (int s = 0; s < r->world; s++) {
    int64_t start = i;
    for (int64_t j = 0; j < el; j++) {
      int64_t e = r->ep_rank * el + j;
      int64_t a = seg_of(r, s, e), b = a + count_of(r, s, e);
      for (int64_t row = a > lo ? a : lo; row < (b < hi ? b : hi); row++) r->back_src[i++] = (int32_t)row;
    }
    push(&r->combine_send, s, start, i - start);
  }
  r->n_back = i;
}

/*
 * Visits this rank's rows of every expert as they come back: a segment may straddle TP
 * chunks, and each part comes from the chunk's owner, in expert order per owner.
 */
typedef void (*hm_back_fn)(struct hm_route *r, int owner, int64_t packed, int64_t rows);

static void walk_back(struct hm_route *r, hm_back_fn fn) {
  for (int64_t e = 0; e < r->experts; e++) {
    int g = (int)(e / r->local_experts);
    int64_t chunk = hm_route_padded_rows(r, g) / r->tp;
    int64_t o = seg_of(r, r->rank, e), end = o + count_of(r, r->rank, e);
    for (int64_t a = o; a < end;) {
      int64_t t = a / chunk, b = (t + 1) * chunk < end ? (t + 1) * chunk : end;
      fn(r, g * r->tp + (int)t, r->packed_start[e] + (a - o), b - a);
      a = b;
    }
  }
}

static void count_back(struct hm_route *r, int owner, int64_t packed, int64_t rows) {
  (void)packed;
  r->fill[owner] += rows;
}

static void place_back(struct hm_route *r, int owner, int64_t packed, int64_t rows) {
  for (int64_t k = 0; k < rows; k++) r->back_pos[packed + k] = (int32_t)r->fill[owner]++;
}

static void combine_recv_pieces(struct hm_route *r) {
  memset(r->fill, 0, (size_t)r->world * sizeof(int64_t));
  walk_back(r, count_back);
  int64_t start = 0;
  for (int q = 0; q < r->world; q++) {
    int64_t rows = r->fill[q];
    push(&r->combine_recv, q, start, rows);
    r->fill[q] = start;
    start += rows;
  }
  walk_back(r, place_back);
  for (int64_t i = 0; i < r->tokens * r->top_k; i++)
    r->combine_pos[i] = r->slot_pos[i] < 0 ? -1 : r->back_pos[r->slot_pos[i]];
}

hm_status hm_route_global(struct hm_route *r) {
  HM_CHECK(check_statuses(r));
  HM_CHECK(lay_out_groups(r));
  r->dispatch_send.n = r->dispatch_recv.n = r->combine_send.n = r->combine_recv.n = 0;
  dispatch_send_pieces(r);
  dispatch_recv_pieces(r);
  combine_send_pieces(r);
  combine_recv_pieces(r);
  return HM_OK;
}

int64_t hm_route_padded_rows(const struct hm_route *r, int g) {
  return round_up(r->group_rows[g], r->tp);
}

int64_t hm_route_my_rows(const struct hm_route *r) {
  return r->group_rows[r->ep_rank];
}
