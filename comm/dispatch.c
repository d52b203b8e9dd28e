/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Dispatch and combine of one micro-batch: the counts exchange (bounded, on the host),
 * the routing plan, then on the caller's stream one upload of the plan's maps, the
 * pack, one message per peer each way, and the scatter into the expert layout; combine
 * is the TP reduce, the gather, one message per peer each way, and the weighted sum.
 */
#include <stdlib.h>
#include <string.h>

#include "comm.h"
#include "route.h"
#include "rows.h"

/* Engine memory that only grows; its content is not kept across growth. */
typedef struct hm_buf {
  void *ptr;
  size_t bytes;
} hm_buf;

enum {
  BUF_SEND,       /* wire rows packed by expert, for dispatch */
  BUF_STAGE,      /* wire rows received in dispatch, by source rank */
  BUF_RECV_X,     /* expert layout: payload rows */
  BUF_RECV_SCALE, /* expert layout: their fp8 scales */
  BUF_Y,          /* expert layout: outputs */
  BUF_GATHER,     /* outputs this rank returns in combine, by home rank */
  BUF_BACK,       /* outputs received in combine, by owner */
  BUF_PLAN,       /* the int32 maps and layout metadata of one dispatch */
  BUF_COUNT
};

/* Where each int32 array of a dispatch's plan starts, in words; the same on host and device. */
typedef struct hm_plan_at {
  size_t send_src, combine_pos, offsets, counts, recv_dst, back_src, words;
} hm_plan_at;

struct hm_comm_batch {
  hm_comm *comm;
  hm_rows_ctx rows;
  const struct hm_rows_ops *ops;
  struct hm_route route;
  hm_buf buf[BUF_COUNT];
  int32_t *plan_host; /* one upload a dispatch */
  hm_plan_at at;
  hm_comm_xfer *xfers;  /* 2 * world */
  const float *weights; /* the caller's, from dispatch to combine */
  bool dispatched;
  hm_comm_expert_batch out;
  double dispatch_bytes, combine_bytes;
};

size_t hm_comm_payload_row_bytes(hm_comm_payload p, int64_t hidden) {
  return (size_t)hidden * (p == HM_COMM_PAYLOAD_FP8 ? 1 : 2);
}

size_t hm_comm_scale_row_bytes(hm_comm_payload p, int64_t hidden) {
  return p == HM_COMM_PAYLOAD_FP8 ? (size_t)(hidden / 128) * sizeof(float) : 0;
}

size_t hm_comm_wire_row_bytes(hm_comm_payload p, int64_t hidden) {
  return hm_comm_payload_row_bytes(p, hidden) + hm_comm_scale_row_bytes(p, hidden);
}

static size_t out_row_bytes(const hm_comm_batch *b) {
  return (size_t)b->rows.hidden * (b->rows.out == HM_F32 ? 4 : 2);
}

static size_t wire_row_bytes(const hm_comm_batch *b) {
  return hm_comm_wire_row_bytes(b->rows.payload, b->rows.hidden);
}

/* The plan's words at most: two per slot of this rank, metadata, two per slot of the world. */
static size_t plan_capacity(const hm_comm *c) {
  size_t slots = (size_t)(c->cfg.max_tokens * c->cfg.top_k);
  return 2 * slots + 2 * (size_t)c->plan.local_experts + 1 + 2 * (size_t)c->plan.world * slots;
}

static hm_status batch_alloc(hm_comm *c, hm_comm_payload payload, hm_comm_batch *b) {
  b->comm = c;
  b->rows = (hm_rows_ctx){c->engine, payload, c->cfg.combine_dtype, c->cfg.hidden, c->cfg.top_k, {NULL}};
  b->ops = c->engine->kind == HM_BACKEND_CUDA ? &hm_rows_cuda_ops : &hm_rows_host_ops;
  b->plan_host = malloc(plan_capacity(c) * sizeof(int32_t));
  b->xfers = calloc(2 * (size_t)c->plan.world, sizeof(hm_comm_xfer));
  if (b->plan_host == NULL || b->xfers == NULL) HM_FAIL(HM_OUT_OF_MEMORY, "comm batch plan");
  return hm_route_init(&b->route, c);
}

hm_status hm_comm_batch_create_payload(hm_comm *c, hm_comm_payload payload, hm_comm_batch **out) {
  HM_CHECK_NOT_NULL(out);
  *out = NULL;
  HM_CHECK(hm_comm_check_usable(c));
  if (payload == HM_COMM_PAYLOAD_FP8 && c->engine->kind == HM_BACKEND_CUDA && c->engine->arch < 89)
    HM_FAIL(HM_UNSUPPORTED, "rank %d: fp8 payload needs sm_89 or newer, %s is sm_%d", c->plan.rank,
            c->engine->device_name, c->engine->arch);
  hm_comm_batch *b = calloc(1, sizeof(*b));
  if (b == NULL) HM_FAIL(HM_OUT_OF_MEMORY, "comm batch");
  hm_status ret = batch_alloc(c, payload, b);
  if (ret != HM_OK) {
    hm_comm_batch_destroy(b);
    return ret;
  }
  *out = b;
  return HM_OK;
}

hm_status hm_comm_batch_create(hm_comm *comm, hm_comm_batch **out) {
  HM_CHECK(hm_comm_check_usable(comm));
  return hm_comm_batch_create_payload(comm, comm->cfg.payload, out);
}

void hm_comm_batch_destroy(hm_comm_batch *batch) {
  if (batch == NULL) return;
  for (int i = 0; i < BUF_COUNT; i++) hm_mem_free(batch->comm->engine, batch->buf[i].ptr);
  hm_route_free(&batch->route);
  free(batch->plan_host);
  free(batch->xfers);
  free(batch);
}

void hm_comm_batch_sent_bytes(const hm_comm_batch *b, double *dispatch_bytes, double *combine_bytes) {
  *dispatch_bytes = b->dispatch_bytes;
  *combine_bytes = b->combine_bytes;
}

static hm_status check_tokens(const hm_comm_batch *b, const hm_comm_tokens *t) {
  const hm_comm *c = b->comm;
  HM_CHECK_NOT_NULL(t);
  if (t->count < 0 || t->count > c->cfg.max_tokens)
    HM_FAIL(HM_INVALID_ARGUMENT, "rank %d: %lld tokens, expected 0..max_tokens %lld", c->plan.rank,
            (long long)t->count, (long long)c->cfg.max_tokens);
  if (t->count > 0 && (t->x == NULL || t->topk_ids == NULL || t->topk_weights == NULL))
    HM_FAIL(HM_INVALID_ARGUMENT, "rank %d: tokens need x, topk_ids and topk_weights", c->plan.rank);
  return HM_OK;
}

/* The ids decide the counts the host exchanges: wait (bounded) for the stream, then copy. */
static hm_status fetch_ids(hm_comm_batch *b, const hm_comm_tokens *t, hm_stream *stream) {
  hm_comm *c = b->comm;
  size_t bytes = (size_t)(t->count * c->cfg.top_k) * sizeof(int32_t);
  if (bytes == 0) return HM_OK;
  HM_CHECK(c->tr->ops->wait(c->tr, stream, "dispatch input"));
  return hm_engine_copy(c->engine, b->route.ids, t->topk_ids, bytes, HM_COPY_D2H, NULL);
}

/* Over the MPI bootstrap when there is one: host memory, no round trip through the GPU. */
static hm_status exchange_counts(hm_comm_batch *b, hm_stream *stream) {
  hm_comm *c = b->comm;
  struct hm_route *r = &b->route;
  hm_transport *t = c->boot ? c->boot : c->tr;
  return hm_comm_allgather_host(c, t, r->msg, r->counts, hm_route_msg_bytes(r), stream, "dispatch counts");
}

/* Lays the plan's arrays end to end, so that one copy uploads them. */
static void pack_plan(hm_comm_batch *b) {
  const struct hm_route *r = &b->route;
  hm_plan_at *at = &b->at;
  size_t w = 0;
  const struct {
    size_t *at;
    const int32_t *src;
    int64_t n;
  } parts[] = {
      {&at->send_src, r->send_src, r->n_send},
      {&at->combine_pos, r->combine_pos, r->tokens * r->top_k},
      {&at->offsets, r->offsets, r->local_experts + 1},
      {&at->counts, r->expert_counts, r->local_experts},
      {&at->recv_dst, r->recv_dst, r->n_recv},
      {&at->back_src, r->back_src, r->n_back},
  };
  for (size_t i = 0; i < sizeof(parts) / sizeof(parts[0]); i++) {
    *parts[i].at = w;
    memcpy(b->plan_host + w, parts[i].src, (size_t)parts[i].n * sizeof(int32_t));
    w += (size_t)parts[i].n;
  }
  at->words = w;
}

static const int32_t *plan_dev(const hm_comm_batch *b, size_t at) {
  return (const int32_t *)b->buf[BUF_PLAN].ptr + at;
}

/* Growth waits for the stream: the old buffers may still be read by queued work. */
static hm_status reserve(hm_comm_batch *b, const size_t *need, hm_stream *stream) {
  hm_comm *c = b->comm;
  bool grow = false;
  for (int i = 0; i < BUF_COUNT; i++) grow |= need[i] > b->buf[i].bytes;
  if (!grow) return HM_OK;
  HM_CHECK(c->tr->ops->wait(c->tr, stream, "buffer growth"));
  for (int i = 0; i < BUF_COUNT; i++) {
    if (need[i] <= b->buf[i].bytes) continue;
    hm_mem_free(c->engine, b->buf[i].ptr);
    b->buf[i] = (hm_buf){NULL, 0};
    /* Half as much again, so that a slowly growing load does not reallocate each time. */
    size_t bytes = need[i] + need[i] / 2;
    HM_CHECK(hm_mem_alloc(c->engine, bytes, &b->buf[i].ptr));
    b->buf[i].bytes = bytes;
    /* Padding rows are never written by anyone; zero keeps them finite through reductions. */
    HM_CHECK(hm_engine_memset(c->engine, b->buf[i].ptr, 0, bytes, NULL));
  }
  return HM_OK;
}

static hm_status reserve_for_route(hm_comm_batch *b, hm_stream *stream) {
  const struct hm_route *r = &b->route;
  size_t prb = hm_comm_payload_row_bytes(b->rows.payload, b->rows.hidden);
  size_t srb = hm_comm_scale_row_bytes(b->rows.payload, b->rows.hidden);
  size_t rows = (size_t)hm_route_my_rows(r), orb = out_row_bytes(b);
  size_t need[BUF_COUNT] = {
      [BUF_SEND] = (size_t)r->n_send * wire_row_bytes(b),
      [BUF_STAGE] = (size_t)r->n_recv * wire_row_bytes(b),
      [BUF_RECV_X] = rows * prb,
      [BUF_RECV_SCALE] = rows * srb,
      [BUF_Y] = (size_t)hm_route_padded_rows(r, r->ep_rank) * orb,
      [BUF_GATHER] = (size_t)r->n_back * orb,
      [BUF_BACK] = (size_t)r->n_send * orb,
      [BUF_PLAN] = b->at.words * sizeof(int32_t),
  };
  return reserve(b, need, stream);
}

/* One transfer per piece, from send_buf and into recv_buf, rows of row_bytes; returns the bytes sent. */
static hm_status exchange_rows(hm_comm_batch *b, const hm_pieces *send, const hm_pieces *recv, int send_buf,
                               int recv_buf, size_t row_bytes, hm_stream *stream, const char *what,
                               double *sent) {
  hm_comm_xfer *sx = b->xfers, *rx = b->xfers + send->n;
  *sent = 0;
  for (int i = 0; i < send->n; i++) {
    const hm_piece *p = &send->v[i];
    sx[i] = (hm_comm_xfer){p->peer, (char *)b->buf[send_buf].ptr + (size_t)p->row * row_bytes,
                           (size_t)p->rows * row_bytes};
    *sent += (double)sx[i].bytes;
  }
  for (int i = 0; i < recv->n; i++) {
    const hm_piece *p = &recv->v[i];
    rx[i] = (hm_comm_xfer){p->peer, (char *)b->buf[recv_buf].ptr + (size_t)p->row * row_bytes,
                           (size_t)p->rows * row_bytes};
  }
  hm_transport *t = b->comm->tr;
  return t->ops->exchange(t, sx, send->n, rx, recv->n, stream, what);
}

static void fill_out(hm_comm_batch *b) {
  const hm_comm *c = b->comm;
  const struct hm_route *r = &b->route;
  b->out = (hm_comm_expert_batch){
      .layout = c->cfg.layout,
      .local_experts = r->local_experts,
      .rows = hm_route_my_rows(r),
      .max_m = c->cfg.max_m,
      .x_dtype = b->rows.payload == HM_COMM_PAYLOAD_FP8 ? HM_F8E4M3 : HM_BF16,
      .x = b->buf[BUF_RECV_X].ptr,
      .x_scale = b->rows.payload == HM_COMM_PAYLOAD_FP8 ? b->buf[BUF_RECV_SCALE].ptr : NULL,
      .expert_offsets = plan_dev(b, b->at.offsets),
      .expert_counts = plan_dev(b, b->at.counts),
      .host_expert_offsets = r->offsets,
      .host_expert_counts = r->expert_counts,
      .y = b->buf[BUF_Y].ptr,
      .valid_rows = r->n_recv,
      .row_list = plan_dev(b, b->at.recv_dst),
  };
}

/* The routing plan, on the host: counts of every rank, layouts, pieces and maps. */
static hm_status plan_dispatch(hm_comm_batch *b, const hm_comm_tokens *tokens, hm_stream *stream) {
  struct hm_route *r = &b->route;
  HM_CHECK(fetch_ids(b, tokens, stream));
  hm_route_local(r, tokens->count);
  HM_CHECK(exchange_counts(b, stream));
  HM_CHECK(hm_route_global(r));
  pack_plan(b);
  HM_CHECK(reserve_for_route(b, stream));
  return hm_engine_copy(b->comm->engine, b->buf[BUF_PLAN].ptr, b->plan_host, b->at.words * sizeof(int32_t),
                        HM_COPY_H2D, stream);
}

hm_status hm_comm_dispatch(hm_comm_batch *batch, const hm_comm_tokens *tokens, hm_stream *stream,
                           hm_comm_expert_batch *out) {
  HM_CHECK_NOT_NULL(batch);
  HM_CHECK_NOT_NULL(out);
  hm_comm *c = batch->comm;
  HM_CHECK(hm_comm_check_usable(c));
  HM_CHECK(check_tokens(batch, tokens));
  struct hm_route *r = &batch->route;
  batch->dispatched = false;
  HM_CHECK(plan_dispatch(batch, tokens, stream));
  HM_CHECK(batch->ops->pack(&batch->rows, tokens->x, plan_dev(batch, batch->at.send_src), r->n_send,
                            batch->buf[BUF_SEND].ptr, stream));
  HM_CHECK(exchange_rows(batch, &r->dispatch_send, &r->dispatch_recv, BUF_SEND, BUF_STAGE,
                         wire_row_bytes(batch), stream, "dispatch", &batch->dispatch_bytes));
  HM_CHECK(batch->ops->scatter(&batch->rows, batch->buf[BUF_STAGE].ptr, plan_dev(batch, batch->at.recv_dst),
                               r->n_recv, batch->buf[BUF_RECV_X].ptr, batch->buf[BUF_RECV_SCALE].ptr,
                               stream));
  batch->weights = tokens->topk_weights;
  batch->dispatched = true;
  fill_out(batch);
  *out = batch->out;
  return HM_OK;
}

static hm_status check_dispatched(const hm_comm_batch *batch) {
  HM_CHECK_NOT_NULL(batch);
  HM_CHECK(hm_comm_check_usable(batch->comm));
  if (!batch->dispatched)
    HM_FAIL(HM_NOT_READY, "rank %d: combine without a dispatch before it", batch->comm->plan.rank);
  return HM_OK;
}

hm_status hm_comm_combine_rows(hm_comm_batch *batch, hm_stream *stream, const void **rows,
                               const int32_t **pos) {
  HM_CHECK(check_dispatched(batch));
  hm_comm *c = batch->comm;
  struct hm_route *r = &batch->route;
  int64_t padded = hm_route_padded_rows(r, r->ep_rank);
  HM_CHECK(c->tr->ops->tp_reduce(c->tr, batch->buf[BUF_Y].ptr, padded * batch->rows.hidden, batch->rows.out,
                                 true, stream));
  HM_CHECK(batch->ops->gather(&batch->rows, batch->buf[BUF_Y].ptr, plan_dev(batch, batch->at.back_src),
                              r->n_back, batch->buf[BUF_GATHER].ptr, stream));
  HM_CHECK(exchange_rows(batch, &r->combine_send, &r->combine_recv, BUF_GATHER, BUF_BACK,
                         out_row_bytes(batch), stream, "combine", &batch->combine_bytes));
  batch->dispatched = false;
  *rows = batch->buf[BUF_BACK].ptr;
  *pos = plan_dev(batch, batch->at.combine_pos);
  return HM_OK;
}

hm_status hm_comm_combine(hm_comm_batch *batch, void *y, hm_stream *stream) {
  HM_CHECK(check_dispatched(batch));
  const struct hm_route *r = &batch->route;
  if (y == NULL && r->tokens > 0)
    HM_FAIL(HM_INVALID_ARGUMENT, "rank %d: y must not be NULL", batch->comm->plan.rank);
  const void *rows = NULL;
  const int32_t *pos = NULL;
  HM_CHECK(hm_comm_combine_rows(batch, stream, &rows, &pos));
  return batch->ops->combine(&batch->rows, rows, pos, batch->weights, r->tokens, y, stream);
}

/* With TP the partials are summed: TP rank 0 holds the row, the others add zero. */
hm_status hm_comm_loopback(hm_comm_batch *batch, hm_stream *stream) {
  HM_CHECK_NOT_NULL(batch);
  hm_comm *c = batch->comm;
  HM_CHECK(hm_comm_check_usable(c));
  if (!batch->dispatched) HM_FAIL(HM_NOT_READY, "rank %d: loopback without a dispatch", c->plan.rank);
  void *y = batch->buf[BUF_Y].ptr;
  if (c->plan.tp_rank != 0)
    return hm_engine_memset(c->engine, y, 0, (size_t)batch->out.rows * out_row_bytes(batch), stream);
  return batch->ops->loopback(&batch->rows, batch->buf[BUF_RECV_X].ptr, batch->buf[BUF_RECV_SCALE].ptr,
                              batch->out.rows, y, stream);
}
