/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Bringing a bench process up and down: MPI (only when launched by mpirun or when
 * --ep/--tp ask for several ranks), the engine on the rank's device, the timing events,
 * the L2 flush buffer and the roofline.
 */
#include <stdio.h>
#include <string.h>

#include <mpi.h>

#include "bench/bench_setup.h"
#include "check.h"
#include "heuristics/device_profile.h"
#include "params.h"

/* Larger than the L2 of every GPU we profile (B200: 126 MiB), so one write evicts it. */
#define FLUSH_BYTES ((size_t)256 << 20)

/* A failed rank ends the job: its peers may already wait in a collective it will never join. */
int hm_bench_fail(const hm_bench *b, const char *what, hm_status st) {
  const char *detail = hm_last_error();
  fprintf(stderr, "humming-moe-bench [rank %d]: %s: %s\n", b->rank, what,
          detail[0] ? detail : hm_status_str(st));
  if (b->world > 1) {
    fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, HM_BENCH_EXIT_FAIL);
  }
  return HM_BENCH_EXIT_FAIL;
}

/* The comm module initializes MPI (and finalizes it in hm_shutdown). */
static int start_mpi(hm_bench *b) {
  b->world = 1;
  if (b->o.mode == HM_MODE_COMM && b->o.ep * b->o.tp == 1) b->o.ep = hm_param_ompi_world_size();
  if (b->o.ep < 1) b->o.ep = 1;
  bool launched = hm_param_ompi_world_size() > 0;
  if (!launched && b->o.ep * b->o.tp == 1 && b->o.mode != HM_MODE_COMM) return 0;
  hm_comm_world world;
  hm_status st = hm_comm_mpi_init(NULL, NULL, &world);
  if (st != HM_OK) return hm_bench_fail(b, "MPI", st);
  b->mpi = true;
  b->rank = world.rank;
  b->world = world.size;
  b->local_rank = world.local_rank;
  /* One rank a GPU each running the whole thing (ep = tp = 1) is a valid job too. */
  if (b->o.ep * b->o.tp != b->world && b->o.ep * b->o.tp != 1) {
    if (b->rank == 0)
      fprintf(stderr,
              "humming-moe-bench: --ep %lld x --tp %lld needs %lld ranks, the job has %d (mpirun -np N)\n",
              (long long)b->o.ep, (long long)b->o.tp, (long long)(b->o.ep * b->o.tp), b->world);
    return HM_BENCH_EXIT_USAGE;
  }
  return 0;
}

static hm_backend_kind backend_kind(const char *name) {
  if (strcmp(name, "host") == 0) return HM_BACKEND_HOST;
  if (strcmp(name, "cuda") == 0) return HM_BACKEND_CUDA;
  return HM_BACKEND_AUTO;
}

/* --roof-* > the H200 numbers we measured > the device profile; none on the host. */
static hm_status choose_roofline(hm_bench *b) {
  hm_roof *r = &b->roof;
  memset(r, 0, sizeof(*r));
  if (!b->cuda) {
    snprintf(r->source, sizeof(r->source), "none on the host backend");
    return HM_OK;
  }
  hm_device_profile p;
  HM_CHECK(hm_device_profile_for_engine(b->engine, &p));
  bool h200 = strcmp(p.name, "h200") == 0;
  double bw_gbs = b->o.roof_bw_tbs > 0 ? b->o.roof_bw_tbs * 1e3 : p.mem_bw_gbs;
  double tf16 = b->o.roof_tflops > 0 ? b->o.roof_tflops : p.tflops_f16;
  double tf8 = p.tflops_fp8 > 0 ? p.tflops_fp8 : p.tflops_int8;
  /* Hopper's 8-bit rate is twice its 16-bit one; keep measured and datasheet numbers consistent. */
  if (b->o.roof_tflops > 0 || tf8 <= 0 || tf8 > 2 * tf16) tf8 = 2 * tf16;
  r->bw_bytes_per_us = bw_gbs * 1e3;
  r->flops_per_us_16 = tf16 * 1e6;
  r->flops_per_us_8 = tf8 * 1e6;
  if (b->o.roof_bw_tbs > 0 || b->o.roof_tflops > 0)
    snprintf(r->source, sizeof(r->source), "--roof-*");
  else
    snprintf(r->source, sizeof(r->source), h200 ? "measured" : "profile %s", p.name);
  return HM_OK;
}

static hm_status start_engine(hm_bench *b) {
  hm_engine_config cfg = HM_ENGINE_CONFIG_INIT;
  cfg.backend = backend_kind(b->o.backend_name);
  cfg.rank = b->world > 1 ? b->rank : -1;
  cfg.local_rank = b->local_rank;
  HM_CHECK(hm_engine_create(&cfg, &b->engine));
  b->cuda = hm_engine_backend(b->engine) == HM_BACKEND_CUDA;
  b->host = b->engine;
  HM_CHECK(hm_stream_create(b->engine, &b->stream));
  b->host_stream = b->stream;
  if (b->cuda) {
    hm_engine_config host_cfg = HM_ENGINE_CONFIG_INIT;
    host_cfg.backend = HM_BACKEND_HOST;
    host_cfg.rank = cfg.rank;
    HM_CHECK(hm_engine_create(&host_cfg, &b->host));
    HM_CHECK(hm_stream_create(b->host, &b->host_stream));
  }
  HM_CHECK(hm_event_create(b->engine, &b->ev_start));
  HM_CHECK(hm_event_create(b->engine, &b->ev_end));
  if (b->cuda && b->o.flush) {
    b->flush_bytes = FLUSH_BYTES;
    HM_CHECK(hm_mem_alloc(b->engine, b->flush_bytes, &b->flush_buf));
  }
  return choose_roofline(b);
}

int hm_bench_start(hm_bench *b) {
  int rc = start_mpi(b);
  if (rc != 0) return rc;
  hm_status st = start_engine(b);
  if (st != HM_OK) return hm_bench_fail(b, "engine", st);
  hm_bench_backend_defaults(&b->o, b->cuda);
  return 0;
}

/* Writes the files rank 0 was asked for; a failed write fails the run. */
static int write_outputs(hm_bench *b) {
  if (b->rank != 0) return 0;
  int rc = 0;
  if (b->o.json_path[0] && !hm_report_write_json(b->report, b->o.json_path)) {
    perror(b->o.json_path);
    rc = HM_BENCH_EXIT_FAIL;
  }
  if (b->o.csv_path[0] && !hm_report_write_csv(b->report, b->o.csv_path)) {
    perror(b->o.csv_path);
    rc = HM_BENCH_EXIT_FAIL;
  }
  return rc;
}

int hm_bench_finish(hm_bench *b, int rc) {
  if (rc == 0 && b->report) rc = write_outputs(b);
  if (b->world > 1) {
    int worst = rc;
    MPI_Allreduce(&rc, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    rc = worst;
  }
  hm_report_destroy(b->report);
  hm_mem_free(b->engine, b->flush_buf);
  hm_event_destroy(b->ev_start);
  hm_event_destroy(b->ev_end);
  if (b->host_stream != b->stream) hm_stream_destroy(b->host_stream);
  hm_stream_destroy(b->stream);
  if (b->host != b->engine) hm_engine_destroy(b->host);
  hm_engine_destroy(b->engine);
  hm_shutdown();
  return rc;
}
