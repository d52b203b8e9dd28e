/* SPDX-License-Identifier: Apache-2.0 */
/*
 * HUMMING_COMPILER=nvcc: the same kernel compiles with nvcc (its headers written to a
 * private work dir), the key differs from NVRTC's, the entry keeps nvcc's command, and
 * a compile error names the kernel and its log.
 */
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "params.h"
#include "test_jit_util.h"

static void use_nvcc(void) {
  setenv("HUMMING_COMPILER", "nvcc", 1);
  hm_shutdown();
}

static void nvcc_compiles_with_its_own_key(void **state) {
  (void)state;
  tj_axpy k;
  tj_axpy_make(&k, 3, 89, false);
  const hm_cubin *c = NULL;
  HM_ASSERT_OK(hm_jit_get_cubin(&k.src, &c));
  char nvrtc_key[65];
  memcpy(nvrtc_key, c->key, sizeof(nvrtc_key));

  use_nvcc();
  HM_ASSERT_OK(hm_jit_get_cubin(&k.src, &c));
  assert_false(c->from_cache);
  assert_string_not_equal(c->key, nvrtc_key);
  assert_memory_equal(c->data, "\177ELF", 4);
  int vec = 0;
  HM_ASSERT_OK(hm_cubin_read_symbol(c, "hm_axpy_vec", &vec, sizeof(vec)));
  assert_int_equal(vec, 8);
  hm_kernel_meta meta;
  HM_ASSERT_OK(hm_cubin_kernel_meta(c, k.name, &meta));
  assert_int_equal(meta.threads, 256);
  printf("# nvcc: %zu bytes in %.3f s\n", c->size, c->seconds);

  char path[PATH_MAX], line[1024] = "";
  tj_entry_file(tj_cache_dir, c->key, "options.txt", path, sizeof(path));
  FILE *f = fopen(path, "r");
  assert_non_null(f);
  assert_non_null(fgets(line, sizeof(line), f));
  fclose(f);
  assert_non_null(strstr(line, "/bin/nvcc -cubin -arch=sm_89"));

  hm_shutdown();
  HM_ASSERT_OK(hm_jit_get_cubin(&k.src, &c)); /* nvcc's entry is found again */
  assert_true(c->from_cache);
}

static void nvcc_error_names_kernel_and_log(void **state) {
  (void)state;
  use_nvcc();
  hm_kernel_source src = {.name = "hm_nvcc_broken",
                          .source = "extern \"C\" __global__ void hm_nvcc_broken(int *p) { p[0] = nope; }\n",
                          .arch = 80};
  const hm_cubin *c = NULL;
  assert_int_equal(hm_jit_get_cubin(&src, &c), HM_NVRTC);
  assert_non_null(strstr(hm_last_error(), "kernel hm_nvcc_broken failed to compile"));
  assert_non_null(strstr(hm_last_error(), "nope"));
  assert_non_null(strstr(hm_last_error(), "log.txt"));
}

static void missing_nvcc_is_unsupported(void **state) {
  (void)state;
  setenv("HUMMING_CUDA_HOME", "/nonexistent-cuda", 1);
  use_nvcc();
  tj_axpy k;
  tj_axpy_make(&k, 0, 80, false);
  const hm_cubin *c = NULL;
  assert_int_equal(hm_jit_get_cubin(&k.src, &c), HM_UNSUPPORTED);
  assert_non_null(strstr(hm_last_error(), "/nonexistent-cuda/bin/nvcc"));
  unsetenv("HUMMING_CUDA_HOME");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(nvcc_compiles_with_its_own_key, tj_setup, tj_teardown),
      cmocka_unit_test_setup_teardown(nvcc_error_names_kernel_and_log, tj_setup, tj_teardown),
      cmocka_unit_test_setup_teardown(missing_nvcc_is_unsupported, tj_setup, tj_teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
