/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Every kernel a MoE layer's forward may launch (router, alignment, decode front,
 * permutation, activations, combine) compiles with NVRTC for sm_80 and sm_90, as the
 * layer asks for them at transform (hm_moe_compile_kernels), for the presets' routers,
 * widths and shared experts and for 16- and 8-bit activations. On the fake driver: no GPU.
 */
#include "check.h"
#include "hm_fake_cuda.h"
#include "moe/layer_internal.h"
#include "test_jit_util.h"

static void compile_for(int arch, const char *model, const char *quant) {
  hm_fake_cuda_install();
  hm_engine engine = hm_fake_cuda_engine(arch);
  hm_moe_config c = HM_MOE_CONFIG_INIT;
  HM_ASSERT_OK(hm_moe_config_for_model(model, &c));
  HM_ASSERT_OK(hm_quant_scheme_parse(quant, &c.scheme));
  hm_moe_layer *l = NULL;
  HM_ASSERT_OK(hm_moe_layer_create(&engine, &c, &l));
  HM_ASSERT_OK(hm_moe_compile_kernels(l));
  const hm_moe_kernels *k = &l->kernels;
  assert_non_null(k->router);
  assert_non_null(k->align.fused);
  assert_non_null(k->align.scatter);
  assert_non_null(k->permute);
  assert_non_null(k->act);
  assert_non_null(k->combine);
  assert_int_equal(k->front != NULL, hm_moe_front_fits(c.router.experts + l->shared_fused, c.router.top_k));
  assert_int_equal(k->convert_x != NULL, c.scheme.act != HM_BF16);
  printf("# sm_%d %s %s: every kernel compiled\n", arch, model, quant);
  hm_moe_layer_destroy(l);
  hm_shutdown();
}

static void every_kernel_compiles(void **state) {
  (void)state;
  const struct {
    const char *model, *quant;
    int min_arch; /* the layer's GEMMs refuse older devices */
  } cases[] = {
      {"deepseek-v3", "w4a16", 80},       /* grouped sigmoid router, shared expert run as expert 256 */
      {"deepseek-v3", "w8a8-fp8", 89},    /* fp8 activations with 1x128 scales */
      {"qwen3-30b-a3b", "w4a16", 80},     /* softmax router, no shared expert */
      {"mixtral-8x7b", "w4a8-mxfp4", 89}, /* eight experts, top 2 */
  };
  const int archs[] = {80, 90};
  for (size_t a = 0; a < HM_ARRAY_SIZE(archs); a++)
    for (size_t i = 0; i < HM_ARRAY_SIZE(cases); i++)
      if (archs[a] >= cases[i].min_arch) compile_for(archs[a], cases[i].model, cases[i].quant);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(every_kernel_compiles, tj_setup, tj_teardown)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
