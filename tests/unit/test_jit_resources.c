/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What ptxas gave a kernel, read back from its cubin on the CPU: the register count, and
 * the stack frame that register spills need. NVRTC compiles tj_spill_source (one kernel
 * that must spill, one that fits); a corrupt image and an unknown kernel name are refused.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "hm_test.h"
#include "kernels/jit.h"
#include "test_jit_util.h"

static void compile(int arch, bool arch_specific, hm_cubin *out) {
  const hm_kernel_source src = {
      .name = "hm_spill", .source = tj_spill_source, .arch = arch, .arch_specific = arch_specific};
  HM_ASSERT_OK(hm_jit_compile_uncached(&src, out));
}

static void spills_show_as_a_stack_frame(void **state) {
  (void)state;
  const struct {
    int arch;
    bool specific;
  } targets[] = {{80, false}, {90, true}};
  for (size_t t = 0; t < HM_ARRAY_SIZE(targets); t++) {
    hm_cubin c;
    compile(targets[t].arch, targets[t].specific, &c);
    hm_kernel_resources spills, fits;
    HM_ASSERT_OK(hm_cubin_kernel_resources(&c, "hm_spill", &spills));
    HM_ASSERT_OK(hm_cubin_kernel_resources(&c, "hm_fits", &fits));
    printf("# sm_%d: hm_spill %u registers, %u bytes of stack; hm_fits %u registers, %u bytes\n",
           targets[t].arch, spills.registers, spills.local_bytes, fits.registers, fits.local_bytes);
    assert_true(spills.registers > 0 && spills.registers <= 32);
    assert_true(spills.local_bytes > 0);
    assert_true(fits.registers > 0);
    assert_int_equal(fits.local_bytes, 0);
    hm_jit_cubin_free(&c);
  }
}

static void bad_images_and_names_are_refused(void **state) {
  (void)state;
  hm_cubin c;
  compile(80, false, &c);
  hm_kernel_resources r;
  assert_int_equal(hm_cubin_kernel_resources(&c, "hm_absent", &r), HM_INVALID_ARGUMENT);
  assert_non_null(strstr(hm_last_error(), "hm_absent"));
  memset(c.data, 0, 16);
  assert_int_equal(hm_cubin_kernel_resources(&c, "hm_spill", &r), HM_CORRUPT);
  hm_jit_cubin_free(&c);
  const hm_cubin empty = {0};
  assert_int_equal(hm_cubin_kernel_resources(&empty, "hm_spill", &r), HM_CORRUPT);
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(spills_show_as_a_stack_frame),
                                     cmocka_unit_test(bad_images_and_names_are_refused)};
  int rc = cmocka_run_group_tests(tests, NULL, NULL);
  hm_shutdown();
  return rc;
}
