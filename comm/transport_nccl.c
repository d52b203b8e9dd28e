/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The device transport: NCCL communicators made non-blocking (blocking = 0), so every
 * call returns at once and the host polls ncclCommGetAsyncError and the stream against
 * the deadline; on timeout the communicators are aborted, which also stops the NCCL
 * kernels still waiting on the GPU for a peer that will never come.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm.h"
#include "cuda_driver.h"
#include "nccl_lib.h"

struct nccl_state {
  ncclComm_t world;
  ncclComm_t tp; /* NULL when tp == 1 */
  CUevent epoch; /* recorded and complete at create: the reference of completion queries */
  CUevent done;
};

static struct nccl_state *state_of(hm_transport *t) {
  return t->state;
}

static hm_status make_current(hm_comm *c) {
  HM_CU_CHECK(cuCtxSetCurrent((CUcontext)c->engine->backend_state));
  return HM_OK;
}

static hm_status nccl_comm_fail(hm_transport *t, ncclResult_t r, ncclComm_t comm, const char *what) {
  char detail[768];
  hm_comm_last_message(hm_nccl_fail(r, comm, what, __FILE__, __LINE__), detail, sizeof(detail));
  HM_COMM_FAIL(t->comm, r == ncclRemoteError ? HM_REMOTE : HM_NCCL, "rank %d: %s", t->comm->plan.rank,
               detail);
}

/* Waits until comm has finished its last non-blocking call. */
static hm_status settle(hm_transport *t, ncclComm_t comm, const char *what, double deadline) {
  int spins = 0;
  for (;;) {
    ncclResult_t state = ncclInProgress;
    ncclResult_t r = hm_nccl.ncclCommGetAsyncError(comm, &state);
    if (r != ncclSuccess) return nccl_comm_fail(t, r, comm, what);
    if (state == ncclSuccess) return HM_OK;
    if (state != ncclInProgress) return nccl_comm_fail(t, state, comm, what);
    if (hm_comm_now() > deadline)
      HM_COMM_FAIL(t->comm, HM_TIMEOUT,
                   "rank %d: %s did not finish within %d s (a peer is dead or hung); NCCL aborted",
                   t->comm->plan.rank, what, t->comm->cfg.timeout_s);
    hm_comm_backoff(&spins);
  }
}

/* A peer's failure reaches us as an asynchronous error on either communicator. */
static hm_status check_async(hm_transport *t, const char *what) {
  struct nccl_state *s = state_of(t);
  ncclComm_t comms[2] = {s->world, s->tp};
  for (int i = 0; i < 2; i++) {
    if (comms[i] == NULL) continue;
    ncclResult_t state = ncclSuccess;
    ncclResult_t r = hm_nccl.ncclCommGetAsyncError(comms[i], &state);
    if (r != ncclSuccess) return nccl_comm_fail(t, r, comms[i], what);
    if (state != ncclSuccess && state != ncclInProgress) return nccl_comm_fail(t, state, comms[i], what);
  }
  return HM_OK;
}

static hm_status end_group(hm_transport *t, ncclResult_t first, ncclComm_t comm, const char *what) {
  ncclResult_t r = hm_nccl.ncclGroupEnd();
  if (first != ncclSuccess) return nccl_comm_fail(t, first, comm, what);
  if (r != ncclSuccess && r != ncclInProgress) return nccl_comm_fail(t, r, comm, what);
  return settle(t, comm, what, hm_comm_now() + t->comm->cfg.timeout_s);
}

/*
 * What a rank sends itself is a device copy on the stream, not an NCCL send/recv pair:
 * with one rank (or a self-only exchange) no NCCL kernel runs at all. Transfers with one
 * peer match in order, so the k-th self send lands in the k-th self receive.
 */
static hm_status copy_to_self(hm_transport *t, const hm_comm_xfer *sends, int n_send,
                              const hm_comm_xfer *recvs, int n_recv, hm_stream *stream, const char *what,
                              bool *others) {
  hm_comm *c = t->comm;
  int me = c->plan.rank, j = 0;
  *others = false;
  for (int i = 0; i < n_send; i++) {
    if (sends[i].bytes == 0) continue;
    if (sends[i].peer != me) {
      *others = true;
      continue;
    }
    while (j < n_recv && (recvs[j].peer != me || recvs[j].bytes == 0)) j++;
    if (j == n_recv || recvs[j].bytes != sends[i].bytes)
      HM_FAIL(HM_INTERNAL, "rank %d: %s sends itself %zu bytes that no receive of the same size takes", me,
              what, sends[i].bytes);
    HM_CHECK(hm_engine_copy(c->engine, recvs[j++].buf, sends[i].buf, sends[i].bytes, HM_COPY_D2D, stream));
  }
  for (int i = 0; i < n_recv; i++) *others |= recvs[i].bytes > 0 && recvs[i].peer != me;
  return HM_OK;
}

static hm_status nccl_exchange(hm_transport *t, const hm_comm_xfer *sends, int n_send,
                               const hm_comm_xfer *recvs, int n_recv, hm_stream *stream, const char *what) {
  HM_CHECK(make_current(t->comm));
  struct nccl_state *s = state_of(t);
  bool others = false;
  HM_CHECK(copy_to_self(t, sends, n_send, recvs, n_recv, stream, what, &others));
  if (!others) return HM_OK;
  cudaStream_t st = (cudaStream_t)hm_stream_native(stream);
  int me = t->comm->plan.rank;
  ncclResult_t r = hm_nccl.ncclGroupStart();
  if (r != ncclSuccess) return nccl_comm_fail(t, r, s->world, what);
  ncclResult_t first = ncclSuccess;
  for (int i = 0; i < n_recv && first == ncclSuccess; i++)
    if (recvs[i].bytes && recvs[i].peer != me)
      first = hm_nccl.ncclRecv(recvs[i].buf, recvs[i].bytes, ncclInt8, recvs[i].peer, s->world, st);
  for (int i = 0; i < n_send && first == ncclSuccess; i++)
    if (sends[i].bytes && sends[i].peer != me)
      first = hm_nccl.ncclSend(sends[i].buf, sends[i].bytes, ncclInt8, sends[i].peer, s->world, st);
  if (first == ncclInProgress) first = ncclSuccess;
  return end_group(t, first, s->world, what);
}

static hm_status nccl_tp_reduce(hm_transport *t, void *buf, int64_t count, hm_dtype dtype, bool scatter,
                                hm_stream *stream) {
  hm_comm *c = t->comm;
  if (c->plan.tp == 1 || count == 0) return HM_OK;
  HM_CHECK(make_current(c));
  struct nccl_state *s = state_of(t);
  cudaStream_t st = (cudaStream_t)hm_stream_native(stream);
  ncclDataType_t type = dtype == HM_F32 ? ncclFloat32 : ncclBfloat16;
  size_t elt = dtype == HM_F32 ? 4 : 2;
  const char *what = scatter ? "TP reduce-scatter" : "TP all-reduce";
  ncclResult_t r;
  if (scatter) {
    size_t chunk = (size_t)count / (size_t)c->plan.tp;
    void *mine = (char *)buf + chunk * elt * (size_t)c->plan.tp_rank;
    r = hm_nccl.ncclReduceScatter(buf, mine, chunk, type, ncclSum, s->tp, st);
  } else {
    r = hm_nccl.ncclAllReduce(buf, buf, (size_t)count, type, ncclSum, s->tp, st);
  }
  if (r != ncclSuccess && r != ncclInProgress) return nccl_comm_fail(t, r, s->tp, what);
  return settle(t, s->tp, what, hm_comm_now() + c->cfg.timeout_s);
}

/*
 * cuEventElapsedTime doubles as a non-blocking completion query: it answers NOT_READY
 * until the later event is done, and needs no driver entry beyond the engine's table.
 */
static hm_status nccl_wait(hm_transport *t, hm_stream *stream, const char *what) {
  hm_comm *c = t->comm;
  HM_CHECK(make_current(c));
  struct nccl_state *s = state_of(t);
  HM_CU_CHECK(cuEventRecord(s->done, (CUstream)hm_stream_native(stream)));
  double deadline = hm_comm_now() + c->cfg.timeout_s;
  int spins = 0;
  for (;;) {
    float ms = 0;
    CUresult r = hm_cu.cuEventElapsedTime(&ms, s->epoch, s->done);
    if (r == CUDA_SUCCESS) return HM_OK;
    if (r != CUDA_ERROR_NOT_READY) {
      char text[256];
      hm_comm_last_message(hm_cu_fail(r, "cuEventElapsedTime", __FILE__, __LINE__), text, sizeof(text));
      HM_COMM_FAIL(c, HM_CUDA, "rank %d: %s: %s", c->plan.rank, what, text);
    }
    HM_CHECK(check_async(t, what));
    if (hm_comm_now() > deadline)
      HM_COMM_FAIL(c, HM_TIMEOUT,
                   "rank %d: %s did not finish within %d s (a peer is dead or hung); NCCL aborted",
                   c->plan.rank, what, c->cfg.timeout_s);
    hm_comm_backoff(&spins);
  }
}

static void nccl_abort(hm_transport *t) {
  struct nccl_state *s = state_of(t);
  if (s == NULL || make_current(t->comm) != HM_OK) return;
  if (s->tp) hm_nccl.ncclCommAbort(s->tp);
  if (s->world) hm_nccl.ncclCommAbort(s->world);
  s->tp = NULL;
  s->world = NULL;
}

/* Finalize flushes outstanding work; a communicator that cannot is aborted instead. */
static void close_comm(hm_transport *t, ncclComm_t comm) {
  double deadline = hm_comm_now() + t->comm->cfg.timeout_s;
  ncclResult_t r = hm_nccl.ncclCommFinalize(comm);
  ncclResult_t state = r;
  int spins = 0;
  while (r == ncclSuccess || r == ncclInProgress) {
    if (hm_nccl.ncclCommGetAsyncError(comm, &state) != ncclSuccess || state != ncclInProgress) break;
    if (hm_comm_now() > deadline) break;
    hm_comm_backoff(&spins);
  }
  if (state == ncclSuccess)
    hm_nccl.ncclCommDestroy(comm);
  else
    hm_nccl.ncclCommAbort(comm);
}

static void nccl_destroy(hm_transport *t) {
  struct nccl_state *s = state_of(t);
  if (s == NULL) return;
  if (make_current(t->comm) == HM_OK) {
    if (s->tp) close_comm(t, s->tp);
    if (s->world) close_comm(t, s->world);
    if (s->done) hm_cu.cuEventDestroy(s->done);
    if (s->epoch) hm_cu.cuEventDestroy(s->epoch);
  }
  free(s);
}

static const struct hm_transport_ops nccl_ops = {
    .name = "nccl",
    .host_memory = false,
    .exchange = nccl_exchange,
    .tp_reduce = nccl_tp_reduce,
    .wait = nccl_wait,
    .abort = nccl_abort,
    .destroy = nccl_destroy,
};

static hm_status init_world(hm_transport *t, const void *nccl_id) {
  hm_comm *c = t->comm;
  struct nccl_state *s = state_of(t);
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclUniqueId id;
  memcpy(&id, nccl_id, sizeof(id));
  ncclResult_t r = hm_nccl.ncclCommInitRankConfig(&s->world, c->plan.world, id, c->plan.rank, &config);
  if (r != ncclSuccess && r != ncclInProgress)
    return nccl_comm_fail(t, r, s->world, "ncclCommInitRankConfig");
  return settle(t, s->world, "NCCL init (every rank must join)", hm_comm_now() + c->cfg.timeout_s);
}

hm_status hm_transport_nccl_split(hm_transport *t) {
  hm_comm *c = t->comm;
  struct nccl_state *s = state_of(t);
  if (c->plan.tp == 1) return HM_OK;
  HM_CHECK(make_current(c));
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  /* TP peers share an EP rank; their order in the split is their TP rank. */
  ncclResult_t r = hm_nccl.ncclCommSplit(s->world, c->plan.ep_rank, c->plan.tp_rank, &s->tp, &config);
  if (r != ncclSuccess && r != ncclInProgress) return nccl_comm_fail(t, r, s->world, "ncclCommSplit");
  return settle(t, s->tp ? s->tp : s->world, "NCCL TP split", hm_comm_now() + c->cfg.timeout_s);
}

static hm_status make_events(hm_transport *t) {
  struct nccl_state *s = state_of(t);
  HM_CU_CHECK(cuEventCreate(&s->epoch, CU_EVENT_DEFAULT));
  HM_CU_CHECK(cuEventCreate(&s->done, CU_EVENT_DEFAULT));
  HM_CU_CHECK(cuEventRecord(s->epoch, (CUstream)hm_stream_native(t->comm->stream)));
  HM_CU_CHECK(cuEventSynchronize(s->epoch));
  return HM_OK;
}

hm_status hm_transport_nccl_create(hm_comm *c, const void *nccl_id, hm_transport **out) {
  HM_CHECK(hm_nccl_load());
  HM_CHECK(make_current(c));
  hm_transport *t = calloc(1, sizeof(*t));
  struct nccl_state *s = calloc(1, sizeof(*s));
  hm_status ret = HM_OK;
  if (t == NULL || s == NULL) {
    free(t);
    free(s);
    HM_FAIL(HM_OUT_OF_MEMORY, "NCCL transport");
  }
  t->ops = &nccl_ops;
  t->comm = c;
  t->state = s;
  c->tr = t; /* a failure below aborts through the communicator */
  HM_CHECK_GOTO(make_events(t), fail);
  HM_CHECK_GOTO(init_world(t, nccl_id), fail);
  *out = t;
  return HM_OK;
fail:
  c->tr = NULL;
  nccl_abort(t);
  nccl_destroy(t);
  free(t);
  return ret;
}
