/* SPDX-License-Identifier: Apache-2.0 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "hm_test.h"

#include "engine.h"

void hm_rng_seed(hm_rng *rng, uint64_t seed) { rng->state = seed ? seed : 0x9e3779b97f4a7c15ull; }

/* splitmix64: good enough statistics for test data, trivially reproducible. */
uint64_t hm_rng_next(hm_rng *rng) {
  uint64_t z = (rng->state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

float hm_rng_uniform(hm_rng *rng, float lo, float hi) {
  double u = (double)(hm_rng_next(rng) >> 11) * (1.0 / 9007199254740992.0);
  return (float)(lo + (hi - lo) * u);
}

float hm_rng_normal(hm_rng *rng) {
  double u1 = ((double)(hm_rng_next(rng) >> 11) + 1.0) * (1.0 / 9007199254740993.0);
  double u2 = (double)(hm_rng_next(rng) >> 11) * (1.0 / 9007199254740992.0);
  return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

void hm_rng_fill_uniform(hm_rng *rng, float *x, size_t n, float lo, float hi) {
  for (size_t i = 0; i < n; i++) x[i] = hm_rng_uniform(rng, lo, hi);
}

void hm_rng_fill_normal(hm_rng *rng, float *x, size_t n, float scale) {
  for (size_t i = 0; i < n; i++) x[i] = scale * hm_rng_normal(rng);
}

uint64_t hm_test_seed(const char *test_name) {
  const char *fixed = getenv("HM_TEST_SEED");
  uint64_t seed = fixed && *fixed ? strtoull(fixed, NULL, 10) : (uint64_t)time(NULL) * 1000003u ^ (uint64_t)getpid();
  printf("# %s seed %llu\n", test_name, (unsigned long long)seed);
  return seed;
}

double hm_rel_error(const float *out, const float *ref, size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n; i++) {
    if (!isfinite(out[i])) return INFINITY;
    double d = (double)out[i] - (double)ref[i];
    num += d * d;
    den += (double)ref[i] * (double)ref[i];
  }
  if (den == 0) return num == 0 ? 0 : INFINITY;
  return sqrt(num / den);
}

hm_layer_config hm_test_layer_config(const char *quant, int64_t n, int64_t k, int64_t experts, int top_k) {
  hm_layer_config c = HM_LAYER_CONFIG_INIT;
  HM_ASSERT_OK(hm_quant_scheme_parse(quant, &c.scheme));
  c.n = n;
  c.k = k;
  c.experts = experts;
  c.top_k = top_k;
  return c;
}

hm_engine *hm_test_host_engine(void) {
  hm_engine_config cfg = HM_ENGINE_CONFIG_INIT;
  cfg.backend = HM_BACKEND_HOST;
  hm_engine *e = NULL;
  HM_ASSERT_OK(hm_engine_create(&cfg, &e));
  return e;
}

hm_engine *hm_test_cuda_engine_or_skip(void) {
  /* A device call's time limit kills a case that runs long; the lines it printed into a
   * log must survive that, not sit in a 4 KiB buffer (thirty-fifth session: a killed
   * case's log held one buffer's worth, which told neither its rate nor how far it got). */
  setvbuf(stdout, NULL, _IOLBF, 0);
  hm_engine_config cfg = HM_ENGINE_CONFIG_INIT;
  cfg.backend = HM_BACKEND_CUDA;
  hm_engine *e = NULL;
  hm_status st = hm_engine_create(&cfg, &e);
  if (st == HM_NO_DEVICE) {
    printf("SKIP: no CUDA device (%s)\n", hm_last_error());
    return NULL;
  }
  if (st != HM_OK) {
    /* A device that is there but fails is a failure, never a skip. */
    fprintf(stderr, "FAIL: CUDA engine: %s\n", hm_last_error());
    exit(1);
  }
  /* A GPU binary compiles dozens of kernels into a cold cache, minutes on a lent machine
   * whose time is counted: HM_TEST_FILTER runs only the cases its pattern matches. */
  const char *only = getenv("HM_TEST_FILTER");
  if (only != NULL && *only != '\0') {
    printf("# HM_TEST_FILTER: only the cases matching %s\n", only);
    cmocka_set_test_filter(only);
  }
  return e;
}

static int cmp_float(const void *a, const void *b) {
  const float x = *(const float *)a, y = *(const float *)b;
  return (x > y) - (x < y);
}

float hm_test_median_ms(hm_engine *engine, hm_stream *stream, int warmup, int reps,
                        void (*fn)(void *ctx, int call), void *ctx) {
  hm_event *t0, *t1;
  HM_ASSERT_OK(hm_event_create(engine, &t0));
  HM_ASSERT_OK(hm_event_create(engine, &t1));
  float *ms = malloc((size_t)reps * sizeof(float));
  assert_non_null(ms);
  for (int i = 0; i < warmup + reps; i++) {
    HM_ASSERT_OK(hm_event_record(t0, stream));
    fn(ctx, i);
    HM_ASSERT_OK(hm_event_record(t1, stream));
    float t;
    HM_ASSERT_OK(hm_event_elapsed_ms(t0, t1, &t));
    if (i >= warmup) ms[i - warmup] = t;
  }
  hm_event_destroy(t0);
  hm_event_destroy(t1);
  qsort(ms, (size_t)reps, sizeof(float), cmp_float);
  const float median = ms[reps / 2];
  free(ms);
  return median;
}

hm_engine *hm_test_mpi_host_engine(int *argc, char ***argv, hm_comm_world *world) {
  if (hm_comm_mpi_init(argc, argv, world) != HM_OK) {
    fprintf(stderr, "FAIL: %s\n", hm_last_error());
    return NULL;
  }
  hm_engine_config cfg = HM_ENGINE_CONFIG_INIT;
  cfg.backend = HM_BACKEND_HOST;
  cfg.rank = world->rank;
  hm_engine *e = NULL;
  if (hm_engine_create(&cfg, &e) != HM_OK) {
    fprintf(stderr, "FAIL: rank %d engine: %s\n", world->rank, hm_last_error());
    return NULL;
  }
  return e;
}
