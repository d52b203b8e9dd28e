/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Sharded loading: a checkpoint split over five files (two experts each, then the
 * non-expert tensors) is loaded by every rank of EP x TP grids from EP=8/TP=1 to
 * EP=1/TP=8. Each rank's layers equal its slice of the reference, it maps only the
 * shards of its experts, a corrupt or missing shard it does not need leaves it
 * unaffected, and one it needs is named in the error. Also: inspect's summary.
 */
#include "test_checkpoint_util.h"

#define H 64
#define I 64
#define E 8

static const hm_quant_format bf16 = {HM_BF16, HM_BF16, HM_SCALE_NONE, 0, 0, false, false};
static char dir[64];
static ck_ffn ffn;

static void put(hm_st_writer *w, const char *module, const hm_host_weights *ref, int64_t e, int64_t row0,
                int64_t n, int64_t k, json_t *map, const char *file) {
  uint16_t *t = malloc((size_t)(n * k) * 2);
  for (int64_t r = 0; r < n; r++)
    for (int64_t c = 0; c < k; c++) t[r * k + c] = (uint16_t)ck_code(ref, e, row0 + r, c);
  char name[160];
  snprintf(name, sizeof(name), "%s.weight", module);
  HM_ASSERT_OK(hm_st_writer_add(w, name, HM_ST_BF16, 2, (int64_t[]){n, k}, t));
  json_object_set_new(map, name, json_string(file));
  free(t);
}

static int write_sharded(void **state) {
  (void)state;
  ck_tmpdir(dir, sizeof(dir));
  ck_ffn_make(&ffn, 71, E, H, I, &bf16);
  json_t *map = json_object();
  for (int s = 0; s < 4; s++) {
    char file[64];
    snprintf(file, sizeof(file), "model-%05d-of-00005.safetensors", s + 1);
    hm_st_writer *w;
    HM_ASSERT_OK(hm_st_writer_create(&w));
    for (int64_t e = 2 * s; e < 2 * s + 2; e++) {
      char m[96];
      snprintf(m, sizeof(m), "model.layers.0.mlp.experts.%lld.gate_proj", (long long)e);
      put(w, m, &ffn.ref_gate_up, e, 0, I, H, map, file);
      snprintf(m, sizeof(m), "model.layers.0.mlp.experts.%lld.up_proj", (long long)e);
      put(w, m, &ffn.ref_gate_up, e, I, I, H, map, file);
      snprintf(m, sizeof(m), "model.layers.0.mlp.experts.%lld.down_proj", (long long)e);
      put(w, m, &ffn.ref_down, e, 0, H, I, map, file);
    }
    ck_save(w, dir, file);
  }
  hm_st_writer *w;
  HM_ASSERT_OK(hm_st_writer_create(&w));
  uint16_t embed[32 * H] = {0}, gate[E * H] = {0};
  HM_ASSERT_OK(hm_st_writer_add(w, "model.embed_tokens.weight", HM_ST_BF16, 2, (int64_t[]){32, H}, embed));
  HM_ASSERT_OK(hm_st_writer_add(w, "model.layers.0.mlp.gate.weight", HM_ST_BF16, 2, (int64_t[]){E, H}, gate));
  ck_save(w, dir, "model-00005-of-00005.safetensors");
  json_object_set_new(map, "model.embed_tokens.weight", json_string("model-00005-of-00005.safetensors"));
  json_object_set_new(map, "model.layers.0.mlp.gate.weight", json_string("model-00005-of-00005.safetensors"));
  ck_write_json(dir, "model.safetensors.index.json",
                json_pack("{s:{s:i}, s:o}", "metadata", "total_size", 0, "weight_map", map));
  ck_write_json(dir, "config.json", ck_qwen3_config(H, I, E, NULL));
  return 0;
}

static int cleanup(void **state) {
  (void)state;
  ck_ffn_free(&ffn);
  ck_rmdir(dir);
  return 0;
}

/* Rank (ep_rank, tp_rank): both layers equal its slice; only its shards are mapped. */
static void check_rank(int ep, int tp, int ep_rank, int tp_rank) {
  hm_ckpt *ck;
  hm_expert_range r;
  HM_ASSERT_OK(hm_ckpt_open(dir, &ck));
  assert_int_equal(hm_ckpt_open_files(ck), 0);
  HM_ASSERT_OK(hm_expert_range_of_rank(E, ep_rank, ep, &r));
  int64_t *rows = ck_gate_up_rows(I, tp_rank, tp, r.count), *cols = ck_down_cols(I, tp_rank, tp, r.count);
  ck_load_expect(ck, CK_GATE_UP, r, tp_rank, tp, &ffn.ref_gate_up, rows, NULL);
  ck_load_expect(ck, CK_DOWN, r, tp_rank, tp, &ffn.ref_down, NULL, cols);
  size_t shards = (size_t)((r.count + 1) / 2);
  assert_int_equal(hm_ckpt_open_files(ck), shards);
  free(rows);
  free(cols);
  hm_ckpt_close(ck);
}

static void every_rank_of_every_grid(void **state) {
  (void)state;
  const int grids[][2] = {{8, 1}, {4, 2}, {2, 4}, {1, 8}};
  for (size_t g = 0; g < 4; g++)
    for (int ep_rank = 0; ep_rank < grids[g][0]; ep_rank++)
      for (int tp_rank = 0; tp_rank < grids[g][1]; tp_rank++)
        check_rank(grids[g][0], grids[g][1], ep_rank, tp_rank);
}

/* A header that promises 16 bytes of JSON and ends after 15. */
static void write_garbage(const char *file) {
  char path[128];
  snprintf(path, sizeof(path), "%s/%s", dir, file);
  FILE *f = fopen(path, "wb");
  assert_non_null(f);
  fwrite("\x10\0\0\0\0\0\0\0{\"a\": {\"dtype\"", 1, 23, f);
  fclose(f);
}

static void unneeded_shards_stay_closed(void **state) {
  (void)state;
  write_garbage("model-00005-of-00005.safetensors");
  check_rank(4, 1, 0, 0);
  hm_ckpt *ck;
  HM_ASSERT_OK(hm_ckpt_open(dir, &ck));
  hm_ckpt_tensor t;
  assert_int_equal(hm_ckpt_get(ck, "model.embed_tokens.weight", &t), HM_CORRUPT);
  assert_non_null(strstr(hm_last_error(), "model-00005-of-00005.safetensors"));
  hm_host_weights w;
  char path[128];
  snprintf(path, sizeof(path), "%s/model-00004-of-00005.safetensors", dir);
  unlink(path);
  assert_int_not_equal(hm_ckpt_load_layer(ck, CK_DOWN, (hm_expert_range){6, 2}, 0, 1, &w, NULL), HM_OK);
  assert_non_null(strstr(hm_last_error(), "model-00004-of-00005.safetensors"));
  HM_ASSERT_OK(hm_ckpt_load_layer(ck, CK_DOWN, (hm_expert_range){0, 6}, 0, 1, &w, NULL));
  hm_host_weights_free(&w);
  assert_int_equal(hm_ckpt_load_layer(ck, CK_DOWN, (hm_expert_range){7, 2}, 0, 1, &w, NULL),
                   HM_INVALID_ARGUMENT);
  assert_int_equal(hm_ckpt_load_layer(ck, CK_DOWN, (hm_expert_range){0, 1}, 3, 3, &w, NULL),
                   HM_INVALID_ARGUMENT);
  hm_ckpt_close(ck);
}

/* inspect's numbers for EP 2 x TP 2, computed here from the shapes. */
static void summary_per_rank(void **state) {
  (void)state;
  hm_ckpt *ck;
  hm_ckpt_summary s;
  HM_ASSERT_OK(hm_ckpt_open(dir, &ck));
  HM_ASSERT_OK(hm_ckpt_summarize(ck, 2, 2, &s));
  assert_int_equal(s.files, 5);
  assert_int_equal(s.tensors, 3 * E + 2);
  uint64_t other = (32 * H + E * H) * 2, experts = 3 * E * H * I * 2;
  assert_int_equal(s.tensor_bytes, experts + other);
  assert_int_equal(s.dtype_bytes[HM_ST_BF16], experts + other);
  assert_int_equal(s.other_bytes, other);
  assert_int_equal(s.other_rank_bytes, other / 2);
  assert_int_equal(s.layer_count, 2);
  assert_string_equal(s.layers[0].name, CK_GATE_UP);
  assert_int_equal(s.layers[0].rank_experts, E / 2);
  assert_int_equal(s.layers[0].rank_n, I);
  assert_int_equal(s.layers[1].rank_k, I / 2);
  assert_int_equal(s.layers[0].rank_bytes, (E / 2) * I * H * 2);
  assert_int_equal(s.ffn_rank_bytes, (E / 2) * I * H * 2 + (E / 2) * H * (I / 2) * 2);
  hm_ckpt_summary_free(&s);
  assert_int_equal(hm_ckpt_summarize(ck, 3, 1, &s), HM_INVALID_ARGUMENT);
  assert_int_equal(hm_ckpt_summarize(ck, 1, 128, &s), HM_INVALID_ARGUMENT);
  hm_ckpt_close(ck);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(every_rank_of_every_grid),
      cmocka_unit_test(summary_per_rank),
      cmocka_unit_test(unneeded_shards_stay_closed),
  };
  return cmocka_run_group_tests(tests, write_sharded, cleanup);
}
