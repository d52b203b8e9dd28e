/* SPDX-License-Identifier: Apache-2.0 */
/* Engine creation, backend choice without a driver, host memory, streams and events. */
#include <stdlib.h>
#include <string.h>

#include "engine.h"
#include "hm_test.h"
#include "params.h"

static void bad_config_is_refused(void **state) {
  (void)state;
  hm_engine *e = (hm_engine *)0x1;
  assert_int_equal(hm_engine_create(NULL, &e), HM_INVALID_ARGUMENT);
  assert_null(e);
  hm_engine_config cfg = {0};
  assert_int_equal(hm_engine_create(&cfg, &e), HM_INVALID_ARGUMENT);
  hm_engine_config good = HM_ENGINE_CONFIG_INIT;
  good.backend = (hm_backend_kind)9;
  assert_int_equal(hm_engine_create(&good, &e), HM_INVALID_ARGUMENT);
  hm_engine_destroy(NULL);
}

static void auto_falls_back_to_host_without_driver(void **state) {
  (void)state;
  setenv("HUMMING_LIBCUDA", "libcuda-that-does-not-exist.so.1", 1);
  hm_params_reload();
  hm_shutdown();
  hm_engine_config cfg = HM_ENGINE_CONFIG_INIT;
  hm_engine *e = NULL;
  HM_ASSERT_OK(hm_engine_create(&cfg, &e));
  assert_int_equal(hm_engine_backend(e), HM_BACKEND_HOST);
  assert_int_equal(hm_engine_arch(e), 0);
  hm_engine_destroy(e);

  cfg.backend = HM_BACKEND_CUDA;
  assert_int_equal(hm_engine_create(&cfg, &e), HM_NO_DEVICE);
  assert_non_null(strstr(hm_last_error(), "libcuda-that-does-not-exist"));
  unsetenv("HUMMING_LIBCUDA");
  hm_shutdown();
}

static void forced_backend_from_env_is_checked(void **state) {
  (void)state;
  setenv("HUMMING_BACKEND", "tpu", 1);
  hm_params_reload();
  hm_engine_config cfg = HM_ENGINE_CONFIG_INIT;
  hm_engine *e = NULL;
  assert_int_equal(hm_engine_create(&cfg, &e), HM_INVALID_ARGUMENT);
  assert_non_null(strstr(hm_last_error(), "HUMMING_BACKEND=tpu"));
  setenv("HUMMING_BACKEND", "host", 1);
  hm_params_reload();
  HM_ASSERT_OK(hm_engine_create(&cfg, &e));
  assert_int_equal(hm_engine_backend(e), HM_BACKEND_HOST);
  hm_engine_destroy(e);
  unsetenv("HUMMING_BACKEND");
  hm_params_reload();
}

static void host_memory_streams_events(void **state) {
  (void)state;
  hm_engine *e = hm_test_host_engine();
  void *a = NULL, *b = NULL;
  HM_ASSERT_OK(hm_mem_alloc(e, 1000, &a));
  HM_ASSERT_OK(hm_mem_alloc(e, 1000, &b));
  assert_int_equal((uintptr_t)a % 64, 0);
  char src[1000], dst[1000];
  for (int i = 0; i < 1000; i++) src[i] = (char)i;
  HM_ASSERT_OK(hm_mem_upload(e, a, src, sizeof(src)));
  hm_stream *s = NULL;
  HM_ASSERT_OK(hm_stream_create(e, &s));
  HM_ASSERT_OK(hm_engine_copy(e, b, a, 1000, HM_COPY_D2D, s));
  HM_ASSERT_OK(hm_engine_memset(e, a, 0xab, 10, s));
  HM_ASSERT_OK(hm_stream_synchronize(s));
  HM_ASSERT_OK(hm_mem_download(e, dst, b, sizeof(dst)));
  assert_memory_equal(src, dst, sizeof(src));
  HM_ASSERT_OK(hm_mem_download(e, dst, a, 10));
  for (int i = 0; i < 10; i++) assert_int_equal((unsigned char)dst[i], 0xab);

  hm_event *t0 = NULL, *t1 = NULL;
  HM_ASSERT_OK(hm_event_create(e, &t0));
  HM_ASSERT_OK(hm_event_create(e, &t1));
  HM_ASSERT_OK(hm_event_record(t0, s));
  HM_ASSERT_OK(hm_event_record(t1, s));
  float ms = -1;
  HM_ASSERT_OK(hm_event_elapsed_ms(t0, t1, &ms));
  assert_true(ms >= 0);
  hm_event_destroy(t0);
  hm_event_destroy(t1);
  hm_stream_destroy(s);
  hm_mem_free(e, a);
  hm_mem_free(e, b);
  hm_mem_free(e, NULL);
  assert_int_equal(hm_mem_alloc(e, 8, NULL), HM_INVALID_ARGUMENT);
  hm_engine_destroy(e);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(bad_config_is_refused),
      cmocka_unit_test(auto_falls_back_to_host_without_driver),
      cmocka_unit_test(forced_backend_from_env_is_checked),
      cmocka_unit_test(host_memory_streams_events),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
