/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The routing plan of one dispatch, computed on the host. Every rank all-gathers every
 * rank's per-expert counts, so each can lay out every EP group's rows and knows, without
 * further messages, which rows it sends and receives in dispatch and in combine.
 *
 * Layout of EP group g (the same on its TP ranks): local expert j's segment holds the
 * rows from rank 0, then rank 1, ...; segments start at multiples of block_m
 * (contiguous) or at j * max_m (masked). In combine, TP rank t of g owns chunk t of the
 * reduce-scattered layout and returns the rows in it.
 *
 * Each pair of ranks exchanges one message per direction per exchange, whatever the
 * number of experts: a sender packs its rows by expert, so a group's rows are one run;
 * a receiver takes each peer's message whole into a staging buffer and one scatter
 * (recv_dst) moves the rows into the layout. Combine mirrors it: the owner of a chunk
 * gathers (back_src) each home rank's rows into one run, and the home rank reads its
 * rows straight from what it received (combine_pos).
 */
#ifndef HM_COMM_ROUTE_H
#define HM_COMM_ROUTE_H

#include "comm.h"

/* A run of rows exchanged with one world rank; row indexes the local buffer. */
typedef struct hm_piece {
  int peer;
  int64_t row;
  int64_t rows;
} hm_piece;

/* At most one piece a peer, in peer order. */
typedef struct hm_pieces {
  hm_piece *v;
  int n;
} hm_pieces;

struct hm_route {
  int world, rank, ep, tp, ep_rank, tp_rank, top_k;
  int64_t experts, local_experts, block_m, max_m, max_tokens;
  hm_comm_layout layout;
  /* From this rank's ids. */
  int64_t tokens;
  int32_t *ids;      /* [max_tokens * top_k] */
  int32_t *send_src; /* packed row -> token */
  int32_t *slot_pos; /* token * top_k + slot -> packed row, -1 when skipped */
  int64_t n_send;
  int32_t *msg;    /* what this rank all-gathers: status, tokens, count per expert */
  int32_t *counts; /* [world][2 + experts]: every rank's msg */
  hm_status local_status;
  char local_error[256];
  /* From every rank's counts. */
  int64_t *packed_start;  /* [experts + 1] this rank's first packed row of expert e */
  int64_t *seg_start;     /* [world][experts] row of rank s's segment in e's group layout */
  int64_t *group_rows;    /* [ep] rows of each group's layout */
  int32_t *offsets;       /* [local_experts + 1] this rank's group layout */
  int32_t *expert_counts; /* [local_experts] */
  int32_t *recv_dst;      /* dispatch: row i of the received messages -> its layout row */
  int64_t n_recv;
  int32_t *back_src; /* combine: layout row of each row this rank returns, by home rank */
  int64_t n_back;
  int32_t *back_pos;    /* packed row -> row of the messages received in combine */
  int32_t *combine_pos; /* token * top_k + slot -> row received in combine, -1 when skipped */
  int64_t *fill;        /* [world] scratch */
  hm_pieces dispatch_send, dispatch_recv, combine_send, combine_recv;
};

hm_status hm_route_init(struct hm_route *r, const hm_comm *c);
void hm_route_free(struct hm_route *r);
/* Bytes of one rank's msg. */
size_t hm_route_msg_bytes(const struct hm_route *r);
/*
 * Counts and packs this rank's rows from r->ids. A bad id is not returned at once: it
 * is recorded in msg so that every rank learns it in the exchange (hm_route_global).
 */
void hm_route_local(struct hm_route *r, int64_t tokens);
/* After the counts exchange: fails on every rank if one rank's input was bad or a
 * masked segment overflows, else builds the layouts, the pieces and the row maps. */
hm_status hm_route_global(struct hm_route *r);
/* Rows of group g's layout rounded up to a multiple of tp (the reduce-scatter size). */
int64_t hm_route_padded_rows(const struct hm_route *r, int g);
/* Rows this rank's own group lays out. */
int64_t hm_route_my_rows(const struct hm_route *r);

#endif
