/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Every W8A8 GEMM variant compiles with NVRTC for sm_89 and sm_90a: fp8 with 128x128
 * block or per-channel weight scales and int8 with per-channel ones, each with per-token
 * or 1x128 activation scales, f16/bf16 output, bias; every GEMM type (each plan entry of
 * one, the first (the swapped 8-row tile) and last (wgmma on sm_90a) entries of the
 * others), the swapped tunings the device tests force, on a GEMM type per variant, batch
 * invariance, and the transform kernels. Also the plans' legality and the refusals of
 * what no kernel takes, and the f16-accumulation variant (fp8 per-channel and mxfp4
 * weights, per-token scales, mma.sync only) with its refusals. tests/unit/
 * test_gemm_wgmma_nvrtc.c compiles more wgmma tiles.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "hm_test.h"
#include "test_gemm_compile.h"
#include "kernels/gemm_config_w8a8.h"
#include "kernels/gemm_select.h"
#include "kernels/transform.h"

typedef struct variant {
  hm_dtype type; /* of weights and activations */
  bool block;    /* 128x128 weight blocks, else per channel */
  hm_act_scale_kind act_scale;
  hm_dtype out;
  bool bias;
} variant;

static const variant variants[] = {
    {HM_F8E4M3, true, HM_ACT_SCALE_GROUP128, HM_BF16, false},
    {HM_F8E4M3, true, HM_ACT_SCALE_TOKEN, HM_F16, true},
    {HM_F8E4M3, false, HM_ACT_SCALE_TOKEN, HM_BF16, true},
    {HM_F8E4M3, false, HM_ACT_SCALE_GROUP128, HM_F16, false},
    {HM_I8, false, HM_ACT_SCALE_TOKEN, HM_BF16, false},
    {HM_I8, false, HM_ACT_SCALE_GROUP128, HM_F16, true},
};

static hm_layer_config layer_of(const variant *v, int64_t experts, bool invariant) {
  hm_layer_config c = HM_LAYER_CONFIG_INIT;
  c.n = 4096 + 512;
  c.k = 7168;
  c.experts = experts;
  hm_quant_format f = {
      v->type, HM_F32, v->block ? HM_SCALE_BLOCK : HM_SCALE_CHANNEL, v->block ? 128 : 0, v->block ? 128 : 0,
      false,   false};
  c.scheme.weight = f;
  c.scheme.act = v->type;
  c.scheme.act_scale = v->act_scale;
  c.out = v->out;
  c.bias = v->bias;
  c.batch_invariant = invariant;
  return c;
}

static void every_variant_compiles_for_sm89_and_sm90a(void **state) {
  (void)state;
  static tg_batch b;
  const int archs[] = {89, 90};
  for (size_t a = 0; a < HM_ARRAY_SIZE(archs); a++) {
    for (size_t i = 0; i < HM_ARRAY_SIZE(variants); i++) {
      const hm_layer_config lc = layer_of(&variants[i], i == 0 ? 1 : 64, false);
      const hm_gemm_type own = lc.experts == 1 ? HM_GEMM_DENSE : (hm_gemm_type)(1 + i % 3);
      tg_add_layer_plans(&b, &lc, own, archs[a]);
      const hm_gemm_type forced = (hm_gemm_type)((i + (size_t)a) % 4);
      const hm_layer_config swap = layer_of(&variants[i], forced == HM_GEMM_DENSE ? 1 : 64, false);
      tg_add_swap8(&b, &swap, forced, archs[a]);
    }
    const hm_layer_config inv = layer_of(&variants[0], 1, true);
    const hm_gemm_plan plan = tg_plan_of(&inv, HM_GEMM_DENSE, archs[a]);
    tg_add_gemm(&b, &plan.cfg[plan.count - 1]);
    const hm_dtype scale_types[] = {HM_F16, HM_BF16, HM_F32};
    for (size_t s = 0; s < HM_ARRAY_SIZE(scale_types); s++)
      tg_add_transform_128(&b, HM_F8E4M3, scale_types[s], 0, HM_F8E4M3, archs[a]);
  }
  tg_compile_all(b.src, b.count, "W8A8 GEMM and transform");
}

/*
 * Plans of every variant, type and arch are legal configs: the swapped 8-row tile up to 8
 * rows per expert (not for batch-invariant layers, which keep one MMA shape), then on
 * sm_89, and for batch-invariant layers, mma.sync throughout; on sm_90 wgmma (bk 128)
 * from 17 rows an expert: the warp-specialized 64-token tile in every layout, then
 * warp-specialized where token tiles come by TMA (not indexed).
 */
static void plans_are_legal(void **state) {
  (void)state;
  const int archs[] = {89, 90};
  for (size_t a = 0; a < HM_ARRAY_SIZE(archs); a++)
    for (int inv = 0; inv < 2; inv++)
      for (size_t i = 0; i < HM_ARRAY_SIZE(variants); i++)
        for (int t = 0; t < 4; t++) {
          const int64_t experts = t == HM_GEMM_DENSE ? 1 : 8;
          const hm_layer_config lc = layer_of(&variants[i], experts, inv);
          const hm_gemm_plan plan = tg_plan_of(&lc, (hm_gemm_type)t, archs[a]);
          assert_true(plan.count >= 1 && plan.m_hi[plan.count - 1] == INT64_MAX);
          for (int j = 0; j < plan.count; j++) {
            const hm_gemm_config *c = &plan.cfg[j];
            const int64_t m_lo = j == 0 ? 0 : plan.m_hi[j - 1];
            const bool tma = t != HM_GEMM_INDEXED;
            const bool wgmma = archs[a] == 90 && !inv && m_lo >= 16 * experts;
            HM_ASSERT_OK(hm_gemm_config_check(c));
            assert_int_equal(c->tuning.mma, wgmma ? HM_MMA_WGMMA : HM_MMA_SYNC);
            /* Warp-specialized (hm_gemm_prefer_ws) from 17 rows an expert: every 64-token
             * tile, and the taller ones where token tiles come by TMA. */
            assert_int_equal(c->tuning.ws, wgmma && (tma || c->tuning.bm == 64));
            assert_int_equal(c->tuning.bm == 8, j == 0 && !inv);
            if (c->tuning.bm == 8) assert_true(plan.m_hi[0] == 8 * experts);
            if (variants[i].block || variants[i].act_scale == HM_ACT_SCALE_GROUP128 || wgmma)
              assert_int_equal(128 % c->tuning.bk, 0);
            if (inv) assert_false(c->tuning.stream_k);
          }
          assert_true(plan.cfg[hm_gemm_plan_pick(&plan, experts * 4096)].tuning.bm >= 64);
        }
}

static void unsupported_configs_are_refused(void **state) {
  (void)state;
  hm_layer_config lc = layer_of(&variants[0], 1, false);
  hm_gemm_config base, c;
  HM_ASSERT_OK(hm_gemm_config_from_layer(&lc, HM_GEMM_DENSE, 90, &base));
  HM_ASSERT_OK(hm_gemm_select(&base, 1, &c));
  hm_gemm_config bad = c;
  bad.tuning.bk = 256;
  bad.tuning.stages = 2;
  assert_int_equal(hm_gemm_config_check(&bad), HM_INVALID_ARGUMENT);
  assert_non_null(strstr(hm_last_error(), "must divide 128"));
  assert_int_equal(c.tuning.bm, 8); /* decode: the swapped tile, one warp row */
  bad = c;
  bad.tuning.warps_m = 2;
  assert_int_equal(hm_gemm_config_check(&bad), HM_INVALID_ARGUMENT);
  bad = c;
  bad.arch = 80; /* fp8 MMA from sm_89 */
  assert_int_equal(hm_gemm_config_check(&bad), HM_UNSUPPORTED);
  assert_non_null(strstr(hm_last_error(), "sm_89"));
  bad = c;
  bad.layer.n = 4096 + 64; /* blocks of 128 rows */
  assert_int_equal(hm_gemm_config_check(&bad), HM_UNSUPPORTED);
  bad = c;
  bad.layer.weight = HM_I4; /* W4A8 int4 takes int8 activations */
  assert_int_equal(hm_gemm_config_check(&bad), HM_UNSUPPORTED);
  assert_non_null(strstr(hm_last_error(), "W4A8"));
  /* The wgmma kernels: sm_90a only, bk 128. Past 512 rows the warp-specialized one, 256
   * tokens a tile, a warpgroup per 128 of them. */
  HM_ASSERT_OK(hm_gemm_select(&base, 4096, &c));
  assert_int_equal(c.tuning.mma, HM_MMA_WGMMA);
  assert_true(c.tuning.ws);
  assert_int_equal(c.tuning.bm, 256);
  bad = c;
  bad.arch = 89;
  assert_int_equal(hm_gemm_config_check(&bad), HM_UNSUPPORTED);
  assert_non_null(strstr(hm_last_error(), "sm_89"));
  bad = c;
  bad.tuning.bk = 64;
  assert_int_equal(hm_gemm_config_check(&bad), HM_INVALID_ARGUMENT);
  assert_non_null(strstr(hm_last_error(), "must be 128"));
  bad = c;
  bad.tuning.bm = 192; /* 96 tokens a warpgroup: not whole m64 blocks */
  assert_int_equal(hm_gemm_config_check(&bad), HM_INVALID_ARGUMENT);
  assert_non_null(strstr(hm_last_error(), "m64"));
  /* The plain kernel keeps all its partial sums beside the accumulators. */
  bad = c;
  bad.tuning.ws = false; /* 128 columns x 128 tokens a warpgroup: 128 accumulators and 128 partial sums */
  assert_int_equal(hm_gemm_config_check(&bad), HM_INVALID_ARGUMENT);
  assert_non_null(strstr(hm_last_error(), "partial sums"));
  bad.tuning.bm = 128;
  bad.tuning.bn = 256; /* 4 warpgroups of 64 columns: 128 registers a thread */
  bad.tuning.warps_m = 1;
  bad.tuning.warps_n = 16;
  bad.tuning.stages = 4;
  assert_int_equal(hm_gemm_config_check(&bad), HM_INVALID_ARGUMENT);
  assert_non_null(strstr(hm_last_error(), "warpgroups"));
  /* int8 per token: its s32 sums cover all of K, which must stay below overflow. */
  lc = layer_of(&variants[4], 1, false);
  lc.k = 262144;
  assert_int_equal(hm_gemm_config_from_layer(&lc, HM_GEMM_DENSE, 90, &base), HM_OK);
  assert_int_equal(hm_gemm_select(&base, 1, &c), HM_UNSUPPORTED);
  /* Group scales of weights have no W8A8 kernel. */
  lc = layer_of(&variants[2], 1, false);
  lc.scheme.weight.scale_kind = HM_SCALE_GROUP;
  lc.scheme.weight.group_k = 128;
  assert_int_equal(hm_gemm_config_from_layer(&lc, HM_GEMM_DENSE, 90, &base), HM_UNSUPPORTED);
  /* Per-token and 1x128 activation scales are different kernels. */
  char tok[256], grp[256];
  lc = layer_of(&variants[2], 1, false);
  HM_ASSERT_OK(hm_gemm_config_from_layer(&lc, HM_GEMM_DENSE, 90, &base));
  HM_ASSERT_OK(hm_gemm_select(&base, 1, &c));
  hm_gemm_config_name(&c, tok, sizeof(tok));
  c.layer.act_scale = HM_ACT_SCALE_GROUP128;
  hm_gemm_config_name(&c, grp, sizeof(grp));
  assert_string_not_equal(tok, grp);
}

/* f16 accumulation: the bench's schemes, fp8 per-channel or mxfp4 weights with per-token scales. */
static hm_layer_config acc16_layer(bool mxfp4, int64_t experts) {
  hm_layer_config c = layer_of(&variants[2], experts, false);
  HM_ASSERT_OK(hm_quant_scheme_parse(mxfp4 ? "w4a8-mxfp4" : "w8a8-fp8-ch", &c.scheme));
  c.fp16_accumulate = true;
  return c;
}

/* Every plan entry stays on mma.sync, sm_90 included (no wgmma kernel sums in f16), and
 * names its kernel apart from the f32 one's, so that the compile cache and tuning tables
 * keep them apart. */
static void f16_accumulation_plans_are_mma_sync(void **state) {
  (void)state;
  const int archs[] = {89, 90};
  for (size_t a = 0; a < HM_ARRAY_SIZE(archs); a++)
    for (int mx = 0; mx < 2; mx++)
      for (int t = 0; t < 4; t++) {
        const hm_layer_config lc = acc16_layer(mx, t == HM_GEMM_DENSE ? 1 : 8);
        const hm_gemm_plan plan = tg_plan_of(&lc, (hm_gemm_type)t, archs[a]);
        for (int j = 0; j < plan.count; j++) {
          const hm_gemm_config *c = &plan.cfg[j];
          HM_ASSERT_OK(hm_gemm_config_check(c));
          assert_true(c->compute.f16_acc);
          assert_int_equal(c->tuning.mma, HM_MMA_SYNC);
          char acc16[256], acc32[256];
          hm_gemm_config_name(c, acc16, sizeof(acc16));
          hm_gemm_config f32 = *c;
          f32.compute.f16_acc = false;
          hm_gemm_config_name(&f32, acc32, sizeof(acc32));
          assert_non_null(strstr(acc16, "_acc16"));
          assert_string_not_equal(acc16, acc32);
        }
      }
}

/* Refused where the f32 fold must scale each k32 step's sums or the kernel has no f16 form. */
static void f16_accumulation_refusals(void **state) {
  (void)state;
  hm_gemm_config base, c;
  hm_layer_config lc = layer_of(&variants[1], 1, false); /* fp8 128x128 blocks, per token */
  lc.fp16_accumulate = true;
  HM_ASSERT_OK(hm_gemm_config_from_layer(&lc, HM_GEMM_DENSE, 89, &base));
  assert_int_equal(hm_gemm_select(&base, 1, &c), HM_UNSUPPORTED);
  assert_non_null(strstr(hm_last_error(), "block weight scales"));
  lc = layer_of(&variants[3], 1, false); /* fp8 per channel, 1x128 activation scales */
  lc.fp16_accumulate = true;
  HM_ASSERT_OK(hm_gemm_config_from_layer(&lc, HM_GEMM_DENSE, 89, &base));
  assert_int_equal(hm_gemm_select(&base, 1, &c), HM_UNSUPPORTED);
  assert_non_null(strstr(hm_last_error(), "1x128 activation scales"));
  lc = layer_of(&variants[4], 1, false); /* int8 */
  lc.fp16_accumulate = true;
  HM_ASSERT_OK(hm_gemm_config_from_layer(&lc, HM_GEMM_DENSE, 89, &base));
  assert_int_equal(hm_gemm_select(&base, 1, &c), HM_UNSUPPORTED);
  assert_non_null(strstr(hm_last_error(), "f8e4m3 activations"));
  lc.scheme.weight.weight = HM_I4; /* W4A8 int4: int8 activations too */
  HM_ASSERT_OK(hm_gemm_config_from_layer(&lc, HM_GEMM_DENSE, 89, &base));
  assert_int_equal(hm_gemm_select(&base, 1, &c), HM_UNSUPPORTED);
  lc = layer_of(&variants[2], 1, false);
  lc.scheme.weight = (hm_quant_format){HM_U4, HM_BF16, HM_SCALE_GROUP, 128, 0, false, false};
  lc.scheme.act = HM_BF16;
  lc.scheme.act_scale = HM_ACT_SCALE_NONE;
  lc.fp16_accumulate = true; /* the weight-only kernels have no such option */
  HM_ASSERT_OK(hm_gemm_config_from_layer(&lc, HM_GEMM_DENSE, 89, &base));
  assert_int_equal(hm_gemm_select(&base, 1, &c), HM_UNSUPPORTED);
  assert_non_null(strstr(hm_last_error(), "fp8 W8A8"));
  /* A wgmma tile forced on the option. */
  lc = layer_of(&variants[2], 1, false);
  HM_ASSERT_OK(hm_gemm_config_from_layer(&lc, HM_GEMM_DENSE, 90, &base));
  HM_ASSERT_OK(hm_gemm_select(&base, 4096, &c));
  assert_int_equal(c.tuning.mma, HM_MMA_WGMMA);
  c.compute.f16_acc = true;
  assert_int_equal(hm_gemm_config_check(&c), HM_INVALID_ARGUMENT);
  assert_non_null(strstr(hm_last_error(), "mma.sync"));
}

/* Dense plans whole, the decode and large-M entries of an indexed one, for both weight formats. */
static void f16_accumulation_compiles_for_sm89_and_sm90a(void **state) {
  (void)state;
  static tg_batch b;
  const int archs[] = {89, 90};
  for (size_t a = 0; a < HM_ARRAY_SIZE(archs); a++)
    for (int mx = 0; mx < 2; mx++) {
      const hm_layer_config dense = acc16_layer(mx, 1);
      const hm_gemm_plan plan = tg_plan_of(&dense, HM_GEMM_DENSE, archs[a]);
      for (int j = 0; j < plan.count; j++) tg_add_gemm(&b, &plan.cfg[j]);
      const hm_layer_config moe = acc16_layer(mx, 64);
      const hm_gemm_plan idx = tg_plan_of(&moe, HM_GEMM_INDEXED, archs[a]);
      tg_add_gemm(&b, &idx.cfg[0]);
      tg_add_gemm(&b, &idx.cfg[idx.count - 1]);
    }
  tg_compile_all(b.src, b.count, "W8A8 f16-accumulation GEMM");
}

/* Units of 32x64 bytes over N padded to 64 and K to 32; f32 scales in the canonical order. */
static void transform_sizes_follow_the_layouts(void **state) {
  (void)state;
  hm_transform_desc d = {.weight = HM_F8E4M3,
                         .scale = HM_F32,
                         .act = HM_F8E4M3,
                         .group = 128,
                         .group_n = 128,
                         .n = 640,
                         .k = 896,
                         .experts = 3,
                         .arch = 90};
  hm_transform_sizes sz;
  HM_ASSERT_OK(hm_transform_sizes_of(&d, &sz));
  assert_int_equal(sz.weight_bytes, 3 * 10 * 28 * 2048);
  assert_int_equal(sz.in_weight_bytes, 3 * 640 * 896);
  assert_int_equal(sz.scale_bytes, 3 * 5 * 7 * 4);
  assert_int_equal(sz.in_scale_bytes, 3 * 5 * 7 * 4);
  assert_int_equal(sz.zero_bytes, 0);
  d = (hm_transform_desc){
      .weight = HM_I8, .scale = HM_BF16, .act = HM_I8, .n = 200, .k = 592, .experts = 1, .arch = 80};
  HM_ASSERT_OK(hm_transform_sizes_of(&d, &sz));
  assert_int_equal(sz.weight_bytes, 4 * 19 * 2048);
  assert_int_equal(sz.in_weight_bytes, 200 * 592);
  assert_int_equal(sz.scale_bytes, 200 * 4);
  assert_int_equal(sz.in_scale_bytes, 200 * 2);
  d.k = 600; /* A and weight rows are moved in 16-byte pieces */
  assert_int_equal(hm_transform_sizes_of(&d, &sz), HM_INVALID_ARGUMENT);
  d.k = 592;
  d.weight = HM_U4; /* no 8-bit activation kernel (W4A8 is i4 x i8: test_gemm_w4a8_nvrtc.c) */
  assert_int_equal(hm_transform_sizes_of(&d, &sz), HM_UNSUPPORTED);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(plans_are_legal),
      cmocka_unit_test(unsupported_configs_are_refused),
      cmocka_unit_test(transform_sizes_follow_the_layouts),
      cmocka_unit_test(every_variant_compiles_for_sm89_and_sm90a),
      cmocka_unit_test(f16_accumulation_plans_are_mma_sync),
      cmocka_unit_test(f16_accumulation_refusals),
      cmocka_unit_test(f16_accumulation_compiles_for_sm89_and_sm90a),
  };
  int rc = cmocka_run_group_tests(tests, NULL, NULL);
  hm_shutdown();
  return rc;
}
