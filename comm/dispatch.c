/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Dispatch and combine of one micro-batch: the counts exchange (bounded, on the host),
 * the routing plan, then the row exchanges queued on the caller's stream.
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
  BUF_SEND_X,
  BUF_SEND_SCALE,
  BUF_RECV_X,
  BUF_RECV_SCALE,
  BUF_Y,
  BUF_BACK,
  BUF_SRC,
  BUF_SLOT,
  BUF_OFFSETS,
  BUF_COUNTS,
  BUF_COUNT
};

struct hm_comm_batch {
  hm_comm *comm;
  hm_rows_ctx rows;
  const struct hm_rows_ops *ops;
  struct hm_route route;
  hm_buf buf[BUF_COUNT];
  hm_comm_xfer *xfers;
  int xfer_cap;
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

static size_t out_row_bytes(const hm_comm_batch *b) {
  return (size_t)b->rows.hidden * (b->rows.out == HM_F32 ? 4 : 2);
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
  b->comm = c;
  b->rows = (hm_rows_ctx){c->engine, payload, c->cfg.combine_dtype, c->cfg.hidden, c->cfg.top_k, {NULL}};
  b->ops = c->engine->kind == HM_BACKEND_CUDA ? &hm_rows_cuda_ops : &hm_rows_host_ops;
  hm_status ret = hm_route_init(&b->route, c);
  if (ret != HM_OK) {
    free(b);
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
  size_t n_send = (size_t)r->n_send, rows = (size_t)hm_route_my_rows(r);
  size_t need[BUF_COUNT] = {
      [BUF_SEND_X] = n_send * prb,
      [BUF_SEND_SCALE] = n_send * srb,
      [BUF_RECV_X] = rows * prb,
      [BUF_RECV_SCALE] = rows * srb,
      [BUF_Y] = (size_t)hm_route_padded_rows(r, r->ep_rank) * out_row_bytes(b),
      [BUF_BACK] = n_send * out_row_bytes(b),
      [BUF_SRC] = n_send * sizeof(int32_t),
      [BUF_SLOT] = (size_t)(r->tokens * r->top_k) * sizeof(int32_t),
      [BUF_OFFSETS] = (size_t)(r->local_experts + 1) * sizeof(int32_t),
      [BUF_COUNTS] = (size_t)r->local_experts * sizeof(int32_t),
  };
  return reserve(b, need, stream);
}

static hm_status upload_plan(hm_comm_batch *b, hm_stream *stream) {
  const struct hm_route *r = &b->route;
  hm_engine *e = b->comm->engine;
  HM_CHECK(hm_engine_copy(e, b->buf[BUF_SRC].ptr, r->send_src, (size_t)r->n_send * 4, HM_COPY_H2D, stream));
  HM_CHECK(hm_engine_copy(e, b->buf[BUF_SLOT].ptr, r->slot_pos, (size_t)(r->tokens * r->top_k) * 4,
                          HM_COPY_H2D, stream));
  HM_CHECK(hm_engine_copy(e, b->buf[BUF_OFFSETS].ptr, r->offsets, (size_t)(r->local_experts + 1) * 4,
                          HM_COPY_H2D, stream));
  return hm_engine_copy(e, b->buf[BUF_COUNTS].ptr, r->expert_counts, (size_t)r->local_experts * 4,
                        HM_COPY_H2D, stream);
}

static hm_status reserve_xfers(hm_comm_batch *b, int n) {
  if (n <= b->xfer_cap) return HM_OK;
  hm_comm_xfer *x = realloc(b->xfers, (size_t)n * sizeof(*x));
  if (x == NULL) HM_FAIL(HM_OUT_OF_MEMORY, "%d transfers", n);
  b->xfers = x;
  b->xfer_cap = n;
  return HM_OK;
}

/* Appends one transfer per piece over a buffer of row_bytes rows; returns the bytes. */
static double add_xfers(hm_comm_xfer *x, int *n, const hm_pieces *p, void *base, size_t row_bytes) {
  double bytes = 0;
  if (row_bytes == 0) return 0;
  for (int i = 0; i < p->n; i++) {
    x[(*n)++] = (hm_comm_xfer){p->v[i].peer, (char *)base + (size_t)p->v[i].row * row_bytes,
                               (size_t)p->v[i].rows * row_bytes};
    bytes += (double)p->v[i].rows * (double)row_bytes;
  }
  return bytes;
}

/* Rows, then scales: per peer, both sides list them in the same order. */
static hm_status exchange_rows(hm_comm_batch *b, const hm_pieces *send, const hm_pieces *recv, int bufs[4],
                               const size_t row_bytes[2], hm_stream *stream, const char *what, double *sent) {
  HM_CHECK(reserve_xfers(b, 2 * (send->n + recv->n)));
  hm_comm_xfer *sx = b->xfers, *rx = b->xfers + 2 * send->n;
  int ns = 0, nr = 0;
  *sent = 0;
  for (int k = 0; k < 2; k++) {
    *sent += add_xfers(sx, &ns, send, b->buf[bufs[2 * k]].ptr, row_bytes[k]);
    add_xfers(rx, &nr, recv, b->buf[bufs[2 * k + 1]].ptr, row_bytes[k]);
  }
  hm_transport *t = b->comm->tr;
  return t->ops->exchange(t, sx, ns, rx, nr, stream, what);
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
      .expert_offsets = b->buf[BUF_OFFSETS].ptr,
      .expert_counts = b->buf[BUF_COUNTS].ptr,
      .host_expert_offsets = r->offsets,
      .host_expert_counts = r->expert_counts,
      .y = b->buf[BUF_Y].ptr,
  };
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
  HM_CHECK(fetch_ids(batch, tokens, stream));
  hm_route_local(r, tokens->count);
  HM_CHECK(
      hm_comm_allgather_host(c, c->tr, r->msg, r->counts, hm_route_msg_bytes(r), stream, "dispatch counts"));
  HM_CHECK(hm_route_global(r));
  HM_CHECK(reserve_for_route(batch, stream));
  HM_CHECK(upload_plan(batch, stream));
  HM_CHECK(batch->ops->pack(&batch->rows, tokens->x, batch->buf[BUF_SRC].ptr, r->n_send,
                            batch->buf[BUF_SEND_X].ptr, batch->buf[BUF_SEND_SCALE].ptr, stream));
  int bufs[4] = {BUF_SEND_X, BUF_RECV_X, BUF_SEND_SCALE, BUF_RECV_SCALE};
  size_t row_bytes[2] = {hm_comm_payload_row_bytes(batch->rows.payload, batch->rows.hidden),
                         hm_comm_scale_row_bytes(batch->rows.payload, batch->rows.hidden)};
  HM_CHECK(exchange_rows(batch, &r->dispatch_send, &r->dispatch_recv, bufs, row_bytes, stream, "dispatch",
                         &batch->dispatch_bytes));
  batch->weights = tokens->topk_weights;
  batch->dispatched = true;
  fill_out(batch);
  *out = batch->out;
  return HM_OK;
}

hm_status hm_comm_combine(hm_comm_batch *batch, void *y, hm_stream *stream) {
  HM_CHECK_NOT_NULL(batch);
  hm_comm *c = batch->comm;
  HM_CHECK(hm_comm_check_usable(c));
  struct hm_route *r = &batch->route;
  if (!batch->dispatched)
    HM_FAIL(HM_NOT_READY, "rank %d: combine without a dispatch before it", c->plan.rank);
  if (y == NULL && r->tokens > 0) HM_FAIL(HM_INVALID_ARGUMENT, "rank %d: y must not be NULL", c->plan.rank);
  int64_t padded = hm_route_padded_rows(r, r->ep_rank);
  HM_CHECK(c->tr->ops->tp_reduce(c->tr, batch->buf[BUF_Y].ptr, padded * batch->rows.hidden, batch->rows.out,
                                 true, stream));
  int bufs[4] = {BUF_Y, BUF_BACK, BUF_Y, BUF_BACK};
  size_t row_bytes[2] = {out_row_bytes(batch), 0};
  HM_CHECK(exchange_rows(batch, &r->combine_send, &r->combine_recv, bufs, row_bytes, stream, "combine",
                         &batch->combine_bytes));
  HM_CHECK(batch->ops->combine(&batch->rows, batch->buf[BUF_BACK].ptr, batch->buf[BUF_SLOT].ptr,
                               batch->weights, r->tokens, y, stream));
  batch->dispatched = false;
  return HM_OK;
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
