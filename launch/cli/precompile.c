/* SPDX-License-Identifier: Apache-2.0 */
/*
 * humming-moe precompile: compiles every kernel a model needs into the node's cache, from
 * the kernel tables its layers will plan (HUMMING_GEMM_PLAN, the device, the tuning table),
 * before serving starts, and with --stats measures the compiler and the cache (cold
 * compile per kernel on one thread, warm load from disk, in-process hit).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "common/options.h"
#include "engine.h"
#include "heuristics/choose_engine.h"
#include "kernels/jit.h"
#include "kernels/jit_model.h"

#define EXIT_USAGE 2
#define HIT_REPEATS 1000

typedef struct precompile_opts {
  char model[HM_OPT_STR_LEN];
  char quant[HM_OPT_STR_LEN];
  char arch[HM_OPT_STR_LEN];
  int64_t tp, ep, threads;
  bool stats, list, help;
} precompile_opts;

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* "sm_90a", "sm_90" or "90": the arch number; the generator picks sm_XXa where a kernel needs it. */
static bool parse_arch(const char *text, int *arch) {
  const char *p = strncmp(text, "sm_", 3) == 0 ? text + 3 : text;
  char *end = NULL;
  long v = strtol(p, &end, 10);
  if (end == p || (*end != '\0' && strcmp(end, "a") != 0) || v < 75 || v > 121) return false;
  *arch = (int)v;
  return true;
}

static void progress_bar(int done, int total, void *user) {
  (void)user;
  const int width = 40;
  int filled = total ? done * width / total : width;
  fprintf(stderr, "\r[%.*s%*s] %d/%d kernels", filled, "########################################",
          width - filled, "", done, total);
  if (done == total) fputc('\n', stderr);
}

static int compare_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* Prints median, min and max of n values scaled by unit_scale. */
static void print_stat(const char *what, double *v, int n, double unit_scale, const char *unit) {
  if (n == 0) {
    printf("  %-20s %10s\n", what, "n/a");
    return;
  }
  qsort(v, (size_t)n, sizeof(*v), compare_double);
  double median = n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
  printf("  %-20s %10.3f %10.3f %10.3f  %s\n", what, median * unit_scale, v[0] * unit_scale,
         v[n - 1] * unit_scale, unit);
}

/* Cold compiles on this thread alone, then loads from disk, then process-table hits. */
static int run_stats(const hm_model_kernels *k) {
  int n = k->count, cold = 0, warm = 0;
  double *wall = calloc((size_t)n, sizeof(double)), *cpu = calloc((size_t)n, sizeof(double));
  double *disk = calloc((size_t)n, sizeof(double)), *hit = calloc((size_t)n, sizeof(double));
  int failed = 0;
  for (int i = 0; wall && cpu && disk && hit && i < n; i++) {
    hm_cubin c;
    if (hm_jit_compile_uncached(&k->items[i].src, &c) != HM_OK) {
      fprintf(stderr, "precompile: %s\n", hm_last_error());
      failed++;
      continue;
    }
    wall[cold] = c.seconds;
    cpu[cold++] = c.cpu_seconds;
    hm_jit_cubin_free(&c);
    if (isatty(2)) progress_bar(i + 1, n, NULL);
  }
  hm_shutdown(); /* forget the process table: the next lookups go to the disk */
  for (int i = 0; wall && i < n; i++) {
    const hm_cubin *c = NULL;
    double start = now_s();
    if (hm_jit_get_cubin(&k->items[i].src, &c) != HM_OK || !c->from_cache) continue;
    disk[warm] = now_s() - start;
    start = now_s();
    for (int r = 0; r < HIT_REPEATS; r++) hm_jit_get_cubin(&k->items[i].src, &c);
    hit[warm++] = (now_s() - start) / HIT_REPEATS;
  }
  printf("# stats over %d kernels: cold compiles one at a time on one thread, bypassing the cache\n", n);
  printf("  %-20s %10s %10s %10s\n", "measure", "median", "min", "max");
  print_stat("cold compile (wall)", wall, cold, 1, "s");
  print_stat("cold compile (CPU)", cpu, cold, 1, "s");
  print_stat("warm disk hit", disk, warm, 1e3, "ms");
  print_stat("in-process hit", hit, warm, 1e6, "us");
  if (warm < n) printf("# %d kernels were not in the cache (not writable?)\n", n - warm);
  free(wall);
  free(cpu);
  free(disk);
  free(hit);
  return failed ? 1 : 0;
}

static int parse(int argc, char **argv, precompile_opts *o, int *arch) {
  const hm_opt table[] = {
      {"--model", HM_OPT_STR, o->model, 0, 0, "NAME", "model preset", NULL},
      {"--quant", HM_OPT_STR, o->quant, 0, 0, "SCHEME", "quantization scheme: " HM_QUANT_SCHEMES, NULL},
      {"--arch", HM_OPT_STR, o->arch, 0, 0, "sm_XX", "target arch (sm_80, sm_89, sm_90a, sm_100a)", NULL},
      {"--tp", HM_OPT_INT, &o->tp, 1, 4096, "N", "tensor-parallel ranks (shapes of one rank)", NULL},
      {"--ep", HM_OPT_INT, &o->ep, 1, 4096, "N", "expert-parallel ranks", NULL},
      {"--threads", HM_OPT_INT, &o->threads, 0, 256, "N", "compile threads (0: HUMMING_JIT_THREADS)", NULL},
      {"--stats", HM_OPT_FLAG, &o->stats, 0, 0, NULL, "time cold compiles, disk hits and in-process hits",
       NULL},
      {"--list", HM_OPT_FLAG, &o->list, 0, 0, NULL, "print the kernels and exit", NULL},
      {"--help", HM_OPT_FLAG, &o->help, 0, 0, NULL, "this text", NULL},
  };
  const int n = (int)(sizeof(table) / sizeof(table[0]));
  char err[512];
  if (hm_opts_parse(table, n, argc, argv, 2, err, sizeof(err)) < 0) {
    fprintf(stderr, "humming-moe precompile: %s\n", err);
    return EXIT_USAGE;
  }
  if (o->help) {
    printf("usage: humming-moe precompile --model NAME --quant SCHEME --arch sm_XX [options]\n");
    hm_opts_usage(stdout, table, n);
    return 0;
  }
  if (!parse_arch(o->arch, arch)) {
    fprintf(stderr, "humming-moe precompile: --arch '%s' is not sm_75 .. sm_121 (e.g. sm_90a)\n", o->arch);
    return EXIT_USAGE;
  }
  return -1;
}

/* Kernels that keep registers in local memory run slower than their tiling should: named
 * here, before serving, as well as at load. */
static void report_spills(const hm_kernel_source *srcs, const hm_cubin *const *outs, int count) {
  int spilling = 0;
  for (int i = 0; i < count; i++) {
    hm_kernel_resources r;
    if (outs[i] == NULL || hm_cubin_kernel_resources(outs[i], srcs[i].name, &r) != HM_OK ||
        r.local_bytes == 0)
      continue;
    printf("precompile: %s keeps %u bytes a thread in local memory at %u registers\n", srcs[i].name,
           r.local_bytes, r.registers);
    spilling++;
  }
  printf("precompile: %d of %d kernels spill registers\n", spilling, count);
}

static int compile_all(const precompile_opts *o, const hm_model_kernels *k) {
  hm_kernel_source *srcs = calloc((size_t)k->count + 1, sizeof(*srcs));
  const hm_cubin **outs = calloc((size_t)k->count + 1, sizeof(*outs));
  if (srcs == NULL || outs == NULL) {
    free(srcs);
    free(outs);
    fprintf(stderr, "precompile: out of memory\n");
    return 1;
  }
  for (int i = 0; i < k->count; i++) srcs[i] = k->items[i].src;
  hm_jit_batch batch = {(int)o->threads, isatty(2) ? progress_bar : NULL, NULL};
  double start = now_s();
  hm_status st = hm_jit_get_cubins_ex(srcs, k->count, &batch, outs);
  double wall = now_s() - start;
  if (st != HM_OK) fprintf(stderr, "precompile: %s\n", hm_last_error());
  hm_jit_stats s;
  hm_jit_get_stats(&s);
  printf("precompile: %d kernels: %llu compiled, %llu found, %llu failed in %.1f s\n", k->count,
         (unsigned long long)s.compiled, (unsigned long long)(s.disk_hits + s.memory_hits),
         (unsigned long long)s.failed, wall);
  report_spills(srcs, outs, k->count);
  free(srcs);
  free(outs);
  return st == HM_OK ? 0 : 1;
}

/* Where the layers on this node will take their kernel tables from. */
typedef struct precompile_plan {
  hm_engine *engine;
  hm_plan_source source;
} precompile_plan;

static hm_status layer_plan(void *ctx, const hm_layer_config *lc, hm_gemm_type type, int arch, hm_gemm_plan *out) {
  const precompile_plan *c = ctx;
  hm_layer_plan lp;
  HM_CHECK(hm_heuristics_layer_plan(c->engine, lc, type, arch, c->source, &lp));
  *out = lp.plan;
  return HM_OK;
}

/* The kernels of the tables that HUMMING_GEMM_PLAN makes layers run on this node's device
 * (or HUMMING_DEVICE_PROFILE's on the host): the cost model ranks on the device, the
 * tuning table is the node's. */
static hm_status plan_kernels(hm_model_kernel_request req, hm_model_kernels *k) {
  hm_engine_config ec = HM_ENGINE_CONFIG_INIT;
  precompile_plan c = {NULL, HM_PLAN_AUTO};
  HM_CHECK(hm_plan_source_from_env(&c.source));
  HM_CHECK(hm_engine_create(&ec, &c.engine));
  req.plan = layer_plan;
  req.plan_ctx = &c; /* a copy of the caller's request: c does not outlive this call */
  hm_status st = hm_model_kernels_make(&req, k);
  hm_engine_destroy(c.engine);
  return st;
}

int hm_cli_precompile(int argc, char **argv) {
  precompile_opts o = {.model = "deepseek-v3", .quant = "w4a16", .arch = "sm_90", .tp = 1, .ep = 1};
  int arch = 0;
  int rc = parse(argc, argv, &o, &arch);
  if (rc >= 0) return rc;
  hm_model_kernel_request req = {o.model, o.quant, arch, (int)o.tp, (int)o.ep, NULL, NULL};
  hm_model_kernels k;
  if (plan_kernels(req, &k) != HM_OK) {
    fprintf(stderr, "humming-moe precompile: %s\n", hm_last_error());
    return EXIT_USAGE;
  }
  char compiler[256] = "", cache[1024] = "";
  if (hm_jit_describe(compiler, sizeof(compiler), cache, sizeof(cache)) != HM_OK) {
    fprintf(stderr, "humming-moe precompile: %s\n", hm_last_error());
    hm_model_kernels_free(&k);
    return 1;
  }
  printf("# humming-moe precompile  model=%s quant=%s arch=sm_%d tp=%lld ep=%lld\n", o.model, o.quant, arch,
         (long long)o.tp, (long long)o.ep);
  printf("# compiler %s  cache %s\n", compiler, cache[0] ? cache : "(none: compiling in memory)");
  if (o.list) {
    for (int i = 0; i < k.count; i++) printf("%s\n", k.items[i].name);
  } else {
    rc = compile_all(&o, &k);
    if (rc == 0 && o.stats) rc = run_stats(&k);
  }
  hm_model_kernels_free(&k);
  hm_shutdown();
  return rc < 0 ? 0 : rc;
}
