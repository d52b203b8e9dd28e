/* SPDX-License-Identifier: Apache-2.0 */
/* What a checkpoint holds and what one rank of an EP x TP grid keeps of it (inspect). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "checkpoint.h"

static uint64_t canonical_bytes(const hm_quant_format *f, int64_t experts, int64_t n, int64_t k) {
  uint64_t one = (uint64_t)hm_quant_qweight_words(f, n, k) * 4 +
                 (uint64_t)hm_quant_scale_count(f, n, k) * (uint64_t)hm_quant_scale_bytes(f) +
                 (uint64_t)hm_quant_zero_words(f, n, k) * 4 + (f->global_scale ? 4 : 0);
  return one * (uint64_t)experts;
}

/* The slicing rules hm_ckpt_load_layer enforces, said before anything is loaded. */
static void find_problem(const hm_ckpt_ffn *f, hm_ckpt_proj proj, int tp, hm_ckpt_layer_info *info) {
  const hm_quant_format *fmt = &info->fmt;
  bool grouped = fmt->scale_kind == HM_SCALE_GROUP || fmt->scale_kind == HM_SCALE_BLOCK;
  if (grouped && info->rank_k % fmt->group_k != 0)
    snprintf(info->problem, sizeof(info->problem),
             "K = %lld a rank is not a multiple of the %d-column scale group", (long long)info->rank_k,
             fmt->group_k);
  else if (fmt->scale_kind == HM_SCALE_BLOCK && proj == HM_PROJ_GATE_UP &&
           (f->intermediate / tp) % fmt->group_n)
    snprintf(info->problem, sizeof(info->problem),
             "gate and up keep %lld rows a rank, not whole %d-row scale blocks",
             (long long)(f->intermediate / tp), fmt->group_n);
  else if (hm_quant_format_check(fmt, info->rank_n, info->rank_k) != HM_OK)
    snprintf(info->problem, sizeof(info->problem), "%s", hm_last_error());
}

static hm_status layer_info(hm_ckpt *ck, const hm_ckpt_ffn *f, hm_ckpt_proj proj, int ep, int tp,
                            hm_ckpt_layer_info *info) {
  memset(info, 0, sizeof(*info));
  snprintf(info->name, sizeof(info->name), "%s.%s", f->prefix, proj == HM_PROJ_GATE_UP ? "gate_up" : "down");
  if (f->intermediate % tp != 0)
    HM_FAIL(HM_INVALID_ARGUMENT, "%s: TP %d does not divide intermediate size %lld", info->name, tp,
            (long long)f->intermediate);
  if (f->kind == HM_FFN_ROUTED && f->experts % ep != 0)
    HM_FAIL(HM_INVALID_ARGUMENT, "%s: EP %d does not divide %lld experts", info->name, ep,
            (long long)f->experts);
  info->kind = f->kind;
  info->experts = f->experts;
  info->rank_experts = f->kind == HM_FFN_ROUTED ? f->experts / ep : 1;
  info->n = proj == HM_PROJ_GATE_UP ? 2 * f->intermediate : f->hidden;
  info->k = proj == HM_PROJ_GATE_UP ? f->hidden : f->intermediate;
  info->rank_n = proj == HM_PROJ_GATE_UP ? info->n / tp : info->n;
  info->rank_k = proj == HM_PROJ_GATE_UP ? info->k : info->k / tp;
  HM_CHECK(hm_ckpt_layer_format(ck, info->name, &info->fmt));
  info->rank_bytes = canonical_bytes(&info->fmt, info->rank_experts, info->rank_n, info->rank_k);
  find_problem(f, proj, tp, info);
  return HM_OK;
}

static bool in_ffn(const hm_ckpt *ck, const char *tensor) {
  for (size_t i = 0; i < hm_ckpt_ffn_count(ck); i++) {
    const char *prefix = hm_ckpt_ffn_at(ck, i)->prefix;
    size_t len = strlen(prefix);
    if (strncmp(tensor, prefix, len) == 0 && tensor[len] == '.') return true;
  }
  return false;
}

static hm_status scan_files(hm_ckpt *ck, hm_ckpt_summary *s) {
  s->files = hm_ckpt_file_count(ck);
  for (size_t i = 0; i < s->files; i++) {
    hm_safetensors *st;
    HM_CHECK(hm_ckpt_file_open(ck, i, &st));
    for (size_t j = 0; j < hm_safetensors_count(st); j++) {
      const hm_st_tensor *t = hm_safetensors_at(st, j);
      s->tensors++;
      s->tensor_bytes += t->nbytes;
      s->dtype_bytes[t->dtype] += t->nbytes;
      if (!in_ffn(ck, t->name)) s->other_bytes += t->nbytes;
    }
  }
  return HM_OK;
}

hm_status hm_ckpt_summarize(hm_ckpt *ck, int ep, int tp, hm_ckpt_summary *out) {
  HM_CHECK_NOT_NULL(ck);
  HM_CHECK_NOT_NULL(out);
  memset(out, 0, sizeof(*out));
  if (ep < 1 || tp < 1) HM_FAIL(HM_INVALID_ARGUMENT, "EP %d x TP %d: both must be at least 1", ep, tp);
  hm_status ret = HM_OK;
  size_t ffns = hm_ckpt_ffn_count(ck);
  out->layers = calloc(2 * ffns + 1, sizeof(*out->layers));
  if (out->layers == NULL) HM_FAIL(HM_OUT_OF_MEMORY, "summary of %zu layers", 2 * ffns);
  HM_CHECK_GOTO(scan_files(ck, out), fail);
  for (size_t i = 0; i < ffns; i++) {
    for (int proj = HM_PROJ_GATE_UP; proj <= HM_PROJ_DOWN; proj++) {
      hm_ckpt_layer_info *info = &out->layers[out->layer_count];
      HM_CHECK_GOTO(layer_info(ck, hm_ckpt_ffn_at(ck, i), (hm_ckpt_proj)proj, ep, tp, info), fail);
      out->ffn_rank_bytes += info->rank_bytes;
      out->problems += info->problem[0] != '\0';
      out->layer_count++;
    }
  }
  out->other_rank_bytes = out->other_bytes / (uint64_t)tp;
  return HM_OK;
fail:
  hm_ckpt_summary_free(out);
  return ret;
}

void hm_ckpt_summary_free(hm_ckpt_summary *s) {
  if (s == NULL) return;
  free(s->layers);
  memset(s, 0, sizeof(*s));
}
