/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Every weight-only GEMM variant compiles with NVRTC for sm_80 and sm_90a: each weight
 * format (bits, signedness, zero points), group size class, activation and output
 * type, bias (formats rotate over the tunings of the M plan), every GEMM type with
 * every tuning, batch invariance, the swapped 8-row decode kernel of each quantized
 * format, the one-unit decode tile at its deepest ring and at bk 512, and the transform
 * kernels; on the JIT thread pool. Also the traced kernels, the decode tiles with more
 * early weight stages and an L2 warm-up (HUMMING_PDL_EARLY_*), the plan's invariants and
 * the legality checks of configs.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "hm_test.h"
#include "test_gemm_compile.h"
#include "kernels/gemm_gen.h"
#include "kernels/gemm_select.h"
#include "kernels/transform.h"
#include "params.h"

typedef struct variant {
  hm_dtype weight;
  int group;
  bool zero_point;
  hm_dtype act, out;
  bool bias;
} variant;

static const variant variants[] = {
    {HM_U4, 128, true, HM_BF16, HM_BF16, false}, {HM_U4, 64, true, HM_F16, HM_F16, true},
    {HM_U4, 32, false, HM_BF16, HM_F16, false},  {HM_U4, 0, true, HM_F16, HM_BF16, false},
    {HM_I4, 128, false, HM_BF16, HM_BF16, true}, {HM_U8, 128, false, HM_BF16, HM_BF16, false},
    {HM_U8, 64, true, HM_F16, HM_F16, false},    {HM_I8, 0, false, HM_BF16, HM_BF16, true},
    {HM_U3, 128, true, HM_BF16, HM_BF16, false}, {HM_U2, 64, true, HM_F16, HM_F16, false},
    {HM_U5, 128, true, HM_BF16, HM_BF16, false}, {HM_U6, 32, false, HM_F16, HM_F16, false},
    {HM_U7, 0, true, HM_BF16, HM_BF16, false},   {HM_U1, 128, false, HM_F16, HM_F16, false},
    {HM_BF16, 0, false, HM_BF16, HM_BF16, true}, {HM_F16, 0, false, HM_F16, HM_F16, false},
};

static hm_layer_config layer_of(const variant *v, int64_t experts, bool invariant) {
  hm_layer_config c = HM_LAYER_CONFIG_INIT;
  c.n = 4096 + 576;
  c.k = 7168;
  c.experts = experts;
  const bool q = v->weight != HM_F16 && v->weight != HM_BF16;
  hm_quant_format f = {v->weight, q ? HM_BF16 : v->weight,
                       q ? (v->group ? HM_SCALE_GROUP : HM_SCALE_CHANNEL) : HM_SCALE_NONE, v->group, 0,
                       v->zero_point, false};
  c.scheme.weight = f;
  c.scheme.act = v->act;
  c.out = v->out;
  c.bias = v->bias;
  c.batch_invariant = invariant;
  return c;
}

/* The engine's kernel plan of (layer, type) for arch. */
static hm_gemm_plan plan_of(const hm_layer_config *lc, hm_gemm_type type, int arch) {
  hm_gemm_config base;
  HM_ASSERT_OK(hm_gemm_config_from_layer(lc, type, arch, &base));
  hm_gemm_plan plan;
  HM_ASSERT_OK(hm_gemm_plan_make(&base, &plan));
  return plan;
}

/* Adds the kernels of the plan of (layer, type) for arch: all, or only entry `only`. */
static void add_plan(tg_batch *b, const hm_layer_config *lc, hm_gemm_type type, int arch, int only) {
  const hm_gemm_plan plan = plan_of(lc, type, arch);
  for (int i = 0; i < plan.count; i++) {
    if (only >= 0 && i != only % plan.count) continue;
    tg_add_gemm(b, &plan.cfg[i]);
  }
}

/* The plan's swapped 8-row kernel (entry 0 where it has one), unless `only` picked it already. */
static void add_swap(tg_batch *b, const hm_layer_config *lc, hm_gemm_type type, int arch, int only) {
  const hm_gemm_plan plan = plan_of(lc, type, arch);
  if (plan.cfg[0].tuning.bm != 8 || only % plan.count == 0) return;
  tg_add_gemm(b, &plan.cfg[0]);
}

/* The transform of each weight type; every scale type with the first, f16/bf16 alternating after. */
static void add_transforms(tg_batch *b, int arch) {
  const hm_dtype scale_types[] = {HM_F16, HM_BF16, HM_F32};
  for (size_t i = 0; i < HM_ARRAY_SIZE(variants); i++)
    for (size_t s = 0; s < HM_ARRAY_SIZE(scale_types); s++) {
      const variant *v = &variants[i];
      if (i > 0 && s != i % 2) continue;
      hm_transform_desc d = {.weight = v->weight, .scale = scale_types[s], .act = v->act, .group = v->group,
                             .zero_point = v->zero_point, .n = 64, .k = 128, .experts = 1, .arch = arch};
      tg_add_transform(b, &d);
    }
}

/* The one-unit dense decode tile at the deepest rings and longest k-tiles allowed: bk 256
 * up to 16 stages, bk 512 and 1024 (weight-only mma.sync; eight k-warps at 1024), as deep
 * as arch's shared memory holds; and as the heuristic takes it, bk 512 on eight k-warps
 * and four stages, and on sm_90, whose shared memory holds them, six stages and the 16-row
 * tile's bk 1024 on three (heuristics/choose.c hm_choose_unit_tile). */
static void add_deep_decode(tg_batch *b, int arch) {
  hm_layer_config lc = layer_of(&variants[0], 1, false);
  hm_gemm_config c;
  HM_ASSERT_OK(hm_gemm_config_from_layer(&lc, HM_GEMM_DENSE, arch, &c));
  const hm_gemm_tuning tiles[] = {
      {8, 64, 256, 1, 1, 4, arch >= 90 ? 16 : 12, false, 0, 1, HM_MMA_SYNC, false},
      {8, 64, 512, 1, 1, 4, arch >= 90 ? 8 : 6, false, 0, 1, HM_MMA_SYNC, false},
      {8, 64, 1024, 1, 1, 8, arch >= 90 ? 3 : 2, false, 0, 1, HM_MMA_SYNC, false},
      {8, 64, 512, 1, 1, 8, 4, false, 0, 1, HM_MMA_SYNC, false},
      /* the last two: past sm_80's shared memory */
      {8, 64, 512, 1, 1, 8, 6, false, 0, 1, HM_MMA_SYNC, false},
      {16, 64, 1024, 1, 1, 8, 3, false, 0, 1, HM_MMA_SYNC, false}};
  for (size_t i = 0; i < HM_ARRAY_SIZE(tiles) - 2 * (arch < 90); i++) {
    c.tuning = tiles[i];
    HM_ASSERT_OK(hm_gemm_config_check(&c));
    tg_add_gemm(b, &c);
  }
}

static void every_variant_compiles_for_sm80_and_sm90a(void **state) {
  (void)state;
  static tg_batch b;
  const int archs[] = {80, 90};
  for (size_t a = 0; a < HM_ARRAY_SIZE(archs); a++) {
    for (size_t i = 0; i < HM_ARRAY_SIZE(variants); i++) {
      hm_layer_config lc = layer_of(&variants[i], i % 4 == 0 ? 1 : 64, false);
      const hm_gemm_type type = lc.experts == 1 ? HM_GEMM_DENSE : (hm_gemm_type)(1 + i % 3);
      add_plan(&b, &lc, type, archs[a], (int)i);
      add_swap(&b, &lc, type, archs[a], (int)i);
    }
    hm_layer_config lc = layer_of(&variants[0], 256, false);
    for (int t = 0; t < 4; t++) add_plan(&b, &lc, (hm_gemm_type)t, archs[a], -1);
    lc = layer_of(&variants[0], 1, true);
    add_plan(&b, &lc, HM_GEMM_DENSE, archs[a], -1);
    add_transforms(&b, archs[a]);
    add_deep_decode(&b, archs[a]);
  }
  tg_compile_all(b.src, b.count, "GEMM and transform");
}

/* The plan's warp-specialized wgmma kernels (sm_90: the large-M end). */
static void add_ws(tg_batch *b, const hm_layer_config *lc, hm_gemm_type type) {
  const hm_gemm_plan plan = plan_of(lc, type, 90);
  for (int i = 0; i < plan.count; i++)
    if (plan.cfg[i].tuning.ws) tg_add_gemm(b, &plan.cfg[i]);
}

/* HUMMING_TRACE=1 builds the mma.sync kernels and the warp-specialized wgmma ones with
 * their per-CTA timeline: the decode tile of each dense and grouped type still compiles,
 * for both archs, and so does each warp-specialized tile of the sm_90 plans. */
static void traced_kernels_compile(void **state) {
  (void)state;
  static tg_batch b;
  setenv("HUMMING_TRACE", "1", 1);
  hm_params_reload();
  const int archs[] = {80, 90};
  for (size_t a = 0; a < HM_ARRAY_SIZE(archs); a++)
    for (int t = 0; t < 4; t++) {
      hm_layer_config lc = layer_of(&variants[0], t == 0 ? 1 : 64, false);
      add_plan(&b, &lc, (hm_gemm_type)t, archs[a], 0);
    }
  const int ws_before = b.count;
  for (int t = 0; t < 4; t++) {
    hm_layer_config lc = layer_of(&variants[0], t == 0 ? 1 : 64, false);
    add_ws(&b, &lc, (hm_gemm_type)t);
  }
  assert_true(b.count > ws_before);
  for (int i = 0; i < b.count; i++) assert_non_null(strstr(b.src[i].text, "#define HM_TRACE 1\n"));
  tg_compile_all(b.src, b.count, "traced GEMM");
  unsetenv("HUMMING_TRACE");
  hm_params_reload();
}

/* HUMMING_PDL_EARLY_STAGES and HUMMING_PDL_EARLY_L2 reach the generated source (the
 * defaults, 3 and 0, too), and the tiles that fill before the grid dependency compile with
 * more early stages and the L2 warm-up after them: the weight-only unit tiles and W8A8's
 * dense decode tile, on sm_90a (the only arch that waits). */
static void early_weights_reach_the_source(void **state) {
  (void)state;
  static tg_batch b;
  const hm_layer_config fp8 = hm_test_layer_config("w8a8-fp8", 7168, 2048, 1, 0);
  hm_gemm_config base, c;
  HM_ASSERT_OK(hm_gemm_config_from_layer(&fp8, HM_GEMM_DENSE, 90, &base));
  HM_ASSERT_OK(hm_gemm_select(&base, 1, &c));
  assert_true(hm_gemm_exclusive_sm(&c));
  hm_gemm_source dflt;
  HM_ASSERT_OK(hm_gemm_gen(&c, &dflt));
  assert_non_null(strstr(dflt.text, "#define HM_EARLY_STAGES 3\n#define HM_EARLY_L2_STAGES 0\n"));
  hm_gemm_source_free(&dflt);

  setenv("HUMMING_PDL_EARLY_STAGES", "5", 1);
  setenv("HUMMING_PDL_EARLY_L2", "4", 1);
  hm_params_reload();
  add_deep_decode(&b, 90);
  tg_add_gemm(&b, &c);
  for (int i = 0; i < b.count; i++)
    assert_non_null(strstr(b.src[i].text, "#define HM_EARLY_STAGES 5\n#define HM_EARLY_L2_STAGES 4\n"));
  tg_compile_all(b.src, b.count, "early-weights GEMM");
  unsetenv("HUMMING_PDL_EARLY_STAGES");
  unsetenv("HUMMING_PDL_EARLY_L2");
  hm_params_reload();
}

/* HUMMING_DECODE_COPY_SETS reaches the generated source: 1 by default, 0 when asked for;
 * the deep decode tiles then copy and wait as one CTA and compile so (their default form,
 * with sets, in every_variant_compiles_for_sm80_and_sm90a). */
static void copy_sets_reach_the_source(void **state) {
  (void)state;
  static tg_batch b;
  add_deep_decode(&b, 90);
  assert_non_null(strstr(b.src[0].text, "#define HM_COPY_SETS 1\n"));
  for (int i = 0; i < b.count; i++) hm_gemm_source_free(&b.src[i]);
  b.count = 0;
  setenv("HUMMING_DECODE_COPY_SETS", "0", 1);
  hm_params_reload();
  for (int arch = 80; arch <= 90; arch += 10) add_deep_decode(&b, arch);
  for (int i = 0; i < b.count; i++) assert_non_null(strstr(b.src[i].text, "#define HM_COPY_SETS 0\n"));
  tg_compile_all(b.src, b.count, "decode GEMM without copy sets");
  unsetenv("HUMMING_DECODE_COPY_SETS");
  hm_params_reload();
}

static void plans_are_consistent(void **state) {
  (void)state;
  for (int inv = 0; inv < 2; inv++)
    for (size_t i = 0; i < HM_ARRAY_SIZE(variants); i++) {
      hm_layer_config lc = layer_of(&variants[i], 8, inv);
      hm_gemm_config base;
      HM_ASSERT_OK(hm_gemm_config_from_layer(&lc, HM_GEMM_INDEXED, 90, &base));
      hm_gemm_plan plan;
      HM_ASSERT_OK(hm_gemm_plan_make(&base, &plan));
      assert_true(plan.count >= 1 && plan.count <= HM_GEMM_PLAN_MAX);
      assert_true(plan.m_hi[plan.count - 1] == INT64_MAX);
      for (int j = 0; j < plan.count; j++) {
        const hm_gemm_tuning *t = &plan.cfg[j].tuning;
        HM_ASSERT_OK(hm_gemm_config_check(&plan.cfg[j]));
        if (j > 0) assert_true(plan.m_hi[j] > plan.m_hi[j - 1]);
        assert_int_equal(hm_gemm_plan_pick(&plan, plan.m_hi[j]), j);
        if (inv) {
          /* bk and warps_k fix the order of the k sums: the same for every M. */
          assert_false(t->stream_k);
          assert_int_equal(t->bk, plan.cfg[0].tuning.bk);
          assert_int_equal(t->warps_k, plan.cfg[0].tuning.warps_k);
        }
      }
      /* Decode (1 row per expert) takes the swapped 8-row tile (quantized, not batch
       * invariant) or the 16-row one; 16 rows per expert the 16-row one; many a taller one. */
      const bool quant = variants[i].weight != HM_F16 && variants[i].weight != HM_BF16;
      assert_int_equal(plan.cfg[hm_gemm_plan_pick(&plan, 8)].tuning.bm, quant && !inv ? 8 : 16);
      assert_int_equal(plan.cfg[hm_gemm_plan_pick(&plan, 8 * 16)].tuning.bm, 16);
      assert_true(plan.cfg[hm_gemm_plan_pick(&plan, 8 * 4096)].tuning.bm >= 64);
    }
}

static void illegal_configs_are_refused(void **state) {
  (void)state;
  hm_layer_config lc = layer_of(&variants[0], 1, false);
  hm_gemm_config base, c;
  HM_ASSERT_OK(hm_gemm_config_from_layer(&lc, HM_GEMM_DENSE, 90, &base));
  HM_ASSERT_OK(hm_gemm_select(&base, 1, &c));
  hm_gemm_config bad = c;
  bad.tuning.bm = 24;
  assert_int_equal(hm_gemm_config_check(&bad), HM_INVALID_ARGUMENT);
  bad = c;
  bad.tuning.bk = 96;
  assert_int_equal(hm_gemm_config_check(&bad), HM_INVALID_ARGUMENT);
  bad = c;
  bad.tuning.bk = 512;
  bad.tuning.mma = HM_MMA_WGMMA;
  assert_int_equal(hm_gemm_config_check(&bad), HM_INVALID_ARGUMENT);
  assert_non_null(strstr(hm_last_error(), "bk=512"));
  bad.tuning.bk = 1024;
  assert_int_equal(hm_gemm_config_check(&bad), HM_INVALID_ARGUMENT);
  bad.tuning.bk = 2048;
  bad.tuning.mma = HM_MMA_SYNC;
  assert_int_equal(hm_gemm_config_check(&bad), HM_INVALID_ARGUMENT);
  bad = c;
  bad.tuning.stages = HM_GEMM_MAX_STAGES + 1;
  assert_int_equal(hm_gemm_config_check(&bad), HM_INVALID_ARGUMENT);
  bad = c;
  bad.tuning.bm = 256;
  bad.tuning.warps_m = 4;
  bad.tuning.stages = 8;
  bad.tuning.bk = 256;
  assert_int_equal(hm_gemm_config_check(&bad), HM_UNSUPPORTED); /* shared memory */
  assert_non_null(strstr(hm_last_error(), "shared memory"));
  bad = c;
  bad.tuning.bm = 8;
  bad.tuning.warps_m = 2;
  assert_int_equal(hm_gemm_config_check(&bad), HM_INVALID_ARGUMENT);
  assert_non_null(strstr(hm_last_error(), "bm=8"));
  bad.tuning.bm = 4;
  bad.tuning.warps_m = 1;
  assert_int_equal(hm_gemm_config_check(&bad), HM_INVALID_ARGUMENT);
  bad = c;
  bad.arch = 75;
  assert_int_equal(hm_gemm_config_check(&bad), HM_UNSUPPORTED);
  bad = c;
  bad.layer.n = 1001;
  assert_int_equal(hm_gemm_config_check(&bad), HM_UNSUPPORTED);
  bad = c;
  bad.layer.weight = HM_F8E4M3;
  assert_int_equal(hm_gemm_config_check(&bad), HM_UNSUPPORTED);
  bad = c;
  bad.layer.zero_point = true;
  bad.layer.weight = HM_I4;
  assert_int_equal(hm_gemm_config_check(&bad), HM_UNSUPPORTED);
  char name[256], other[256];
  hm_gemm_config_name(&c, name, sizeof(name));
  bad = c;
  bad.compute.type = HM_GEMM_INDEXED;
  hm_gemm_config_name(&bad, other, sizeof(other));
  assert_string_not_equal(name, other);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(plans_are_consistent),
      cmocka_unit_test(illegal_configs_are_refused),
      cmocka_unit_test(every_variant_compiles_for_sm80_and_sm90a),
      cmocka_unit_test(traced_kernels_compile),
      cmocka_unit_test(early_weights_reach_the_source),
      cmocka_unit_test(copy_sets_reach_the_source),
  };
  int rc = cmocka_run_group_tests(tests, NULL, NULL);
  hm_shutdown();
  return rc;
}
