/* SPDX-License-Identifier: Apache-2.0 */
/* Status strings, last error, dtype table, version. */
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "dtype.h"
#include "hm_test.h"

static void status_strings_are_distinct(void **state) {
  (void)state;
  for (int i = 0; i < HM_STATUS_COUNT; i++) {
    assert_non_null(hm_status_str((hm_status)i));
    for (int j = 0; j < i; j++) assert_string_not_equal(hm_status_str((hm_status)i), hm_status_str((hm_status)j));
  }
  assert_string_equal(hm_status_str((hm_status)999), "unknown status");
}

static hm_status fails_with_context(int value) {
  HM_FAIL(HM_INVALID_ARGUMENT, "value %d is out of range", value);
}

static hm_status passes_failure_up(void) {
  HM_CHECK(fails_with_context(42));
  return HM_OK;
}

static void last_error_names_cause_and_place(void **state) {
  (void)state;
  hm_error_clear();
  assert_string_equal(hm_last_error(), "");
  assert_int_equal(passes_failure_up(), HM_INVALID_ARGUMENT);
  assert_non_null(strstr(hm_last_error(), "value 42 is out of range"));
  assert_non_null(strstr(hm_last_error(), "test_core.c:"));
  assert_non_null(strstr(hm_last_error(), "invalid argument"));
}

/* A probe's failures answer the prober and leave the thread's last error as it was. */
static void quiet_probes_keep_the_last_error(void **state) {
  (void)state;
  hm_error_clear();
  assert_int_equal(passes_failure_up(), HM_INVALID_ARGUMENT);
  hm_error_quiet_begin();
  hm_error_quiet_begin();
  assert_int_equal(fails_with_context(7), HM_INVALID_ARGUMENT);
  assert_non_null(strstr(hm_last_error(), "value 7 is out of range"));
  hm_error_quiet_end();
  assert_non_null(strstr(hm_last_error(), "value 7 is out of range"));
  hm_error_quiet_end();
  assert_non_null(strstr(hm_last_error(), "value 42 is out of range"));
  hm_error_quiet_end(); /* unbalanced: ignored */
  assert_non_null(strstr(hm_last_error(), "value 42 is out of range"));
}

static void dtype_table_round_trips(void **state) {
  (void)state;
  for (int i = 0; i < HM_DTYPE_COUNT; i++) {
    hm_dtype parsed;
    HM_ASSERT_OK(hm_dtype_parse(hm_dtype_name((hm_dtype)i), &parsed));
    assert_int_equal(parsed, i);
    assert_true(hm_dtype_bits((hm_dtype)i) >= 1 && hm_dtype_bits((hm_dtype)i) <= 32);
  }
  assert_int_equal(hm_dtype_bits(HM_U3), 3);
  assert_int_equal(hm_dtype_bits(HM_BF16), 16);
  assert_int_equal(hm_dtype_bits((hm_dtype)-1), 0);
  hm_dtype d;
  assert_int_equal(hm_dtype_parse("f7", &d), HM_INVALID_ARGUMENT);
  assert_int_equal(hm_dtype_parse(NULL, &d), HM_INVALID_ARGUMENT);
}

static void dtype_row_bytes_round_sub_byte_rows_to_words(void **state) {
  (void)state;
  assert_int_equal(hm_dtype_row_bytes(HM_BF16, 7), 14);
  assert_int_equal(hm_dtype_row_bytes(HM_U4, 8), 4);
  assert_int_equal(hm_dtype_row_bytes(HM_U4, 9), 8);
  assert_int_equal(hm_dtype_row_bytes(HM_U3, 32), 12);
}

static void version_matches_header(void **state) {
  (void)state;
  char expect[32];
  snprintf(expect, sizeof(expect), "%d.%d.%d", HM_VERSION_MAJOR, HM_VERSION_MINOR, HM_VERSION_PATCH);
  assert_string_equal(hm_get_version(), expect);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(status_strings_are_distinct),
      cmocka_unit_test(last_error_names_cause_and_place),
      cmocka_unit_test(quiet_probes_keep_the_last_error),
      cmocka_unit_test(dtype_table_round_trips),
      cmocka_unit_test(dtype_row_bytes_round_sub_byte_rows_to_words),
      cmocka_unit_test(version_matches_header),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
