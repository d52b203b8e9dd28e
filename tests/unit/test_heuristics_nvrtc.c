/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The analytic choices compile: the kernel table of one preset's layers per profile
 * (sm_80 for a100, sm_90a for h20 and h200) generated and compiled with NVRTC through
 * the JIT, every kernel in one parallel batch. The compile cache in the build dir keeps
 * the second run fast.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "heuristics/choose.h"
#include "heuristics/choose_model.h"
#include "hm_test.h"
#include "kernels/gemm_gen.h"

#define MAX_KERNELS 256

static const char *const profiles[] = {"h20", "h200", "a100"};

static bool seen(const hm_gemm_source *gen, int count, const char *name) {
  for (int i = 0; i < count; i++)
    if (strcmp(gen[i].name, name) == 0) return true;
  return false;
}

/* The distinct kernels of every plan of a preset's layers on a profile. */
static int add_preset(const char *preset_name, const hm_device_profile *p, hm_gemm_source *gen, int count) {
  hm_model_preset preset;
  hm_quant_scheme scheme;
  hm_choose_model_layer layers[HM_CHOOSE_MODEL_MAX_LAYERS];
  int n = 0;
  HM_ASSERT_OK(hm_model_preset_get(preset_name, &preset));
  HM_ASSERT_OK(hm_quant_scheme_parse("w4a16", &scheme));
  HM_ASSERT_OK(hm_choose_model_layers(&preset, &scheme, 1, 1, layers, &n));
  for (int l = 0; l < n; l++) {
    hm_gemm_plan plan;
    const hm_gemm_type type = layers[l].config.experts == 1 ? HM_GEMM_DENSE : HM_GEMM_INDEXED;
    HM_ASSERT_OK(hm_choose_plan(&layers[l].config, type, p, &plan));
    for (int i = 0; i < plan.count && count < MAX_KERNELS; i++) {
      HM_ASSERT_OK(hm_gemm_gen(&plan.cfg[i], &gen[count]));
      if (seen(gen, count, gen[count].name)) hm_gemm_source_free(&gen[count]);
      else count++;
    }
  }
  return count;
}

static void chosen_configs_compile(void **state) {
  (void)state;
  hm_gemm_source *gen = calloc(MAX_KERNELS, sizeof(*gen));
  hm_kernel_source *src = calloc(MAX_KERNELS, sizeof(*src));
  const hm_cubin **cubins = calloc(MAX_KERNELS, sizeof(*cubins));
  assert_true(gen && src && cubins);
  int count = 0;
  for (size_t i = 0; i < sizeof(profiles) / sizeof(profiles[0]); i++) {
    hm_device_profile p;
    HM_ASSERT_OK(hm_device_profile_builtin(profiles[i], &p));
    count = add_preset("qwen3-30b-a3b", &p, gen, count);
  }
  for (int i = 0; i < count; i++) src[i] = gen[i].src;
  printf("# compiling %d chosen kernels\n", count);
  HM_ASSERT_OK(hm_jit_get_cubins(src, count, cubins));
  for (int i = 0; i < count; i++) {
    assert_non_null(cubins[i]);
    assert_true(cubins[i]->size > 0);
    hm_gemm_source_free(&gen[i]);
  }
  free(gen);
  free(src);
  free(cubins);
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(chosen_configs_compile)};
  int rc = cmocka_run_group_tests(tests, NULL, NULL);
  hm_shutdown();
  return rc;
}
