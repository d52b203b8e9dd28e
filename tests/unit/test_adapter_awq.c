/* SPDX-License-Identifier: Apache-2.0 */
/*
 * AWQ checkpoints written here the way AutoAWQ packs them (order_map [0,2,4,6,1,3,5,7]),
 * loaded back: bit-exact canonical weights, the same host GEMM, TP slices and expert
 * ranges, the nibble interleave pinned on a hand-made word, AutoRound's auto_awq
 * packing, and refused variants.
 */
#include "test_checkpoint_util.h"

#define H 128
#define I 64
#define E 4

static const int order_map[8] = {0, 2, 4, 6, 1, 3, 5, 7};

/* AutoAWQ's pack: nibble i of word w takes column 8w + order_map[i]. */
static void awq_pack_row(const unsigned *codes, int64_t n, int32_t *words) {
  for (int64_t w = 0; w < n / 8; w++) {
    uint32_t v = 0;
    for (int i = 0; i < 8; i++) v |= (uint32_t)codes[8 * w + order_map[i]] << (4 * i);
    words[w] = (int32_t)v;
  }
}

/* Module rows [row0, row0 + n) of expert e of ref, as AWQ's (K, N/8) and (G, N/8) tensors. */
static void awq_module(hm_st_writer *w, const char *module, const hm_host_weights *ref, int64_t e,
                       int64_t row0, int64_t n, int64_t k, int group) {
  int64_t groups = k / group;
  int32_t *qweight = malloc((size_t)(k * n / 8) * 4), *qzeros = malloc((size_t)(groups * n / 8) * 4);
  uint16_t *scales = malloc((size_t)(groups * n) * 2);
  unsigned *codes = malloc((size_t)n * sizeof(unsigned));
  for (int64_t c = 0; c < k; c++) {
    for (int64_t j = 0; j < n; j++) codes[j] = ck_code(ref, e, row0 + j, c);
    awq_pack_row(codes, n, qweight + c * n / 8);
  }
  for (int64_t g = 0; g < groups; g++) {
    for (int64_t j = 0; j < n; j++) {
      codes[j] = ck_zero(ref, e, row0 + j, g * group);
      memcpy(&scales[g * n + j], ck_scale(ref, e, row0 + j, g * group), 2);
    }
    awq_pack_row(codes, n, qzeros + g * n / 8);
  }
  char name[256];
  snprintf(name, sizeof(name), "%s.qweight", module);
  HM_ASSERT_OK(hm_st_writer_add(w, name, HM_ST_I32, 2, (int64_t[]){k, n / 8}, qweight));
  snprintf(name, sizeof(name), "%s.qzeros", module);
  HM_ASSERT_OK(hm_st_writer_add(w, name, HM_ST_I32, 2, (int64_t[]){groups, n / 8}, qzeros));
  snprintf(name, sizeof(name), "%s.scales", module);
  HM_ASSERT_OK(hm_st_writer_add(w, name, HM_ST_F16, 2, (int64_t[]){groups, n}, scales));
  free(qweight);
  free(qzeros);
  free(scales);
  free(codes);
}

static void write_awq(const char *dir, const ck_ffn *f, json_t *quant) {
  hm_st_writer *w;
  HM_ASSERT_OK(hm_st_writer_create(&w));
  for (int64_t e = 0; e < E; e++) {
    char module[128];
    snprintf(module, sizeof(module), "model.layers.0.mlp.experts.%lld.gate_proj", (long long)e);
    awq_module(w, module, &f->ref_gate_up, e, 0, I, H, 32);
    snprintf(module, sizeof(module), "model.layers.0.mlp.experts.%lld.up_proj", (long long)e);
    awq_module(w, module, &f->ref_gate_up, e, I, I, H, 32);
    snprintf(module, sizeof(module), "model.layers.0.mlp.experts.%lld.down_proj", (long long)e);
    awq_module(w, module, &f->ref_down, e, 0, H, I, 32);
  }
  ck_save(w, dir, "model.safetensors");
  ck_write_json(dir, "config.json", ck_qwen3_config(H, I, E, quant));
}

static json_t *awq_config(const char *version, int bits) {
  return json_pack("{s:s, s:i, s:i, s:b, s:s}", "quant_method", "awq", "bits", bits, "group_size", 32,
                   "zero_point", 1, "version", version);
}

static const hm_quant_format awq_fmt = {HM_U4, HM_F16, HM_SCALE_GROUP, 32, 0, true, false};

static void check_round_trip(const char *dir, const ck_ffn *f) {
  hm_ckpt *ck;
  HM_ASSERT_OK(hm_ckpt_open(dir, &ck));
  hm_host_weights got;
  HM_ASSERT_OK(hm_ckpt_load_layer(ck, CK_GATE_UP, (hm_expert_range){0, E}, 0, 1, &got, NULL));
  ck_expect_mapped(&got, &f->ref_gate_up, 0, NULL, NULL, 0);
  ck_expect_same_gemm(&got, NULL, &f->ref_gate_up, NULL);
  hm_host_weights_free(&got);
  HM_ASSERT_OK(hm_ckpt_load_layer(ck, CK_DOWN, (hm_expert_range){0, E}, 0, 1, &got, NULL));
  ck_expect_mapped(&got, &f->ref_down, 0, NULL, NULL, 0);
  ck_expect_same_gemm(&got, NULL, &f->ref_down, NULL);
  hm_host_weights_free(&got);
  int64_t *rows = ck_gate_up_rows(I, 0, 2, 3), *cols = ck_down_cols(I, 0, 2, 3);
  ck_load_expect(ck, CK_GATE_UP, (hm_expert_range){1, 3}, 0, 2, &f->ref_gate_up, rows, NULL);
  ck_load_expect(ck, CK_DOWN, (hm_expert_range){1, 3}, 0, 2, &f->ref_down, NULL, cols);
  free(rows);
  free(cols);
  hm_ckpt_close(ck);
}

static void gemm_layout_round_trip(void **state) {
  (void)state;
  char dir[64];
  ck_tmpdir(dir, sizeof(dir));
  ck_ffn f;
  ck_ffn_make(&f, 21, E, H, I, &awq_fmt);
  write_awq(dir, &f, awq_config("gemm", 4));
  check_round_trip(dir, &f);
  ck_ffn_free(&f);
  ck_rmdir(dir);
}

static void autoround_awq_packing(void **state) {
  (void)state;
  char dir[64];
  ck_tmpdir(dir, sizeof(dir));
  ck_ffn f;
  ck_ffn_make(&f, 22, E, H, I, &awq_fmt);
  write_awq(dir, &f,
            json_pack("{s:s, s:i, s:i, s:b, s:s}", "quant_method", "auto-round", "bits", 4, "group_size", 32,
                      "sym", 0, "packing_format", "auto_awq:gemm"));
  check_round_trip(dir, &f);
  ck_ffn_free(&f);
  ck_rmdir(dir);
}

/* qweight word 0x76543210 in every row: column j of each 8 reads nibble [0,4,1,5,2,6,3,7][j]. */
static void interleave_on_a_known_word(void **state) {
  (void)state;
  char dir[64];
  ck_tmpdir(dir, sizeof(dir));
  int32_t qweight[32 * 4], qzeros[4];
  uint16_t scales[32];
  for (int i = 0; i < 32 * 4; i++) qweight[i] = 0x76543210;
  for (int i = 0; i < 4; i++) qzeros[i] = 0;
  for (int i = 0; i < 32; i++) scales[i] = 0x3c00;
  hm_st_writer *w;
  HM_ASSERT_OK(hm_st_writer_create(&w));
  const char *projs[] = {"gate_proj", "up_proj", "down_proj"};
  for (int p = 0; p < 3; p++) {
    char name[128];
    snprintf(name, sizeof(name), "model.layers.0.mlp.experts.0.%s.qweight", projs[p]);
    HM_ASSERT_OK(hm_st_writer_add(w, name, HM_ST_I32, 2, (int64_t[]){32, 4}, qweight));
    snprintf(name, sizeof(name), "model.layers.0.mlp.experts.0.%s.qzeros", projs[p]);
    HM_ASSERT_OK(hm_st_writer_add(w, name, HM_ST_I32, 2, (int64_t[]){1, 4}, qzeros));
    snprintf(name, sizeof(name), "model.layers.0.mlp.experts.0.%s.scales", projs[p]);
    HM_ASSERT_OK(hm_st_writer_add(w, name, HM_ST_F16, 2, (int64_t[]){1, 32}, scales));
  }
  ck_save(w, dir, "model.safetensors");
  ck_write_json(dir, "config.json", ck_qwen3_config(32, 32, 1, awq_config("gemm", 4)));
  hm_host_weights got;
  HM_ASSERT_OK(hm_checkpoint_load_layer(dir, CK_DOWN, (hm_expert_range){0, 1}, 0, 1, &got, NULL));
  const unsigned expected[8] = {0, 4, 1, 5, 2, 6, 3, 7};
  for (int n = 0; n < 32; n++)
    for (int k = 0; k < 32; k++) assert_int_equal(ck_code(&got, 0, n, k), expected[n % 8]);
  hm_host_weights_free(&got);
  ck_rmdir(dir);
}

static void refused_variants(void **state) {
  (void)state;
  char dir[64];
  ck_tmpdir(dir, sizeof(dir));
  ck_ffn f;
  ck_ffn_make(&f, 23, E, H, I, &awq_fmt);
  write_awq(dir, &f, awq_config("gemv", 4));
  hm_host_weights got;
  assert_int_equal(hm_checkpoint_load_layer(dir, CK_DOWN, (hm_expert_range){0, 1}, 0, 1, &got, NULL),
                   HM_UNSUPPORTED);
  assert_non_null(strstr(hm_last_error(), "gemv"));
  ck_write_json(dir, "config.json", ck_qwen3_config(H, I, E, awq_config("gemm", 8)));
  assert_int_equal(hm_checkpoint_load_layer(dir, CK_DOWN, (hm_expert_range){0, 1}, 0, 1, &got, NULL),
                   HM_UNSUPPORTED);
  /* a config.json with a wider intermediate than the tensors */
  ck_write_json(dir, "config.json", ck_qwen3_config(H, 2 * I, E, awq_config("gemm", 4)));
  assert_int_equal(hm_checkpoint_load_layer(dir, CK_GATE_UP, (hm_expert_range){0, 1}, 0, 1, &got, NULL),
                   HM_CORRUPT);
  assert_non_null(strstr(hm_last_error(), "qweight"));
  ck_ffn_free(&f);
  ck_rmdir(dir);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(gemm_layout_round_trip),
      cmocka_unit_test(autoround_awq_packing),
      cmocka_unit_test(interleave_on_a_known_word),
      cmocka_unit_test(refused_variants),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
