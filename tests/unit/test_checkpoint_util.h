/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Shared by the checkpoint and adapter tests: temporary checkpoint directories, tiny
 * model configs, the reference (float weights quantized directly into the canonical
 * contract), and comparisons of a loaded layer with that reference. The canonical
 * layout is read here bit by bit from the contract, independently of engine/pack.c.
 */
#ifndef HM_TEST_CHECKPOINT_UTIL_H
#define HM_TEST_CHECKPOINT_UTIL_H

#include <dirent.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "checkpoint.h"
#include "hm_test.h"
#include "numfmt.h"
#include "quant.h"
#include "ref_gemm.h"
#include "safetensors.h"

static inline void ck_tmpdir(char *buf, size_t len) {
  snprintf(buf, len, "/tmp/hm-ckpt-XXXXXX");
  assert_non_null(mkdtemp(buf));
}

static inline void ck_rmdir(const char *dir) {
  DIR *d = opendir(dir);
  if (d == NULL) return;
  struct dirent *ent;
  char path[4096];
  while ((ent = readdir(d)) != NULL) {
    if (strcmp(ent->d_name, ".") == 0 || strcmp(ent->d_name, "..") == 0) continue;
    snprintf(path, sizeof(path), "%s/%s", dir, ent->d_name);
    unlink(path);
  }
  closedir(d);
  rmdir(dir);
}

/* Writes j (and drops the reference) as dir/name. */
static inline void ck_write_json(const char *dir, const char *name, json_t *j) {
  char path[4096];
  snprintf(path, sizeof(path), "%s/%s", dir, name);
  assert_int_equal(json_dump_file(j, path, JSON_INDENT(1)), 0);
  json_decref(j);
}

static inline void ck_write_text(const char *dir, const char *name, const char *text) {
  char path[4096];
  snprintf(path, sizeof(path), "%s/%s", dir, name);
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  fputs(text, f);
  fclose(f);
}

static inline void ck_save(hm_st_writer *w, const char *dir, const char *name) {
  char path[4096];
  snprintf(path, sizeof(path), "%s/%s", dir, name);
  HM_ASSERT_OK(hm_st_writer_save(w, path));
  hm_st_writer_destroy(w);
}

/* config.json of a one-layer Qwen3-MoE; quant (may be NULL) becomes quantization_config. */
static inline json_t *ck_qwen3_config(int64_t hidden, int64_t inter, int64_t experts, json_t *quant) {
  json_t *c =
      json_pack("{s:s, s:I, s:i, s:I, s:i, s:I, s:I, s:i, s:[]}", "model_type", "qwen3_moe", "hidden_size",
                (json_int_t)hidden, "num_hidden_layers", 1, "num_experts", (json_int_t)experts,
                "num_experts_per_tok", 2, "moe_intermediate_size", (json_int_t)inter, "intermediate_size",
                (json_int_t)(2 * inter), "decoder_sparse_step", 1, "mlp_only_layers");
  if (quant) json_object_set_new(c, "quantization_config", quant);
  return c;
}

#define CK_GATE_UP "model.layers.0.mlp.experts.gate_up"
#define CK_DOWN "model.layers.0.mlp.experts.down"

/* Float weights of an FFN and their direct quantization: the reference of every test. */
typedef struct ck_ffn {
  int64_t experts, hidden, inter;
  float *gate_up; /* (E, 2I, H): gate rows, then up rows */
  float *down;    /* (E, H, I) */
  hm_host_weights ref_gate_up, ref_down;
} ck_ffn;

static inline void ck_quantize(const float *w, const hm_quant_format *fmt, int64_t e, int64_t n, int64_t k,
                               hm_host_weights *out) {
  HM_ASSERT_OK(hm_host_weights_alloc(out, fmt, e, n, k));
  HM_ASSERT_OK(hm_quantize_weights(w, out));
}

static inline void ck_ffn_make(ck_ffn *f, uint64_t seed, int64_t experts, int64_t hidden, int64_t inter,
                               const hm_quant_format *fmt) {
  hm_rng rng;
  hm_rng_seed(&rng, seed);
  f->experts = experts;
  f->hidden = hidden;
  f->inter = inter;
  size_t n_gu = (size_t)(experts * 2 * inter * hidden), n_d = (size_t)(experts * hidden * inter);
  f->gate_up = malloc(n_gu * sizeof(float));
  f->down = malloc(n_d * sizeof(float));
  assert_non_null(f->gate_up);
  assert_non_null(f->down);
  hm_rng_fill_normal(&rng, f->gate_up, n_gu, 0.05f);
  hm_rng_fill_normal(&rng, f->down, n_d, 0.05f);
  ck_quantize(f->gate_up, fmt, experts, 2 * inter, hidden, &f->ref_gate_up);
  ck_quantize(f->down, fmt, experts, hidden, inter, &f->ref_down);
}

static inline void ck_ffn_free(ck_ffn *f) {
  free(f->gate_up);
  free(f->down);
  hm_host_weights_free(&f->ref_gate_up);
  hm_host_weights_free(&f->ref_down);
}

/* ---- the canonical contract, read bit by bit ---- */

static inline int64_t ck_words(int bits, int64_t count) {
  return (count * bits + 31) / 32;
}

static inline unsigned ck_stream(const uint32_t *row, int64_t index, int bits) {
  unsigned v = 0;
  for (int t = 0; t < bits; t++) {
    int64_t p = index * bits + t;
    v |= ((row[p / 32] >> (p % 32)) & 1u) << t;
  }
  return v;
}

/* Code (e, n, k); 16-bit weights give their bit pattern. */
static inline unsigned ck_code(const hm_host_weights *w, int64_t e, int64_t n, int64_t k) {
  int bits = hm_dtype_bits(w->fmt.weight);
  return ck_stream(w->qweight + (e * w->n + n) * ck_words(bits, w->k), k, bits);
}

static inline int64_t ck_groups(const hm_host_weights *w) {
  switch (w->fmt.scale_kind) {
    case HM_SCALE_GROUP:
    case HM_SCALE_BLOCK: return w->k / w->fmt.group_k;
    case HM_SCALE_CHANNEL: return 1;
    default: return 0;
  }
}

/* Bytes of the scale of element (e, n, k). */
static inline const uint8_t *ck_scale(const hm_host_weights *w, int64_t e, int64_t n, int64_t k) {
  const hm_quant_format *f = &w->fmt;
  int64_t g = ck_groups(w), i;
  switch (f->scale_kind) {
    case HM_SCALE_GROUP: i = (e * w->n + n) * g + k / f->group_k; break;
    case HM_SCALE_CHANNEL: i = e * w->n + n; break;
    case HM_SCALE_BLOCK: i = (e * (w->n / f->group_n) + n / f->group_n) * g + k / f->group_k; break;
    default: i = e; break;
  }
  return (const uint8_t *)w->scales + i * (hm_dtype_bits(f->scale) / 8);
}

static inline unsigned ck_zero(const hm_host_weights *w, int64_t e, int64_t n, int64_t k) {
  int bits = hm_dtype_bits(w->fmt.weight);
  int64_t g = w->fmt.scale_kind == HM_SCALE_GROUP ? k / w->fmt.group_k : 0;
  return ck_stream(w->zeros + (e * ck_groups(w) + g) * ck_words(bits, w->n), n, bits);
}

static inline void ck_expect_format(const hm_quant_format *a, const hm_quant_format *b) {
  assert_int_equal(a->weight, b->weight);
  assert_int_equal(a->scale, b->scale);
  assert_int_equal(a->scale_kind, b->scale_kind);
  assert_int_equal(a->group_k, b->group_k);
  assert_int_equal(a->group_n, b->group_n);
  assert_int_equal(a->zero_point, b->zero_point);
  assert_int_equal(a->global_scale, b->global_scale);
}

/*
 * got(e, n, k) must equal ref(e0 + e, rows[e][n], cols[e][k]) bit for bit: codes, the
 * scale and zero point each element uses, the global scale. rows and cols are NULL
 * (identity) or hold one map per expert. ulps_global: allowed distance of global scales.
 */
static inline void ck_expect_mapped(const hm_host_weights *got, const hm_host_weights *ref, int64_t e0,
                                    const int64_t *rows, const int64_t *cols, int ulps_global) {
  ck_expect_format(&got->fmt, &ref->fmt);
  int sbytes = hm_dtype_bits(got->fmt.scale) / 8;
  for (int64_t e = 0; e < got->experts; e++) {
    if (got->fmt.global_scale) {
      int32_t a, b;
      memcpy(&a, &got->global_scale[e], 4);
      memcpy(&b, &ref->global_scale[e0 + e], 4);
      assert_true(abs(a - b) <= ulps_global);
    }
    for (int64_t n = 0; n < got->n; n++) {
      int64_t rn = rows ? rows[e * got->n + n] : n;
      for (int64_t k = 0; k < got->k; k++) {
        int64_t rk = cols ? cols[e * got->k + k] : k;
        if (ck_code(got, e, n, k) != ck_code(ref, e0 + e, rn, rk))
          fail_msg("code (%lld, %lld, %lld) differs from reference (%lld, %lld, %lld)", (long long)e,
                   (long long)n, (long long)k, (long long)(e0 + e), (long long)rn, (long long)rk);
        if (got->fmt.scale_kind != HM_SCALE_NONE &&
            memcmp(ck_scale(got, e, n, k), ck_scale(ref, e0 + e, rn, rk), (size_t)sbytes) != 0)
          fail_msg("scale of (%lld, %lld, %lld) differs", (long long)e, (long long)n, (long long)k);
        if (got->fmt.zero_point && ck_zero(got, e, n, k) != ck_zero(ref, e0 + e, rn, rk))
          fail_msg("zero point of (%lld, %lld, %lld) differs", (long long)e, (long long)n, (long long)k);
      }
    }
  }
}

/* Rows of TP rank r's gate_up within the full [gate; up] (2I rows), for each expert. */
static inline int64_t *ck_gate_up_rows(int64_t inter, int rank, int tp, int64_t experts) {
  int64_t slice = inter / tp, *rows = malloc((size_t)(experts * 2 * slice) * sizeof(int64_t));
  for (int64_t e = 0; e < experts; e++) {
    for (int64_t i = 0; i < slice; i++) {
      rows[e * 2 * slice + i] = rank * slice + i;
      rows[e * 2 * slice + slice + i] = inter + rank * slice + i;
    }
  }
  return rows;
}

/* Columns of TP rank r's down, the same for each of `experts` experts. */
static inline int64_t *ck_down_cols(int64_t inter, int rank, int tp, int64_t experts) {
  int64_t slice = inter / tp, *cols = malloc((size_t)(experts * slice) * sizeof(int64_t));
  for (int64_t e = 0; e < experts; e++)
    for (int64_t i = 0; i < slice; i++) cols[e * slice + i] = rank * slice + i;
  return cols;
}

/* Loads a layer with the expected status; on success compares with the reference map. */
static inline void ck_load_expect(hm_ckpt *ck, const char *layer, hm_expert_range r, int rank, int tp,
                                  const hm_host_weights *ref, const int64_t *rows, const int64_t *cols) {
  hm_host_weights got;
  hm_ckpt_extras extras;
  HM_ASSERT_OK(hm_ckpt_load_layer(ck, layer, r, rank, tp, &got, &extras));
  ck_expect_mapped(&got, ref, r.first, rows, cols, 0);
  hm_host_weights_free(&got);
  hm_ckpt_extras_free(&extras);
}

/*
 * The layer output through the host reference GEMM (grouped-masked, f32): the loaded
 * weights with A's columns gathered through k_perm (the loader's) against the reference
 * weights with A gathered through ref_perm (what the test wrote). Either may be NULL.
 * The same weights and gathers must agree exactly.
 */
static inline void ck_expect_same_gemm(const hm_host_weights *got, const int32_t *k_perm,
                                       const hm_host_weights *ref, const int64_t *ref_perm) {
  const int64_t m = 3, e_count = got->experts, k = got->k, n = got->n;
  float *a = malloc((size_t)(e_count * m * k) * sizeof(float));
  float *a_perm = malloc((size_t)(e_count * m * k) * sizeof(float));
  float *a_ref = malloc((size_t)(e_count * m * k) * sizeof(float));
  float *c_got = calloc((size_t)(e_count * m * n), sizeof(float));
  float *c_ref = calloc((size_t)(e_count * m * n), sizeof(float));
  int32_t *counts = malloc((size_t)e_count * sizeof(int32_t));
  hm_rng rng;
  hm_rng_seed(&rng, 7);
  hm_rng_fill_normal(&rng, a, (size_t)(e_count * m * k), 1.0f);
  for (int64_t e = 0; e < e_count; e++) {
    counts[e] = (int32_t)m;
    for (int64_t i = 0; i < m; i++)
      for (int64_t j = 0; j < k; j++) {
        a_perm[(e * m + i) * k + j] = a[(e * m + i) * k + (k_perm ? k_perm[e * k + j] : j)];
        a_ref[(e * m + i) * k + j] = a[(e * m + i) * k + (ref_perm ? ref_perm[e * k + j] : j)];
      }
  }
  hm_ref_gemm_problem p;
  memset(&p, 0, sizeof(p));
  p.act = HM_F32;
  p.out = HM_F32;
  p.threads = 1;
  p.args.type = HM_GEMM_GROUPED_MASKED;
  p.args.m = m;
  p.args.expert_counts = counts;
  p.w = got;
  p.args.a = a_perm;
  p.args.c = c_got;
  HM_ASSERT_OK(hm_ref_gemm(&p));
  p.w = ref;
  p.args.a = a_ref;
  p.args.c = c_ref;
  HM_ASSERT_OK(hm_ref_gemm(&p));
  assert_true(hm_rel_error(c_got, c_ref, (size_t)(e_count * m * n)) == 0.0);
  free(a);
  free(a_ref);
  free(a_perm);
  free(c_got);
  free(c_ref);
  free(counts);
}

#endif
