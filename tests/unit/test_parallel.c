/* SPDX-License-Identifier: Apache-2.0 */
/* The host parallel-for: coverage of every index, worker ids, failures, thread count. */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "hm_test.h"
#include "parallel.h"
#include "params.h"

struct coverage {
  atomic_int *hits; /* per item */
  atomic_int calls; /* body calls */
  int64_t grain;
  int workers;
  atomic_int bad; /* chunks with a wrong size or worker id */
};

static hm_status count_hits(void *ctx, int64_t begin, int64_t end, int worker) {
  struct coverage *c = ctx;
  atomic_fetch_add(&c->calls, 1);
  if (worker < 0 || worker >= c->workers || end <= begin || end - begin > c->grain)
    atomic_fetch_add(&c->bad, 1);
  for (int64_t i = begin; i < end; i++) atomic_fetch_add(&c->hits[i], 1);
  return HM_OK;
}

static void every_index_exactly_once(void **state) {
  (void)state;
  hm_rng rng;
  hm_rng_seed(&rng, hm_test_seed("parallel_for"));
  const int64_t counts[] = {1, 2, 7, 64, 1000, 4097};
  const int64_t grains[] = {1, 3, 64, 5000};
  const int threads[] = {0, 1, 2, 3, 8, 33};
  for (size_t a = 0; a < HM_ARRAY_SIZE(counts); a++)
    for (size_t b = 0; b < HM_ARRAY_SIZE(grains); b++)
      for (size_t t = 0; t < HM_ARRAY_SIZE(threads); t++) {
        int64_t count = counts[a] + (int64_t)(hm_rng_next(&rng) % 3);
        struct coverage c = {.grain = grains[b]};
        c.workers = hm_parallel_workers(count, grains[b], threads[t]);
        c.hits = calloc((size_t)count, sizeof(*c.hits));
        assert_non_null(c.hits);
        HM_ASSERT_OK(hm_parallel_for(count, grains[b], threads[t], count_hits, &c));
        for (int64_t i = 0; i < count; i++) assert_int_equal(atomic_load(&c.hits[i]), 1);
        assert_int_equal(atomic_load(&c.bad), 0);
        assert_int_equal(atomic_load(&c.calls), (count + grains[b] - 1) / grains[b]);
        free(c.hits);
      }
}

static void worker_count_follows_work_and_threads(void **state) {
  (void)state;
  assert_int_equal(hm_parallel_workers(10, 1, 4), 4);
  assert_int_equal(hm_parallel_workers(10, 5, 4), 2);
  assert_int_equal(hm_parallel_workers(11, 5, 4), 3);
  assert_int_equal(hm_parallel_workers(0, 1, 4), 1);
  assert_int_equal(hm_parallel_workers(100, 1, 1), 1);
  assert_true(hm_parallel_workers(1000, 1, 0) >= 1);
}

static hm_status never_called(void *ctx, int64_t begin, int64_t end, int worker) {
  (void)begin, (void)end, (void)worker;
  atomic_fetch_add((atomic_int *)ctx, 1);
  return HM_OK;
}

static void empty_range_calls_nothing(void **state) {
  (void)state;
  atomic_int calls = 0;
  HM_ASSERT_OK(hm_parallel_for(0, 1, 4, never_called, &calls));
  assert_int_equal(atomic_load(&calls), 0);
}

/* Fails at item 37, whichever worker gets it. */
static hm_status fail_at_37(void *ctx, int64_t begin, int64_t end, int worker) {
  (void)worker;
  atomic_fetch_add((atomic_int *)ctx, 1);
  if (begin <= 37 && 37 < end) HM_FAIL(HM_INVALID_ARGUMENT, "item 37 is bad");
  return HM_OK;
}

static void failure_reaches_the_caller(void **state) {
  (void)state;
  const int threads[] = {1, 2, 4};
  for (size_t t = 0; t < HM_ARRAY_SIZE(threads); t++) {
    atomic_int calls = 0;
    hm_error_clear();
    assert_int_equal(hm_parallel_for(100000, 1, threads[t], fail_at_37, &calls), HM_INVALID_ARGUMENT);
    assert_non_null(strstr(hm_last_error(), "item 37 is bad"));
    /* Workers stop claiming chunks once one failed. */
    assert_true(atomic_load(&calls) < 100000);
  }
}

static void bad_arguments_are_refused(void **state) {
  (void)state;
  atomic_int calls = 0;
  assert_int_equal(hm_parallel_for(10, 1, 1, NULL, &calls), HM_INVALID_ARGUMENT);
  assert_int_equal(hm_parallel_for(-1, 1, 1, never_called, &calls), HM_INVALID_ARGUMENT);
  assert_non_null(strstr(hm_last_error(), "-1"));
  assert_int_equal(hm_parallel_for(10, 0, 1, never_called, &calls), HM_INVALID_ARGUMENT);
  assert_non_null(strstr(hm_last_error(), "grain"));
  assert_int_equal(hm_parallel_for(10, 1, -2, never_called, &calls), HM_INVALID_ARGUMENT);
  assert_non_null(strstr(hm_last_error(), "threads"));
  assert_int_equal(atomic_load(&calls), 0);
}

static void threads_come_from_the_environment(void **state) {
  (void)state;
  setenv("HUMMING_HOST_THREADS", "3", 1);
  hm_params_reload();
  assert_int_equal(hm_parallel_threads(), 3);
  assert_int_equal(hm_parallel_workers(100, 1, 0), 3);
  unsetenv("HUMMING_HOST_THREADS");
  hm_params_reload();
  assert_true(hm_parallel_threads() >= 1);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(every_index_exactly_once),  cmocka_unit_test(worker_count_follows_work_and_threads),
      cmocka_unit_test(empty_range_calls_nothing), cmocka_unit_test(failure_reaches_the_caller),
      cmocka_unit_test(bad_arguments_are_refused), cmocka_unit_test(threads_come_from_the_environment),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
