/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What ptxas gave a kernel, read back from its cubin on the CPU: the register count, and
 * the stack frame that register spills need. NVRTC compiles tj_spill_source (one kernel
 * that must spill, one that fits); a corrupt image and an unknown kernel name are refused.
 * A kernel whose wgmmas ptxas had to serialize compiles, with a warning that names it,
 * and a process that loads it from the cache warns again.
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

/* Two wgmmas of one pipeline stage with the accumulators written between them by a plain
 * multiply: ptxas inserts a wait and serializes the pipeline (C7511). */
static const char serialized_source[] =
    "#define MMA \"wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 {%0, %1, %2, %3}, \" \\\n"
    "  \"{%4, %5, %6, %7}, %8, 1, 1, 1, 0;\\n\"\n"
    "#define ACC \"+f\"(d[0]), \"+f\"(d[1]), \"+f\"(d[2]), \"+f\"(d[3])\n"
    "#define IN \"r\"(a[0]), \"r\"(a[1]), \"r\"(a[2]), \"r\"(a[3]), \"l\"(desc)\n"
    "extern \"C\" __global__ void __launch_bounds__(128) hm_serialized(const unsigned *x,\n"
    "                                                              unsigned long long desc, float *y) {\n"
    "  float d[4] = {0, 0, 0, 0};\n"
    "  unsigned a[4];\n"
    "  for (int i = 0; i < 4; i++) a[i] = x[threadIdx.x + 128 * i];\n"
    "  asm volatile(\"wgmma.fence.sync.aligned;\\n\");\n"
    "  asm volatile(MMA : ACC : IN);\n"
    "  d[0] *= 3.0f;\n"
    "  asm volatile(MMA : ACC : IN);\n"
    "  asm volatile(\"wgmma.commit_group.sync.aligned;\\n\");\n"
    "  asm volatile(\"wgmma.wait_group.sync.aligned 0;\\n\" : ACC);\n"
    "  y[threadIdx.x] = d[0] + d[1] + d[2] + d[3];\n"
    "}\n";

static int slow_warnings, named_warnings;

static void count_slow_warnings(hm_log_level level, const char *line, void *user) {
  (void)user;
  if (level != HM_LOG_WARN || strstr(line, "compiled slow") == NULL) return;
  slow_warnings++;
  if (strstr(line, "hm_serialized") && strstr(line, "Performance Loss")) named_warnings++;
}

static const hm_kernel_source serialized = {
    .name = "hm_serialized", .source = serialized_source, .arch = 90, .arch_specific = true};

/* Counts the slow-compile warnings logged from now on, from zero. */
static void listen_for_slow_warnings(void) {
  slow_warnings = named_warnings = 0;
  hm_log_set(count_slow_warnings, NULL);
}

static void serialized_wgmma_is_a_warning(void **state) {
  (void)state;
  listen_for_slow_warnings();
  hm_cubin c;
  const hm_status st = hm_jit_compile_uncached(&serialized, &c);
  hm_log_set(NULL, NULL);
  HM_ASSERT_OK(st);
  assert_int_equal(slow_warnings, 1);
  assert_int_equal(named_warnings, 1);
  hm_jit_cubin_free(&c);

  /* A compile without the note says nothing (hm_spill: spills, but no wgmma). */
  hm_log_set(count_slow_warnings, NULL);
  compile(90, true, &c);
  hm_log_set(NULL, NULL);
  assert_int_equal(slow_warnings, 1);
  hm_jit_cubin_free(&c);
}

/* A process that loads the kernel from the cache says so too, from the entry's log. */
static void serialized_wgmma_from_the_cache_is_a_warning(void **state) {
  (void)state;
  listen_for_slow_warnings();
  const hm_cubin *c = NULL;
  HM_ASSERT_OK(hm_jit_get_cubin(&serialized, &c));
  assert_false(c->from_cache);
  hm_shutdown(); /* forgets the kernel: the next get reads the cache entry */
  hm_log_set(count_slow_warnings, NULL);
  HM_ASSERT_OK(hm_jit_get_cubin(&serialized, &c));
  assert_true(c->from_cache);
  HM_ASSERT_OK(hm_jit_get_cubin(&serialized, &c)); /* in memory now: said once a process */
  hm_log_set(NULL, NULL);
  assert_int_equal(named_warnings, 2);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(spills_show_as_a_stack_frame), cmocka_unit_test(bad_images_and_names_are_refused),
      cmocka_unit_test(serialized_wgmma_is_a_warning),
      cmocka_unit_test_setup_teardown(serialized_wgmma_from_the_cache_is_a_warning, tj_setup, tj_teardown)};
  int rc = cmocka_run_group_tests(tests, NULL, NULL);
  hm_shutdown();
  return rc;
}
