/* SPDX-License-Identifier: Apache-2.0 */
/*
 * FP8 checkpoints in DeepSeek-V3's layout (weight + weight_scale_inv per 128x128 block),
 * a two-layer DeepSeek config (dense layer 0 left in bf16, routed and shared experts in
 * layer 1): bit-exact canonical weights, the same host GEMM, TP slices, the bf16
 * fallback for unquantized modules, per-tensor scales fused into channel scales, and
 * TP splits that would cut a scale block.
 */
#include "test_checkpoint_util.h"

#define H 256
#define I 256
#define E 4

static const hm_quant_format block_fmt = {HM_F8E4M3, HM_F32, HM_SCALE_BLOCK, 128, 128, false, false};
static const hm_quant_format bf16_fmt = {HM_BF16, HM_BF16, HM_SCALE_NONE, 0, 0, false, false};

/* Rows [row0, row0 + n) of expert e: fp8 bytes and f32 scales per 128x128 block. */
static void fp8_module(hm_st_writer *w, const char *module, const hm_host_weights *ref, int64_t e,
                       int64_t row0, int64_t n, int64_t k) {
  uint8_t *weight = malloc((size_t)(n * k));
  float *scale_inv = malloc((size_t)(n / 128 * k / 128) * 4);
  for (int64_t r = 0; r < n; r++)
    for (int64_t c = 0; c < k; c++) {
      weight[r * k + c] = (uint8_t)ck_code(ref, e, row0 + r, c);
      memcpy(&scale_inv[(r / 128) * (k / 128) + c / 128], ck_scale(ref, e, row0 + r, c), 4);
    }
  char name[256];
  snprintf(name, sizeof(name), "%s.weight", module);
  HM_ASSERT_OK(hm_st_writer_add(w, name, HM_ST_F8_E4M3, 2, (int64_t[]){n, k}, weight));
  snprintf(name, sizeof(name), "%s.weight_scale_inv", module);
  HM_ASSERT_OK(hm_st_writer_add(w, name, HM_ST_F32, 2, (int64_t[]){n / 128, k / 128}, scale_inv));
  free(weight);
  free(scale_inv);
}

static void bf16_module(hm_st_writer *w, const char *module, const hm_host_weights *ref, int64_t row0,
                        int64_t n, int64_t k) {
  uint16_t *weight = malloc((size_t)(n * k) * 2);
  for (int64_t r = 0; r < n; r++)
    for (int64_t c = 0; c < k; c++) weight[r * k + c] = (uint16_t)ck_code(ref, 0, row0 + r, c);
  char name[256];
  snprintf(name, sizeof(name), "%s.weight", module);
  HM_ASSERT_OK(hm_st_writer_add(w, name, HM_ST_BF16, 2, (int64_t[]){n, k}, weight));
  free(weight);
}

typedef void (*module_fn)(hm_st_writer *, const char *, const hm_host_weights *, int64_t, int64_t, int64_t,
                          int64_t);

static void bf16_adapter(hm_st_writer *w, const char *m, const hm_host_weights *r, int64_t e, int64_t row0,
                         int64_t n, int64_t k) {
  (void)e;
  bf16_module(w, m, r, row0, n, k);
}

static void ffn_modules(hm_st_writer *w, const char *prefix, const ck_ffn *f, int64_t e, module_fn put) {
  char module[160];
  snprintf(module, sizeof(module), "%s.gate_proj", prefix);
  put(w, module, &f->ref_gate_up, e, 0, f->inter, f->hidden);
  snprintf(module, sizeof(module), "%s.up_proj", prefix);
  put(w, module, &f->ref_gate_up, e, f->inter, f->inter, f->hidden);
  snprintf(module, sizeof(module), "%s.down_proj", prefix);
  put(w, module, &f->ref_down, e, 0, f->hidden, f->inter);
}

static json_t *deepseek_config(json_t *quant) {
  json_t *c = json_pack("{s:s, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:i}", "model_type", "deepseek_v3",
                        "hidden_size", H, "num_hidden_layers", 2, "n_routed_experts", E,
                        "num_experts_per_tok", 2, "moe_intermediate_size", I, "intermediate_size", I,
                        "n_shared_experts", 1, "first_k_dense_replace", 1, "moe_layer_freq", 1);
  if (quant) json_object_set_new(c, "quantization_config", quant);
  return c;
}

static json_t *block_config(void) {
  return json_pack("{s:s, s:s, s:s, s:[i, i]}", "quant_method", "fp8", "fmt", "e4m3", "activation_scheme",
                   "dynamic", "weight_block_size", 128, 128);
}

static void expect_layer(hm_ckpt *ck, const char *layer, const hm_host_weights *ref) {
  hm_host_weights got;
  HM_ASSERT_OK(hm_ckpt_load_layer(ck, layer, (hm_expert_range){0, ref->experts}, 0, 1, &got, NULL));
  ck_expect_mapped(&got, ref, 0, NULL, NULL, 0);
  ck_expect_same_gemm(&got, NULL, ref, NULL);
  hm_host_weights_free(&got);
}

static void deepseek_block_fp8(void **state) {
  (void)state;
  char dir[64];
  ck_tmpdir(dir, sizeof(dir));
  ck_ffn routed, shared, dense;
  ck_ffn_make(&routed, 31, E, H, I, &block_fmt);
  ck_ffn_make(&shared, 32, 1, H, I, &block_fmt);
  ck_ffn_make(&dense, 33, 1, H, I, &bf16_fmt);
  hm_st_writer *w;
  HM_ASSERT_OK(hm_st_writer_create(&w));
  for (int64_t e = 0; e < E; e++) {
    char prefix[96];
    snprintf(prefix, sizeof(prefix), "model.layers.1.mlp.experts.%lld", (long long)e);
    ffn_modules(w, prefix, &routed, e, fp8_module);
  }
  ffn_modules(w, "model.layers.1.mlp.shared_experts", &shared, 0, fp8_module);
  ffn_modules(w, "model.layers.0.mlp", &dense, 0, bf16_adapter);
  ck_save(w, dir, "model.safetensors");
  ck_write_json(dir, "config.json", deepseek_config(block_config()));
  hm_ckpt *ck;
  HM_ASSERT_OK(hm_ckpt_open(dir, &ck));
  expect_layer(ck, "model.layers.1.mlp.experts.gate_up", &routed.ref_gate_up);
  expect_layer(ck, "model.layers.1.mlp.experts.down", &routed.ref_down);
  expect_layer(ck, "model.layers.1.mlp.shared_experts.gate_up", &shared.ref_gate_up);
  expect_layer(ck, "model.layers.0.mlp.down", &dense.ref_down);
  expect_layer(ck, "model.layers.0.mlp.gate_up", &dense.ref_gate_up);
  int64_t *rows = ck_gate_up_rows(I, 1, 2, 2), *cols = ck_down_cols(I, 1, 2, 2);
  ck_load_expect(ck, "model.layers.1.mlp.experts.gate_up", (hm_expert_range){2, 2}, 1, 2, &routed.ref_gate_up,
                 rows, NULL);
  ck_load_expect(ck, "model.layers.1.mlp.experts.down", (hm_expert_range){2, 2}, 1, 2, &routed.ref_down, NULL,
                 cols);
  free(rows);
  free(cols);
  /* TP 4 would cut the 128x128 blocks: refused with the reason. */
  hm_host_weights got;
  assert_int_equal(
      hm_ckpt_load_layer(ck, "model.layers.1.mlp.experts.gate_up", (hm_expert_range){0, 1}, 0, 4, &got, NULL),
      HM_UNSUPPORTED);
  assert_non_null(strstr(hm_last_error(), "scale block"));
  assert_int_equal(
      hm_ckpt_load_layer(ck, "model.layers.1.mlp.experts.down", (hm_expert_range){0, 1}, 0, 4, &got, NULL),
      HM_UNSUPPORTED);
  hm_ckpt_close(ck);
  ck_ffn_free(&routed);
  ck_ffn_free(&shared);
  ck_ffn_free(&dense);
  ck_rmdir(dir);
}

/* Per-tensor scales: gate and up each carry their own, so the loader makes them per row. */
static void per_tensor_scales_become_channel(void **state) {
  (void)state;
  char dir[64];
  ck_tmpdir(dir, sizeof(dir));
  const hm_quant_format tensor_fmt = {HM_F8E4M3, HM_F32, HM_SCALE_TENSOR, 0, 0, false, false};
  hm_rng rng;
  hm_rng_seed(&rng, 34);
  float *gate = malloc(I * H * 4), *up = malloc(I * H * 4);
  hm_rng_fill_normal(&rng, gate, I * H, 0.05f);
  hm_rng_fill_normal(&rng, up, I * H, 0.5f); /* ten times wider: a different tensor scale */
  hm_host_weights ref_gate, ref_up;
  ck_quantize(gate, &tensor_fmt, 1, I, H, &ref_gate);
  ck_quantize(up, &tensor_fmt, 1, I, H, &ref_up);
  hm_st_writer *w;
  HM_ASSERT_OK(hm_st_writer_create(&w));
  const hm_host_weights *refs[3] = {&ref_gate, &ref_up, &ref_gate};
  const char *projs[3] = {"gate_proj", "up_proj", "down_proj"};
  uint8_t *weight = malloc(I * H);
  for (int p = 0; p < 3; p++) {
    for (int64_t r = 0; r < I; r++)
      for (int64_t c = 0; c < H; c++) weight[r * H + c] = (uint8_t)ck_code(refs[p], 0, r, c);
    char name[128];
    snprintf(name, sizeof(name), "model.layers.1.mlp.experts.0.%s.weight", projs[p]);
    HM_ASSERT_OK(hm_st_writer_add(w, name, HM_ST_F8_E4M3, 2, (int64_t[]){I, H}, weight));
    snprintf(name, sizeof(name), "model.layers.1.mlp.experts.0.%s.weight_scale", projs[p]);
    HM_ASSERT_OK(hm_st_writer_add(w, name, HM_ST_F32, 1, (int64_t[]){1}, refs[p]->scales));
  }
  ck_save(w, dir, "model.safetensors");
  ck_write_json(dir, "config.json",
                deepseek_config(json_pack("{s:s, s:s, s:s}", "quant_method", "fp8", "fmt", "e4m3",
                                          "activation_scheme", "static")));
  hm_host_weights got;
  HM_ASSERT_OK(hm_checkpoint_load_layer(dir, "model.layers.1.mlp.experts.gate_up", (hm_expert_range){0, 1}, 0,
                                        1, &got, NULL));
  assert_int_equal(got.fmt.scale_kind, HM_SCALE_CHANNEL);
  const float *scales = got.scales;
  for (int64_t n = 0; n < 2 * I; n++) {
    const hm_host_weights *ref = n < I ? &ref_gate : &ref_up;
    assert_memory_equal(&scales[n], ref->scales, 4);
    for (int64_t c = 0; c < H; c++) assert_int_equal(ck_code(&got, 0, n, c), ck_code(ref, 0, n % I, c));
  }
  hm_host_weights_free(&got);
  free(weight);
  free(gate);
  free(up);
  hm_host_weights_free(&ref_gate);
  hm_host_weights_free(&ref_up);
  ck_rmdir(dir);
}

static void scale_shape_lies(void **state) {
  (void)state;
  char dir[64];
  ck_tmpdir(dir, sizeof(dir));
  ck_ffn routed;
  ck_ffn_make(&routed, 35, 1, H, I, &block_fmt);
  hm_st_writer *w;
  HM_ASSERT_OK(hm_st_writer_create(&w));
  ffn_modules(w, "model.layers.1.mlp.experts.0", &routed, 0, fp8_module);
  ck_save(w, dir, "model.safetensors");
  /* blocks of 64 rows would need twice the scale rows */
  json_t *quant =
      json_pack("{s:s, s:s, s:[i, i]}", "quant_method", "fp8", "fmt", "e4m3", "weight_block_size", 64, 128);
  ck_write_json(dir, "config.json", deepseek_config(quant));
  hm_host_weights got;
  assert_int_equal(hm_checkpoint_load_layer(dir, "model.layers.1.mlp.experts.down", (hm_expert_range){0, 1},
                                            0, 1, &got, NULL),
                   HM_CORRUPT);
  assert_non_null(strstr(hm_last_error(), "experts.0.down_proj.weight_scale_inv"));
  assert_non_null(strstr(hm_last_error(), "[2, 2]"));
  ck_ffn_free(&routed);
  ck_rmdir(dir);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(deepseek_block_fp8),
      cmocka_unit_test(per_tensor_scales_become_channel),
      cmocka_unit_test(scale_shape_lies),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
