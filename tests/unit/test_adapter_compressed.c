/* SPDX-License-Identifier: Apache-2.0 */
/*
 * compressed-tensors checkpoints written here as llm-compressor lays them out
 * (pack-quantized int4 with and without zero points and act-order, int-quantized int8,
 * float-quantized fp8 per block and per channel, nvfp4- and mxfp4-pack-quantized),
 * loaded back bit-exactly (the nvfp4 global scale within one ulp: it is stored as a
 * divisor), the same host GEMM, TP slices; config_group matching and refused formats.
 */
#include "test_checkpoint_util.h"

#define E 2

enum ct_kind { CT_PACKED, CT_INT8, CT_FP8_BLOCK, CT_FP8_CHANNEL, CT_NVFP4, CT_MXFP4 };

typedef struct ct_case {
  enum ct_kind kind;
  hm_quant_format fmt;
  int64_t hidden, inter;
  const int64_t *hidden_perm; /* (E, H) act-order of gate/up: canonical column c is source column perm[c] */
} ct_case;

static void add(hm_st_writer *w, const char *module, const char *suffix, hm_st_dtype dt, int ndim,
                const int64_t *shape, const void *data) {
  char name[256];
  snprintf(name, sizeof(name), "%s.%s", module, suffix);
  HM_ASSERT_OK(hm_st_writer_add(w, name, dt, ndim, shape, data));
}

/* compressed-tensors' pack_to_int32: 8 codes a word along the packed dimension, LSB first.
 * col_of (act-order: reference column of each source column) or NULL. */
static void packed_module(hm_st_writer *w, const char *module, const hm_host_weights *ref, int64_t e,
                          int64_t row0, int64_t n, int64_t k, const int64_t *act_order) {
  int64_t g = ref->fmt.group_k, groups = k / g;
  int32_t *packed = calloc((size_t)(n * k / 8), 4), *zeros = calloc((size_t)((n + 7) / 8 * groups), 4);
  uint16_t *scales = malloc((size_t)(n * groups) * 2);
  int32_t *g_idx = malloc((size_t)k * 4);
  int64_t *col_of = malloc((size_t)k * sizeof(int64_t));
  for (int64_t s = 0; s < k; s++) col_of[s] = act_order ? act_order[s] : s;
  for (int64_t r = 0; r < n; r++) {
    for (int64_t s = 0; s < k; s++)
      packed[r * k / 8 + s / 8] |= (int32_t)(ck_code(ref, e, row0 + r, col_of[s]) << (4 * (s % 8)));
    for (int64_t c = 0; c < groups; c++) {
      memcpy(&scales[r * groups + c], ck_scale(ref, e, row0 + r, c * g), 2);
      if (ref->fmt.zero_point)
        zeros[(r / 8) * groups + c] |= (int32_t)(ck_zero(ref, e, row0 + r, c * g) << (4 * (r % 8)));
    }
  }
  for (int64_t s = 0; s < k; s++) g_idx[s] = (int32_t)(col_of[s] / g);
  add(w, module, "weight_packed", HM_ST_I32, 2, (int64_t[]){n, k / 8}, packed);
  add(w, module, "weight_scale", HM_ST_BF16, 2, (int64_t[]){n, groups}, scales);
  add(w, module, "weight_shape", HM_ST_I64, 1, (int64_t[]){2}, (int64_t[]){n, k});
  if (ref->fmt.zero_point)
    add(w, module, "weight_zero_point", HM_ST_I32, 2, (int64_t[]){(n + 7) / 8, groups}, zeros);
  if (act_order) add(w, module, "weight_g_idx", HM_ST_I32, 1, (int64_t[]){k}, g_idx);
  free(col_of);
  free(packed);
  free(zeros);
  free(scales);
  free(g_idx);
}

/* Byte-per-element weights (int8, fp8) and row-major scales (per channel or per block). */
static void byte_module(hm_st_writer *w, const char *module, const hm_host_weights *ref, int64_t e,
                        int64_t row0, int64_t n, int64_t k, hm_st_dtype wdt) {
  uint8_t *weight = malloc((size_t)(n * k));
  bool block = ref->fmt.scale_kind == HM_SCALE_BLOCK;
  int64_t sr = block ? n / 128 : n, sc = block ? k / 128 : 1, sbytes = hm_dtype_bits(ref->fmt.scale) / 8;
  uint8_t *scales = malloc((size_t)(sr * sc * sbytes));
  for (int64_t r = 0; r < n; r++)
    for (int64_t c = 0; c < k; c++) {
      weight[r * k + c] = (uint8_t)ck_code(ref, e, row0 + r, c);
      int64_t at = block ? (r / 128) * sc + c / 128 : r;
      memcpy(scales + at * sbytes, ck_scale(ref, e, row0 + r, c), (size_t)sbytes);
    }
  hm_st_dtype sdt = ref->fmt.scale == HM_F32 ? HM_ST_F32 : HM_ST_BF16;
  add(w, module, "weight", wdt, 2, (int64_t[]){n, k}, weight);
  add(w, module, "weight_scale", sdt, 2, (int64_t[]){sr, sc}, scales);
  free(weight);
  free(scales);
}

/* Two e2m1 codes a byte (low nibble first) and one scale byte per group. */
static void fp4_module(hm_st_writer *w, const char *module, const hm_host_weights *ref, int64_t e,
                       int64_t row0, int64_t n, int64_t k) {
  int64_t g = ref->fmt.group_k;
  uint8_t *packed = calloc((size_t)(n * k / 2), 1), *scales = malloc((size_t)(n * k / g));
  for (int64_t r = 0; r < n; r++)
    for (int64_t c = 0; c < k; c++) {
      packed[r * k / 2 + c / 2] |= (uint8_t)(ck_code(ref, e, row0 + r, c) << (4 * (c % 2)));
      scales[r * (k / g) + c / g] = *ck_scale(ref, e, row0 + r, c);
    }
  bool nv = ref->fmt.global_scale;
  add(w, module, "weight_packed", HM_ST_U8, 2, (int64_t[]){n, k / 2}, packed);
  add(w, module, "weight_scale", nv ? HM_ST_F8_E4M3 : HM_ST_U8, 2, (int64_t[]){n, k / g}, scales);
  if (nv) {
    float divisor = 1.0f / ref->global_scale[e];
    add(w, module, "weight_global_scale", HM_ST_F32, 1, (int64_t[]){1}, &divisor);
  }
  free(packed);
  free(scales);
}

static void put_module(hm_st_writer *w, const ct_case *c, const char *module, const hm_host_weights *ref,
                       int64_t e, int64_t row0, int64_t n, int64_t k, const int64_t *col_of) {
  switch (c->kind) {
    case CT_PACKED: packed_module(w, module, ref, e, row0, n, k, col_of); break;
    case CT_INT8: byte_module(w, module, ref, e, row0, n, k, HM_ST_I8); break;
    case CT_FP8_BLOCK:
    case CT_FP8_CHANNEL: byte_module(w, module, ref, e, row0, n, k, HM_ST_F8_E4M3); break;
    default: fp4_module(w, module, ref, e, row0, n, k); break;
  }
}

static json_t *ct_config(const ct_case *c, const char *format, json_t *targets) {
  const char *strategy = c->fmt.scale_kind == HM_SCALE_GROUP   ? "group"
                         : c->fmt.scale_kind == HM_SCALE_BLOCK ? "block"
                                                               : "channel";
  bool is_float = c->kind == CT_FP8_BLOCK || c->kind == CT_FP8_CHANNEL || c->kind >= CT_NVFP4;
  json_t *weights = json_pack("{s:i, s:s, s:b, s:s, s:i, s:o}", "num_bits", hm_dtype_bits(c->fmt.weight),
                              "type", is_float ? "float" : "int", "symmetric", !c->fmt.zero_point, "strategy",
                              strategy, "group_size", c->fmt.group_k, "actorder",
                              c->hidden_perm ? json_string("group") : json_null());
  if (c->kind == CT_FP8_BLOCK) json_object_set_new(weights, "block_structure", json_pack("[i, i]", 128, 128));
  return json_pack("{s:s, s:s, s:{s:{s:o, s:o}}, s:[s]}", "quant_method", "compressed-tensors", "format",
                   format, "config_groups", "group_0", "targets", targets, "weights", weights, "ignore",
                   "lm_head");
}

static const char *ct_format(const ct_case *c) {
  static const char *names[] = {"pack-quantized",  "int-quantized",        "float-quantized",
                                "float-quantized", "nvfp4-pack-quantized", "mxfp4-pack-quantized"};
  return names[c->kind];
}

static void write_ct(const char *dir, const ct_case *c, const ck_ffn *f, json_t *quant) {
  hm_st_writer *w;
  HM_ASSERT_OK(hm_st_writer_create(&w));
  int64_t h = c->hidden, in = c->inter;
  int64_t *col_h = malloc((size_t)h * sizeof(int64_t));
  for (int64_t e = 0; e < E; e++) {
    for (int64_t i = 0; i < h; i++) col_h[c->hidden_perm ? c->hidden_perm[e * h + i] : i] = i;
    char m[128];
    snprintf(m, sizeof(m), "model.layers.0.mlp.experts.%lld.gate_proj", (long long)e);
    put_module(w, c, m, &f->ref_gate_up, e, 0, in, h, c->hidden_perm ? col_h : NULL);
    snprintf(m, sizeof(m), "model.layers.0.mlp.experts.%lld.up_proj", (long long)e);
    put_module(w, c, m, &f->ref_gate_up, e, in, in, h, c->hidden_perm ? col_h : NULL);
    snprintf(m, sizeof(m), "model.layers.0.mlp.experts.%lld.down_proj", (long long)e);
    put_module(w, c, m, &f->ref_down, e, 0, h, in, NULL);
  }
  free(col_h);
  ck_save(w, dir, "model.safetensors");
  ck_write_json(
      dir, "config.json",
      ck_qwen3_config(h, in, E, quant ? quant : ct_config(c, ct_format(c), json_pack("[s]", "Linear"))));
}

static void round_trip(const ct_case *c, int ulps_global) {
  char dir[64];
  ck_tmpdir(dir, sizeof(dir));
  ck_ffn f;
  ck_ffn_make(&f, 51 + (uint64_t)c->kind, E, c->hidden, c->inter, &c->fmt);
  write_ct(dir, c, &f, NULL);
  hm_ckpt *ck;
  HM_ASSERT_OK(hm_ckpt_open(dir, &ck));
  hm_host_weights got;
  hm_ckpt_extras x;
  HM_ASSERT_OK(hm_ckpt_load_layer(ck, CK_GATE_UP, (hm_expert_range){0, E}, 0, 1, &got, &x));
  /* loaded column j is source column k_perm[j], whose reference column is j again */
  ck_expect_mapped(&got, &f.ref_gate_up, 0, NULL, NULL, ulps_global);
  if (ulps_global == 0) ck_expect_same_gemm(&got, x.k_perm, &f.ref_gate_up, c->hidden_perm);
  if (c->hidden_perm) {
    for (int64_t j = 0; j < E * c->hidden; j++) assert_int_equal(x.k_perm[j], c->hidden_perm[j]);
  } else {
    assert_null(x.k_perm);
  }
  hm_host_weights_free(&got);
  hm_ckpt_extras_free(&x);
  int64_t *rows = ck_gate_up_rows(c->inter, 1, 2, 1), *cols = ck_down_cols(c->inter, 1, 2, 1);
  HM_ASSERT_OK(hm_ckpt_load_layer(ck, CK_DOWN, (hm_expert_range){1, 1}, 1, 2, &got, &x));
  ck_expect_mapped(&got, &f.ref_down, 1, NULL, cols, ulps_global);
  hm_host_weights_free(&got);
  HM_ASSERT_OK(hm_ckpt_load_layer(ck, CK_GATE_UP, (hm_expert_range){1, 1}, 1, 2, &got, &x));
  ck_expect_mapped(&got, &f.ref_gate_up, 1, rows, NULL, ulps_global);
  hm_host_weights_free(&got);
  hm_ckpt_extras_free(&x);
  free(rows);
  free(cols);
  hm_ckpt_close(ck);
  ck_ffn_free(&f);
  ck_rmdir(dir);
}

static void pack_quantized_int4(void **state) {
  (void)state;
  round_trip(&(ct_case){CT_PACKED, {HM_U4, HM_BF16, HM_SCALE_GROUP, 32, 0, false, false}, 128, 64, NULL}, 0);
}

/* Asymmetric with act-order: the groups of 32 are whole in any order, so a random
 * permutation that keeps each group's columns sorted is what llm-compressor writes. */
static void pack_quantized_asym_actorder(void **state) {
  (void)state;
  int64_t perm[E * 128];
  hm_rng rng;
  hm_rng_seed(&rng, 57);
  for (int64_t e = 0; e < E; e++) {
    int64_t groups[4] = {0, 1, 2, 3};
    for (int i = 3; i > 0; i--) {
      int j = (int)(hm_rng_next(&rng) % (uint64_t)(i + 1));
      int64_t t = groups[i];
      groups[i] = groups[j];
      groups[j] = t;
    }
    /* canonical group c comes from source columns groups[c]*32 .. +31 */
    for (int64_t c = 0; c < 128; c++) perm[e * 128 + c] = groups[c / 32] * 32 + c % 32;
  }
  /* act-order lists source columns by group: group c's block holds perm's columns of c */
  round_trip(&(ct_case){CT_PACKED, {HM_U4, HM_BF16, HM_SCALE_GROUP, 32, 0, true, false}, 128, 64, perm}, 0);
}

static void int_quantized_int8_channel(void **state) {
  (void)state;
  round_trip(&(ct_case){CT_INT8, {HM_I8, HM_F32, HM_SCALE_CHANNEL, 0, 0, false, false}, 128, 64, NULL}, 0);
}

static void float_quantized_fp8(void **state) {
  (void)state;
  round_trip(
      &(ct_case){CT_FP8_BLOCK, {HM_F8E4M3, HM_F32, HM_SCALE_BLOCK, 128, 128, false, false}, 256, 256, NULL},
      0);
  round_trip(
      &(ct_case){CT_FP8_CHANNEL, {HM_F8E4M3, HM_BF16, HM_SCALE_CHANNEL, 0, 0, false, false}, 128, 64, NULL},
      0);
}

static void nvfp4_and_mxfp4(void **state) {
  (void)state;
  round_trip(&(ct_case){CT_NVFP4, {HM_F4E2M1, HM_F8E4M3, HM_SCALE_GROUP, 16, 0, false, true}, 128, 64, NULL},
             1);
  round_trip(&(ct_case){CT_MXFP4, {HM_F4E2M1, HM_E8M0, HM_SCALE_GROUP, 32, 0, false, false}, 128, 64, NULL},
             0);
}

/* Targets by regex, untargeted modules, and formats the adapter does not know. */
static void config_groups_and_formats(void **state) {
  (void)state;
  char dir[64];
  ck_tmpdir(dir, sizeof(dir));
  ct_case c = {CT_PACKED, {HM_U4, HM_BF16, HM_SCALE_GROUP, 32, 0, false, false}, 128, 64, NULL};
  ck_ffn f;
  ck_ffn_make(&f, 58, E, 128, 64, &c.fmt);
  write_ct(dir, &c, &f, ct_config(&c, "pack-quantized", json_pack("[s]", "re:.*mlp\\.experts\\..*")));
  hm_host_weights got;
  HM_ASSERT_OK(hm_checkpoint_load_layer(dir, CK_DOWN, (hm_expert_range){0, E}, 0, 1, &got, NULL));
  ck_expect_mapped(&got, &f.ref_down, 0, NULL, NULL, 0);
  hm_host_weights_free(&got);
  ck_write_json(
      dir, "config.json",
      ck_qwen3_config(128, 64, E, ct_config(&c, "pack-quantized", json_pack("[s]", "re:.*self_attn.*"))));
  assert_int_equal(hm_checkpoint_load_layer(dir, CK_DOWN, (hm_expert_range){0, 1}, 0, 1, &got, NULL),
                   HM_CORRUPT);
  assert_non_null(strstr(hm_last_error(), "experts.0.down_proj"));
  ck_write_json(dir, "config.json",
                ck_qwen3_config(128, 64, E, ct_config(&c, "marlin-24", json_pack("[s]", "Linear"))));
  assert_int_equal(hm_checkpoint_load_layer(dir, CK_DOWN, (hm_expert_range){0, 1}, 0, 1, &got, NULL),
                   HM_UNSUPPORTED);
  assert_non_null(strstr(hm_last_error(), "marlin-24"));
  ck_ffn_free(&f);
  ck_rmdir(dir);
}

/* The global scale is a divisor: 0.25 stored means weights times 4. */
static void nvfp4_global_scale_is_inverted(void **state) {
  (void)state;
  char dir[64];
  ck_tmpdir(dir, sizeof(dir));
  hm_st_writer *w;
  HM_ASSERT_OK(hm_st_writer_create(&w));
  uint8_t packed[32 * 16], scales[32 * 2];
  memset(packed, 0x22, sizeof(packed)); /* e2m1 code 2 = 1.0 */
  memset(scales, 0x38, sizeof(scales)); /* e4m3 0x38 = 1.0 */
  float divisor = 0.25f;
  const char *projs[] = {"gate_proj", "up_proj", "down_proj"};
  for (int p = 0; p < 3; p++) {
    char m[96];
    snprintf(m, sizeof(m), "model.layers.0.mlp.experts.0.%s", projs[p]);
    add(w, m, "weight_packed", HM_ST_U8, 2, (int64_t[]){32, 16}, packed);
    add(w, m, "weight_scale", HM_ST_F8_E4M3, 2, (int64_t[]){32, 2}, scales);
    add(w, m, "weight_global_scale", HM_ST_F32, 1, (int64_t[]){1}, &divisor);
  }
  ck_save(w, dir, "model.safetensors");
  ct_case c = {CT_NVFP4, {HM_F4E2M1, HM_F8E4M3, HM_SCALE_GROUP, 16, 0, false, true}, 32, 32, NULL};
  ck_write_json(
      dir, "config.json",
      ck_qwen3_config(32, 32, 1, ct_config(&c, "nvfp4-pack-quantized", json_pack("[s]", "Linear"))));
  hm_host_weights got;
  HM_ASSERT_OK(hm_checkpoint_load_layer(dir, CK_DOWN, (hm_expert_range){0, 1}, 0, 1, &got, NULL));
  assert_true(got.global_scale[0] == 4.0f);
  float row[32];
  HM_ASSERT_OK(hm_dequantize_rows(&got, 0, 7, 1, row));
  for (int k = 0; k < 32; k++) assert_true(row[k] == 4.0f);
  hm_host_weights_free(&got);
  ck_rmdir(dir);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(pack_quantized_int4),
      cmocka_unit_test(pack_quantized_asym_actorder),
      cmocka_unit_test(int_quantized_int8_channel),
      cmocka_unit_test(float_quantized_fp8),
      cmocka_unit_test(nvfp4_and_mxfp4),
      cmocka_unit_test(config_groups_and_formats),
      cmocka_unit_test(nvfp4_global_scale_is_inverted),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
