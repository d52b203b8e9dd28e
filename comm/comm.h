/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The communicator, private to comm/. A transport (MPI on the host, NCCL on CUDA) moves
 * bytes between world ranks; everything above it (config check, dispatch, combine, the
 * benchmark) is written once against the transport table.
 */
#ifndef HM_COMM_PRIVATE_H
#define HM_COMM_PRIVATE_H

#include <stdint.h>

#include "check.h"
#include "engine.h"
#include "log.h"

/* One point-to-point transfer with a world rank; zero bytes means nothing to move. */
typedef struct hm_comm_xfer {
  int peer;
  void *buf;
  size_t bytes;
} hm_comm_xfer;

typedef struct hm_transport hm_transport;

struct hm_transport_ops {
  const char *name;
  bool host_memory; /* buffers are host memory (MPI) rather than device memory (NCCL) */
  /*
   * Posts all transfers at once. Transfers with one peer match in posting order on both
   * sides, so both must list them in the same order. The host transport completes them
   * before returning; NCCL queues them on stream (see wait).
   */
  hm_status (*exchange)(hm_transport *t, const hm_comm_xfer *sends, int n_send, const hm_comm_xfer *recvs,
                        int n_recv, hm_stream *stream, const char *what);
  /* Sums buf over the TP group in place: all of it, or only chunk tp_rank (scatter). */
  hm_status (*tp_reduce)(hm_transport *t, void *buf, int64_t count, hm_dtype dtype, bool scatter,
                         hm_stream *stream);
  /* Waits, bounded, until the work queued on stream is done. */
  hm_status (*wait)(hm_transport *t, hm_stream *stream, const char *what);
  /* Stops all communication after a failure so that peers fail too rather than hang. */
  void (*abort)(hm_transport *t);
  void (*destroy)(hm_transport *t);
};

struct hm_transport {
  const struct hm_transport_ops *ops;
  hm_comm *comm;
  void *state;
};

struct hm_comm {
  hm_engine *engine;
  hm_comm_config cfg; /* resolved: ep, tp, block_m, max_m, timeout_s filled in */
  hm_comm_plan plan;
  hm_transport *boot; /* MPI bootstrap; also the data transport on a host engine */
  hm_transport *tr;   /* data transport */
  bool failed;
  char failure[512];
  hm_stream *stream; /* create-time exchanges; the communication stream of the overlap */
  void *stage;       /* engine memory staging host exchanges over NCCL */
  size_t stage_bytes;
  hm_comm_batch *pipe[2]; /* batches of hm_comm_run_overlapped, made on first use */
  char binding[256];
};

/* Seconds since an arbitrary start, monotonic. */
double hm_comm_now(void);
/* Sleeps a little longer each call up to a millisecond: ranks share cores while they wait. */
void hm_comm_backoff(int *spins);

/*
 * Records a failure that leaves the communicator unusable: aborts the transports so the
 * peers fail too, keeps the message for later calls, and keeps MPI from finalizing.
 */
hm_status hm_comm_fail(hm_comm *c, hm_status status, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
#define HM_COMM_FAIL(c, status, ...) return hm_comm_fail((c), (status), __FILE__, __LINE__, __VA_ARGS__)
/* The last error's message alone, without status and source location, to quote in another. */
const char *hm_comm_last_message(hm_status status, char *buf, size_t len);
/* HM_REMOTE naming the first failure when the communicator failed earlier. */
hm_status hm_comm_check_usable(const hm_comm *c);

/*
 * All-gather of bytes from every world rank over t, host memory to host memory (staged
 * through engine memory on stream for NCCL; NULL: the communicator's own stream).
 */
hm_status hm_comm_allgather_host(hm_comm *c, hm_transport *t, const void *mine, void *all, size_t bytes,
                                 hm_stream *stream, const char *what);

/* Transports. */
hm_status hm_transport_mpi_create(hm_comm *c, hm_transport **out);
/* Joins the world communicator (every rank of the id); the TP split follows once the plan is agreed. */
hm_status hm_transport_nccl_create(hm_comm *c, const void *nccl_id, hm_transport **out);
hm_status hm_transport_nccl_split(hm_transport *t);
void hm_transport_destroy(hm_transport *t);

/* MPI bootstrap state (mpi_boot.c): whether MPI is up, and that a failure happened. */
bool hm_comm_mpi_ready(void);
void hm_comm_mpi_world(int *world, int *rank);
void hm_comm_mpi_mark_failed(void);

/* Config check across ranks (config.c). */
hm_status hm_comm_config_resolve(hm_comm *c, const hm_comm_config *in, int world, int rank);
hm_status hm_comm_config_agree(hm_comm *c, hm_transport *t, hm_status local, const char *local_error);

/* Batches with a payload other than the config's (the benchmark runs both). */
hm_status hm_comm_batch_create_payload(hm_comm *c, hm_comm_payload payload, hm_comm_batch **out);
/*
 * Combine up to the rows at their home: TP reduce, gather, exchange. [OUT] rows: rows of
 * the combine dtype, pos: [tokens * top_k] the row of each slot, -1 skipped; both in
 * engine memory, valid until the next dispatch of the batch.
 */
hm_status hm_comm_combine_rows(hm_comm_batch *batch, hm_stream *stream, const void **rows,
                               const int32_t **pos);
/* Bytes this batch's last dispatch and combine sent (benchmark). */
void hm_comm_batch_sent_bytes(const hm_comm_batch *b, double *dispatch_bytes, double *combine_bytes);

/* Row bytes of a payload and of its scales for hidden elements; a wire row is both. */
size_t hm_comm_payload_row_bytes(hm_comm_payload p, int64_t hidden);
size_t hm_comm_scale_row_bytes(hm_comm_payload p, int64_t hidden);
size_t hm_comm_wire_row_bytes(hm_comm_payload p, int64_t hidden);

#endif
