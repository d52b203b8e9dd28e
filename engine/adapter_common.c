/* SPDX-License-Identifier: Apache-2.0 */
/* What every adapter shares: choosing one, config fields, accessors, and the assembler. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "adapter.h"
#include "check.h"
#include "log.h"
#include "numfmt.h"
#include "pack.h"

static const struct {
  const char *method;
  const hm_adapter *adapter;
} adapters[] = {
    {"", &hm_adapter_float},
    {"gptq", &hm_adapter_gptq},
    {"auto-round", &hm_adapter_gptq}, /* GPTQ-packed; its AWQ packing is routed by adapter_gptq.c */
    {"awq", &hm_adapter_awq},
    {"fp8", &hm_adapter_fp8},
    {"mxfp4", &hm_adapter_mxfp4},
    {"compressed-tensors", &hm_adapter_compressed},
    {"modelopt", &hm_adapter_modelopt},
};

hm_status hm_adapter_for(const hm_ckpt *ck, const hm_adapter **out) {
  const char *method = hm_ckpt_model_info(ck)->quant_method;
  for (size_t i = 0; i < HM_ARRAY_SIZE(adapters); i++) {
    if (strcmp(adapters[i].method, method) == 0) {
      *out = adapters[i].adapter;
      return HM_OK;
    }
  }
  HM_FAIL(HM_UNSUPPORTED, "%s: no adapter for quant_method '%s'", hm_ckpt_dir(ck), method);
}

/* Modules a quantizer left alone (ignore lists) keep 16-bit weights under the plain name. */
static bool is_unquantized(hm_ckpt *ck, const hm_src_request *req) {
  char name[256];
  snprintf(name, sizeof(name), req->expert >= 0 ? "%s" : "%s.weight", req->module);
  hm_ckpt_tensor t;
  if (!hm_ckpt_has(ck, name) || hm_ckpt_get(ck, name, &t) != HM_OK) return false;
  return t.st->dtype == HM_ST_BF16 || t.st->dtype == HM_ST_F16;
}

hm_status hm_adapter_open(hm_ckpt *ck, const hm_src_request *req, hm_src_matrix *m) {
  memset(m, 0, sizeof(*m));
  snprintf(m->module, sizeof(m->module), "%s", req->module);
  m->n = req->n;
  m->k = req->k;
  m->groups = 1;
  m->global = 1.0f;
  const hm_adapter *adapter = NULL;
  HM_CHECK(hm_adapter_for(ck, &adapter));
  if (adapter != &hm_adapter_float && is_unquantized(ck, req)) adapter = &hm_adapter_float;
  hm_status ret = adapter->open(ck, req, m);
  if (ret != HM_OK) hm_src_release(m);
  return ret;
}

void hm_src_release(hm_src_matrix *m) {
  if (m == NULL) return;
  free(m->g_idx);
  m->g_idx = NULL;
}

/* A field of obj; absent, null and a NULL obj all read as NULL. */
static json_t *qcfg_get(json_t *obj, const char *key) {
  json_t *v = obj ? json_object_get(obj, key) : NULL;
  return v && !json_is_null(v) ? v : NULL;
}

hm_status hm_qcfg_int(const hm_ckpt *ck, json_t *obj, const char *key, int64_t def, int64_t *out) {
  json_t *v = qcfg_get(obj, key);
  *out = def;
  if (v == NULL) return HM_OK;
  if (!json_is_integer(v))
    HM_FAIL(HM_CORRUPT, "%s/%s: quantization field '%s' is not an integer", hm_ckpt_dir(ck),
            hm_ckpt_quant_file(ck), key);
  *out = (int64_t)json_integer_value(v);
  return HM_OK;
}

hm_status hm_qcfg_bool(const hm_ckpt *ck, json_t *obj, const char *key, bool def, bool *out) {
  json_t *v = qcfg_get(obj, key);
  *out = def;
  if (v == NULL) return HM_OK;
  if (!json_is_boolean(v))
    HM_FAIL(HM_CORRUPT, "%s/%s: quantization field '%s' is not a boolean", hm_ckpt_dir(ck),
            hm_ckpt_quant_file(ck), key);
  *out = json_is_true(v);
  return HM_OK;
}

const char *hm_qcfg_str(json_t *obj, const char *key, const char *def) {
  const char *s = obj ? json_string_value(json_object_get(obj, key)) : NULL;
  return s ? s : def;
}

hm_status hm_src_copy_g_idx(hm_src_matrix *m, const hm_ckpt_tensor *t, int64_t groups) {
  m->g_idx = malloc((size_t)m->k * sizeof(*m->g_idx));
  if (m->g_idx == NULL) HM_FAIL(HM_OUT_OF_MEMORY, "g_idx of %s", m->module);
  for (int64_t i = 0; i < m->k; i++) {
    int32_t g = (int32_t)hm_st_load_u32(t->st->data, i);
    if (g < 0 || g >= groups)
      HM_FAIL(HM_CORRUPT, "%s: tensor '%s': g_idx[%lld] = %d is outside 0..%lld", t->file, t->st->name,
              (long long)i, g, (long long)groups - 1);
    m->g_idx[i] = g;
  }
  return HM_OK;
}

hm_dtype hm_src_uint_dtype(int bits) {
  static const hm_dtype uints[] = {HM_U1, HM_U2, HM_U3, HM_U4, HM_U5, HM_U6, HM_U7, HM_U8};
  return uints[bits < 1 ? 0 : bits > 8 ? 7 : bits - 1];
}

hm_status hm_src_scale_dtype(const hm_ckpt_tensor *t, hm_dtype *out) {
  switch (t->st->dtype) {
    case HM_ST_F16: *out = HM_F16; return HM_OK;
    case HM_ST_BF16: *out = HM_BF16; return HM_OK;
    case HM_ST_F32: *out = HM_F32; return HM_OK;
    default:
      HM_FAIL(HM_CORRUPT, "%s: tensor '%s' is %s; scales must be F16, BF16 or F32", t->file, t->st->name,
              hm_st_dtype_name(t->st->dtype));
  }
}

/* Whole fp8 and bf16 rows dominate big checkpoints: copy runs of columns at once. */
void hm_src_codes_bytes(const hm_src_matrix *m, int64_t row, const int64_t *cols, int64_t count,
                        uint8_t *out) {
  int64_t width = m->param[0];
  const uint8_t *src = m->data[0] + row * m->ld[0];
  for (int64_t j = 0; j < count;) {
    int64_t run = 1;
    while (j + run < count && cols[j + run] == cols[j] + run) run++;
    memcpy(out + j * width, src + cols[j] * width, (size_t)(run * width));
    j += run;
  }
}

void hm_src_codes_nibbles(const hm_src_matrix *m, int64_t row, const int64_t *cols, int64_t count,
                          uint8_t *out) {
  const uint8_t *src = m->data[0] + row * m->ld[0];
  for (int64_t j = 0; j < count; j++) out[j] = (uint8_t)((src[cols[j] / 2] >> (4 * (cols[j] & 1))) & 0xf);
}

void hm_src_scale_rowmajor(const hm_src_matrix *m, int64_t row, int64_t group, uint8_t *out) {
  int64_t width = m->param[1];
  memcpy(out, m->data[1] + (row * m->ld[1] + group) * width, (size_t)width);
}

/* ---- the assembler ---- */

static int64_t out_groups(const hm_host_weights *out) {
  switch (out->fmt.scale_kind) {
    case HM_SCALE_GROUP:
    case HM_SCALE_BLOCK: return out->k / out->fmt.group_k;
    case HM_SCALE_CHANNEL: return 1;
    default: return 0;
  }
}

static int64_t src_group(const hm_src_matrix *m, int64_t col) {
  if (m->fmt.scale_kind != HM_SCALE_GROUP && m->fmt.scale_kind != HM_SCALE_BLOCK) return 0;
  return m->g_idx ? m->g_idx[col] : col / m->fmt.group_k;
}

/* Source group of each output group; every column of an output group must share it. */
static hm_status map_groups(const hm_asm_part *p, const hm_host_weights *out, int64_t *map) {
  int64_t groups = out_groups(out), width = groups ? out->k / groups : 0;
  for (int64_t c = 0; c < groups; c++) {
    map[c] = src_group(p->src, p->cols[c * width]);
    for (int64_t j = c * width; j < (c + 1) * width; j++) {
      int64_t g = src_group(p->src, p->cols[j]);
      if (g != map[c])
        HM_FAIL(
            HM_UNSUPPORTED,
            "%s: output columns %lld..%lld draw on source scale groups %lld and %lld (a slice or act-order "
            "permutation must keep whole groups)",
            p->src->module, (long long)(c * width), (long long)((c + 1) * width - 1), (long long)map[c],
            (long long)g);
    }
  }
  return HM_OK;
}

/* Block scales: each block of output rows must come from one block of source rows. */
static hm_status check_row_blocks(const hm_asm_part *p, const hm_host_weights *out) {
  if (out->fmt.scale_kind != HM_SCALE_BLOCK) return HM_OK;
  int64_t bn = out->fmt.group_n;
  if (p->dst_row % bn != 0 || p->n_rows % bn != 0)
    HM_FAIL(HM_UNSUPPORTED, "%s: %lld rows at output row %lld do not fill whole %lld-row scale blocks",
            p->src->module, (long long)p->n_rows, (long long)p->dst_row, (long long)bn);
  for (int64_t i = 0; i < p->n_rows; i++) {
    if (p->rows[i] / bn != p->rows[i - i % bn] / bn)
      HM_FAIL(HM_UNSUPPORTED, "%s: output rows %lld..%lld span several source scale blocks", p->src->module,
              (long long)(p->dst_row + i - i % bn), (long long)(p->dst_row + i - i % bn + bn - 1));
  }
  return HM_OK;
}

static uint8_t *scale_at(const hm_host_weights *out, int64_t e, int64_t r, int64_t c) {
  int64_t groups = out_groups(out), index;
  if (out->fmt.scale_kind == HM_SCALE_BLOCK)
    index = (e * (out->n / out->fmt.group_n) + r / out->fmt.group_n) * groups + c;
  else
    index = (e * out->n + r) * groups + c;
  return (uint8_t *)out->scales + index * hm_quant_scale_bytes(&out->fmt);
}

/* Folds a part's own second-level scale into its scales when parts disagree (lossy). */
static hm_status rescale(const hm_host_weights *out, uint8_t *scale, float ratio) {
  float s = hm_load_f32(out->fmt.scale, scale, 0) * ratio;
  return hm_convert_from_f32(out->fmt.scale, &s, scale, 1);
}

static hm_status copy_row(const hm_asm_part *p, int64_t i, int64_t e, const int64_t *map, float ratio,
                          hm_host_weights *out, uint8_t *codes, uint8_t *zero_codes) {
  const hm_src_matrix *m = p->src;
  int64_t r = p->dst_row + i, groups = out_groups(out);
  int bits = hm_dtype_bits(out->fmt.weight);
  int64_t row_words = hm_pack_row_words(bits, out->k);
  m->codes(m, p->rows[i], p->cols, out->k, codes);
  uint32_t *dst = out->qweight + (e * out->n + r) * row_words;
  HM_CHECK(bits == 16 ? hm_pack_rows(codes, 1, 2 * out->k, 8, dst)
                      : hm_pack_rows(codes, 1, out->k, bits, dst));
  bool block_row = out->fmt.scale_kind != HM_SCALE_BLOCK || r % out->fmt.group_n == 0;
  for (int64_t c = 0; c < groups && block_row; c++) {
    uint8_t *s = scale_at(out, e, r, c);
    m->scale(m, p->rows[i], map[c], s);
    if (ratio != 1.0f) HM_CHECK(rescale(out, s, ratio));
    if (out->fmt.zero_point) zero_codes[c * out->n + r] = m->zero(m, p->rows[i], map[c]);
  }
  return HM_OK;
}

static hm_status assemble_part(const hm_asm_part *p, int64_t e, float global, hm_host_weights *out,
                               uint8_t *zero_codes) {
  if (p->dst_row < 0 || p->dst_row + p->n_rows > out->n)
    HM_FAIL(HM_INTERNAL, "%s: rows %lld..+%lld outside the output", p->src->module, (long long)p->dst_row,
            (long long)p->n_rows);
  hm_status ret = HM_OK;
  int64_t groups = out_groups(out);
  int64_t *map = malloc((size_t)(groups + 1) * sizeof(*map));
  uint8_t *codes = malloc((size_t)out->k * 2);
  if (map == NULL || codes == NULL) HM_FAIL_GOTO(HM_OUT_OF_MEMORY, done, "%s: row buffers", p->src->module);
  HM_CHECK_GOTO(map_groups(p, out, map), done);
  HM_CHECK_GOTO(check_row_blocks(p, out), done);
  float ratio = out->fmt.global_scale ? p->src->global / global : 1.0f;
  if (ratio != 1.0f)
    HM_WARN(INIT, "%s: second-level scale %g differs from the expert's %g; its scales are rescaled (inexact)",
            p->src->module, (double)p->src->global, (double)global);
  for (int64_t i = 0; i < p->n_rows; i++)
    HM_CHECK_GOTO(copy_row(p, i, e, map, ratio, out, codes, zero_codes), done);
done:
  free(map);
  free(codes);
  return ret;
}

hm_status hm_assemble_expert(const hm_asm_part *parts, int n_parts, int64_t e, hm_host_weights *out,
                             uint8_t *zero_codes) {
  float global = 0.0f;
  for (int i = 0; i < n_parts && out->fmt.global_scale; i++) {
    float g = parts[i].src->global;
    if (!(g > 0.0f) || !isfinite(g))
      HM_FAIL(HM_CORRUPT, "%s: second-level scale %g is not a positive finite number", parts[i].src->module,
              (double)g);
    global = fmaxf(global, g);
  }
  if (out->fmt.global_scale) out->global_scale[e] = global;
  for (int i = 0; i < n_parts; i++) HM_CHECK(assemble_part(&parts[i], e, global, out, zero_codes));
  return HM_OK;
}
