/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Micro-batch pipeline: while the experts of micro-batch i run on the caller's stream,
 * micro-batch i+1 is dispatched on the communicator's stream. Two batches alternate;
 * stream waits order only what depends: compute(i) after dispatch(i), combine(i) after
 * compute(i). The host blocks only in dispatch's counts exchange, after compute(i) is
 * queued, so the GPU overlaps the two.
 */
#include "comm.h"

static hm_status ensure_batches(hm_comm *c) {
  for (int i = 0; i < 2; i++)
    if (c->pipe[i] == NULL) HM_CHECK(hm_comm_batch_create(c, &c->pipe[i]));
  return HM_OK;
}

static hm_status check_args(const hm_comm *c, const hm_comm_tokens *tokens, void *const *y, int count,
                            hm_comm_expert_fn fn) {
  HM_CHECK(hm_comm_check_usable(c));
  HM_CHECK_NOT_NULL(fn);
  if (count < 0 || (count > 0 && (tokens == NULL || y == NULL)))
    HM_FAIL(HM_INVALID_ARGUMENT, "rank %d: %d micro-batches need tokens and y", c->plan.rank, count);
  return HM_OK;
}

hm_status hm_comm_run_overlapped(hm_comm *comm, const hm_comm_tokens *tokens, void *const *y, int count,
                                 hm_comm_expert_fn fn, void *user, hm_stream *stream) {
  HM_CHECK(check_args(comm, tokens, y, count, fn));
  if (count == 0) return HM_OK;
  HM_CHECK(ensure_batches(comm));
  hm_stream *side = comm->stream;
  hm_comm_expert_batch eb[2];
  /* The tokens were made on stream. */
  HM_CHECK(hm_stream_wait_stream(side, stream));
  HM_CHECK(hm_comm_dispatch(comm->pipe[0], &tokens[0], side, &eb[0]));
  HM_CHECK(hm_stream_wait_stream(stream, side));
  for (int i = 0; i < count; i++) {
    HM_CHECK(fn(user, i, &eb[i % 2], stream));
    if (i + 1 < count) {
      HM_CHECK(hm_comm_dispatch(comm->pipe[(i + 1) % 2], &tokens[i + 1], side, &eb[(i + 1) % 2]));
      /* Queued before combine(i) joins side, so compute(i+1) does not wait for it. */
      HM_CHECK(hm_stream_wait_stream(stream, side));
    }
    HM_CHECK(hm_stream_wait_stream(side, stream));
    HM_CHECK(hm_comm_combine(comm->pipe[i % 2], y[i], side));
  }
  HM_CHECK(hm_stream_wait_stream(stream, side));
  return HM_OK;
}
