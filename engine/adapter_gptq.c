/* SPDX-License-Identifier: Apache-2.0 */
/*
 * GPTQ (AutoGPTQ, GPTQModel) and AutoRound's GPTQ packing -> canonical contract.
 * Tensors of <module>, G = K / group_size (1 when group_size is -1):
 *   qweight I32 (K*b/32, N)  column n is an LSB-first bit stream along K running down the
 *                            rows (for b = 3 a code may straddle two rows)
 *   scales  F16 (G, N)       (BF16 accepted)
 *   qzeros  I32 (G, N*b/32)  row g is an LSB-first bit stream along N
 *   g_idx   I32 (K)          scale group of each input column (optional; act-order when
 *                            not k / group_size)
 * Zero points: checkpoint_format "gptq" (v1, the default) stores z - 1 (mod 2^b), the
 * historical offset of AutoGPTQ, so z = stored + 1; "gptq_v2" stores z. AutoRound:
 * packing_format "auto_gptq" is v1, its own "auto_round..." packing stores z (it was made
 * to drop that offset), "auto_awq" goes to the AWQ adapter.
 * sym = true: the stored zeros must all be 2^(b-1); canonical u<b> without zero points
 * (the contract's implicit 2^(b-1)). Otherwise u<b> with zero points packed along N.
 * Codes and scales are copied unchanged: the canonical weights are bit-exact.
 */
#include <stdio.h>
#include <string.h>

#include "adapter.h"
#include "check.h"

enum { P_BITS = 2, P_OFFSET = 3 };

static void gptq_codes(const hm_src_matrix *m, int64_t row, const int64_t *cols, int64_t count,
                       uint8_t *out) {
  for (int64_t j = 0; j < count; j++)
    out[j] = hm_src_stream_code(m->data[0] + row * 4, m->ld[0], cols[j], (int)m->param[P_BITS]);
}

/* scales (G, N): column-major with respect to (row, group). */
static void gptq_scale(const hm_src_matrix *m, int64_t row, int64_t group, uint8_t *out) {
  memcpy(out, m->data[1] + (group * m->ld[1] + row) * m->param[1], (size_t)m->param[1]);
}

static uint8_t gptq_zero(const hm_src_matrix *m, int64_t row, int64_t group) {
  int bits = (int)m->param[P_BITS];
  uint8_t stored = hm_src_stream_code(m->data[2] + group * m->ld[2] * 4, 1, row, bits);
  return (uint8_t)((stored + m->param[P_OFFSET]) & ((1u << bits) - 1u));
}

struct gptq_config {
  int64_t bits, group;
  bool sym, offset;
};

static hm_status read_config(hm_ckpt *ck, struct gptq_config *c) {
  json_t *q = hm_ckpt_quant_config(ck);
  HM_CHECK(hm_qcfg_int(ck, q, "bits", 4, &c->bits));
  HM_CHECK(hm_qcfg_int(ck, q, "group_size", 128, &c->group));
  HM_CHECK(hm_qcfg_bool(ck, q, "sym", true, &c->sym));
  if (c->bits < 2 || c->bits > 8)
    HM_FAIL(HM_UNSUPPORTED, "%s/%s: GPTQ bits = %lld (2..8 supported)", hm_ckpt_dir(ck),
            hm_ckpt_quant_file(ck), (long long)c->bits);
  if (c->group == 0 || c->group < -1)
    HM_FAIL(HM_CORRUPT, "%s/%s: group_size = %lld", hm_ckpt_dir(ck), hm_ckpt_quant_file(ck),
            (long long)c->group);
  const char *data_type = hm_qcfg_str(q, "data_type", "int");
  if (strcmp(data_type, "int") != 0)
    HM_FAIL(HM_UNSUPPORTED, "%s/%s: data_type '%s' (only int is GPTQ-packed)", hm_ckpt_dir(ck),
            hm_ckpt_quant_file(ck), data_type);
  if (strcmp(hm_ckpt_model_info(ck)->quant_method, "gptq") == 0)
    c->offset = strcmp(hm_qcfg_str(q, "checkpoint_format", "gptq"), "gptq_v2") != 0;
  else
    c->offset = strncmp(hm_qcfg_str(q, "packing_format", "auto_round"), "auto_round", 10) != 0;
  return HM_OK;
}

static hm_status check_sym_zeros(const hm_src_matrix *m, const hm_ckpt_tensor *t) {
  uint8_t mid = (uint8_t)(1u << (m->param[P_BITS] - 1));
  for (int64_t g = 0; g < m->groups; g++) {
    for (int64_t n = 0; n < m->n; n++) {
      uint8_t z = gptq_zero(m, n, g);
      if (z != mid)
        HM_FAIL(HM_CORRUPT,
                "%s: tensor '%s': sym = true but the zero point of (group %lld, column %lld) is %u, "
                "not %u",
                t->file, t->st->name, (long long)g, (long long)n, z, mid);
    }
  }
  return HM_OK;
}

static hm_status open_tensors(hm_ckpt *ck, const hm_src_request *req, const struct gptq_config *c,
                              hm_src_matrix *m) {
  char name[224];
  hm_ckpt_tensor qw, sc, qz, gi;
  int64_t b = c->bits, n = req->n, k = req->k, groups = m->groups;
  snprintf(name, sizeof(name), "%s.qweight", req->module);
  HM_CHECK(hm_ckpt_expect(ck, name, HM_ST_I32, 2, (int64_t[]){k * b / 32, n}, &qw));
  snprintf(name, sizeof(name), "%s.scales", req->module);
  HM_CHECK(hm_ckpt_get(ck, name, &sc));
  HM_CHECK(hm_src_scale_dtype(&sc, &m->fmt.scale));
  HM_CHECK(hm_ckpt_expect(ck, name, sc.st->dtype, 2, (int64_t[]){groups, n}, &sc));
  snprintf(name, sizeof(name), "%s.qzeros", req->module);
  HM_CHECK(hm_ckpt_expect(ck, name, HM_ST_I32, 2, (int64_t[]){groups, n * b / 32}, &qz));
  m->data[0] = qw.st->data;
  m->ld[0] = n;
  m->data[1] = sc.st->data;
  m->ld[1] = n;
  m->param[1] = hm_dtype_bits(m->fmt.scale) / 8;
  m->data[2] = qz.st->data;
  m->ld[2] = n * b / 32;
  snprintf(name, sizeof(name), "%s.g_idx", req->module);
  if (groups > 1 && hm_ckpt_has(ck, name)) {
    HM_CHECK(hm_ckpt_expect(ck, name, HM_ST_I32, 1, (int64_t[]){k}, &gi));
    HM_CHECK(hm_src_copy_g_idx(m, &gi, groups));
  }
  return c->sym ? check_sym_zeros(m, &qz) : HM_OK;
}

static hm_status gptq_open(hm_ckpt *ck, const hm_src_request *req, hm_src_matrix *m) {
  json_t *q = hm_ckpt_quant_config(ck);
  if (strcmp(hm_ckpt_model_info(ck)->quant_method, "auto-round") == 0 &&
      strstr(hm_qcfg_str(q, "packing_format", ""), "awq") != NULL)
    return hm_adapter_awq.open(ck, req, m);
  struct gptq_config c;
  HM_CHECK(read_config(ck, &c));
  if (req->expert >= 0)
    HM_FAIL(HM_UNSUPPORTED, "%s: GPTQ packing of fused expert tensors is not a known layout", req->module);
  if ((req->k * c.bits) % 32 != 0 || (req->n * c.bits) % 32 != 0)
    HM_FAIL(HM_CORRUPT, "%s: N = %lld and K = %lld must fill whole 32-bit words at %lld bits", req->module,
            (long long)req->n, (long long)req->k, (long long)c.bits);
  bool channel = c.group == -1 || c.group > req->k;
  if (!channel && req->k % c.group != 0)
    HM_FAIL(HM_CORRUPT, "%s: group_size %lld does not divide K = %lld", req->module, (long long)c.group,
            (long long)req->k);
  m->groups = channel ? 1 : req->k / c.group;
  m->fmt = (hm_quant_format){hm_src_uint_dtype((int)c.bits),
                             HM_F16,
                             channel ? HM_SCALE_CHANNEL : HM_SCALE_GROUP,
                             channel ? 0 : (int)c.group,
                             0,
                             !c.sym,
                             false};
  m->param[P_BITS] = c.bits;
  m->param[P_OFFSET] = c.offset ? 1 : 0;
  m->codes = gptq_codes;
  m->scale = gptq_scale;
  m->zero = gptq_zero;
  return open_tensors(ck, req, &c, m);
}

const hm_adapter hm_adapter_gptq = {"gptq", gptq_open};
