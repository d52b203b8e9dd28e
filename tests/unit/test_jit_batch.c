/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Many kernels at once: the parallel for runs every index exactly once, a batch with
 * repeated sources compiles each distinct one once, reports progress for every item,
 * and a failing item fails the batch without losing the others.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "check.h"
#include "kernels/threadpool.h"
#include "test_jit_util.h"

struct tally {
  atomic_int hits[1000];
  atomic_int threads_seen;
  pthread_t ids[64];
  pthread_mutex_t lock;
};

static void count_index(void *ctx, int i) {
  struct tally *t = ctx;
  atomic_fetch_add(&t->hits[i], 1);
  pthread_mutex_lock(&t->lock);
  bool known = false;
  for (int k = 0; k < atomic_load(&t->threads_seen); k++) known |= pthread_equal(t->ids[k], pthread_self());
  if (!known && t->threads_seen < 64) t->ids[atomic_fetch_add(&t->threads_seen, 1)] = pthread_self();
  pthread_mutex_unlock(&t->lock);
}

static void parallel_for_runs_each_index_once(void **state) {
  (void)state;
  static struct tally t;
  memset(&t, 0, sizeof(t));
  pthread_mutex_init(&t.lock, NULL);
  HM_ASSERT_OK(hm_threadpool_for(4, 1000, count_index, &t));
  for (int i = 0; i < 1000; i++) assert_int_equal(atomic_load(&t.hits[i]), 1);
  assert_true(t.threads_seen >= 1 && t.threads_seen <= 4);
  HM_ASSERT_OK(hm_threadpool_for(8, 0, count_index, &t));
  assert_int_equal(hm_threadpool_for(2, -1, count_index, &t), HM_INVALID_ARGUMENT);
  assert_true(hm_threadpool_size(0) >= 1);
  assert_int_equal(hm_threadpool_size(3), 3);
}

struct progress {
  int calls, last_done, total;
  bool in_order;
};

static void on_progress(int done, int total, void *user) {
  struct progress *p = user;
  p->in_order &= done == p->last_done + 1;
  p->last_done = done;
  p->total = total;
  p->calls++;
}

static void batch_compiles_each_distinct_kernel_once(void **state) {
  (void)state;
  enum { COUNT = 8 };
  tj_axpy k[COUNT];
  hm_kernel_source srcs[COUNT];
  for (int i = 0; i < COUNT; i++) {
    tj_axpy_make(&k[i], i % 5, 80, false); /* items 5..7 repeat items 0..2 */
    srcs[i] = k[i].src;
  }
  const hm_cubin *outs[COUNT];
  struct progress p = {0, 0, 0, true};
  hm_jit_batch batch = {2, on_progress, &p};
  HM_ASSERT_OK(hm_jit_get_cubins_ex(srcs, COUNT, &batch, outs));
  for (int i = 0; i < 3; i++) assert_ptr_equal(outs[i], outs[i + 5]);
  for (int i = 0; i < COUNT; i++) assert_non_null(outs[i]);
  assert_int_equal(p.calls, COUNT);
  assert_int_equal(p.total, COUNT);
  assert_true(p.in_order);
  hm_jit_stats st;
  hm_jit_get_stats(&st);
  assert_int_equal(st.compiled, 5);
  assert_int_equal(st.memory_hits, 3);
  printf("# 5 kernels on 2 threads: %.3f s in the compiler\n", st.compiled ? st.compile_s : 0.0);
}

static void failing_item_fails_the_batch_only_for_itself(void **state) {
  (void)state;
  tj_axpy good[2];
  tj_axpy_make(&good[0], 0, 80, false);
  tj_axpy_make(&good[1], 1, 80, false);
  hm_kernel_source srcs[3] = {
      good[0].src, {.name = "hm_bad", .source = "this is not CUDA;\n", .arch = 80}, good[1].src};
  const hm_cubin *outs[3];
  assert_int_equal(hm_jit_get_cubins(srcs, 3, outs), HM_NVRTC);
  assert_non_null(strstr(hm_last_error(), "hm_bad"));
  assert_non_null(strstr(hm_last_error(), "1 of 3 kernels failed"));
  assert_non_null(outs[0]);
  assert_null(outs[1]);
  assert_non_null(outs[2]);
  assert_int_equal(hm_jit_get_cubins(srcs, -1, outs), HM_INVALID_ARGUMENT);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(parallel_for_runs_each_index_once),
      cmocka_unit_test_setup_teardown(batch_compiles_each_distinct_kernel_once, tj_setup, tj_teardown),
      cmocka_unit_test_setup_teardown(failing_item_fails_the_batch_only_for_itself, tj_setup, tj_teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
