/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Eight ranks of one node ask a cold cache for the same 20 real GEMM kernels at once:
 * every kernel is compiled exactly once on the node (compiles summed over ranks), all
 * ranks hold identical bytes, and asking again (a fresh process table, or with
 * --second-run a fresh set of processes) compiles nothing.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "hm_test.h"
#include "kernels/cache_key.h"
#include "kernels/gemm_gen.h"
#include "kernels/gemm_select.h"
#include "kernels/jit.h"
#include "log.h"
#include "params.h"

#define KERNELS 20

static int rank, ranks, failures;

#define EXPECT(cond, ...)                                                 \
  do {                                                                    \
    if (!(cond)) {                                                        \
      fprintf(stderr, "rank %d: FAIL %s:%d: ", rank, __FILE__, __LINE__); \
      fprintf(stderr, __VA_ARGS__);                                       \
      fprintf(stderr, "\n");                                              \
      failures++;                                                         \
    }                                                                     \
  } while (0)

/* Twenty GEMM kernels: five layer shapes, each with the tiles of its M classes. */
static int make_sources(hm_gemm_source *gen) {
  const int64_t shapes[][2] = {{4096, 4096}, {2048, 7168}, {7168, 2048},
                               {1024, 4096}, {4096, 1024}, {3072, 3072}};
  int count = 0;
  for (size_t s = 0; s < HM_ARRAY_SIZE(shapes) && count < KERNELS; s++) {
    hm_gemm_config base = {0};
    base.layer = (hm_gemm_layer_part){HM_U4, HM_BF16,      HM_BF16,      128, false, false,
                                      false, shapes[s][0], shapes[s][1], 1,   0,     HM_ACT_SCALE_NONE,
                                      false};
    base.compute.type = HM_GEMM_DENSE;
    base.arch = 80;
    hm_gemm_plan plan;
    if (hm_gemm_plan_make(&base, &plan) != HM_OK) {
      fprintf(stderr, "rank %d: plan: %s\n", rank, hm_last_error());
      return -1;
    }
    for (int i = 0; i < plan.count && count < KERNELS; i++) {
      if (hm_gemm_gen(&plan.cfg[i], &gen[count]) != HM_OK) {
        fprintf(stderr, "rank %d: gen: %s\n", rank, hm_last_error());
        return -1;
      }
      count++;
    }
  }
  return count;
}

/* Gathers every rank's SHA-256 of every cubin and checks them against rank 0's. */
static void check_identical(const hm_cubin **cubins) {
  static char mine[KERNELS][HM_SHA256_HEX];
  for (int i = 0; i < KERNELS; i++) {
    if (cubins[i] == NULL || hm_sha256_hex(cubins[i]->data, cubins[i]->size, mine[i]) != HM_OK)
      snprintf(mine[i], HM_SHA256_HEX, "missing");
  }
  char *all = rank == 0 ? malloc((size_t)ranks * sizeof(mine)) : NULL;
  MPI_Gather(mine, (int)sizeof(mine), MPI_CHAR, all, (int)sizeof(mine), MPI_CHAR, 0, MPI_COMM_WORLD);
  if (rank != 0) return;
  for (int r = 1; r < ranks; r++)
    EXPECT(memcmp(all + (size_t)r * sizeof(mine), mine, sizeof(mine)) == 0, "rank %d holds other bytes", r);
  free(all);
}

/* One round: all ranks ask at once; returns the compiles summed over ranks. */
static long round_of(const char *what, hm_kernel_source *srcs, const hm_cubin **cubins) {
  hm_shutdown(); /* a fresh process table: what follows sees only the disk */
  MPI_Barrier(MPI_COMM_WORLD);
  double start = MPI_Wtime();
  hm_jit_batch batch = {2, NULL, NULL};
  hm_status st = hm_jit_get_cubins_ex(srcs, KERNELS, &batch, cubins);
  EXPECT(st == HM_OK, "%s: %s", what, hm_last_error());
  double wall = MPI_Wtime() - start;
  hm_jit_stats stats;
  hm_jit_get_stats(&stats);
  EXPECT(stats.compiled + stats.disk_hits == KERNELS, "%s: %llu compiled + %llu loaded != %d", what,
         (unsigned long long)stats.compiled, (unsigned long long)stats.disk_hits, KERNELS);
  EXPECT(stats.broken == 0 && stats.failed == 0, "%s: %llu broken, %llu failed", what,
         (unsigned long long)stats.broken, (unsigned long long)stats.failed);
  long mine = (long)stats.compiled, total = 0;
  double cpu = stats.compile_cpu_s, cpu_total = 0, slowest = 0;
  MPI_Allreduce(&mine, &total, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
  MPI_Reduce(&cpu, &cpu_total, 1, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
  MPI_Reduce(&wall, &slowest, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
  if (rank == 0)
    printf("# %s: %ld compiles on %d ranks, %.1f CPU s in compilers, slowest rank %.2f s\n", what, total,
           ranks, cpu_total, slowest);
  check_identical(cubins);
  return total;
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  bool second_run = argc > 1 && strcmp(argv[1], "--second-run") == 0;
  char root[1024];
  snprintf(root, sizeof(root), "%s/mpi-cache",
           hm_param_cache_dir()[0] ? hm_param_cache_dir() : "/tmp/hm-test");
  if (rank == 0 && !second_run) {
    char cmd[1100];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
    if (system(cmd) != 0) fprintf(stderr, "could not empty %s\n", root);
  }
  setenv("HUMMING_CACHE_DIR", root, 1);
  hm_params_reload();
  hm_log_set_rank(rank, -1);

  static hm_gemm_source gen[KERNELS];
  hm_kernel_source srcs[KERNELS];
  const hm_cubin *cubins[KERNELS];
  int count = make_sources(gen);
  EXPECT(count == KERNELS, "made %d of %d kernels", count, KERNELS);
  for (int i = 0; i < KERNELS && count == KERNELS; i++) srcs[i] = gen[i].src;
  if (count == KERNELS) {
    if (!second_run) {
      long cold = round_of("cold cache", srcs, cubins);
      if (rank == 0) EXPECT(cold == KERNELS, "cold cache: %ld compiles for %d kernels", cold, KERNELS);
    }
    long warm = round_of(second_run ? "second run" : "warm cache", srcs, cubins);
    if (rank == 0) EXPECT(warm == 0, "warm cache: %ld compiles", warm);
  }
  for (int i = 0; i < KERNELS; i++) hm_gemm_source_free(&gen[i]);
  hm_shutdown();
  int all_failures = 0;
  MPI_Allreduce(&failures, &all_failures, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  MPI_Finalize();
  return all_failures ? 1 : 0;
}
