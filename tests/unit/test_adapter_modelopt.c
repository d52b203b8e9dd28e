/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ModelOpt checkpoints on a Mixtral config (w1/w3/w2 names): NVFP4 from
 * hf_quant_config.json (bit-exact, global scale = weight_scale_2, same host GEMM, TP
 * slices), FP8 per tensor, MXFP8 e8m0 scales widened exactly, MIXED_PRECISION lookups,
 * and refused algorithms or scales.
 */
#include "test_checkpoint_util.h"

#define H 128
#define I 64
#define E 2
#define PREFIX "model.layers.0.block_sparse_moe.experts"

static const hm_quant_format nvfp4 = {HM_F4E2M1, HM_F8E4M3, HM_SCALE_GROUP, 16, 0, false, true};

static void add(hm_st_writer *w, const char *module, const char *suffix, hm_st_dtype dt, int ndim,
                const int64_t *shape, const void *data) {
  char name[256];
  snprintf(name, sizeof(name), "%s.%s", module, suffix);
  HM_ASSERT_OK(hm_st_writer_add(w, name, dt, ndim, shape, data));
}

static void nvfp4_module(hm_st_writer *w, const char *module, const hm_host_weights *ref, int64_t e,
                         int64_t row0, int64_t n, int64_t k) {
  uint8_t *weight = calloc((size_t)(n * k / 2), 1), *scales = malloc((size_t)(n * k / 16));
  for (int64_t r = 0; r < n; r++)
    for (int64_t c = 0; c < k; c++) {
      weight[r * k / 2 + c / 2] |= (uint8_t)(ck_code(ref, e, row0 + r, c) << (4 * (c % 2)));
      scales[r * (k / 16) + c / 16] = *ck_scale(ref, e, row0 + r, c);
    }
  add(w, module, "weight", HM_ST_U8, 2, (int64_t[]){n, k / 2}, weight);
  add(w, module, "weight_scale", HM_ST_F8_E4M3, 2, (int64_t[]){n, k / 16}, scales);
  add(w, module, "weight_scale_2", HM_ST_F32, 0, NULL, &ref->global_scale[e]);
  float input_scale = 1.0f;
  add(w, module, "input_scale", HM_ST_F32, 0, NULL, &input_scale);
  free(weight);
  free(scales);
}

static void fp8_module(hm_st_writer *w, const char *module, const hm_host_weights *ref, int64_t e,
                       int64_t row0, int64_t n, int64_t k) {
  uint8_t *weight = malloc((size_t)(n * k));
  for (int64_t r = 0; r < n; r++)
    for (int64_t c = 0; c < k; c++) weight[r * k + c] = (uint8_t)ck_code(ref, e, row0 + r, c);
  add(w, module, "weight", HM_ST_F8_E4M3, 2, (int64_t[]){n, k}, weight);
  add(w, module, "weight_scale", HM_ST_F32, 1, (int64_t[]){1}, ck_scale(ref, e, 0, 0));
  free(weight);
}

typedef void (*module_fn)(hm_st_writer *, const char *, const hm_host_weights *, int64_t, int64_t, int64_t,
                          int64_t);

static void write_mixtral(const char *dir, const ck_ffn *f, module_fn put, json_t *quant) {
  hm_st_writer *w;
  HM_ASSERT_OK(hm_st_writer_create(&w));
  for (int64_t e = 0; e < E; e++) {
    char m[128];
    snprintf(m, sizeof(m), PREFIX ".%lld.w1", (long long)e);
    put(w, m, &f->ref_gate_up, e, 0, I, H);
    snprintf(m, sizeof(m), PREFIX ".%lld.w3", (long long)e);
    put(w, m, &f->ref_gate_up, e, I, I, H);
    snprintf(m, sizeof(m), PREFIX ".%lld.w2", (long long)e);
    put(w, m, &f->ref_down, e, 0, H, I);
  }
  ck_save(w, dir, "model.safetensors");
  json_t *c = json_pack("{s:s, s:i, s:i, s:i, s:i, s:i}", "model_type", "mixtral", "hidden_size", H,
                        "num_hidden_layers", 1, "num_local_experts", E, "num_experts_per_tok", 2,
                        "intermediate_size", I);
  if (quant) json_object_set_new(c, "quantization_config", quant);
  ck_write_json(dir, "config.json", c);
}

static void nvfp4_from_hf_quant_config(void **state) {
  (void)state;
  char dir[64];
  ck_tmpdir(dir, sizeof(dir));
  ck_ffn f;
  ck_ffn_make(&f, 61, E, H, I, &nvfp4);
  write_mixtral(dir, &f, nvfp4_module, NULL);
  ck_write_json(dir, "hf_quant_config.json",
                json_pack("{s:{s:s}, s:{s:s, s:i, s:[s]}}", "producer", "name", "modelopt", "quantization",
                          "quant_algo", "NVFP4", "group_size", 16, "exclude_modules", "lm_head"));
  hm_ckpt *ck;
  HM_ASSERT_OK(hm_ckpt_open(dir, &ck));
  assert_string_equal(hm_ckpt_model_info(ck)->quant_method, "modelopt");
  hm_host_weights got;
  HM_ASSERT_OK(hm_ckpt_load_layer(ck, PREFIX ".gate_up", (hm_expert_range){0, E}, 0, 1, &got, NULL));
  ck_expect_mapped(&got, &f.ref_gate_up, 0, NULL, NULL, 0);
  ck_expect_same_gemm(&got, NULL, &f.ref_gate_up, NULL);
  hm_host_weights_free(&got);
  int64_t *cols = ck_down_cols(I, 0, 2, E);
  ck_load_expect(ck, PREFIX ".down", (hm_expert_range){0, E}, 0, 2, &f.ref_down, NULL, cols);
  free(cols);
  hm_ckpt_close(ck);
  ck_ffn_free(&f);
  ck_rmdir(dir);
}

/* Per-tensor fp8: every row of a module carries the tensor's scale. */
static void fp8_per_tensor(void **state) {
  (void)state;
  char dir[64];
  ck_tmpdir(dir, sizeof(dir));
  const hm_quant_format tensor = {HM_F8E4M3, HM_F32, HM_SCALE_TENSOR, 0, 0, false, false};
  ck_ffn f;
  ck_ffn_make(&f, 62, E, H, I, &tensor);
  write_mixtral(dir, &f, fp8_module,
                json_pack("{s:s, s:s}", "quant_method", "modelopt", "quant_algo", "FP8"));
  hm_host_weights got;
  HM_ASSERT_OK(hm_checkpoint_load_layer(dir, PREFIX ".gate_up", (hm_expert_range){0, E}, 0, 1, &got, NULL));
  assert_int_equal(got.fmt.scale_kind, HM_SCALE_CHANNEL);
  for (int64_t e = 0; e < E; e++)
    for (int64_t n = 0; n < 2 * I; n++) {
      assert_memory_equal(ck_scale(&got, e, n, 0), ck_scale(&f.ref_gate_up, e, n, 0), 4);
      for (int64_t k = 0; k < H; k++)
        assert_int_equal(ck_code(&got, e, n, k), ck_code(&f.ref_gate_up, e, n, k));
    }
  hm_host_weights_free(&got);
  ck_ffn_free(&f);
  ck_rmdir(dir);
}

/* MXFP8: e8m0 bytes s become f32 2^(s - 127) per 32 columns; the NaN code is refused. */
static void mxfp8_scales_widen_exactly(void **state) {
  (void)state;
  char dir[64];
  ck_tmpdir(dir, sizeof(dir));
  hm_rng rng;
  hm_rng_seed(&rng, 63);
  uint8_t weight[H * H], scales[H * H / 32];
  for (int i = 0; i < H * H; i++) weight[i] = (uint8_t)(hm_rng_next(&rng) % 0x7e); /* finite e4m3 */
  for (int i = 0; i < H * H / 32; i++) scales[i] = (uint8_t)(100 + hm_rng_next(&rng) % 50);
  hm_st_writer *w;
  HM_ASSERT_OK(hm_st_writer_create(&w));
  const char *projs[] = {"w1", "w3", "w2"};
  for (int p = 0; p < 3; p++) {
    char m[96];
    snprintf(m, sizeof(m), PREFIX ".0.%s", projs[p]);
    add(w, m, "weight", HM_ST_F8_E4M3, 2, (int64_t[]){H, H}, weight);
    add(w, m, "weight_scale", HM_ST_U8, 2, (int64_t[]){H, H / 32}, scales);
  }
  ck_save(w, dir, "model.safetensors");
  json_t *c =
      json_pack("{s:s, s:i, s:i, s:i, s:i, s:i, s:{s:s, s:{s:s}}}", "model_type", "mixtral", "hidden_size", H,
                "num_hidden_layers", 1, "num_local_experts", 1, "num_experts_per_tok", 1, "intermediate_size",
                H, "quantization_config", "quant_method", "modelopt", "quantization", "quant_algo", "MXFP8");
  ck_write_json(dir, "config.json", c);
  hm_host_weights got;
  HM_ASSERT_OK(hm_checkpoint_load_layer(dir, PREFIX ".down", (hm_expert_range){0, 1}, 0, 1, &got, NULL));
  assert_int_equal(got.fmt.scale, HM_F32);
  assert_int_equal(got.fmt.group_k, 32);
  for (int64_t n = 0; n < H; n++)
    for (int64_t k = 0; k < H; k++) {
      assert_int_equal(ck_code(&got, 0, n, k), weight[n * H + k]);
      float s;
      memcpy(&s, ck_scale(&got, 0, n, k), 4);
      assert_true(s == ldexpf(1.0f, scales[n * (H / 32) + k / 32] - 127));
    }
  hm_host_weights_free(&got);
  scales[77] = 0xff;
  HM_ASSERT_OK(hm_st_writer_create(&w));
  add(w, PREFIX ".0.w2", "weight", HM_ST_F8_E4M3, 2, (int64_t[]){H, H}, weight);
  add(w, PREFIX ".0.w2", "weight_scale", HM_ST_U8, 2, (int64_t[]){H, H / 32}, scales);
  ck_save(w, dir, "model.safetensors");
  assert_int_equal(hm_checkpoint_load_layer(dir, PREFIX ".down", (hm_expert_range){0, 1}, 0, 1, &got, NULL),
                   HM_CORRUPT);
  assert_non_null(strstr(hm_last_error(), "w2.weight_scale"));
  ck_rmdir(dir);
}

static void mixed_precision_and_unknown_algorithms(void **state) {
  (void)state;
  char dir[64];
  ck_tmpdir(dir, sizeof(dir));
  ck_ffn f;
  ck_ffn_make(&f, 64, E, H, I, &nvfp4);
  json_t *layers = json_object();
  for (int64_t e = 0; e < E; e++) {
    const char *projs[] = {"w1", "w3", "w2"};
    for (int p = 0; p < 3; p++) {
      char m[96];
      snprintf(m, sizeof(m), PREFIX ".%lld.%s", (long long)e, projs[p]);
      json_object_set_new(layers, m, json_pack("{s:s, s:i}", "quant_algo", "NVFP4", "group_size", 16));
    }
  }
  write_mixtral(dir, &f, nvfp4_module,
                json_pack("{s:s, s:s, s:o}", "quant_method", "modelopt", "quant_algo", "MIXED_PRECISION",
                          "quantized_layers", layers));
  hm_host_weights got;
  HM_ASSERT_OK(hm_checkpoint_load_layer(dir, PREFIX ".down", (hm_expert_range){0, E}, 0, 1, &got, NULL));
  ck_expect_mapped(&got, &f.ref_down, 0, NULL, NULL, 0);
  hm_host_weights_free(&got);
  write_mixtral(dir, &f, nvfp4_module,
                json_pack("{s:s, s:s, s:{}}", "quant_method", "modelopt", "quant_algo", "MIXED_PRECISION",
                          "quantized_layers"));
  assert_int_equal(hm_checkpoint_load_layer(dir, PREFIX ".down", (hm_expert_range){0, 1}, 0, 1, &got, NULL),
                   HM_CORRUPT);
  assert_non_null(strstr(hm_last_error(), PREFIX ".0.w2"));
  write_mixtral(dir, &f, nvfp4_module,
                json_pack("{s:s, s:s}", "quant_method", "modelopt", "quant_algo", "W4A8_AWQ"));
  assert_int_equal(hm_checkpoint_load_layer(dir, PREFIX ".down", (hm_expert_range){0, 1}, 0, 1, &got, NULL),
                   HM_UNSUPPORTED);
  assert_non_null(strstr(hm_last_error(), "W4A8_AWQ"));
  ck_ffn_free(&f);
  ck_rmdir(dir);
}

/* gate and up with their own weight_scale_2: the larger becomes the expert's, the other
 * module's block scales absorb the ratio, and the weights stay what the file says. */
static void different_gate_up_globals_are_folded(void **state) {
  (void)state;
  char dir[64];
  ck_tmpdir(dir, sizeof(dir));
  uint8_t weight[32 * 16], scales[32 * 2];
  memset(weight, 0x22, sizeof(weight)); /* e2m1 1.0, 1.0 */
  memset(scales, 0x40, sizeof(scales)); /* e4m3 2.0 */
  const float globals[3] = {0.5f, 1.0f, 1.0f};
  const char *projs[] = {"w1", "w3", "w2"};
  hm_st_writer *w;
  HM_ASSERT_OK(hm_st_writer_create(&w));
  for (int p = 0; p < 3; p++) {
    char m[96];
    snprintf(m, sizeof(m), PREFIX ".0.%s", projs[p]);
    add(w, m, "weight", HM_ST_U8, 2, (int64_t[]){32, 16}, weight);
    add(w, m, "weight_scale", HM_ST_F8_E4M3, 2, (int64_t[]){32, 2}, scales);
    add(w, m, "weight_scale_2", HM_ST_F32, 0, NULL, &globals[p]);
  }
  ck_save(w, dir, "model.safetensors");
  ck_write_json(dir, "config.json",
                json_pack("{s:s, s:i, s:i, s:i, s:i, s:{s:s, s:s}}", "model_type", "mixtral", "hidden_size",
                          32, "num_hidden_layers", 1, "num_local_experts", 1, "intermediate_size", 32,
                          "quantization_config", "quant_method", "modelopt", "quant_algo", "NVFP4"));
  hm_host_weights got;
  HM_ASSERT_OK(hm_checkpoint_load_layer(dir, PREFIX ".gate_up", (hm_expert_range){0, 1}, 0, 1, &got, NULL));
  assert_true(got.global_scale[0] == 1.0f);
  float rows[64 * 32];
  HM_ASSERT_OK(hm_dequantize_rows(&got, 0, 0, 64, rows));
  for (int n = 0; n < 64; n++)
    for (int k = 0; k < 32; k++) assert_true(rows[n * 32 + k] == (n < 32 ? 1.0f : 2.0f));
  hm_host_weights_free(&got);
  ck_rmdir(dir);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(nvfp4_from_hf_quant_config),
      cmocka_unit_test(fp8_per_tensor),
      cmocka_unit_test(mxfp8_scales_widen_exactly),
      cmocka_unit_test(mixed_precision_and_unknown_algorithms),
      cmocka_unit_test(different_gate_up_globals_are_folded),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
