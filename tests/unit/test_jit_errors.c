/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Failures of the JIT: a compile error names the kernel, the error line and the path
 * of its log; an injected NVRTC failure; bad sources and settings are refused with
 * the bad value named; a failed kernel leaves no loadable entry.
 */
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "kernels/nvrtc.h"
#include "test_jit_util.h"

static int cleanup(void **state) {
  hm_nvrtc_restore();
  return tj_teardown(state);
}

static void compile_error_names_kernel_and_log(void **state) {
  (void)state;
  hm_kernel_source src = {
      .name = "hm_broken",
      .source = "extern \"C\" __global__ void hm_broken(float *p) { p[0] = undeclared_name; }\n",
      .arch = 80};
  const hm_cubin *c = (const hm_cubin *)&src;
  assert_int_equal(hm_jit_get_cubin(&src, &c), HM_NVRTC);
  assert_null(c);
  const char *msg = hm_last_error();
  assert_non_null(strstr(msg, "kernel hm_broken failed to compile for sm_80"));
  assert_non_null(strstr(msg, "undeclared_name"));
  const char *log = strstr(msg, "log: ");
  assert_non_null(log);
  char path[PATH_MAX];
  assert_int_equal(sscanf(log + 5, "%4095s", path), 1);
  assert_non_null(strstr(path, tj_cache_dir)); /* kept in the entry, beside its source */
  FILE *f = fopen(path, "r");
  assert_non_null(f);
  char text[4096] = "";
  size_t n = fread(text, 1, sizeof(text) - 1, f);
  fclose(f);
  assert_true(n > 0);
  assert_non_null(strstr(text, "undeclared_name"));
  char *slash = strrchr(path, '/');
  snprintf(slash, sizeof(path) - (size_t)(slash - path), "/kernel.cubin");
  assert_false(tj_exists(path)); /* a failed compile is never a loadable entry */
  hm_jit_stats st;
  hm_jit_get_stats(&st);
  assert_int_equal(st.failed, 1);
  assert_int_equal(st.compiled, 0);

  /* Asked again, it is compiled again (and fails the same way), not served as broken. */
  assert_int_equal(hm_jit_get_cubin(&src, &c), HM_NVRTC);
  hm_jit_get_stats(&st);
  assert_int_equal(st.failed, 2);
  assert_int_equal(st.broken, 0);
}

static nvrtcResult refuse_to_compile(nvrtcProgram prog, int n, const char *const *options) {
  (void)prog, (void)n, (void)options;
  return NVRTC_ERROR_BUILTIN_OPERATION_FAILURE;
}

static void injected_nvrtc_failure(void **state) {
  (void)state;
  tj_axpy k;
  tj_axpy_make(&k, 0, 80, false);
  hm_nvrtc.nvrtcCompileProgram = refuse_to_compile;
  const hm_cubin *c = NULL;
  assert_int_equal(hm_jit_get_cubin(&k.src, &c), HM_NVRTC);
  assert_non_null(strstr(hm_last_error(), k.name));
  assert_non_null(strstr(hm_last_error(), "NVRTC_ERROR_BUILTIN_OPERATION_FAILURE"));
  hm_nvrtc_restore();
  HM_ASSERT_OK(hm_jit_get_cubin(&k.src, &c)); /* a failure is not remembered as final */
  assert_false(c->from_cache);
}

static void bad_sources_are_refused(void **state) {
  (void)state;
  tj_axpy k;
  tj_axpy_make(&k, 0, 80, false);
  const hm_cubin *c = NULL;
  struct {
    const char *what;
    hm_kernel_source src;
    const char *named;
  } cases[] = {
      {"arch", k.src, "arch 70"},
      {"arch-specific", k.src, "sm_80a"},
      {"name", k.src, "not a C identifier"},
      {"options", k.src, "-arch=sm_90"},
      {"headers", k.src, "header_count 2"},
  };
  cases[0].src.arch = 70;
  cases[1].src.arch_specific = true;
  cases[2].src.name = "bad name";
  cases[3].src.options = "-O3 -arch=sm_90";
  cases[4].src.headers = NULL;
  cases[4].src.header_count = 2;
  for (size_t i = 0; i < HM_ARRAY_SIZE(cases); i++) {
    assert_int_equal(hm_jit_get_cubin(&cases[i].src, &c), HM_INVALID_ARGUMENT);
    if (strstr(hm_last_error(), cases[i].named) == NULL) fail_msg("%s: %s", cases[i].what, hm_last_error());
  }
  assert_int_equal(hm_jit_get_cubin(NULL, &c), HM_INVALID_ARGUMENT);
  hm_jit_stats st;
  hm_jit_get_stats(&st);
  assert_int_equal(st.compiled + st.failed, 0);
}

static void unknown_compiler_is_refused(void **state) {
  (void)state;
  setenv("HUMMING_COMPILER", "clang", 1);
  hm_shutdown();
  tj_axpy k;
  tj_axpy_make(&k, 0, 80, false);
  const hm_cubin *c = NULL;
  assert_int_equal(hm_jit_get_cubin(&k.src, &c), HM_INVALID_ARGUMENT);
  assert_non_null(strstr(hm_last_error(), "HUMMING_COMPILER=clang"));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(compile_error_names_kernel_and_log, tj_setup, cleanup),
      cmocka_unit_test_setup_teardown(injected_nvrtc_failure, tj_setup, cleanup),
      cmocka_unit_test_setup_teardown(bad_sources_are_refused, tj_setup, cleanup),
      cmocka_unit_test_setup_teardown(unknown_compiler_is_refused, tj_setup, cleanup),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
