/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The real GEMM kernels of kernels/ compile with NVRTC for sm_80, sm_89 and sm_90a, and
 * their launch metadata reads back from the cubin; the kernel list of a model (what
 * precompile compiles) covers every layer and GEMM type once, with the kernels of the plan
 * it is given.
 */
#include <elf.h>
#include <string.h>

#include "check.h"
#include "kernels/gemm_launch.h"
#include "kernels/gemm_select.h"
#include "kernels/jit_model.h"
#include "test_jit_util.h"

static void gemm_compiles_for_sm80_sm89_sm90a(void **state) {
  (void)state;
  const struct {
    int arch;
    hm_dtype weight;
    hm_gemm_type type;
  } cases[] = {{80, HM_U4, HM_GEMM_DENSE}, {89, HM_U8, HM_GEMM_INDEXED}, {90, HM_U4, HM_GEMM_GROUPED_MASKED}};
  for (size_t i = 0; i < HM_ARRAY_SIZE(cases); i++) {
    hm_gemm_config base = {0}, cfg;
    base.layer =
        (hm_gemm_layer_part){cases[i].weight,   HM_BF16, HM_BF16, 128, true, false, false, 2048, 4096, 8, 0,
                             HM_ACT_SCALE_NONE, false};
    base.compute.type = cases[i].type;
    base.arch = cases[i].arch;
    HM_ASSERT_OK(hm_gemm_select(&base, 1, &cfg));
    hm_gemm_source gen;
    HM_ASSERT_OK(hm_gemm_gen(&cfg, &gen));
    gen.src.arch_specific = cases[i].arch == 90;
    const hm_cubin *c = NULL;
    HM_ASSERT_OK(hm_jit_get_cubin(&gen.src, &c));
    Elf64_Ehdr eh;
    memcpy(&eh, c->data, sizeof(eh));
    assert_memory_equal(eh.e_ident, ELFMAG, SELFMAG);
    assert_int_equal((eh.e_flags >> 8) & 0xff, cases[i].arch);
    hm_kernel_meta meta;
    HM_ASSERT_OK(hm_cubin_kernel_meta(c, gen.name, &meta));
    assert_true(meta.present);
    assert_int_equal(meta.threads, hm_gemm_config_threads(&cfg));
    assert_int_equal(meta.shared_bytes, hm_gemm_config_smem_bytes(&cfg));
    printf("# sm_%d%s %s: %zu bytes, %.2f s (%.2f s CPU)\n", cases[i].arch, gen.src.arch_specific ? "a" : "",
           gen.name, c->size, c->seconds, c->cpu_seconds);
    hm_gemm_source_free(&gen);
  }
  hm_jit_stats st;
  hm_jit_get_stats(&st);
  assert_int_equal(st.compiled, 3);
  assert_int_equal(st.failed, 0);
}

/* A dense decode tile run one CTA an SM under programmatic launch (sm_90) is launched with
 * over half an SM's shared memory, so that no CTA of the next grid enters beside it (it
 * fills before the grid dependency, kernels/gemm_pdl.cuh); no other launch is padded. */
static void decode_tiles_alone_on_an_sm_take_over_half_its_shared_memory(void **state) {
  (void)state;
  hm_gemm_config base = {0}, cfg;
  base.layer = (hm_gemm_layer_part){HM_U4, HM_BF16, HM_BF16,           128,  true, false, false, 8192, 8192,
                                    1,     0,       HM_ACT_SCALE_NONE, false};
  base.compute.type = HM_GEMM_DENSE;
  base.arch = 90;
  const size_t half_sm = 114 * 1024; /* of sm_90's 228 KiB, 1 KiB of it reserved a CTA */
  for (int64_t m = 1; m <= 16; m *= 16) {
    HM_ASSERT_OK(hm_gemm_select(&base, m, &cfg));
    assert_true(cfg.tuning.bm <= 16 && cfg.tuning.ctas_per_sm == 1);
    assert_true(hm_gemm_exclusive_sm(&cfg));
    assert_true(hm_gemm_config_smem_bytes(&cfg) < half_sm);
    assert_int_equal(hm_gemm_launch_smem_bytes(&cfg), half_sm);
    hm_gemm_config other = cfg;
    other.tuning.ctas_per_sm = 2;
    assert_false(hm_gemm_exclusive_sm(&other));
    other = cfg;
    other.arch = 80;
    assert_false(hm_gemm_exclusive_sm(&other));
    other = cfg;
    other.compute.type = HM_GEMM_GROUPED_MASKED;
    assert_false(hm_gemm_exclusive_sm(&other));
    assert_int_equal(hm_gemm_launch_smem_bytes(&other), hm_gemm_config_smem_bytes(&other));
  }
  HM_ASSERT_OK(hm_gemm_select(&base, 4096, &cfg));
  assert_false(hm_gemm_exclusive_sm(&cfg));
  assert_int_equal(hm_gemm_launch_smem_bytes(&cfg), hm_gemm_config_smem_bytes(&cfg));
}

static void model_kernel_list_covers_every_gemm(void **state) {
  (void)state;
  hm_model_kernel_request req = {"deepseek-v3", "w4a16", 90, 1, 1, NULL, NULL};
  hm_model_kernels k;
  HM_ASSERT_OK(hm_model_kernels_make(&req, &k));
  int idx = 0, gcont = 0, masked = 0, dense = 0;
  for (int i = 0; i < k.count; i++) {
    assert_ptr_equal(k.items[i].src.name, k.items[i].name);
    for (int j = 0; j < i; j++) assert_string_not_equal(k.items[i].name, k.items[j].name);
    idx += strstr(k.items[i].name, "_idx_") != NULL;
    gcont += strstr(k.items[i].name, "_gcont_") != NULL;
    masked += strstr(k.items[i].name, "_gmask") != NULL;
    dense += strstr(k.items[i].name, "_dense_") != NULL;
  }
  /* Two routed-expert GEMMs in three layouts, plus dense shared-expert and MLP GEMMs. */
  assert_true(idx >= 2 && idx == gcont && idx == masked);
  assert_true(dense >= 2);
  assert_int_equal(idx + gcont + masked + dense, k.count);
  hm_model_kernels_free(&k);

  req.ep = 7; /* 256 experts do not split over 7 ranks */
  assert_int_equal(hm_model_kernels_make(&req, &k), HM_INVALID_ARGUMENT);
  assert_non_null(strstr(hm_last_error(), "ep 7"));
  req.ep = 1;
  req.quant = "w3a99";
  assert_int_equal(hm_model_kernels_make(&req, &k), HM_INVALID_ARGUMENT);
  assert_non_null(strstr(hm_last_error(), "w3a99"));
  req.quant = "w4a16";
  req.model = "no-such-model";
  assert_int_equal(hm_model_kernels_make(&req, &k), HM_INVALID_ARGUMENT);
}

/* One fixed kernel for every GEMM, counting the layers and types it is asked for. */
static hm_status one_kernel_plan(void *ctx, const hm_layer_config *lc, hm_gemm_type type, int arch,
                                 hm_gemm_plan *out) {
  int *calls = ctx;
  ++*calls;
  memset(out, 0, sizeof(*out));
  HM_CHECK(hm_gemm_config_from_layer(lc, type, arch, &out->cfg[0]));
  out->count = 1;
  out->m_hi[0] = INT64_MAX;
  return hm_gemm_tuning_parse("bm64_bn256_bk128_w1x4x2_s4_sk4_c1", &out->cfg[0].tuning);
}

static hm_status refusing_plan(void *ctx, const hm_layer_config *lc, hm_gemm_type type, int arch,
                               hm_gemm_plan *out) {
  (void)ctx, (void)lc, (void)type, (void)arch, (void)out;
  HM_FAIL(HM_UNSUPPORTED, "no plan for this test");
}

/* The request's plan (humming-moe precompile passes the layers' plan source) decides every
 * kernel, one call per layer and GEMM type; its failure is the list's. */
static void model_kernel_list_follows_the_plan(void **state) {
  (void)state;
  int calls = 0;
  hm_model_kernel_request req = {"deepseek-v3", "w4a16", 90, 1, 1, one_kernel_plan, &calls};
  hm_model_kernels k;
  HM_ASSERT_OK(hm_model_kernels_make(&req, &k));
  /* Routed experts: gate_up and down in three layouts; dense: shared experts and MLP layers. */
  assert_true(calls >= 8);
  assert_int_equal(k.count, calls);
  for (int i = 0; i < k.count; i++) assert_non_null(strstr(k.items[i].name, "_m64n256k128_w1x4x2_s4_sk4_c1"));
  hm_model_kernels_free(&k);
  req.plan = refusing_plan;
  assert_int_equal(hm_model_kernels_make(&req, &k), HM_UNSUPPORTED);
  assert_non_null(strstr(hm_last_error(), "no plan for this test"));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(gemm_compiles_for_sm80_sm89_sm90a, tj_setup, tj_teardown),
      cmocka_unit_test(decode_tiles_alone_on_an_sm_take_over_half_its_shared_memory),
      cmocka_unit_test(model_kernel_list_covers_every_gemm),
      cmocka_unit_test(model_kernel_list_follows_the_plan),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
