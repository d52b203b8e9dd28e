/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A rank that hangs or dies in the middle of a job (mpirun -np 4, HUMMING_COMM_TIMEOUT
 * small): the survivors fail within the timeout, naming the rank they waited for, and
 * the job exits non-zero; nothing hangs. This program is the driver: it runs mpirun on
 * itself (--child <mode>) and reads what the ranks said.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "hm_test.h"

#define RANKS 4
#define VICTIM 2
#define TIMEOUT_S 3 /* HUMMING_COMM_TIMEOUT set by tests/comm.cmake */
#define SLACK_S 40  /* start-up and tear-down of 4 ranks on a loaded machine */
#define DRIVER_LIMIT_S 180
#define SURVIVOR_LINGER_S 1

/* ---- the ranks ---- */

static hm_status one_round(hm_comm_batch *batch, int rank) {
  static uint16_t x[2 * 128];
  static float w[2 * 2] = {1, 1, 1, 1}, y[2 * 128];
  int32_t ids[4] = {rank % 8, (rank + 3) % 8, (rank + 5) % 8, (rank + 6) % 8};
  hm_comm_tokens t = {2, x, ids, w};
  hm_comm_expert_batch eb;
  HM_CHECK(hm_comm_dispatch(batch, &t, NULL, &eb));
  HM_CHECK(hm_comm_loopback(batch, NULL));
  return hm_comm_combine(batch, y, NULL);
}

/* Engine, communicator and batch live until the process ends: the child never returns. */
static hm_status setup(int *argc, char ***argv, hm_comm_world *world, hm_comm_batch **batch) {
  hm_engine_config ecfg = HM_ENGINE_CONFIG_INIT;
  hm_comm_config cfg = HM_COMM_CONFIG_INIT;
  cfg.experts = 8, cfg.hidden = 128, cfg.top_k = 2, cfg.max_tokens = 2;
  hm_engine *engine = NULL;
  hm_comm *comm = NULL;
  HM_CHECK(hm_comm_mpi_init(argc, argv, world));
  ecfg.backend = HM_BACKEND_HOST;
  ecfg.rank = world->rank;
  HM_CHECK(hm_engine_create(&ecfg, &engine));
  HM_CHECK(hm_comm_create_mpi(engine, &cfg, &comm));
  HM_CHECK(hm_comm_batch_create(comm, batch));
  return one_round(*batch, world->rank);
}

static int child(const char *mode, int argc, char **argv) {
  hm_comm_world world;
  hm_comm_batch *batch = NULL;
  if (setup(&argc, &argv, &world, &batch) != HM_OK) {
    fprintf(stderr, "SETUP FAILED: %s\n", hm_last_error());
    return 2;
  }
  if (world.rank == VICTIM) raise(strcmp(mode, "hang") == 0 ? SIGSTOP : SIGKILL);
  hm_status st = one_round(batch, world.rank);
  fprintf(stderr, "SURVIVOR rank %d exit 3: %s\n", world.rank, st == HM_OK ? "no failure" : hm_last_error());
  fflush(stderr);
  /* The first survivor to exit makes mpirun abort the others (outside recovery), which had
   * cut off rank 0 between its log line and this one on a loaded 2-core machine: the
   * survivors time out within milliseconds of each other, so a second's wait lets all say it. */
  sleep(SURVIVOR_LINGER_S);
  /* No MPI_Finalize: it would wait for the victim; mpirun reaps the job. */
  _exit(3);
}

/* ---- the driver ---- */

typedef struct job {
  int exit_code; /* of mpirun, -1 if killed by a signal */
  double seconds;
  char out[65536];
} job;

static void run_job(const char *mode, bool recovery, job *j) {
  char self[512], log_path[] = "/tmp/hm_comm_fault_XXXXXX";
  ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  assert_true(n > 0);
  self[n] = '\0';
  int fd = mkstemp(log_path);
  assert_true(fd >= 0);
  char np[8];
  snprintf(np, sizeof(np), "%d", RANKS);
  const char *args[12];
  int a = 0;
  args[a++] = HM_MPIEXEC;
  args[a++] = "--oversubscribe";
  if (recovery) args[a++] = "--enable-recovery";
  args[a++] = "-np", args[a++] = np, args[a++] = self, args[a++] = "--child", args[a++] = mode,
  args[a] = NULL;
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    setpgid(0, 0);
    dup2(fd, 1), dup2(fd, 2);
    execv(args[0], (char *const *)args);
    _exit(127);
  }
  int status = 0;
  for (;;) {
    if (waitpid(pid, &status, WNOHANG) == pid) break;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    if (t1.tv_sec - t0.tv_sec > DRIVER_LIMIT_S) {
      kill(-pid, SIGKILL);
      waitpid(pid, &status, 0);
      fail_msg("mode %s: the job still ran after %d s", mode, DRIVER_LIMIT_S);
    }
    usleep(50000);
  }
  clock_gettime(CLOCK_MONOTONIC, &t1);
  j->seconds = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
  j->exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  ssize_t got = pread(fd, j->out, sizeof(j->out) - 1, 0);
  j->out[got > 0 ? got : 0] = '\0';
  close(fd);
  unlink(log_path);
  printf("# %s%s: mpirun exit %d after %.1f s\n%s", mode, recovery ? " (recovery)" : "", j->exit_code,
         j->seconds, j->out);
}

/* Each survivor says it timed out waiting for the victim. */
static void check_survivors(const job *j) {
  for (int r = 0; r < RANKS; r++) {
    if (r == VICTIM) continue;
    char want[160];
    snprintf(want, sizeof(want),
             "SURVIVOR rank %d exit 3: timed out: rank %d: dispatch counts timed out after %d s "
             "waiting for rank(s) %d",
             r, r, TIMEOUT_S, VICTIM);
    if (strstr(j->out, want) == NULL) fail_msg("no line '%s'", want);
  }
  assert_true(j->seconds < TIMEOUT_S + SLACK_S);
}

static void hung_rank_is_named(void **state) {
  (void)state;
  static job j;
  run_job("hang", false, &j);
  assert_int_not_equal(j.exit_code, 0);
  check_survivors(&j);
}

static void killed_rank_is_named(void **state) {
  (void)state;
  static job j;
  /* Recovery keeps mpirun from killing the survivors first, so they report themselves. */
  run_job("kill", true, &j);
  check_survivors(&j);
}

static void killed_rank_ends_the_job(void **state) {
  (void)state;
  static job j;
  run_job("kill", false, &j);
  assert_int_not_equal(j.exit_code, 0);
  assert_non_null(strstr(j.out, "rank 2"));
  assert_true(j.seconds < TIMEOUT_S + SLACK_S);
}

int main(int argc, char **argv) {
  if (argc >= 3 && strcmp(argv[1], "--child") == 0) return child(argv[2], argc, argv);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(hung_rank_is_named),
      cmocka_unit_test(killed_rank_is_named),
      cmocka_unit_test(killed_rank_ends_the_job),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
