/* SPDX-License-Identifier: Apache-2.0 */
/*
 * config.json and the shard index: MoE layer selection and tensor naming of each
 * architecture family, quantization methods and where their config comes from, EP
 * ranges, and every malformed input naming the file and field at fault.
 */
#include "test_checkpoint_util.h"

static char dir[64];

static int make_dir(void **state) {
  (void)state;
  ck_tmpdir(dir, sizeof(dir));
  return 0;
}

static int remove_dir(void **state) {
  (void)state;
  ck_rmdir(dir);
  return 0;
}

/* config.json from a JSON text, with an empty shard index. */
static hm_status open_config(const char *config, hm_ckpt **ck) {
  ck_write_text(dir, "config.json", config);
  ck_write_text(dir, "model.safetensors.index.json", "{\"metadata\": {}, \"weight_map\": {}}");
  return hm_ckpt_open(dir, ck);
}

static void expect_ffn(const hm_ckpt *ck, size_t i, const char *prefix, hm_ckpt_ffn_kind kind,
                       int64_t experts, int64_t inter, const char *gate) {
  const hm_ckpt_ffn *f = hm_ckpt_ffn_at(ck, i);
  assert_non_null(f);
  assert_string_equal(f->prefix, prefix);
  assert_int_equal(f->kind, kind);
  assert_int_equal(f->experts, experts);
  assert_int_equal(f->intermediate, inter);
  assert_string_equal(f->gate, gate);
}

static void deepseek_layers(void **state) {
  (void)state;
  hm_ckpt *ck;
  HM_ASSERT_OK(
      open_config("{\"model_type\": \"deepseek_v3\", \"hidden_size\": 64, \"num_hidden_layers\": 4, "
                  "\"n_routed_experts\": 8, \"num_experts_per_tok\": 2, \"moe_intermediate_size\": 16, "
                  "\"intermediate_size\": 96, \"n_shared_experts\": 2, \"first_k_dense_replace\": 1, "
                  "\"moe_layer_freq\": 2, \"num_nextn_predict_layers\": 1}",
                  &ck));
  assert_int_equal(hm_ckpt_model_info(ck)->family, HM_CKPT_DEEPSEEK);
  assert_int_equal(hm_ckpt_ffn_count(ck), 5);
  expect_ffn(ck, 0, "model.layers.0.mlp", HM_FFN_DENSE, 1, 96, "gate_proj");
  expect_ffn(ck, 1, "model.layers.1.mlp", HM_FFN_DENSE, 1, 96, "gate_proj");
  expect_ffn(ck, 2, "model.layers.2.mlp.experts", HM_FFN_ROUTED, 8, 16, "gate_proj");
  expect_ffn(ck, 3, "model.layers.2.mlp.shared_experts", HM_FFN_SHARED, 1, 32, "gate_proj");
  expect_ffn(ck, 4, "model.layers.3.mlp", HM_FFN_DENSE, 1, 96, "gate_proj");
  const hm_ckpt_ffn *f;
  hm_ckpt_proj proj;
  HM_ASSERT_OK(hm_ckpt_layer_find(ck, "model.layers.2.mlp.experts.down", &f, &proj));
  assert_ptr_equal(f, hm_ckpt_ffn_at(ck, 2));
  assert_int_equal(proj, HM_PROJ_DOWN);
  HM_ASSERT_OK(hm_ckpt_layer_find(ck, "model.layers.2.mlp.shared_experts.gate_up", &f, &proj));
  assert_int_equal(proj, HM_PROJ_GATE_UP);
  assert_int_equal(hm_ckpt_layer_find(ck, "model.layers.2.mlp.experts.up", &f, &proj), HM_INVALID_ARGUMENT);
  assert_int_equal(hm_ckpt_layer_find(ck, "model.layers.9.mlp.down", &f, &proj), HM_INVALID_ARGUMENT);
  assert_non_null(strstr(hm_last_error(), "model.layers.0.mlp.gate_up"));
  hm_ckpt_close(ck);
}

static void qwen_mixtral_gpt_oss_layers(void **state) {
  (void)state;
  hm_ckpt *ck;
  HM_ASSERT_OK(
      open_config("{\"model_type\": \"qwen3_moe\", \"hidden_size\": 64, \"num_hidden_layers\": 4, "
                  "\"num_experts\": 16, \"num_experts_per_tok\": 4, \"moe_intermediate_size\": 32, "
                  "\"intermediate_size\": 128, \"decoder_sparse_step\": 2, \"mlp_only_layers\": [3]}",
                  &ck));
  assert_int_equal(hm_ckpt_ffn_count(ck), 4);
  expect_ffn(ck, 0, "model.layers.0.mlp", HM_FFN_DENSE, 1, 128, "gate_proj");
  expect_ffn(ck, 1, "model.layers.1.mlp.experts", HM_FFN_ROUTED, 16, 32, "gate_proj");
  expect_ffn(ck, 3, "model.layers.3.mlp", HM_FFN_DENSE, 1, 128, "gate_proj");
  hm_ckpt_close(ck);
  HM_ASSERT_OK(open_config(
      "{\"model_type\": \"qwen2_moe\", \"hidden_size\": 64, \"num_hidden_layers\": 1, "
      "\"num_experts\": 4, \"moe_intermediate_size\": 32, \"shared_expert_intermediate_size\": 48}",
      &ck));
  expect_ffn(ck, 1, "model.layers.0.mlp.shared_expert", HM_FFN_SHARED, 1, 48, "gate_proj");
  hm_ckpt_close(ck);
  HM_ASSERT_OK(
      open_config("{\"model_type\": \"mixtral\", \"hidden_size\": 64, \"num_hidden_layers\": 2, "
                  "\"num_local_experts\": 8, \"num_experts_per_tok\": 2, \"intermediate_size\": 80}",
                  &ck));
  expect_ffn(ck, 1, "model.layers.1.block_sparse_moe.experts", HM_FFN_ROUTED, 8, 80, "w1");
  assert_string_equal(hm_ckpt_ffn_at(ck, 1)->up, "w3");
  assert_string_equal(hm_ckpt_ffn_at(ck, 1)->down, "w2");
  hm_ckpt_close(ck);
  HM_ASSERT_OK(
      open_config("{\"model_type\": \"gpt_oss\", \"hidden_size\": 64, \"num_hidden_layers\": 1, "
                  "\"num_local_experts\": 32, \"experts_per_token\": 4, \"intermediate_size\": 64}",
                  &ck));
  assert_true(hm_ckpt_ffn_at(ck, 0)->fused);
  assert_int_equal(hm_ckpt_model_info(ck)->top_k, 4);
  hm_ckpt_close(ck);
}

#define MOE                                                                      \
  "\"model_type\": \"mixtral\", \"hidden_size\": 64, \"num_hidden_layers\": 1, " \
  "\"num_local_experts\": 8, \"intermediate_size\": 80"

static void quant_methods(void **state) {
  (void)state;
  const char *aliases[][2] = {
      {"GPTQ", "gptq"},        {"awq", "awq"},     {"intel/auto-round", "auto-round"},
      {"fp8", "fp8"},          {"mxfp4", "mxfp4"}, {"compressed-tensors", "compressed-tensors"},
      {"modelopt", "modelopt"}};
  hm_ckpt *ck;
  char text[512];
  for (size_t i = 0; i < sizeof(aliases) / sizeof(aliases[0]); i++) {
    snprintf(text, sizeof(text), "{" MOE ", \"quantization_config\": {\"quant_method\": \"%s\"}}",
             aliases[i][0]);
    HM_ASSERT_OK(open_config(text, &ck));
    assert_string_equal(hm_ckpt_model_info(ck)->quant_method, aliases[i][1]);
    hm_ckpt_close(ck);
  }
  HM_ASSERT_OK(open_config("{" MOE ", \"compression_config\": {\"format\": \"pack-quantized\"}}", &ck));
  assert_string_equal(hm_ckpt_model_info(ck)->quant_method, "compressed-tensors");
  hm_ckpt_close(ck);
  ck_write_text(dir, "hf_quant_config.json", "{\"quantization\": {\"quant_algo\": \"NVFP4\"}}");
  HM_ASSERT_OK(open_config("{" MOE "}", &ck));
  assert_string_equal(hm_ckpt_model_info(ck)->quant_method, "modelopt");
  assert_string_equal(hm_ckpt_quant_file(ck), "hf_quant_config.json");
  hm_ckpt_close(ck);
  char path[128];
  snprintf(path, sizeof(path), "%s/hf_quant_config.json", dir);
  unlink(path);
  assert_int_equal(
      open_config("{" MOE ", \"quantization_config\": {\"quant_method\": \"bitsandbytes\"}}", &ck),
      HM_UNSUPPORTED);
  assert_non_null(strstr(hm_last_error(), "config.json"));
  assert_non_null(strstr(hm_last_error(), "bitsandbytes"));
  assert_int_equal(open_config("{" MOE ", \"quantization_config\": {\"bits\": 4}}", &ck), HM_CORRUPT);
  assert_non_null(strstr(hm_last_error(), "quant_method"));
}

static void bad_configs(void **state) {
  (void)state;
  hm_ckpt *ck;
  const struct {
    const char *text, *message;
    hm_status status;
  } cases[] = {
      {"{\"model_type\": \"llama\", \"hidden_size\": 64}", "model_type 'llama'", HM_UNSUPPORTED},
      {"{\"hidden_size\": 64}", "model_type", HM_CORRUPT},
      {"{\"model_type\": \"mixtral\", \"hidden_size\": -64, \"num_hidden_layers\": 1}", "'hidden_size'",
       HM_CORRUPT},
      {"{\"model_type\": \"mixtral\", \"hidden_size\": \"64\", \"num_hidden_layers\": 1}", "'hidden_size'",
       HM_CORRUPT},
      {"{\"model_type\": \"mixtral\", \"hidden_size\": 64, \"num_hidden_layers\": 1}", "'num_local_experts'",
       HM_CORRUPT},
      {"{\"model_type\": \"deepseek_v3\", \"hidden_size\": 64, \"num_hidden_layers\": 1, "
       "\"n_routed_experts\": "
       "99999999, \"moe_intermediate_size\": 8, \"intermediate_size\": 8}",
       "'n_routed_experts'", HM_CORRUPT},
      {"{\"model_type\": \"qwen3_moe\", \"hidden_size\": 64, \"num_hidden_layers\": 2, \"num_experts\": 4, "
       "\"moe_intermediate_size\": 8, \"mlp_only_layers\": 3}",
       "mlp_only_layers", HM_CORRUPT},
      {"{\"model_type\": ", "config.json: line", HM_CORRUPT},
      {"[1]", "not a JSON object", HM_CORRUPT},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    assert_int_equal(open_config(cases[i].text, &ck), cases[i].status);
    assert_null(ck);
    if (strstr(hm_last_error(), cases[i].message) == NULL)
      fail_msg("case %zu: '%s' not in '%s'", i, cases[i].message, hm_last_error());
  }
}

static void bad_indexes(void **state) {
  (void)state;
  hm_ckpt *ck;
  ck_write_text(dir, "config.json", "{" MOE "}");
  ck_write_text(dir, "model.safetensors.index.json", "{\"metadata\": {}}");
  assert_int_equal(hm_ckpt_open(dir, &ck), HM_CORRUPT);
  assert_non_null(strstr(hm_last_error(), "weight_map"));
  ck_write_text(dir, "model.safetensors.index.json", "{\"weight_map\": {\"a\": \"../../etc/passwd\"}}");
  assert_int_equal(hm_ckpt_open(dir, &ck), HM_CORRUPT);
  assert_non_null(strstr(hm_last_error(), "not a plain file name"));
  ck_write_text(dir, "model.safetensors.index.json", "{\"weight_map\": {\"a\": 3}}");
  assert_int_equal(hm_ckpt_open(dir, &ck), HM_CORRUPT);
  /* the index names a shard that is not there, and a tensor a shard does not hold */
  ck_write_text(dir, "model.safetensors.index.json",
                "{\"weight_map\": {\"a\": \"gone.safetensors\", \"b\": \"model-1.safetensors\"}}");
  hm_st_writer *w;
  HM_ASSERT_OK(hm_st_writer_create(&w));
  HM_ASSERT_OK(hm_st_writer_add(w, "c", HM_ST_U8, 1, (int64_t[]){1}, "x"));
  ck_save(w, dir, "model-1.safetensors");
  HM_ASSERT_OK(hm_ckpt_open(dir, &ck));
  assert_true(hm_ckpt_has(ck, "a"));
  assert_false(hm_ckpt_has(ck, "c"));
  hm_ckpt_tensor t;
  assert_int_not_equal(hm_ckpt_get(ck, "a", &t), HM_OK);
  assert_non_null(strstr(hm_last_error(), "gone.safetensors"));
  assert_int_equal(hm_ckpt_get(ck, "b", &t), HM_CORRUPT);
  assert_non_null(strstr(hm_last_error(), "model-1.safetensors, which does not hold it"));
  assert_int_equal(hm_ckpt_get(ck, "zzz", &t), HM_CORRUPT);
  assert_non_null(strstr(hm_last_error(), "'zzz' is missing"));
  hm_ckpt_close(ck);
  char path[128];
  snprintf(path, sizeof(path), "%s/model.safetensors.index.json", dir);
  unlink(path);
  snprintf(path, sizeof(path), "%s/model-1.safetensors", dir);
  unlink(path);
  assert_int_equal(hm_ckpt_open(dir, &ck), HM_INVALID_ARGUMENT);
  assert_non_null(strstr(hm_last_error(), "model.safetensors"));
  assert_int_equal(hm_ckpt_open("/tmp/hm-no-such-checkpoint", &ck), HM_INVALID_ARGUMENT);
  assert_non_null(strstr(hm_last_error(), "/tmp/hm-no-such-checkpoint/config.json"));
}

static void expert_ranges(void **state) {
  (void)state;
  hm_expert_range r;
  HM_ASSERT_OK(hm_expert_range_of_rank(256, 7, 8, &r));
  assert_int_equal(r.first, 224);
  assert_int_equal(r.count, 32);
  HM_ASSERT_OK(hm_expert_range_of_rank(8, 0, 1, &r));
  assert_int_equal(r.count, 8);
  assert_int_equal(hm_expert_range_of_rank(10, 0, 4, &r), HM_INVALID_ARGUMENT);
  assert_int_equal(hm_expert_range_of_rank(8, 4, 4, &r), HM_INVALID_ARGUMENT);
  hm_ckpt_close(NULL);
  hm_ckpt_extras_free(NULL);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(deepseek_layers), cmocka_unit_test(qwen_mixtral_gpt_oss_layers),
      cmocka_unit_test(quant_methods),   cmocka_unit_test(bad_configs),
      cmocka_unit_test(bad_indexes),     cmocka_unit_test(expert_ranges),
  };
  return cmocka_run_group_tests(tests, make_dir, remove_dir);
}
