/* SPDX-License-Identifier: Apache-2.0 */
/* Communicator lifetime: bootstrap, config agreement, binding, failure state. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "comm.h"
#include "nccl_lib.h"
#include "params.h"
#include "topo.h"

double hm_comm_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void hm_comm_backoff(int *spins) {
  if (*spins < 1000) (*spins)++;
  long us = *spins < 10 ? 0 : *spins < 100 ? 20 : 1000;
  if (us == 0) return;
  struct timespec ts = {0, us * 1000};
  nanosleep(&ts, NULL);
}

hm_status hm_comm_fail(hm_comm *c, hm_status status, const char *file, int line, const char *fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  if (!c->failed) {
    c->failed = true;
    snprintf(c->failure, sizeof(c->failure), "%s", msg);
    hm_comm_mpi_mark_failed();
    HM_ERROR(COMM, "%s", msg);
    if (c->tr) c->tr->ops->abort(c->tr);
    if (c->boot && c->boot != c->tr) c->boot->ops->abort(c->boot);
  }
  return hm_error_set(status, file, line, "%s", msg);
}

const char *hm_comm_last_message(hm_status status, char *buf, size_t len) {
  const char *text = hm_last_error(), *prefix = hm_status_str(status);
  size_t plen = strlen(prefix);
  if (strncmp(text, prefix, plen) == 0 && strncmp(text + plen, ": ", 2) == 0) text += plen + 2;
  snprintf(buf, len, "%s", text);
  char *where = strrchr(buf, '(');
  if (where && where > buf && where[-1] == ' ' && strchr(where, ':') && buf[strlen(buf) - 1] == ')')
    where[-1] = '\0';
  return buf;
}

hm_status hm_comm_check_usable(const hm_comm *c) {
  HM_CHECK_NOT_NULL(c);
  if (c->failed) HM_FAIL(HM_REMOTE, "rank %d: the communicator failed earlier: %s", c->plan.rank, c->failure);
  return HM_OK;
}

static hm_status stage_reserve(hm_comm *c, size_t bytes) {
  if (c->stage_bytes >= bytes) return HM_OK;
  hm_mem_free(c->engine, c->stage);
  c->stage = NULL;
  c->stage_bytes = 0;
  HM_CHECK(hm_mem_alloc(c->engine, bytes, &c->stage));
  c->stage_bytes = bytes;
  return HM_OK;
}

/* Device transports move engine memory: the host bytes go through a staging buffer. */
static hm_status allgather_staged(hm_comm *c, hm_transport *t, const void *mine, void *all, size_t bytes,
                                  hm_comm_xfer *x, hm_stream *stream, const char *what) {
  int world = c->plan.world;
  HM_CHECK(stage_reserve(c, bytes * (size_t)(world + 1)));
  char *stage = c->stage;
  HM_CHECK(hm_engine_copy(c->engine, stage, mine, bytes, HM_COPY_H2D, stream));
  for (int p = 0; p < world; p++) {
    x[p] = (hm_comm_xfer){p, stage, bytes};
    x[world + p] = (hm_comm_xfer){p, stage + bytes * (size_t)(p + 1), bytes};
  }
  HM_CHECK(t->ops->exchange(t, x, world, x + world, world, stream, what));
  /* Wait with the deadline first: a copy into pageable memory would block without one. */
  HM_CHECK(t->ops->wait(t, stream, what));
  return hm_engine_copy(c->engine, all, stage + bytes, bytes * (size_t)world, HM_COPY_D2H, NULL);
}

hm_status hm_comm_allgather_host(hm_comm *c, hm_transport *t, const void *mine, void *all, size_t bytes,
                                 hm_stream *stream, const char *what) {
  int world = c->plan.world;
  hm_comm_xfer *x = calloc(2 * (size_t)world, sizeof(*x));
  if (x == NULL) HM_FAIL(HM_OUT_OF_MEMORY, "%s", what);
  hm_status ret;
  if (!t->ops->host_memory) {
    ret = allgather_staged(c, t, mine, all, bytes, x, stream ? stream : c->stream, what);
  } else {
    for (int p = 0; p < world; p++) {
      x[p] = (hm_comm_xfer){p, (void *)mine, bytes};
      x[world + p] = (hm_comm_xfer){p, (char *)all + bytes * (size_t)p, bytes};
    }
    ret = t->ops->exchange(t, x, world, x + world, world, NULL, what);
  }
  free(x);
  return ret;
}

void hm_transport_destroy(hm_transport *t) {
  if (t == NULL) return;
  t->ops->destroy(t);
  free(t);
}

static hm_status comm_alloc(hm_engine *engine, const hm_comm_config *config, hm_comm **out) {
  HM_CHECK_NOT_NULL(out);
  *out = NULL;
  HM_CHECK_NOT_NULL(engine);
  HM_CHECK_NOT_NULL(config);
  hm_comm *c = calloc(1, sizeof(*c));
  if (c == NULL) HM_FAIL(HM_OUT_OF_MEMORY, "communicator");
  c->engine = engine;
  /* Bootstrap exchanges already need a deadline, before the config is checked. */
  c->cfg.timeout_s = (int)hm_param_comm_timeout();
  if (config->magic == HM_COMM_CONFIG_MAGIC && config->timeout_s > 0) c->cfg.timeout_s = config->timeout_s;
  hm_status ret = hm_stream_create(engine, &c->stream);
  if (ret != HM_OK) {
    free(c);
    return ret;
  }
  *out = c;
  return HM_OK;
}

/* Binding is best effort: a rank that cannot bind still runs, and says so. */
static void bind_near_gpu(hm_comm *c, const hm_comm_config *config) {
  hm_binding b;
  hm_status st;
  const char *bus = c->engine->kind == HM_BACKEND_CUDA ? c->engine->pci_bus_id : "";
  if (!config->bind) {
    snprintf(c->binding, sizeof(c->binding), "rank %d binding off", c->plan.rank);
  } else if ((st = hm_topo_bind(config->topology, bus, true, &b)) != HM_OK) {
    char text[192];
    snprintf(c->binding, sizeof(c->binding), "rank %d not bound: %s", c->plan.rank,
             hm_comm_last_message(st, text, sizeof(text)));
  } else {
    hm_topo_describe(&b, c->plan.rank, c->engine->kind == HM_BACKEND_CUDA ? c->engine->device : -1,
                     c->binding, sizeof(c->binding));
  }
  HM_INFO(COMM, "%s", c->binding);
}

/* Checks that NCCL loads before the ranks agree, so a rank without it fails them all. */
static hm_status local_check(hm_comm *c, const hm_comm_config *config, int world, int rank, char *error,
                             size_t len) {
  hm_status st = hm_comm_config_resolve(c, config, world, rank);
  if (st == HM_OK && c->engine->kind == HM_BACKEND_CUDA) st = hm_nccl_load();
  if (st != HM_OK) hm_comm_last_message(st, error, len);
  return st;
}

/* Rank 0's NCCL id (or the reason it has none) for every rank, over the MPI bootstrap. */
static hm_status share_nccl_id(hm_comm *c, hm_comm_nccl_id *id) {
  struct {
    int32_t status;
    hm_comm_nccl_id id;
    char error[256];
  } mine = {0}, *all = calloc((size_t)c->plan.world, sizeof(mine));
  if (all == NULL) HM_FAIL(HM_OUT_OF_MEMORY, "NCCL id exchange");
  if (c->plan.rank == 0) {
    mine.status = (int32_t)hm_comm_nccl_id_create(&mine.id);
    if (mine.status != HM_OK) hm_comm_last_message((hm_status)mine.status, mine.error, sizeof(mine.error));
  }
  hm_status ret = hm_comm_allgather_host(c, c->boot, &mine, all, sizeof(mine), NULL, "NCCL id broadcast");
  if (ret == HM_OK && all[0].status != HM_OK)
    HM_FAIL_GOTO(HM_REMOTE, done, "rank 0 could not make an NCCL id: %s", all[0].error);
  if (ret == HM_OK) *id = all[0].id;
done:
  free(all);
  return ret;
}

static void finish_create(hm_comm *c, const hm_comm_config *config) {
  bind_near_gpu(c, config);
  HM_INFO(COMM, "rank %d of %d: EP %d x TP %d, experts [%lld, %lld), intermediate [%lld, %lld), %s transport",
          c->plan.rank, c->plan.world, c->plan.ep, c->plan.tp, (long long)c->plan.first_expert,
          (long long)(c->plan.first_expert + c->plan.local_experts), (long long)c->plan.first_intermediate,
          (long long)(c->plan.first_intermediate + c->plan.local_intermediate), c->tr->ops->name);
}

hm_status hm_comm_create_mpi(hm_engine *engine, const hm_comm_config *config, hm_comm **out) {
  HM_CHECK(comm_alloc(engine, config, out));
  hm_comm *c = *out;
  *out = NULL;
  hm_status ret = HM_OK;
  int world = 0, rank = 0;
  hm_comm_mpi_world(&world, &rank);
  c->plan.world = world;
  c->plan.rank = rank;
  HM_CHECK_GOTO(hm_transport_mpi_create(c, &c->boot), fail);
  char error[256] = "";
  hm_status local = local_check(c, config, world, rank, error, sizeof(error));
  HM_CHECK_GOTO(hm_comm_config_agree(c, c->boot, local, error), fail);
  if (engine->kind == HM_BACKEND_CUDA) {
    hm_comm_nccl_id id;
    HM_CHECK_GOTO(share_nccl_id(c, &id), fail);
    HM_CHECK_GOTO(hm_transport_nccl_create(c, &id, &c->tr), fail);
    HM_CHECK_GOTO(hm_transport_nccl_split(c->tr), fail);
  } else {
    c->tr = c->boot;
  }
  finish_create(c, config);
  *out = c;
  return HM_OK;
fail:
  hm_comm_destroy(c);
  return ret;
}

hm_status hm_comm_nccl_id_create(hm_comm_nccl_id *out) {
  HM_CHECK_NOT_NULL(out);
  HM_CHECK(hm_nccl_load());
  ncclUniqueId id;
  ncclResult_t r = hm_nccl.ncclGetUniqueId(&id);
  if (r != ncclSuccess) return hm_nccl_fail(r, NULL, "ncclGetUniqueId", __FILE__, __LINE__);
  memcpy(out->internal, id.internal, sizeof(out->internal));
  return HM_OK;
}

hm_status hm_comm_create_nccl(hm_engine *engine, const hm_comm_config *config, const hm_comm_nccl_id *id,
                              int rank, int size, hm_comm **out) {
  HM_CHECK_NOT_NULL(out);
  *out = NULL;
  HM_CHECK_NOT_NULL(id);
  if (size < 1 || rank < 0 || rank >= size) HM_FAIL(HM_INVALID_ARGUMENT, "rank %d of %d ranks", rank, size);
  if (engine && engine->kind != HM_BACKEND_CUDA)
    HM_FAIL(HM_UNSUPPORTED, "rank %d: an NCCL communicator needs a CUDA engine, this one is %s", rank,
            engine->ops->name);
  HM_CHECK(comm_alloc(engine, config, out));
  hm_comm *c = *out;
  *out = NULL;
  c->plan.world = size;
  c->plan.rank = rank;
  hm_status ret = HM_OK;
  char error[256] = "";
  hm_status local = local_check(c, config, size, rank, error, sizeof(error));
  /*
   * Without MPI the ranks can compare configs only once NCCL connects them, so a rank
   * whose own check failed still joins (world only; the TP split needs a valid plan).
   */
  HM_CHECK_GOTO(hm_transport_nccl_create(c, id, &c->tr), fail);
  HM_CHECK_GOTO(hm_comm_config_agree(c, c->tr, local, error), fail);
  HM_CHECK_GOTO(hm_transport_nccl_split(c->tr), fail);
  finish_create(c, config);
  *out = c;
  return HM_OK;
fail:
  hm_comm_destroy(c);
  return ret;
}

void hm_comm_destroy(hm_comm *comm) {
  if (comm == NULL) return;
  /* The pipeline's batches may still be read by work on the communicator's stream. */
  if (comm->tr && !comm->failed) comm->tr->ops->wait(comm->tr, comm->stream, "communicator teardown");
  for (int i = 0; i < 2; i++) hm_comm_batch_destroy(comm->pipe[i]);
  if (comm->tr != comm->boot) hm_transport_destroy(comm->tr);
  hm_transport_destroy(comm->boot);
  hm_mem_free(comm->engine, comm->stage);
  hm_stream_destroy(comm->stream);
  free(comm);
}

hm_status hm_comm_get_plan(const hm_comm *comm, hm_comm_plan *out) {
  HM_CHECK_NOT_NULL(comm);
  HM_CHECK_NOT_NULL(out);
  *out = comm->plan;
  return HM_OK;
}

const char *hm_comm_binding(const hm_comm *comm) {
  return comm ? comm->binding : "";
}

hm_status hm_comm_synchronize(hm_comm *comm, hm_stream *stream) {
  HM_CHECK(hm_comm_check_usable(comm));
  return comm->tr->ops->wait(comm->tr, stream, "synchronize");
}

static hm_status check_tp_args(const hm_comm *c, const void *buf, int64_t count, hm_dtype dtype,
                               bool scatter) {
  HM_CHECK(hm_comm_check_usable(c));
  if (count < 0 || (count > 0 && buf == NULL))
    HM_FAIL(HM_INVALID_ARGUMENT, "rank %d: TP reduce of %lld elements at %p", c->plan.rank, (long long)count,
            buf);
  if (dtype != HM_BF16 && dtype != HM_F32)
    HM_FAIL(HM_INVALID_ARGUMENT, "rank %d: TP reduce of %s: expected bf16 or f32", c->plan.rank,
            hm_dtype_name(dtype));
  if (scatter && count % c->plan.tp)
    HM_FAIL(HM_INVALID_ARGUMENT, "rank %d: reduce-scatter of %lld elements is not divisible by TP %d",
            c->plan.rank, (long long)count, c->plan.tp);
  return HM_OK;
}

hm_status hm_comm_tp_all_reduce(hm_comm *comm, void *buf, int64_t count, hm_dtype dtype, hm_stream *stream) {
  HM_CHECK(check_tp_args(comm, buf, count, dtype, false));
  return comm->tr->ops->tp_reduce(comm->tr, buf, count, dtype, false, stream);
}

hm_status hm_comm_tp_reduce_scatter(hm_comm *comm, void *buf, int64_t count, hm_dtype dtype,
                                    hm_stream *stream) {
  HM_CHECK(check_tp_args(comm, buf, count, dtype, true));
  return comm->tr->ops->tp_reduce(comm->tr, buf, count, dtype, true, stream);
}
