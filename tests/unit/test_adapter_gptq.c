/* SPDX-License-Identifier: Apache-2.0 */
/*
 * GPTQ checkpoints (and AutoRound's GPTQ packing) written here in GPTQ's own layout
 * from the directly quantized reference, loaded back: bit-exact canonical weights, the
 * same host GEMM, TP slices and expert ranges, act-order (desc_act) with the FFN output
 * unchanged, the zero-point offset conventions pinned on hand-made words, bad input.
 */
#include "test_checkpoint_util.h"

#define H 128
#define I 64
#define E 4

typedef struct gptq_opts {
  int bits, group; /* group -1: per channel */
  bool sym, v1;
  const int64_t *hidden_perm; /* (E, H): canonical hidden column c is source column perm[c] */
  const int64_t *inter_perm;  /* (E, I): canonical intermediate c is source neuron perm[c] */
} gptq_opts;

static void put_bits(int32_t *words, int64_t stride, int64_t index, int bits, unsigned v) {
  for (int t = 0; t < bits; t++) {
    int64_t p = index * bits + t;
    words[(p / 32) * stride] |= (int32_t)(((v >> t) & 1u) << (p % 32));
  }
}

/* One module: source (n_src, k_src); row_of/col_of give the reference row/column. */
static void gptq_module(hm_st_writer *w, const char *module, const hm_host_weights *ref, int64_t e,
                        const int64_t *row_of, int64_t n_src, const int64_t *col_of, int64_t k_src,
                        const gptq_opts *o) {
  int b = o->bits;
  int64_t gk = o->group > 0 ? o->group : k_src, groups = k_src / gk;
  int32_t *qweight = calloc((size_t)(k_src * b / 32 * n_src), 4);
  int32_t *qzeros = calloc((size_t)(groups * n_src * b / 32), 4);
  uint16_t *scales = malloc((size_t)(groups * n_src) * 2);
  int32_t *g_idx = malloc((size_t)k_src * 4);
  int64_t *first_col = malloc((size_t)groups * sizeof(int64_t));
  for (int64_t s = 0; s < k_src; s++) {
    g_idx[s] = (int32_t)(col_of[s] / gk);
    first_col[col_of[s] / gk] = col_of[s] - col_of[s] % gk;
  }
  for (int64_t n = 0; n < n_src; n++) {
    for (int64_t s = 0; s < k_src; s++)
      put_bits(qweight + n, n_src, s, b, ck_code(ref, e, row_of[n], col_of[s]));
    for (int64_t g = 0; g < groups; g++) {
      memcpy(&scales[g * n_src + n], ck_scale(ref, e, row_of[n], first_col[g]), 2);
      unsigned z = o->sym ? 1u << (b - 1) : ck_zero(ref, e, row_of[n], first_col[g]);
      put_bits(qzeros + g * (n_src * b / 32), 1, n, b, o->v1 ? (z - 1) & ((1u << b) - 1) : z);
    }
  }
  char name[256];
  snprintf(name, sizeof(name), "%s.qweight", module);
  HM_ASSERT_OK(hm_st_writer_add(w, name, HM_ST_I32, 2, (int64_t[]){k_src * b / 32, n_src}, qweight));
  snprintf(name, sizeof(name), "%s.qzeros", module);
  HM_ASSERT_OK(hm_st_writer_add(w, name, HM_ST_I32, 2, (int64_t[]){groups, n_src * b / 32}, qzeros));
  snprintf(name, sizeof(name), "%s.scales", module);
  HM_ASSERT_OK(hm_st_writer_add(w, name, HM_ST_F16, 2, (int64_t[]){groups, n_src}, scales));
  snprintf(name, sizeof(name), "%s.g_idx", module);
  HM_ASSERT_OK(hm_st_writer_add(w, name, HM_ST_I32, 1, (int64_t[]){k_src}, g_idx));
  free(qweight);
  free(qzeros);
  free(scales);
  free(g_idx);
  free(first_col);
}

/* Inverse of perm (count), or the identity. */
static int64_t *inverse(const int64_t *perm, int64_t count) {
  int64_t *inv = malloc((size_t)count * sizeof(int64_t));
  for (int64_t i = 0; i < count; i++) inv[perm ? perm[i] : i] = i;
  return inv;
}

static void write_gptq(const char *dir, const ck_ffn *f, const gptq_opts *o, json_t *quant) {
  hm_st_writer *w;
  HM_ASSERT_OK(hm_st_writer_create(&w));
  int64_t hidden_rows[H], up_rows[I];
  for (int64_t i = 0; i < H; i++) hidden_rows[i] = i;
  for (int64_t e = 0; e < E; e++) {
    int64_t *col_h = inverse(o->hidden_perm ? o->hidden_perm + e * H : NULL, H);
    int64_t *row_i = inverse(o->inter_perm ? o->inter_perm + e * I : NULL, I);
    for (int64_t i = 0; i < I; i++) up_rows[i] = I + row_i[i];
    char module[128];
    snprintf(module, sizeof(module), "model.layers.0.mlp.experts.%lld.gate_proj", (long long)e);
    gptq_module(w, module, &f->ref_gate_up, e, row_i, I, col_h, H, o);
    snprintf(module, sizeof(module), "model.layers.0.mlp.experts.%lld.up_proj", (long long)e);
    gptq_module(w, module, &f->ref_gate_up, e, up_rows, I, col_h, H, o);
    snprintf(module, sizeof(module), "model.layers.0.mlp.experts.%lld.down_proj", (long long)e);
    gptq_module(w, module, &f->ref_down, e, hidden_rows, H, row_i, I, o);
    free(col_h);
    free(row_i);
  }
  ck_save(w, dir, "model.safetensors");
  ck_write_json(dir, "config.json", ck_qwen3_config(H, I, E, quant));
}

static json_t *gptq_config(const gptq_opts *o) {
  return json_pack("{s:s, s:i, s:i, s:b, s:b, s:s}", "quant_method", "gptq", "bits", o->bits, "group_size",
                   o->group, "sym", o->sym, "desc_act", o->hidden_perm != NULL, "checkpoint_format",
                   o->v1 ? "gptq" : "gptq_v2");
}

static hm_quant_format gptq_format(const gptq_opts *o) {
  hm_dtype u[] = {HM_U1, HM_U2, HM_U3, HM_U4, HM_U5, HM_U6, HM_U7, HM_U8};
  hm_quant_format f = {u[o->bits - 1],
                       HM_F16,
                       o->group > 0 ? HM_SCALE_GROUP : HM_SCALE_CHANNEL,
                       o->group > 0 ? o->group : 0,
                       0,
                       !o->sym,
                       false};
  return f;
}

/* Full load equals the reference and computes the same; TP rank 1 of 2 on experts 1..2 too. */
static void round_trip(const gptq_opts *o, json_t *quant) {
  char dir[64];
  ck_tmpdir(dir, sizeof(dir));
  hm_quant_format fmt = gptq_format(o);
  ck_ffn f;
  ck_ffn_make(&f, 11, E, H, I, &fmt);
  write_gptq(dir, &f, o, quant ? quant : gptq_config(o));
  hm_ckpt *ck;
  HM_ASSERT_OK(hm_ckpt_open(dir, &ck));
  hm_host_weights got;
  HM_ASSERT_OK(hm_ckpt_load_layer(ck, CK_GATE_UP, (hm_expert_range){0, E}, 0, 1, &got, NULL));
  ck_expect_mapped(&got, &f.ref_gate_up, 0, NULL, NULL, 0);
  ck_expect_same_gemm(&got, NULL, &f.ref_gate_up, NULL);
  hm_host_weights_free(&got);
  HM_ASSERT_OK(hm_ckpt_load_layer(ck, CK_DOWN, (hm_expert_range){0, E}, 0, 1, &got, NULL));
  ck_expect_mapped(&got, &f.ref_down, 0, NULL, NULL, 0);
  ck_expect_same_gemm(&got, NULL, &f.ref_down, NULL);
  hm_host_weights_free(&got);
  int64_t *rows = ck_gate_up_rows(I, 1, 2, 2), *cols = ck_down_cols(I, 1, 2, 2);
  ck_load_expect(ck, CK_GATE_UP, (hm_expert_range){1, 2}, 1, 2, &f.ref_gate_up, rows, NULL);
  ck_load_expect(ck, CK_DOWN, (hm_expert_range){1, 2}, 1, 2, &f.ref_down, NULL, cols);
  free(rows);
  free(cols);
  hm_ckpt_close(ck);
  ck_ffn_free(&f);
  ck_rmdir(dir);
}

static void v1_asym_4bit_g32(void **state) {
  (void)state;
  round_trip(&(gptq_opts){4, 32, false, true, NULL, NULL}, NULL);
}

static void sym_8bit_g32(void **state) {
  (void)state;
  round_trip(&(gptq_opts){8, 32, true, true, NULL, NULL}, NULL);
}

static void v2_3bit_channel(void **state) {
  (void)state;
  round_trip(&(gptq_opts){3, -1, false, false, NULL, NULL}, NULL);
}

static void autoround_native_packing_has_no_offset(void **state) {
  (void)state;
  gptq_opts o = {4, 32, false, false, NULL, NULL};
  round_trip(&o, json_pack("{s:s, s:i, s:i, s:b, s:s}", "quant_method", "intel/auto-round", "bits", 4,
                           "group_size", 32, "sym", 0, "packing_format", "auto_round:auto_gptq"));
}

static void shuffle(hm_rng *rng, int64_t *p, int64_t count) {
  for (int64_t i = 0; i < count; i++) p[i] = i;
  for (int64_t i = count - 1; i > 0; i--) {
    int64_t j = (int64_t)(hm_rng_next(rng) % (uint64_t)(i + 1)), t = p[i];
    p[i] = p[j];
    p[j] = t;
  }
}

/* Source columns in act-order: group by group, ascending within a group (written here
 * from GPTQ's g_idx meaning, not from the loader). */
static void act_order_of(const int64_t *perm, int64_t count, int group, int64_t *order) {
  int64_t *inv = inverse(perm, count), at = 0;
  for (int64_t g = 0; g < count / group; g++)
    for (int64_t s = 0; s < count; s++)
      if (inv[s] / group == g) order[at++] = s;
  free(inv);
}

static void dequant(const hm_host_weights *w, int64_t e, float *out) {
  HM_ASSERT_OK(hm_dequantize_rows(w, e, 0, w->n, out));
}

/* y = down (silu(gate x) * up x) in double, weights (2I', H) and (H, I') dequantized. */
static void ffn(const float *gu, const float *down, int64_t inter, const float *x, double *y) {
  for (int64_t n = 0; n < H; n++) y[n] = 0;
  for (int64_t i = 0; i < inter; i++) {
    double g = 0, u = 0;
    for (int64_t k = 0; k < H; k++) {
      g += (double)gu[i * H + k] * x[k];
      u += (double)gu[(inter + i) * H + k] * x[k];
    }
    double h = g / (1 + exp(-g)) * u;
    for (int64_t n = 0; n < H; n++) y[n] += (double)down[n * inter + i] * h;
  }
}

/* Loads both layers of TP rank r and adds its FFN output for expert e to y. */
static void add_rank_output(hm_ckpt *ck, int rank, int tp, int64_t e, const float *x, double *y,
                            int32_t *k_perm_out) {
  hm_host_weights gu, dn;
  hm_ckpt_extras xg, xd;
  HM_ASSERT_OK(hm_ckpt_load_layer(ck, CK_GATE_UP, (hm_expert_range){e, 1}, rank, tp, &gu, &xg));
  HM_ASSERT_OK(hm_ckpt_load_layer(ck, CK_DOWN, (hm_expert_range){e, 1}, rank, tp, &dn, &xd));
  assert_non_null(xg.k_perm);
  assert_null(xd.k_perm);
  float *wgu = malloc((size_t)(gu.n * H) * 4), *wd = malloc((size_t)(H * dn.k) * 4), xp[H];
  dequant(&gu, 0, wgu);
  dequant(&dn, 0, wd);
  for (int64_t k = 0; k < H; k++) xp[k] = x[xg.k_perm[k]];
  memcpy(k_perm_out, xg.k_perm, H * sizeof(int32_t));
  double part[H];
  ffn(wgu, wd, dn.k, xp, part);
  for (int64_t n = 0; n < H; n++) y[n] += part[n];
  free(wgu);
  free(wd);
  hm_host_weights_free(&gu);
  hm_host_weights_free(&dn);
  hm_ckpt_extras_free(&xg);
  hm_ckpt_extras_free(&xd);
}

/*
 * desc_act: each expert has its own column order on gate/up (hidden) and on down
 * (intermediate). Loaded weights equal the reference under the orders GPTQ's g_idx
 * implies, k_perm is that order, and the FFN output summed over TP ranks is unchanged.
 */
static void desc_act_reorders_and_keeps_the_ffn(void **state) {
  (void)state;
  hm_rng rng;
  hm_rng_seed(&rng, 5);
  int64_t hperm[E * H], iperm[E * I];
  for (int64_t e = 0; e < E; e++) {
    shuffle(&rng, hperm + e * H, H);
    shuffle(&rng, iperm + e * I, I);
  }
  gptq_opts o = {4, 32, false, true, hperm, iperm};
  char dir[64];
  ck_tmpdir(dir, sizeof(dir));
  hm_quant_format fmt = gptq_format(&o);
  ck_ffn f;
  ck_ffn_make(&f, 12, E, H, I, &fmt);
  write_gptq(dir, &f, &o, gptq_config(&o));
  hm_ckpt *ck;
  HM_ASSERT_OK(hm_ckpt_open(dir, &ck));
  int64_t rows[E * 2 * I], cols_h[E * H], cols_i[E * I], order_h[H], order_i[I];
  for (int64_t e = 0; e < E; e++) {
    int64_t *inv_h = inverse(hperm + e * H, H), *inv_i = inverse(iperm + e * I, I);
    act_order_of(hperm + e * H, H, 32, order_h);
    act_order_of(iperm + e * I, I, 32, order_i);
    for (int64_t j = 0; j < H; j++) cols_h[e * H + j] = inv_h[order_h[j]];
    for (int64_t j = 0; j < I; j++) {
      rows[e * 2 * I + j] = inv_i[order_i[j]];
      rows[e * 2 * I + I + j] = I + inv_i[order_i[j]];
      cols_i[e * I + j] = inv_i[order_i[j]];
    }
    free(inv_h);
    free(inv_i);
  }
  hm_host_weights got;
  hm_ckpt_extras extras;
  HM_ASSERT_OK(hm_ckpt_load_layer(ck, CK_GATE_UP, (hm_expert_range){0, E}, 0, 1, &got, &extras));
  ck_expect_mapped(&got, &f.ref_gate_up, 0, rows, cols_h, 0);
  hm_ckpt_extras_free(&extras);
  hm_host_weights_free(&got);
  HM_ASSERT_OK(hm_ckpt_load_layer(ck, CK_DOWN, (hm_expert_range){0, E}, 0, 1, &got, &extras));
  assert_null(extras.k_perm);
  ck_expect_mapped(&got, &f.ref_down, 0, NULL, cols_i, 0);
  hm_host_weights_free(&got);
  /* Without extras a layer that needs k_perm is an error, not a silent misload. */
  assert_int_equal(hm_ckpt_load_layer(ck, CK_GATE_UP, (hm_expert_range){0, 1}, 0, 1, &got, NULL),
                   HM_INVALID_ARGUMENT);
  for (int64_t e = 0; e < E; e++) {
    float x[H], x_can[H], wgu[2 * I * H], wd[H * I];
    double y_ref[H], y[H] = {0};
    int32_t k_perm[H];
    hm_rng_fill_normal(&rng, x, H, 1.0f);
    for (int64_t c = 0; c < H; c++) x_can[c] = x[hperm[e * H + c]];
    dequant(&f.ref_gate_up, e, wgu);
    dequant(&f.ref_down, e, wd);
    ffn(wgu, wd, I, x_can, y_ref);
    for (int rank = 0; rank < 2; rank++) add_rank_output(ck, rank, 2, e, x, y, k_perm);
    act_order_of(hperm + e * H, H, 32, order_h);
    for (int64_t j = 0; j < H; j++) assert_int_equal(k_perm[j], order_h[j]);
    double num = 0, den = 0;
    for (int64_t n = 0; n < H; n++) {
      num += (y[n] - y_ref[n]) * (y[n] - y_ref[n]);
      den += y_ref[n] * y_ref[n];
    }
    assert_true(sqrt(num / den) < 1e-6);
  }
  hm_ckpt_close(ck);
  ck_ffn_free(&f);
  ck_rmdir(dir);
}

/* One expert, H = I = 32, group 32: every module holds the same hand-made words. */
static void write_golden(const char *dir, uint32_t zero_word, const char *format, bool sym) {
  int32_t qweight[4 * 32], qzeros[4];
  uint16_t scales[32];
  for (int r = 0; r < 4; r++)
    for (int n = 0; n < 32; n++) qweight[r * 32 + n] = (int32_t)(r % 2 ? 0xfedcba98u : 0x76543210u);
  for (int n = 0; n < 32; n++) scales[n] = n % 2 ? 0x4000 : 0x3c00; /* 2.0, 1.0 */
  for (int w = 0; w < 4; w++) qzeros[w] = (int32_t)zero_word;
  hm_st_writer *wr;
  HM_ASSERT_OK(hm_st_writer_create(&wr));
  const char *projs[] = {"gate_proj", "up_proj", "down_proj"};
  for (int p = 0; p < 3; p++) {
    char name[128];
    snprintf(name, sizeof(name), "model.layers.0.mlp.experts.0.%s.qweight", projs[p]);
    HM_ASSERT_OK(hm_st_writer_add(wr, name, HM_ST_I32, 2, (int64_t[]){4, 32}, qweight));
    snprintf(name, sizeof(name), "model.layers.0.mlp.experts.0.%s.qzeros", projs[p]);
    HM_ASSERT_OK(hm_st_writer_add(wr, name, HM_ST_I32, 2, (int64_t[]){1, 4}, qzeros));
    snprintf(name, sizeof(name), "model.layers.0.mlp.experts.0.%s.scales", projs[p]);
    HM_ASSERT_OK(hm_st_writer_add(wr, name, HM_ST_F16, 2, (int64_t[]){1, 32}, scales));
  }
  ck_save(wr, dir, "model.safetensors");
  ck_write_json(dir, "config.json",
                ck_qwen3_config(32, 32, 1,
                                json_pack("{s:s, s:i, s:i, s:b, s:s}", "quant_method", "gptq", "bits", 4,
                                          "group_size", 32, "sym", sym, "checkpoint_format", format)));
}

/* Dequantized gate row n, column k must be (k % 16 - zero) * (n odd ? 2 : 1). */
static hm_status expect_golden(const char *dir, float zero) {
  hm_host_weights w;
  hm_status st = hm_checkpoint_load_layer(dir, CK_GATE_UP, (hm_expert_range){0, 1}, 0, 1, &w, NULL);
  if (st != HM_OK) return st;
  float rows[64 * 32];
  HM_ASSERT_OK(hm_dequantize_rows(&w, 0, 0, 64, rows));
  for (int n = 0; n < 64; n++)
    for (int k = 0; k < 32; k++)
      assert_true(rows[n * 32 + k] == ((float)(k % 16) - zero) * (n % 2 ? 2.0f : 1.0f));
  hm_host_weights_free(&w);
  return HM_OK;
}

static void zero_point_conventions_on_known_words(void **state) {
  (void)state;
  char dir[64];
  ck_tmpdir(dir, sizeof(dir));
  write_golden(dir, 0x00000000u, "gptq", false); /* v1 stores z - 1: z = 1 */
  HM_ASSERT_OK(expect_golden(dir, 1.0f));
  write_golden(dir, 0x00000000u, "gptq_v2", false); /* v2 stores z */
  HM_ASSERT_OK(expect_golden(dir, 0.0f));
  write_golden(dir, 0x77777777u, "gptq", true); /* sym: 7 + 1 = 8, no zero points stored */
  HM_ASSERT_OK(expect_golden(dir, 8.0f));
  write_golden(dir, 0x00000000u, "gptq", true); /* sym but z = 1: refused */
  assert_int_equal(expect_golden(dir, 8.0f), HM_CORRUPT);
  assert_non_null(strstr(hm_last_error(), "qzeros"));
  ck_rmdir(dir);
}

static void bad_input_names_file_and_tensor(void **state) {
  (void)state;
  char dir[64];
  ck_tmpdir(dir, sizeof(dir));
  gptq_opts o = {4, 32, false, true, NULL, NULL};
  hm_quant_format fmt = gptq_format(&o);
  ck_ffn f;
  ck_ffn_make(&f, 13, E, H, I, &fmt);
  write_gptq(dir, &f, &o, gptq_config(&o));
  hm_host_weights w;
  /* config.json promising a wider model than the tensors hold */
  ck_write_json(dir, "config.json", ck_qwen3_config(2 * H, I, E, gptq_config(&o)));
  assert_int_equal(hm_checkpoint_load_layer(dir, CK_DOWN, (hm_expert_range){0, 1}, 0, 1, &w, NULL),
                   HM_CORRUPT);
  assert_non_null(strstr(hm_last_error(), "model.safetensors"));
  assert_non_null(strstr(hm_last_error(), "experts.0.down_proj.qweight"));
  assert_non_null(strstr(hm_last_error(), "config.json implies"));
  /* more experts than written: the first missing tensor is named */
  ck_write_json(dir, "config.json", ck_qwen3_config(H, I, E + 1, gptq_config(&o)));
  assert_int_equal(hm_checkpoint_load_layer(dir, CK_DOWN, (hm_expert_range){0, E + 1}, 0, 1, &w, NULL),
                   HM_CORRUPT);
  assert_non_null(strstr(hm_last_error(), "experts.4.down_proj.qweight"));
  /* bits outside GPTQ's range */
  gptq_opts nine = {9, 32, false, true, NULL, NULL};
  ck_write_json(dir, "config.json", ck_qwen3_config(H, I, E, gptq_config(&nine)));
  assert_int_equal(hm_checkpoint_load_layer(dir, CK_DOWN, (hm_expert_range){0, 1}, 0, 1, &w, NULL),
                   HM_UNSUPPORTED);
  /* a TP slice that splits a scale group */
  ck_write_json(dir, "config.json", ck_qwen3_config(H, I, E, gptq_config(&o)));
  assert_int_equal(hm_checkpoint_load_layer(dir, CK_DOWN, (hm_expert_range){0, 1}, 0, 4, &w, NULL),
                   HM_UNSUPPORTED);
  ck_ffn_free(&f);
  ck_rmdir(dir);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(v1_asym_4bit_g32),
      cmocka_unit_test(sym_8bit_g32),
      cmocka_unit_test(v2_3bit_channel),
      cmocka_unit_test(autoround_native_packing_has_no_offset),
      cmocka_unit_test(desc_act_reorders_and_keeps_the_ffn),
      cmocka_unit_test(zero_point_conventions_on_known_words),
      cmocka_unit_test(bad_input_names_file_and_tensor),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
