/* SPDX-License-Identifier: Apache-2.0 */
/* Running launch/baseline_torch.py and reading its JSON rows back. */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "bench/bench_torch.h"

#define SCRIPT "baseline_torch.py"

/* The script beside the sources: ./launch/ from the repository root, or ../launch/ from a build dir. */
static bool find_script(char *path, size_t len) {
  snprintf(path, len, "launch/" SCRIPT);
  if (access(path, R_OK) == 0) return true;
  char exe[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  if (n <= 0) return false;
  exe[n] = '\0';
  char *slash = strrchr(exe, '/');
  if (slash) *slash = '\0';
  if (snprintf(path, len, "%s/../launch/" SCRIPT, exe) >= (int)len) return false;
  return access(path, R_OK) == 0;
}

/* Fills us[i] with the row whose "m" equals o.m.v[i]; rows the script skipped stay NaN. */
static void read_rows(const hm_bench_opts *o, json_t *doc, double *us) {
  size_t idx;
  json_t *row;
  json_array_foreach(json_object_get(doc, "rows"), idx, row) {
    json_int_t m = json_integer_value(json_object_get(row, "m"));
    double t = json_number_value(json_object_get(row, "time_us"));
    for (int i = 0; i < o->m.count; i++)
      if (o->m.v[i] == m && t > 0) us[i] = t;
  }
}

static double *run_script(hm_bench *b, const char *args) {
  char script[PATH_MAX], sizes[2048], cmd[4096];
  if (b->rank != 0 || !b->cuda) return NULL;
  if (!find_script(script, sizeof(script))) {
    fprintf(stderr, "humming-moe-bench: --baseline torch: %s not found (run from the repository root)\n",
            SCRIPT);
    return NULL;
  }
  hm_int_list_format(&b->o.m, sizes, sizeof(sizes));
  int len = snprintf(cmd, sizeof(cmd), "python3 '%s' %s --m %s --iters %lld --warmup %lld --device %d",
                     script, args, sizes, (long long)b->o.iters, (long long)b->o.warmup, b->engine->device);
  FILE *p = len < (int)sizeof(cmd) ? popen(cmd, "r") : NULL;
  if (p == NULL) return NULL;
  json_error_t err;
  json_t *doc = json_loadf(p, JSON_DISABLE_EOF_CHECK, &err);
  int status = pclose(p);
  double *us = malloc((size_t)b->o.m.count * sizeof(double));
  if (doc == NULL || status != 0 || us == NULL) {
    fprintf(stderr, "humming-moe-bench: --baseline torch: '%s' failed (%s)\n", cmd,
            doc ? "exit status" : err.text);
    json_decref(doc);
    free(us);
    return NULL;
  }
  for (int i = 0; i < b->o.m.count; i++) us[i] = NAN;
  read_rows(&b->o, doc, us);
  hm_report_config(b->report, "torch", json_incref(json_object_get(doc, "versions")));
  json_decref(doc);
  return us;
}

double *hm_bench_torch_kernel(hm_bench *b, const hm_bench_gemm_shape *shape) {
  char args[256];
  /* Only fp8 has a faster torch path than bf16; int8 and weight-only schemes compare to bf16. */
  bool fp8 = b->o.scheme.act == HM_F8E4M3;
  snprintf(args, sizeof(args), "--mode kernel --n %lld --k %lld --experts %lld --top-k %d --chain %lld%s%s",
           (long long)shape->n, (long long)shape->k, (long long)shape->experts, shape->top_k,
           (long long)b->o.chain, shape->down ? " --down" : "", fp8 ? " --fp8" : "");
  return run_script(b, args);
}

double *hm_bench_torch_layer(hm_bench *b) {
  const hm_model_preset *m = &b->o.model;
  char args[256];
  snprintf(args, sizeof(args), "--mode layer --hidden %lld --intermediate %lld --experts %lld --top-k %d",
           (long long)m->hidden, (long long)m->moe_intermediate, (long long)m->experts, m->top_k);
  return run_script(b, args);
}

void hm_bench_torch_free(double *us) {
  free(us);
}
