/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Every W4A8 GEMM variant compiles with NVRTC: int4 x int8 (sm_80, sm_89, sm_90a), mxfp4
 * and nvfp4 (with and without a global scale, and with f16 accumulation) x fp8 e4m3 (sm_89,
 * sm_90a), each with per-token or 1x128 activation scales, f16 or bf16 output, bias; every
 * GEMM type (each plan entry of one, the first (the swapped 8-row tile) and last entries of
 * the others), the swapped tunings the device tests force, on a GEMM type per variant, and
 * the transform kernels. Also the plans (mma.sync only: W4A8 has no wgmma kernel), the
 * refusals (e2m1 with other scales, mxfp4 with a global scale, fp8 before sm_89, a forced
 * wgmma tile, nvfp4 with two units a warp at bk 256, f16 codes for int4), the kernel names
 * and the transform's sizes. The e2m1 kernels and transforms of sm_90 take the f16 codes,
 * those of sm_89 fp8 operands.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "heuristics/choose.h"
#include "heuristics/device_profile.h"
#include "hm_test.h"
#include "kernels/gemm_config_w8a8.h"
#include "kernels/gemm_select.h"
#include "kernels/transform.h"
#include "model_layers.h"
#include "model_presets.h"
#include "test_gemm_compile.h"

#define MXFP4 \
  { HM_F4E2M1, HM_E8M0, HM_SCALE_GROUP, 32, 0, false, false }
/* gs: the per-expert f32 global scale of nvfp4 checkpoints. */
#define NVFP4(gs) \
  { HM_F4E2M1, HM_F8E4M3, HM_SCALE_GROUP, 16, 0, false, gs }
#define INT4 \
  { HM_I4, HM_F32, HM_SCALE_CHANNEL, 0, 0, false, false }

typedef struct variant {
  hm_quant_format fmt; /* int4 (int8 activations), mxfp4 or nvfp4 (fp8 activations) */
  hm_act_scale_kind act_scale;
  hm_dtype out;
  bool bias;
  bool f16_acc;
} variant;

static const variant variants[] = {
    {MXFP4, HM_ACT_SCALE_TOKEN, HM_BF16, false, false},
    {MXFP4, HM_ACT_SCALE_GROUP128, HM_F16, true, false},
    {INT4, HM_ACT_SCALE_TOKEN, HM_BF16, true, false},
    {INT4, HM_ACT_SCALE_GROUP128, HM_F16, false, false},
    {NVFP4(true), HM_ACT_SCALE_TOKEN, HM_BF16, false, false},
    {NVFP4(false), HM_ACT_SCALE_GROUP128, HM_F16, true, false},
    {NVFP4(true), HM_ACT_SCALE_TOKEN, HM_F16, true, true},
};

static hm_layer_config layer_of(const variant *v, int64_t experts) {
  hm_layer_config c = HM_LAYER_CONFIG_INIT;
  c.n = 4096 + 512;
  c.k = 7168;
  c.experts = experts;
  c.scheme.weight = v->fmt;
  c.scheme.act = v->fmt.weight == HM_I4 ? HM_I8 : HM_F8E4M3;
  c.scheme.act_scale = v->act_scale;
  c.out = v->out;
  c.bias = v->bias;
  c.fp16_accumulate = v->f16_acc;
  return c;
}

static bool arch_takes(const variant *v, int arch) {
  return arch >= (v->fmt.weight == HM_I4 ? 80 : 89);
}

static void every_variant_compiles(void **state) {
  (void)state;
  static tg_batch b;
  const int archs[] = {80, 89, 90};
  for (size_t a = 0; a < HM_ARRAY_SIZE(archs); a++) {
    for (size_t i = 0; i < HM_ARRAY_SIZE(variants); i++) {
      if (!arch_takes(&variants[i], archs[a])) continue;
      const hm_layer_config lc = layer_of(&variants[i], i == 0 || i == 4 ? 1 : 64);
      const hm_gemm_type own = lc.experts == 1 ? HM_GEMM_DENSE : (hm_gemm_type)(1 + i % 3);
      tg_add_layer_plans(&b, &lc, own, archs[a]);
      const hm_gemm_type forced = (hm_gemm_type)((i + a) % 4);
      const hm_layer_config swap = layer_of(&variants[i], forced == HM_GEMM_DENSE ? 1 : 64);
      tg_add_swap8(&b, &swap, forced, archs[a]);
    }
    tg_add_transform_128(&b, HM_I4, HM_BF16, 0, HM_I8, archs[a]);
    if (archs[a] < 89) continue;
    tg_add_transform_128(&b, HM_F4E2M1, HM_E8M0, 32, HM_F8E4M3, archs[a]);
    tg_add_transform_128(&b, HM_F4E2M1, HM_F8E4M3, 16, HM_F8E4M3, archs[a]);
  }
  tg_compile_all(b.src, b.count, "W4A8 GEMM and transform");
}

/* The heuristics' plans of DeepSeek-V3's expert layers on H200 and L40S: legal, mma.sync,
 * and their distinct tiles compile (the layer's default plan source is the heuristic one). */
static void heuristic_plans_compile(void **state) {
  (void)state;
  static tg_batch b;
  static char seen[TG_BATCH_MAX][256];
  const char *const profiles[] = {"h200", "l40s"};
  const char *const quants[] = {"w4a8-mxfp4", "w4a8-int4", "w4a8-nvfp4"};
  hm_model_preset preset;
  HM_ASSERT_OK(hm_model_preset_get("deepseek-v3", &preset));
  for (size_t pi = 0; pi < HM_ARRAY_SIZE(profiles); pi++) {
    hm_device_profile prof;
    HM_ASSERT_OK(hm_device_profile_builtin(profiles[pi], &prof));
    for (size_t q = 0; q < HM_ARRAY_SIZE(quants); q++) {
      hm_quant_scheme scheme;
      hm_model_layer layers[HM_MODEL_MAX_LAYERS];
      int count = 0;
      HM_ASSERT_OK(hm_quant_scheme_parse(quants[q], &scheme));
      HM_ASSERT_OK(hm_model_layers(&preset, &scheme, 1, 1, layers, &count));
      for (int l = 0; l < count; l++) {
        if (layers[l].config.experts == 1) continue;
        hm_gemm_plan plan;
        HM_ASSERT_OK(hm_choose_plan(&layers[l].config, HM_GEMM_GROUPED_MASKED, &prof, &plan));
        for (int i = 0; i < plan.count; i++) {
          HM_ASSERT_OK(hm_gemm_config_check(&plan.cfg[i]));
          assert_int_equal(plan.cfg[i].tuning.mma, HM_MMA_SYNC);
          char name[256];
          hm_gemm_config_name(&plan.cfg[i], name, sizeof(name));
          bool dup = false;
          for (int j = 0; j < b.count && !dup; j++) dup = strcmp(seen[j], name) == 0;
          if (dup) continue;
          snprintf(seen[b.count], sizeof(seen[0]), "%s", name);
          tg_add_gemm(&b, &plan.cfg[i]);
        }
      }
    }
  }
  tg_compile_all(b.src, b.count, "W4A8 heuristic-plan");
}

/* mma.sync at every M, on sm_90 too, the swapped 8-row tile up to 8 rows per expert. */
static void plans_are_mma_sync(void **state) {
  (void)state;
  const int archs[] = {89, 90};
  for (size_t a = 0; a < HM_ARRAY_SIZE(archs); a++)
    for (size_t i = 0; i < HM_ARRAY_SIZE(variants); i++)
      for (int t = 0; t < 4; t++) {
        const int64_t experts = t == HM_GEMM_DENSE ? 1 : 8;
        const hm_layer_config lc = layer_of(&variants[i], experts);
        const hm_gemm_plan plan = tg_plan_of(&lc, (hm_gemm_type)t, archs[a]);
        assert_true(plan.count >= 1 && plan.m_hi[plan.count - 1] == INT64_MAX);
        for (int j = 0; j < plan.count; j++) {
          const hm_gemm_config *c = &plan.cfg[j];
          HM_ASSERT_OK(hm_gemm_config_check(c));
          assert_int_equal(c->tuning.mma, HM_MMA_SYNC);
          assert_int_equal(c->tuning.bm == 8, j == 0);
          if (variants[i].act_scale == HM_ACT_SCALE_GROUP128) assert_int_equal(128 % c->tuning.bk, 0);
        }
      }
}

static hm_gemm_config decode_config(const variant *v, int arch) {
  const hm_layer_config lc = layer_of(v, 1);
  hm_gemm_config base, c;
  HM_ASSERT_OK(hm_gemm_config_from_layer(&lc, HM_GEMM_DENSE, arch, &base));
  HM_ASSERT_OK(hm_gemm_select(&base, 1, &c));
  return c;
}

/* The swapped decode tile keeps four stages, as W4A16's: with eight, a second CTA did not
 * fit an SM, and the tuner's one- and two-token picks ran two to four an SM (docs/PERF.md,
 * twenty-third session). */
static void decode_tile_leaves_room_for_a_second_cta(void **state) {
  (void)state;
  for (size_t i = 0; i < HM_ARRAY_SIZE(variants); i++) {
    const hm_gemm_config c = decode_config(&variants[i], 90);
    assert_int_equal(c.tuning.bm, 8);
    assert_true(c.tuning.stages <= 4);
    const size_t sm_bytes = 228 * 1024; /* sm_90's shared memory an SM, 1 KiB of it reserved a CTA */
    assert_true(2 * (hm_gemm_config_smem_bytes(&c) + 1024) <= sm_bytes);
  }
}

static void unsupported_configs_are_refused(void **state) {
  (void)state;
  hm_gemm_config c = decode_config(&variants[0], 90), bad = c;
  bad.arch = 80; /* fp8 MMA from sm_89 */
  assert_int_equal(hm_gemm_config_check(&bad), HM_UNSUPPORTED);
  assert_non_null(strstr(hm_last_error(), "sm_89"));
  bad = c;
  HM_ASSERT_OK(hm_gemm_tuning_parse("bm64_bn128_bk128_w1x8x1_s4_dp_c1_wgmma", &bad.tuning));
  assert_int_equal(hm_gemm_config_check(&bad), HM_INVALID_ARGUMENT);
  assert_non_null(strstr(hm_last_error(), "no wgmma kernel"));
  bad = c;
  bad.layer.k = 7168 + 16; /* e8m0 scales per 32 */
  assert_int_equal(hm_gemm_config_check(&bad), HM_UNSUPPORTED);
  bad = decode_config(&variants[4], 90);
  bad.layer.k = 7168 + 16; /* nvfp4's last k32 step is half padding */
  HM_ASSERT_OK(hm_gemm_config_check(&bad));
  bad = c;
  bad.layer.weight = HM_I4; /* int4 takes int8 activations */
  assert_int_equal(hm_gemm_config_check(&bad), HM_UNSUPPORTED);
  bad = decode_config(&variants[2], 90);
  bad.layer.w4_f16 = true; /* f16 codes are e2m1 ones */
  assert_int_equal(hm_gemm_config_check(&bad), HM_UNSUPPORTED);
  assert_non_null(strstr(hm_last_error(), "f16 codes"));
  /* e2m1 takes e8m0 scales per 32 or e4m3 ones per 16: no scale group is a part of a K half. */
  const hm_quant_format other_scales[] = {
      {HM_F4E2M1, HM_F8E4M3, HM_SCALE_GROUP, 32, 0, false, true},
      {HM_F4E2M1, HM_E8M0, HM_SCALE_GROUP, 16, 0, false, false},
      {HM_F4E2M1, HM_BF16, HM_SCALE_GROUP, 32, 0, false, false},
  };
  hm_gemm_config base;
  hm_transform_sizes sz;
  for (size_t i = 0; i < HM_ARRAY_SIZE(other_scales); i++) {
    hm_layer_config lc = layer_of(&variants[0], 1);
    lc.scheme.weight = other_scales[i];
    assert_int_equal(hm_gemm_config_from_layer(&lc, HM_GEMM_DENSE, 90, &base), HM_UNSUPPORTED);
    assert_non_null(strstr(hm_last_error(), "nvfp4"));
    const hm_transform_desc d = hm_transform_desc_of(&lc, 90);
    assert_int_equal(hm_transform_sizes_of(&d, &sz), HM_UNSUPPORTED);
  }
  /* nvfp4 keeps mxfp4's limit: two units a warp spill at bk 256. */
  bad = decode_config(&variants[4], 90);
  HM_ASSERT_OK(hm_gemm_tuning_parse("bm64_bn256_bk256_w2x4x1_s3_dp_c1", &bad.tuning));
  assert_int_equal(hm_gemm_config_check(&bad), HM_INVALID_ARGUMENT);
  assert_non_null(strstr(hm_last_error(), "nvfp4"));
  bad.tuning.bk = 128;
  HM_ASSERT_OK(hm_gemm_config_check(&bad));
  /* mxfp4 checkpoints carry no global scale. */
  hm_layer_config lc = layer_of(&variants[0], 1);
  lc.scheme.weight.global_scale = true;
  assert_int_equal(hm_gemm_config_from_layer(&lc, HM_GEMM_DENSE, 90, &base), HM_UNSUPPORTED);
  assert_non_null(strstr(hm_last_error(), "global scale"));
  /* int4 s32 sums of 16 q a: K up to 131072. */
  lc = layer_of(&variants[2], 1);
  lc.k = 262144;
  HM_ASSERT_OK(hm_gemm_config_from_layer(&lc, HM_GEMM_DENSE, 90, &base));
  assert_int_equal(hm_gemm_select(&base, 1, &c), HM_UNSUPPORTED);
}

/* The weight format is in the name, and differs from the W8A8 kernel's of the same shape;
 * nvfp4's scale group and global scale tell it from mxfp4. */
static void names_show_the_weight_format(void **state) {
  (void)state;
  char name[256];
  hm_gemm_config c = decode_config(&variants[0], 90);
  hm_gemm_config_name(&c, name, sizeof(name));
  assert_non_null(strstr(name, "f4e2m1_g32"));
  assert_non_null(strstr(name, "_w16_")); /* sm_90: the f16 codes */
  c = decode_config(&variants[0], 89); /* sm_89 has fp8 mma.sync: fp8 operands */
  hm_gemm_config_name(&c, name, sizeof(name));
  assert_null(strstr(name, "_w16_"));
  c = decode_config(&variants[2], 89);
  hm_gemm_config_name(&c, name, sizeof(name));
  assert_non_null(strstr(name, "_i4_ch"));
  c = decode_config(&variants[4], 90);
  assert_int_equal(hm_gemm_w4a8_format(&c.layer), HM_W4_NVFP4);
  hm_gemm_config_name(&c, name, sizeof(name));
  assert_non_null(strstr(name, "f4e2m1_g16"));
  assert_non_null(strstr(name, "_gs_"));
  c = decode_config(&variants[6], 90);
  hm_gemm_config_name(&c, name, sizeof(name));
  assert_non_null(strstr(name, "_acc16"));
}

/* Units of 32x64 codes (1024 bytes) over N padded to 64 and K to 32; scales per layout. */
static void transform_sizes_follow_the_layouts(void **state) {
  (void)state;
  hm_transform_desc d = {.weight = HM_F4E2M1,
                         .scale = HM_E8M0,
                         .act = HM_F8E4M3,
                         .group = 32,
                         .n = 200,
                         .k = 608,
                         .experts = 3,
                         .arch = 90};
  hm_transform_sizes sz;
  HM_ASSERT_OK(hm_transform_sizes_of(&d, &sz));
  assert_int_equal(sz.weight_bytes, 3 * 4 * 19 * 1024);
  assert_int_equal(sz.in_weight_bytes, 3 * 200 * 608 / 2);
  assert_int_equal(sz.scale_bytes, 3 * 4 * 19 * 64);
  assert_int_equal(sz.in_scale_bytes, 3 * 200 * 19);
  /* nvfp4: two K halves of e4m3 scales a unit and k32 step; K = 624 ends in a half step. */
  d.scale = HM_F8E4M3;
  d.group = 16;
  d.k = 624;
  HM_ASSERT_OK(hm_transform_sizes_of(&d, &sz));
  assert_int_equal(sz.weight_bytes, 3 * 4 * 20 * 1024);
  assert_int_equal(sz.in_weight_bytes, 3 * 200 * 624 / 2);
  assert_int_equal(sz.scale_bytes, 3 * 4 * 20 * 128);
  assert_int_equal(sz.in_scale_bytes, 3 * 200 * 39);
  d = (hm_transform_desc){
      .weight = HM_I4, .scale = HM_BF16, .act = HM_I8, .n = 200, .k = 592, .experts = 1, .arch = 80};
  HM_ASSERT_OK(hm_transform_sizes_of(&d, &sz));
  assert_int_equal(sz.weight_bytes, 4 * 19 * 1024);
  assert_int_equal(sz.in_weight_bytes, 200 * 592 / 2);
  assert_int_equal(sz.scale_bytes, 200 * 4);
  assert_int_equal(sz.in_scale_bytes, 200 * 2);
  d.k = 600; /* A rows are moved in 16-byte pieces */
  assert_int_equal(hm_transform_sizes_of(&d, &sz), HM_INVALID_ARGUMENT);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(plans_are_mma_sync),
      cmocka_unit_test(unsupported_configs_are_refused),
      cmocka_unit_test(decode_tile_leaves_room_for_a_second_cta),
      cmocka_unit_test(names_show_the_weight_format),
      cmocka_unit_test(transform_sizes_follow_the_layouts),
      cmocka_unit_test(every_variant_compiles),
      cmocka_unit_test(heuristic_plans_compile),
  };
  int rc = cmocka_run_group_tests(tests, NULL, NULL);
  hm_shutdown();
  return rc;
}
