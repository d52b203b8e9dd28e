/* SPDX-License-Identifier: Apache-2.0 */
/*
 * compressed-tensors (llm-compressor) -> canonical contract. The config_group whose
 * "targets" match a module ("Linear", a module name, or "re:<regex>" matched from the
 * start of the name) gives its scheme; its "format" (or the top-level one) the layout.
 * pf = 32 / num_bits codes per int32, code i of a word at bits i*b (LSB first).
 *   pack-quantized        weight_packed I32 (N, ceil(K/pf)); weight_shape (2) = [N, K];
 *                         codes stored as q + 2^(b-1) (unsigned). weight_scale (N, G),
 *                         G = K/group_size or 1 (channel); asymmetric: weight_zero_point I32
 *                         (ceil(N/pf), G) packed along N the same way, also offset by 2^(b-1).
 *                         actorder "group": weight_g_idx I32 (K).
 *                         -> u<b>, implicit zero 2^(b-1) (symmetric) or the stored zeros.
 *   int-quantized         weight I8 (N, K) (also naive-quantized); symmetric -> i8 / i4,
 *                         asymmetric (weight_zero_point I8 (N, G)) -> u<b> = q + 2^(b-1).
 *   float-quantized       weight F8_E4M3 (N, K); weight_scale per channel (N, 1), per tensor
 *                         (one element, -> channel), group (N, G) or block (N/bn, K/bk) ->
 *                         f32 block scales.
 *   nvfp4-pack-quantized  weight_packed U8 (N, K/2) e2m1, element 2i in the low nibble;
 *                         weight_scale F8_E4M3 (N, K/16); weight_global_scale F32 (1). The
 *                         global scale is stored as a divisor (448 * 6 / amax), so
 *                         w = e2m1 * weight_scale / weight_global_scale; the canonical
 *                         multiplier is 1 / weight_global_scale (one f32 division).
 *   mxfp4-pack-quantized  weight_packed U8 (N, K/2); weight_scale U8 (N, K/32) e8m0.
 * Everything but the nvfp4 global scale is copied bit-exactly.
 */
#include <regex.h>
#include <stdio.h>
#include <string.h>

#include "adapter.h"
#include "check.h"
#include "numfmt.h"

struct ct_scheme {
  const char *format, *strategy;
  int64_t bits, group, bn, bk;
  bool is_float, symmetric;
  json_t *actorder;
};

enum { P_PF = 2, P_OFFSET = 3, P_BITS = 4 };

static void packed_codes(const hm_src_matrix *m, int64_t row, const int64_t *cols, int64_t count,
                         uint8_t *out) {
  int64_t pf = m->param[P_PF], bits = m->param[P_BITS];
  const uint8_t *src = m->data[0] + row * m->ld[0] * 4;
  for (int64_t j = 0; j < count; j++)
    out[j] = (uint8_t)((hm_st_load_u32(src, cols[j] / pf) >> ((cols[j] % pf) * bits)) & ((1u << bits) - 1u));
}

static uint8_t packed_zero(const hm_src_matrix *m, int64_t row, int64_t group) {
  int64_t pf = m->param[P_PF], bits = m->param[P_BITS];
  uint32_t w = hm_st_load_u32(m->data[2], (row / pf) * m->ld[2] + group);
  return (uint8_t)((w >> ((row % pf) * bits)) & ((1u << bits) - 1u));
}

/* Signed int8 storage: the canonical code is the byte (signed) or byte + 2^(b-1) (unsigned). */
static void int8_codes(const hm_src_matrix *m, int64_t row, const int64_t *cols, int64_t count,
                       uint8_t *out) {
  const uint8_t *src = m->data[0] + row * m->ld[0];
  uint8_t mask = (uint8_t)((1u << m->param[P_BITS]) - 1u);
  for (int64_t j = 0; j < count; j++) out[j] = (uint8_t)((src[cols[j]] + m->param[P_OFFSET]) & mask);
}

static uint8_t int8_zero(const hm_src_matrix *m, int64_t row, int64_t group) {
  uint8_t mask = (uint8_t)((1u << m->param[P_BITS]) - 1u);
  return (uint8_t)((m->data[2][row * m->ld[2] + group] + m->param[P_OFFSET]) & mask);
}

/* Block scales are f32 in the contract; bf16/f16 ones widen exactly. */
static void block_scale(const hm_src_matrix *m, int64_t row, int64_t group, uint8_t *out) {
  int64_t i = (row / m->fmt.group_n) * m->ld[1] + group;
  float v = m->param[1] == 4     ? hm_st_load_f32(m->data[1], i)
            : m->param[P_OFFSET] ? hm_bf16_to_f32(hm_st_load_u16(m->data[1], i))
                                 : hm_f16_to_f32(hm_st_load_u16(m->data[1], i));
  memcpy(out, &v, 4);
}

static bool target_matches(json_t *target, const char *module) {
  const char *t = json_string_value(target);
  if (t == NULL) return false;
  if (strcmp(t, "Linear") == 0 || strcmp(t, module) == 0) return true;
  if (strncmp(t, "re:", 3) != 0) {
    size_t lt = strlen(t), lm = strlen(module);
    return lm > lt && module[lm - lt - 1] == '.' && strcmp(module + lm - lt, t) == 0;
  }
  char pattern[512];
  snprintf(pattern, sizeof(pattern), "^(%s)", t + 3);
  regex_t re;
  if (regcomp(&re, pattern, REG_EXTENDED | REG_NOSUB) != 0) return false;
  bool hit = regexec(&re, module, 0, NULL, 0) == 0;
  regfree(&re);
  return hit;
}

static bool list_matches(json_t *list, const char *module) {
  size_t i;
  json_t *v;
  json_array_foreach(list, i, v) if (target_matches(v, module)) return true;
  return false;
}

static hm_status find_group(hm_ckpt *ck, const char *module, json_t **group) {
  json_t *q = hm_ckpt_quant_config(ck), *groups = json_object_get(q, "config_groups");
  const char *key;
  json_t *g;
  if (!list_matches(json_object_get(q, "ignore"), module)) {
    json_object_foreach(groups, key, g) {
      if (list_matches(json_object_get(g, "targets"), module) &&
          json_is_object(json_object_get(g, "weights"))) {
        *group = g;
        return HM_OK;
      }
    }
  }
  HM_FAIL(HM_CORRUPT, "%s/%s: no config_group with weights targets '%s', and it has no 16-bit weight",
          hm_ckpt_dir(ck), hm_ckpt_quant_file(ck), module);
}

static hm_status parse_block(hm_ckpt *ck, json_t *b, struct ct_scheme *s) {
  long long bn = 0, bk = 0;
  if (json_is_array(b) && json_array_size(b) == 2) {
    bn = json_integer_value(json_array_get(b, 0));
    bk = json_integer_value(json_array_get(b, 1));
  } else if (json_is_string(b) && sscanf(json_string_value(b), "%lldx%lld", &bn, &bk) != 2) {
    bn = 0;
  }
  if (bn <= 0 || bk <= 0 || bn > 65536 || bk > 65536)
    HM_FAIL(HM_CORRUPT, "%s/%s: block_structure is not [rows, columns]", hm_ckpt_dir(ck),
            hm_ckpt_quant_file(ck));
  s->bn = bn;
  s->bk = bk;
  return HM_OK;
}

static hm_status read_scheme(hm_ckpt *ck, const char *module, struct ct_scheme *s) {
  json_t *g = NULL, *q = hm_ckpt_quant_config(ck);
  HM_CHECK(find_group(ck, module, &g));
  json_t *w = json_object_get(g, "weights");
  s->format = hm_qcfg_str(g, "format", hm_qcfg_str(q, "format", "pack-quantized"));
  s->strategy = hm_qcfg_str(w, "strategy", "tensor");
  s->is_float = strcmp(hm_qcfg_str(w, "type", "int"), "float") == 0;
  s->actorder = json_object_get(w, "actorder");
  HM_CHECK(hm_qcfg_int(ck, w, "num_bits", 8, &s->bits));
  HM_CHECK(hm_qcfg_int(ck, w, "group_size", 0, &s->group));
  HM_CHECK(hm_qcfg_bool(ck, w, "symmetric", true, &s->symmetric));
  if (s->bits < 1 || s->bits > 8)
    HM_FAIL(HM_UNSUPPORTED, "%s: num_bits = %lld (1..8 supported)", module, (long long)s->bits);
  if (strcmp(s->strategy, "block") == 0) HM_CHECK(parse_block(ck, json_object_get(w, "block_structure"), s));
  return HM_OK;
}

/* G of channel / group / tensor strategies, with its checks. */
static hm_status scale_groups(const hm_src_request *req, const struct ct_scheme *s, hm_src_matrix *m) {
  bool group = strcmp(s->strategy, "group") == 0 || strcmp(s->strategy, "tensor_group") == 0;
  if (!group) {
    m->fmt.scale_kind = HM_SCALE_CHANNEL;
    m->groups = 1;
    return HM_OK;
  }
  if (s->group <= 0 || req->k % s->group != 0)
    HM_FAIL(HM_CORRUPT, "%s: group_size %lld does not divide K = %lld", req->module, (long long)s->group,
            (long long)req->k);
  m->fmt.scale_kind = HM_SCALE_GROUP;
  m->fmt.group_k = (int)s->group;
  m->groups = req->k / s->group;
  return HM_OK;
}

static hm_status open_scale(hm_ckpt *ck, const hm_src_request *req, const struct ct_scheme *s,
                            hm_src_matrix *m) {
  char name[224];
  hm_ckpt_tensor t;
  snprintf(name, sizeof(name), "%s.weight_scale", req->module);
  HM_CHECK(hm_ckpt_get(ck, name, &t));
  HM_CHECK(hm_src_scale_dtype(&t, &m->fmt.scale));
  m->param[1] = hm_dtype_bits(m->fmt.scale) / 8;
  m->data[1] = t.st->data;
  m->scale = hm_src_scale_rowmajor;
  if (strcmp(s->strategy, "tensor") == 0) {
    HM_CHECK(hm_ckpt_expect_scalar(ck, name, t.st->dtype, &t));
    m->ld[1] = 0;
    return HM_OK;
  }
  m->ld[1] = m->groups;
  return hm_ckpt_expect(ck, name, t.st->dtype, 2, (int64_t[]){req->n, m->groups}, &t);
}

static hm_status open_g_idx(hm_ckpt *ck, const hm_src_request *req, hm_src_matrix *m) {
  char name[224];
  hm_ckpt_tensor t;
  snprintf(name, sizeof(name), "%s.weight_g_idx", req->module);
  if (!hm_ckpt_has(ck, name) || m->groups <= 1) return HM_OK;
  HM_CHECK(hm_ckpt_expect(ck, name, HM_ST_I32, 1, (int64_t[]){req->k}, &t));
  return hm_src_copy_g_idx(m, &t, m->groups);
}

/* The asymmetric schemes' zero points: rows x groups of dtype, read by zero. */
static hm_status open_zero_point(hm_ckpt *ck, const hm_src_request *req, hm_st_dtype dtype, int64_t rows,
                                 uint8_t (*zero)(const hm_src_matrix *, int64_t, int64_t), hm_src_matrix *m) {
  char name[224];
  hm_ckpt_tensor t;
  snprintf(name, sizeof(name), "%s.weight_zero_point", req->module);
  HM_CHECK(hm_ckpt_expect(ck, name, dtype, 2, (int64_t[]){rows, m->groups}, &t));
  m->fmt.zero_point = true;
  m->data[2] = t.st->data;
  m->ld[2] = m->groups;
  m->zero = zero;
  return HM_OK;
}

static hm_status open_packed(hm_ckpt *ck, const hm_src_request *req, const struct ct_scheme *s,
                             hm_src_matrix *m) {
  int64_t pf = 32 / s->bits, n = req->n, k = req->k;
  char name[224];
  hm_ckpt_tensor t;
  snprintf(name, sizeof(name), "%s.weight_packed", req->module);
  HM_CHECK(hm_ckpt_expect(ck, name, HM_ST_I32, 2, (int64_t[]){n, (k + pf - 1) / pf}, &t));
  m->data[0] = t.st->data;
  m->ld[0] = (k + pf - 1) / pf;
  snprintf(name, sizeof(name), "%s.weight_shape", req->module);
  HM_CHECK(hm_ckpt_get(ck, name, &t));
  bool i64 = t.st->dtype == HM_ST_I64;
  HM_CHECK(hm_ckpt_expect(ck, name, i64 ? HM_ST_I64 : HM_ST_I32, 1, (int64_t[]){2}, &t));
  int64_t sn = i64 ? hm_st_load_i64(t.st->data, 0) : (int32_t)hm_st_load_u32(t.st->data, 0);
  int64_t sk = i64 ? hm_st_load_i64(t.st->data, 1) : (int32_t)hm_st_load_u32(t.st->data, 1);
  if (sn != n || sk != k)
    HM_FAIL(HM_CORRUPT, "%s: tensor '%s' says [%lld, %lld], config.json implies [%lld, %lld]", t.file, name,
            (long long)sn, (long long)sk, (long long)n, (long long)k);
  m->fmt.weight = hm_src_uint_dtype((int)s->bits);
  m->param[P_PF] = pf;
  m->param[P_BITS] = s->bits;
  m->codes = packed_codes;
  HM_CHECK(scale_groups(req, s, m));
  HM_CHECK(open_scale(ck, req, s, m));
  HM_CHECK(open_g_idx(ck, req, m));
  if (s->symmetric) return HM_OK;
  return open_zero_point(ck, req, HM_ST_I32, (n + pf - 1) / pf, packed_zero, m);
}

static hm_status open_int8(hm_ckpt *ck, const hm_src_request *req, const struct ct_scheme *s,
                           hm_src_matrix *m) {
  char name[224];
  hm_ckpt_tensor t;
  if (s->symmetric && s->bits != 8 && s->bits != 4)
    HM_FAIL(HM_UNSUPPORTED, "%s: symmetric int%lld (int8 and int4 supported)", req->module,
            (long long)s->bits);
  snprintf(name, sizeof(name), "%s.weight", req->module);
  HM_CHECK(hm_ckpt_expect(ck, name, HM_ST_I8, 2, (int64_t[]){req->n, req->k}, &t));
  m->data[0] = t.st->data;
  m->ld[0] = req->k;
  m->param[P_BITS] = s->bits;
  m->param[P_OFFSET] = s->symmetric ? 0 : 1 << (s->bits - 1);
  m->fmt.weight = s->symmetric ? (s->bits == 8 ? HM_I8 : HM_I4) : hm_src_uint_dtype((int)s->bits);
  m->codes = int8_codes;
  HM_CHECK(scale_groups(req, s, m));
  HM_CHECK(open_scale(ck, req, s, m));
  if (s->symmetric) return HM_OK;
  return open_zero_point(ck, req, HM_ST_I8, req->n, int8_zero, m);
}

static hm_status open_fp8(hm_ckpt *ck, const hm_src_request *req, const struct ct_scheme *s,
                          hm_src_matrix *m) {
  char name[224];
  hm_ckpt_tensor t;
  snprintf(name, sizeof(name), "%s.weight", req->module);
  HM_CHECK(hm_ckpt_expect(ck, name, HM_ST_F8_E4M3, 2, (int64_t[]){req->n, req->k}, &t));
  m->fmt.weight = HM_F8E4M3;
  m->data[0] = t.st->data;
  m->ld[0] = req->k;
  m->param[0] = 1;
  m->codes = hm_src_codes_bytes;
  if (strcmp(s->strategy, "block") != 0) {
    HM_CHECK(scale_groups(req, s, m));
    return open_scale(ck, req, s, m);
  }
  int64_t rows = (req->n + s->bn - 1) / s->bn, cols = (req->k + s->bk - 1) / s->bk;
  snprintf(name, sizeof(name), "%s.weight_scale", req->module);
  HM_CHECK(hm_ckpt_get(ck, name, &t));
  hm_dtype dt;
  HM_CHECK(hm_src_scale_dtype(&t, &dt));
  HM_CHECK(hm_ckpt_expect(ck, name, t.st->dtype, 2, (int64_t[]){rows, cols}, &t));
  m->fmt = (hm_quant_format){HM_F8E4M3, HM_F32, HM_SCALE_BLOCK, (int)s->bk, (int)s->bn, false, false};
  m->groups = cols;
  m->data[1] = t.st->data;
  m->ld[1] = cols;
  m->param[1] = hm_dtype_bits(dt) / 8;
  m->param[P_OFFSET] = dt == HM_BF16;
  m->scale = block_scale;
  return HM_OK;
}

static hm_status open_fp4(hm_ckpt *ck, const hm_src_request *req, bool nvfp4, hm_src_matrix *m) {
  int64_t group = nvfp4 ? 16 : 32, n = req->n, k = req->k;
  if (k % group != 0)
    HM_FAIL(HM_CORRUPT, "%s: K = %lld is not a multiple of %lld", req->module, (long long)k,
            (long long)group);
  char name[224];
  hm_ckpt_tensor t;
  snprintf(name, sizeof(name), "%s.weight_packed", req->module);
  HM_CHECK(hm_ckpt_expect(ck, name, HM_ST_U8, 2, (int64_t[]){n, k / 2}, &t));
  m->fmt =
      (hm_quant_format){HM_F4E2M1, nvfp4 ? HM_F8E4M3 : HM_E8M0, HM_SCALE_GROUP, (int)group, 0, false, nvfp4};
  m->groups = k / group;
  m->data[0] = t.st->data;
  m->ld[0] = k / 2;
  m->codes = hm_src_codes_nibbles;
  snprintf(name, sizeof(name), "%s.weight_scale", req->module);
  HM_CHECK(hm_ckpt_expect(ck, name, nvfp4 ? HM_ST_F8_E4M3 : HM_ST_U8, 2, (int64_t[]){n, m->groups}, &t));
  m->data[1] = t.st->data;
  m->ld[1] = m->groups;
  m->param[1] = 1;
  m->scale = hm_src_scale_rowmajor;
  if (!nvfp4) return HM_OK;
  snprintf(name, sizeof(name), "%s.weight_global_scale", req->module);
  HM_CHECK(hm_ckpt_expect_scalar(ck, name, HM_ST_F32, &t));
  m->global = 1.0f / hm_st_load_f32(t.st->data, 0);
  return HM_OK;
}

static hm_status compressed_open(hm_ckpt *ck, const hm_src_request *req, hm_src_matrix *m) {
  struct ct_scheme s;
  if (req->expert >= 0)
    HM_FAIL(HM_UNSUPPORTED, "%s: compressed-tensors fused expert tensors are not a known layout",
            req->module);
  HM_CHECK(read_scheme(ck, req->module, &s));
  const char *f = s.format;
  if (strcmp(f, "pack-quantized") == 0 && !s.is_float) return open_packed(ck, req, &s, m);
  if ((strcmp(f, "int-quantized") == 0 || strcmp(f, "naive-quantized") == 0) && !s.is_float)
    return open_int8(ck, req, &s, m);
  if ((strcmp(f, "float-quantized") == 0 || strcmp(f, "naive-quantized") == 0) && s.is_float && s.bits == 8)
    return open_fp8(ck, req, &s, m);
  if (strcmp(f, "nvfp4-pack-quantized") == 0) return open_fp4(ck, req, true, m);
  if (strcmp(f, "mxfp4-pack-quantized") == 0) return open_fp4(ck, req, false, m);
  HM_FAIL(HM_UNSUPPORTED,
          "%s/%s: compressed-tensors format '%s' with %s%lld weights (for %s) is not supported",
          hm_ckpt_dir(ck), hm_ckpt_quant_file(ck), f, s.is_float ? "float" : "int", (long long)s.bits,
          req->module);
}

const hm_adapter hm_adapter_compressed = {"compressed-tensors", compressed_open};
