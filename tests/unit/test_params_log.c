/* SPDX-License-Identifier: Apache-2.0 */
/* The parameter table (bounds, defaults, --help-env) and the logger (levels, subsystems, callback). */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "hm_test.h"
#include "log.h"
#include "params.h"

static void int_param_reads_env_and_keeps_bounds(void **state) {
  (void)state;
  setenv("HUMMING_JIT_THREADS", "7", 1);
  hm_params_reload();
  assert_int_equal(hm_param_jit_threads(), 7);
  setenv("HUMMING_JIT_THREADS", "100000", 1);
  hm_params_reload();
  assert_int_equal(hm_param_jit_threads(), 0);
  setenv("HUMMING_JIT_THREADS", "seven", 1);
  hm_params_reload();
  assert_int_equal(hm_param_jit_threads(), 0);
  unsetenv("HUMMING_JIT_THREADS");
  hm_params_reload();
  assert_int_equal(hm_param_jit_threads(), 0);
}

static void string_param_defaults(void **state) {
  (void)state;
  unsetenv("HUMMING_BACKEND");
  hm_params_reload();
  assert_string_equal(hm_param_backend(), "auto");
  setenv("HUMMING_BACKEND", "host", 1);
  hm_params_reload();
  assert_string_equal(hm_param_backend(), "host");
  unsetenv("HUMMING_BACKEND");
  hm_params_reload();
}

static void help_env_lists_every_variable(void **state) {
  (void)state;
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  hm_params_print(f);
  fclose(f);
  const char *names[] = {"HUMMING_LOG", "HUMMING_BACKEND", "HUMMING_JIT_THREADS", "HUMMING_CACHE_DIR",
                         "HUMMING_COMPILER", "HUMMING_COMM_TIMEOUT", "HUMMING_DEVICE_PROFILE"};
  for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) assert_non_null(strstr(buf, names[i]));
  free(buf);
}

struct captured {
  int lines;
  char last[512];
};

static void capture(hm_log_level level, const char *line, void *user) {
  (void)level;
  struct captured *c = user;
  c->lines++;
  snprintf(c->last, sizeof(c->last), "%s", line);
}

static void log_filters_by_level_and_subsystem(void **state) {
  (void)state;
  struct captured c = {0};
  setenv("HUMMING_LOG", "info", 1);
  setenv("HUMMING_LOG_SUBSYS", "^COMM", 1);
  hm_params_reload();
  hm_log_reset();
  hm_log_set(capture, &c);
  hm_log_set_rank(3, 1);
  HM_INFO(JIT, "compiled %d kernels", 5);
  assert_int_equal(c.lines, 1);
  assert_non_null(strstr(c.last, "[rank 3/dev 1] INFO JIT compiled 5 kernels"));
  HM_INFO(COMM, "hidden");
  HM_DEBUG(JIT, "hidden");
  assert_int_equal(c.lines, 1);
  HM_ERROR(GEMM, "shown");
  assert_int_equal(c.lines, 2);
  hm_log_set(NULL, NULL);
  hm_log_set_rank(-1, -1);
  unsetenv("HUMMING_LOG");
  unsetenv("HUMMING_LOG_SUBSYS");
  hm_params_reload();
  hm_log_reset();
}

static void log_file_pattern_expands_pid(void **state) {
  (void)state;
  char dir[] = "/tmp/hm-log-XXXXXX";
  assert_non_null(mkdtemp(dir));
  char pattern[128], path[160];
  snprintf(pattern, sizeof(pattern), "%s/log.%%p", dir);
  snprintf(path, sizeof(path), "%s/log.%d", dir, (int)getpid());
  setenv("HUMMING_LOG_FILE", pattern, 1);
  hm_params_reload();
  hm_log_reset();
  HM_WARN(INIT, "to the file");
  hm_log_reset();
  FILE *f = fopen(path, "r");
  assert_non_null(f);
  char line[512] = {0};
  assert_non_null(fgets(line, sizeof(line), f));
  fclose(f);
  assert_non_null(strstr(line, "WARN INIT to the file"));
  unlink(path);
  rmdir(dir);
  unsetenv("HUMMING_LOG_FILE");
  hm_params_reload();
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(int_param_reads_env_and_keeps_bounds),
      cmocka_unit_test(string_param_defaults),
      cmocka_unit_test(help_env_lists_every_variable),
      cmocka_unit_test(log_filters_by_level_and_subsystem),
      cmocka_unit_test(log_file_pattern_expands_pid),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
