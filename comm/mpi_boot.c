/* SPDX-License-Identifier: Apache-2.0 */
/* MPI start-up for one worker per GPU: init, node-local rank, finalize at hm_shutdown. */
#include <mpi.h>
#include <pthread.h>

#include "comm.h"
#include "registry.h"

/* Process-wide because MPI is: one init per process, cleaned up by hm_shutdown. */
static pthread_mutex_t boot_lock = PTHREAD_MUTEX_INITIALIZER;
static bool we_initialized;
static bool comm_failed;

/* A failed job skips MPI_Finalize: it would wait for a dead peer; mpirun reaps the rest. */
static void boot_cleanup(void) {
  pthread_mutex_lock(&boot_lock);
  bool finalize = we_initialized && !comm_failed;
  we_initialized = false;
  comm_failed = false;
  pthread_mutex_unlock(&boot_lock);
  int finalized = 1;
  MPI_Finalized(&finalized);
  if (finalize && !finalized) MPI_Finalize();
}

bool hm_comm_mpi_ready(void) {
  int up = 0, down = 0;
  MPI_Initialized(&up);
  MPI_Finalized(&down);
  return up && !down;
}

void hm_comm_mpi_world(int *world, int *rank) {
  MPI_Comm_size(MPI_COMM_WORLD, world);
  MPI_Comm_rank(MPI_COMM_WORLD, rank);
}

void hm_comm_mpi_mark_failed(void) {
  pthread_mutex_lock(&boot_lock);
  comm_failed = true;
  pthread_mutex_unlock(&boot_lock);
}

static hm_status mpi_failed(int code, const char *call) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(code, text, &len);
  HM_FAIL(HM_MPI, "%s failed: %s", call, text);
}

static hm_status start_mpi(int *argc, char ***argv) {
  int up = 0, down = 0;
  MPI_Initialized(&up);
  MPI_Finalized(&down);
  if (down) HM_FAIL(HM_NOT_READY, "MPI was finalized already");
  if (up) return HM_OK;
  int provided = 0;
  int rc = MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided);
  if (rc != MPI_SUCCESS) return mpi_failed(rc, "MPI_Init_thread");
  pthread_mutex_lock(&boot_lock);
  we_initialized = true;
  pthread_mutex_unlock(&boot_lock);
  return hm_registry_on_shutdown(boot_cleanup);
}

hm_status hm_comm_mpi_init(int *argc, char ***argv, hm_comm_world *out) {
  HM_CHECK_NOT_NULL(out);
  HM_CHECK(start_mpi(argc, argv));
  MPI_Comm_rank(MPI_COMM_WORLD, &out->rank);
  MPI_Comm_size(MPI_COMM_WORLD, &out->size);
  /* Ranks sharing memory share a node; their order there picks the GPU. */
  MPI_Comm node;
  int rc = MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, out->rank, MPI_INFO_NULL, &node);
  if (rc != MPI_SUCCESS) return mpi_failed(rc, "MPI_Comm_split_type");
  MPI_Comm_rank(node, &out->local_rank);
  MPI_Comm_size(node, &out->local_size);
  MPI_Comm_free(&node);
  hm_log_set_rank(out->rank, -1);
  HM_INFO(COMM, "MPI rank %d of %d, local rank %d of %d", out->rank, out->size, out->local_rank,
          out->local_size);
  return HM_OK;
}
