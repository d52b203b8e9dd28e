/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The host transport: non-blocking MPI point-to-point on a private duplicate of
 * MPI_COMM_WORLD, tested in a loop against the deadline so that a dead or hung peer
 * is named instead of waited for. TP reductions are built on the same exchange.
 */
#include <limits.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm.h"
#include "rows.h"

/*
 * One tag for everything: MPI keeps the messages of a pair in order, and both sides of
 * a pair list their transfers in the same order. Tags counted per exchange would drift
 * apart between ranks, since only the ranks concerned take part in a TP reduction.
 */
#define HM_MPI_TAG 0x686d

struct mpi_state {
  MPI_Comm world;
  bool have_world;
};

static MPI_Comm world_of(hm_transport *t) {
  return ((struct mpi_state *)t->state)->world;
}

static hm_status mpi_error(hm_comm *c, int code, const char *what, int peer) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(code, text, &len);
  HM_COMM_FAIL(c, HM_MPI, "rank %d: %s with rank %d failed: %s", c->plan.rank, what, peer, text);
}

/* Names every peer still pending once, e.g. "3 (recv), 5 (send)". */
static void describe_pending(const MPI_Request *reqs, const int *peers, const bool *is_send, int n, char *buf,
                             size_t len) {
  size_t o = 0;
  buf[0] = '\0';
  for (int i = 0; i < n && o + 32 < len; i++) {
    if (reqs[i] == MPI_REQUEST_NULL) continue;
    bool seen = false;
    for (int j = 0; j < i && !seen; j++)
      seen = reqs[j] != MPI_REQUEST_NULL && peers[j] == peers[i] && is_send[j] == is_send[i];
    if (!seen)
      o += (size_t)snprintf(buf + o, len - o, "%s%d (%s)", o ? ", " : "", peers[i],
                            is_send[i] ? "send" : "recv");
  }
}

/* Receives still posted would write into memory freed later: cancel them, then forget all. */
static void drop_pending(MPI_Request *reqs, const bool *is_send, int n) {
  for (int i = 0; i < n; i++) {
    if (reqs[i] == MPI_REQUEST_NULL) continue;
    if (!is_send[i]) MPI_Cancel(&reqs[i]);
    MPI_Request_free(&reqs[i]);
  }
}

/* Tests each request on its own: the one that fails names its peer. */
static hm_status test_each(hm_transport *t, MPI_Request *reqs, const int *peers, const bool *is_send, int n,
                           const char *what, bool *all_done) {
  *all_done = true;
  for (int i = 0; i < n; i++) {
    if (reqs[i] == MPI_REQUEST_NULL) continue;
    int flag = 0;
    int rc = MPI_Test(&reqs[i], &flag, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS) {
      drop_pending(reqs, is_send, n);
      return mpi_error(t->comm, rc, what, peers[i]);
    }
    if (!flag) *all_done = false;
  }
  return HM_OK;
}

static hm_status wait_all(hm_transport *t, MPI_Request *reqs, const int *peers, const bool *is_send, int n,
                          const char *what) {
  hm_comm *c = t->comm;
  double deadline = hm_comm_now() + c->cfg.timeout_s;
  int spins = 0;
  for (;;) {
    bool done = false;
    HM_CHECK(test_each(t, reqs, peers, is_send, n, what, &done));
    if (done) return HM_OK;
    if (hm_comm_now() > deadline) break;
    hm_comm_backoff(&spins);
  }
  char pending[256];
  describe_pending(reqs, peers, is_send, n, pending, sizeof(pending));
  drop_pending(reqs, is_send, n);
  HM_COMM_FAIL(c, HM_TIMEOUT, "rank %d: %s timed out after %d s waiting for rank(s) %s (dead or hung)",
               c->plan.rank, what, c->cfg.timeout_s, pending);
}

/* MPI counts are int: the host transport is for CI-sized runs, and says so when asked more. */
static hm_status check_counts(hm_comm *c, const hm_comm_xfer *x, int n) {
  for (int i = 0; i < n; i++)
    if (x[i].bytes > (size_t)INT_MAX)
      HM_FAIL(HM_UNSUPPORTED,
              "rank %d: host transport moves at most %d bytes per message, %zu asked with rank %d",
              c->plan.rank, INT_MAX, x[i].bytes, x[i].peer);
  return HM_OK;
}

typedef struct requests {
  MPI_Request *reqs;
  int *peers;
  bool *is_send;
  int n;
} requests;

static hm_status post(hm_transport *t, requests *r, const hm_comm_xfer *x, int count, bool send,
                      const char *what) {
  for (int i = 0; i < count; i++) {
    if (x[i].bytes == 0) continue;
    MPI_Request *req = &r->reqs[r->n];
    int rc = send ? MPI_Isend(x[i].buf, (int)x[i].bytes, MPI_BYTE, x[i].peer, HM_MPI_TAG, world_of(t), req)
                  : MPI_Irecv(x[i].buf, (int)x[i].bytes, MPI_BYTE, x[i].peer, HM_MPI_TAG, world_of(t), req);
    if (rc != MPI_SUCCESS) {
      drop_pending(r->reqs, r->is_send, r->n);
      return mpi_error(t->comm, rc, what, x[i].peer);
    }
    r->peers[r->n] = x[i].peer;
    r->is_send[r->n++] = send;
  }
  return HM_OK;
}

static hm_status mpi_exchange(hm_transport *t, const hm_comm_xfer *sends, int n_send,
                              const hm_comm_xfer *recvs, int n_recv, hm_stream *stream, const char *what) {
  (void)stream;
  hm_comm *c = t->comm;
  HM_CHECK(check_counts(c, sends, n_send));
  HM_CHECK(check_counts(c, recvs, n_recv));
  size_t n = (size_t)(n_send + n_recv) + 1;
  requests r = {calloc(n, sizeof(MPI_Request)), calloc(n, sizeof(int)), calloc(n, sizeof(bool)), 0};
  hm_status ret = HM_OK;
  if (r.reqs == NULL || r.peers == NULL || r.is_send == NULL)
    HM_FAIL_GOTO(HM_OUT_OF_MEMORY, done, "%zu MPI requests", n);
  HM_CHECK_GOTO(post(t, &r, recvs, n_recv, false, what), done);
  HM_CHECK_GOTO(post(t, &r, sends, n_send, true, what), done);
  ret = wait_all(t, r.reqs, r.peers, r.is_send, r.n, what);
done:
  free(r.reqs);
  free(r.peers);
  free(r.is_send);
  return ret;
}

/* TP peer q of this rank, as a world rank. */
static int tp_peer(const hm_comm *c, int q) {
  return c->plan.ep_rank * c->plan.tp + q;
}

/*
 * Chunk q of count elements over tp ranks: [lo, hi). Every rank sums the chunk it owns
 * in TP-rank order, so the result is the same on every rank and run.
 */
static void chunk_of(int64_t count, int tp, int q, int64_t *lo, int64_t *hi) {
  *lo = count * q / tp;
  *hi = count * (q + 1) / tp;
}

static hm_status sum_own_chunk(hm_transport *t, void *buf, int64_t count, hm_dtype dtype) {
  hm_comm *c = t->comm;
  int tp = c->plan.tp, me = c->plan.tp_rank;
  size_t elt = dtype == HM_F32 ? 4 : 2;
  int64_t lo, hi;
  chunk_of(count, tp, me, &lo, &hi);
  size_t chunk_bytes = (size_t)(hi - lo) * elt;
  char *parts = malloc(chunk_bytes * (size_t)tp + 1);
  hm_comm_xfer *x = calloc(2 * (size_t)tp, sizeof(*x));
  hm_status ret = HM_OK;
  if (parts == NULL || x == NULL)
    HM_FAIL_GOTO(HM_OUT_OF_MEMORY, done, "TP reduce of %lld elements", (long long)count);
  for (int q = 0; q < tp; q++) {
    int64_t qlo, qhi;
    chunk_of(count, tp, q, &qlo, &qhi);
    x[q] = (hm_comm_xfer){tp_peer(c, q), (char *)buf + (size_t)qlo * elt, (size_t)(qhi - qlo) * elt};
    x[tp + q] = (hm_comm_xfer){tp_peer(c, q), parts + chunk_bytes * (size_t)q, chunk_bytes};
  }
  HM_CHECK_GOTO(mpi_exchange(t, x, tp, x + tp, tp, NULL, "TP reduce-scatter"), done);
  for (int64_t i = 0; i < hi - lo; i++) {
    float s = 0;
    for (int q = 0; q < tp; q++) s += hm_rows_load(dtype, parts + chunk_bytes * (size_t)q, i);
    hm_rows_store(dtype, buf, lo + i, s);
  }
done:
  free(parts);
  free(x);
  return ret;
}

static hm_status share_own_chunk(hm_transport *t, void *buf, int64_t count, hm_dtype dtype) {
  hm_comm *c = t->comm;
  int tp = c->plan.tp, me = c->plan.tp_rank;
  size_t elt = dtype == HM_F32 ? 4 : 2;
  hm_comm_xfer *x = calloc(2 * (size_t)tp, sizeof(*x));
  if (x == NULL) HM_FAIL(HM_OUT_OF_MEMORY, "TP all-gather");
  int64_t lo, hi;
  chunk_of(count, tp, me, &lo, &hi);
  for (int q = 0; q < tp; q++) {
    int64_t qlo, qhi;
    chunk_of(count, tp, q, &qlo, &qhi);
    x[q] =
        (hm_comm_xfer){tp_peer(c, q), (char *)buf + (size_t)lo * elt, q == me ? 0 : (size_t)(hi - lo) * elt};
    x[tp + q] = (hm_comm_xfer){tp_peer(c, q), (char *)buf + (size_t)qlo * elt,
                               q == me ? 0 : (size_t)(qhi - qlo) * elt};
  }
  hm_status ret = mpi_exchange(t, x, tp, x + tp, tp, NULL, "TP all-gather");
  free(x);
  return ret;
}

static hm_status mpi_tp_reduce(hm_transport *t, void *buf, int64_t count, hm_dtype dtype, bool scatter,
                               hm_stream *stream) {
  (void)stream;
  if (t->comm->plan.tp == 1 || count == 0) return HM_OK;
  HM_CHECK(sum_own_chunk(t, buf, count, dtype));
  return scatter ? HM_OK : share_own_chunk(t, buf, count, dtype);
}

static hm_status mpi_wait(hm_transport *t, hm_stream *stream, const char *what) {
  (void)t, (void)what;
  return stream ? hm_stream_synchronize(stream) : HM_OK;
}

/*
 * MPI cannot stop one communicator short of MPI_Abort (the whole job): the requests that
 * timed out were dropped already, and each peer runs into its own deadline.
 */
static void mpi_abort(hm_transport *t) {
  (void)t;
}

static void mpi_destroy(hm_transport *t) {
  struct mpi_state *s = t->state;
  if (s == NULL) return;
  /* Freeing a communicator with requests to a dead peer outstanding can block. */
  if (s->have_world && !t->comm->failed) MPI_Comm_free(&s->world);
  free(s);
}

static const struct hm_transport_ops mpi_ops = {
    .name = "mpi",
    .host_memory = true,
    .exchange = mpi_exchange,
    .tp_reduce = mpi_tp_reduce,
    .wait = mpi_wait,
    .abort = mpi_abort,
    .destroy = mpi_destroy,
};

/* A private duplicate, made without blocking so that a missing rank times out. */
static hm_status dup_world(hm_comm *c, struct mpi_state *s) {
  MPI_Request req;
  int rc = MPI_Comm_idup(MPI_COMM_WORLD, &s->world, &req);
  if (rc != MPI_SUCCESS) return mpi_error(c, rc, "MPI_Comm_idup", 0);
  double deadline = hm_comm_now() + c->cfg.timeout_s;
  int spins = 0, done = 0;
  while (!done) {
    rc = MPI_Test(&req, &done, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS) return mpi_error(c, rc, "MPI_Comm_idup", 0);
    if (done) break;
    if (hm_comm_now() > deadline)
      HM_COMM_FAIL(c, HM_TIMEOUT, "rank %d: not every rank joined the communicator within %d s", c->plan.rank,
                   c->cfg.timeout_s);
    hm_comm_backoff(&spins);
  }
  s->have_world = true;
  MPI_Comm_set_errhandler(s->world, MPI_ERRORS_RETURN);
  return HM_OK;
}

hm_status hm_transport_mpi_create(hm_comm *c, hm_transport **out) {
  if (!hm_comm_mpi_ready()) HM_FAIL(HM_NOT_READY, "MPI is not initialized: call hm_comm_mpi_init first");
  hm_transport *t = calloc(1, sizeof(*t));
  struct mpi_state *s = calloc(1, sizeof(*s));
  hm_status ret = HM_OK;
  if (t == NULL || s == NULL) HM_FAIL_GOTO(HM_OUT_OF_MEMORY, fail, "MPI transport");
  t->ops = &mpi_ops;
  t->comm = c;
  t->state = s;
  HM_CHECK_GOTO(dup_world(c, s), fail);
  *out = t;
  return HM_OK;
fail:
  free(t);
  free(s);
  return ret;
}
