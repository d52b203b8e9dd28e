/* SPDX-License-Identifier: Apache-2.0 */
/*
 * NCCL is opened at run time: a missing library is a clear HM_UNSUPPORTED naming the
 * path (HUMMING_LIBNCCL), never a crash at start; NCCL communicators refuse a host
 * engine and bad ranks before touching NCCL.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/nccl_lib.h"
#include "hm_test.h"
#include "params.h"

static void missing_library_is_named(void **state) {
  (void)state;
  setenv("HUMMING_LIBNCCL", "/nonexistent/libnccl.so.2", 1);
  hm_params_reload();
  hm_nccl_unload();
  hm_comm_nccl_id id;
  assert_int_equal(hm_comm_nccl_id_create(&id), HM_UNSUPPORTED);
  assert_non_null(strstr(hm_last_error(), "cannot open /nonexistent/libnccl.so.2"));
  assert_null(hm_nccl.ncclSend);
  unsetenv("HUMMING_LIBNCCL");
  hm_params_reload();
  hm_nccl_unload();
}

/* Where the toolkit ships NCCL, the table fills and the version is new enough. */
static void installed_library_fills_the_table(void **state) {
  (void)state;
  if (hm_nccl_load() != HM_OK) {
    printf("# no NCCL here: %s\n", hm_last_error());
    assert_non_null(strstr(hm_last_error(), "NCCL unavailable"));
    return;
  }
  int version = 0;
  assert_int_equal(hm_nccl.ncclGetVersion(&version), ncclSuccess);
  assert_true(version >= HM_NCCL_MIN_VERSION);
  assert_non_null(hm_nccl.ncclCommAbort);
  hm_nccl_unload();
  assert_null(hm_nccl.ncclCommAbort);
}

static void nccl_comm_refuses_bad_arguments(void **state) {
  (void)state;
  hm_engine *host = hm_test_host_engine();
  hm_comm_config cfg = HM_COMM_CONFIG_INIT;
  hm_comm_nccl_id id = {{0}};
  hm_comm *comm = (hm_comm *)&cfg; /* any non-NULL value: a failed create must clear it */
  assert_int_equal(hm_comm_create_nccl(host, &cfg, &id, 0, 1, &comm), HM_UNSUPPORTED);
  assert_null(comm);
  assert_non_null(strstr(hm_last_error(), "needs a CUDA engine, this one is host"));
  assert_int_equal(hm_comm_create_nccl(host, &cfg, &id, 2, 2, &comm), HM_INVALID_ARGUMENT);
  assert_non_null(strstr(hm_last_error(), "rank 2 of 2 ranks"));
  assert_int_equal(hm_comm_create_nccl(host, &cfg, NULL, 0, 1, &comm), HM_INVALID_ARGUMENT);
  hm_comm_destroy(NULL);
  hm_engine_destroy(host);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(missing_library_is_named),
      cmocka_unit_test(installed_library_fills_the_table),
      cmocka_unit_test(nccl_comm_refuses_bad_arguments),
  };
  int failed = cmocka_run_group_tests(tests, NULL, NULL);
  hm_shutdown();
  return failed;
}
