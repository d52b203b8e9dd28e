/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The plan of one forward: which layout, how many alignment metadata sets (one per
 * GEMM block_m), whether the decode front runs as one kernel, and where every buffer
 * lives in the layer's workspace.
 */
#include <string.h>

#include "check.h"
#include "layer_internal.h"
#include "log.h"
#include "params.h"

/* Buffers start on 256-byte boundaries, as device allocations do. */
#define HM_MOE_ALIGN_BYTES 256

static hm_status parse_layout_param(hm_moe_layout *out) {
  const char *v = hm_param_moe_layout();
  static const hm_moe_layout all[] = {HM_MOE_LAYOUT_AUTO, HM_MOE_LAYOUT_INDEXED, HM_MOE_LAYOUT_CONTIGUOUS,
                                      HM_MOE_LAYOUT_MASKED};
  for (size_t i = 0; i < HM_ARRAY_SIZE(all); i++) {
    if (strcmp(v, hm_moe_layout_name(all[i])) == 0) {
      *out = all[i];
      return HM_OK;
    }
  }
  HM_FAIL(HM_INVALID_ARGUMENT, "HUMMING_MOE_LAYOUT=%s: expected auto, indexed, contiguous or masked", v);
}

/*
 * Auto: masked for decode (graph-capturable, no alignment pass); contiguous for prefill,
 * whose permuted rows the GEMMs load with TMA on warp-specialized kernels; indexed between,
 * where padding every expert's rows to the GEMMs' block would cost more than the gather.
 */
static hm_moe_layout auto_layout(int64_t tokens) {
  if (tokens <= hm_param_moe_masked_max_tokens()) return HM_MOE_LAYOUT_MASKED;
  return tokens >= hm_param_moe_contiguous_min_tokens() ? HM_MOE_LAYOUT_CONTIGUOUS : HM_MOE_LAYOUT_INDEXED;
}

hm_status hm_moe_choose_layout(const hm_moe_layer *l, int64_t tokens, hm_moe_layout *out) {
  hm_moe_layout layout = l->cfg.layout;
  if (layout == HM_MOE_LAYOUT_AUTO) HM_CHECK(parse_layout_param(&layout));
  *out = layout == HM_MOE_LAYOUT_AUTO ? auto_layout(tokens) : layout;
  return HM_OK;
}

size_t hm_moe_act_bytes(const hm_quant_scheme *s) {
  return (size_t)hm_dtype_bits(s->act) / 8;
}

size_t hm_moe_act_scale_row_bytes(const hm_quant_scheme *s, int64_t k) {
  switch (s->act_scale) {
    case HM_ACT_SCALE_TOKEN: return sizeof(float);
    case HM_ACT_SCALE_GROUP128: return (size_t)((k + 127) / 128) * sizeof(float);
    default: return 0;
  }
}

/* Reserves bytes (0: absent) and returns the offset. */
static size_t take(hm_moe_plan *p, size_t bytes) {
  if (bytes == 0) return HM_MOE_NONE;
  size_t at = p->bytes;
  p->bytes += (bytes + HM_MOE_ALIGN_BYTES - 1) / HM_MOE_ALIGN_BYTES * HM_MOE_ALIGN_BYTES;
  return at;
}

static int64_t gcd(int64_t a, int64_t b) {
  return b == 0 ? a : gcd(b, a % b);
}

/* The alignment configs: contiguous rows serve both GEMMs, so pad to both block sizes. */
static hm_status plan_alignment(const hm_moe_layer *l, hm_moe_plan *p) {
  int64_t ids = p->tokens * p->slots;
  int bm_up = hm_layer_block_m(l->gate_up, ids), bm_down = hm_layer_block_m(l->down, ids);
  if (bm_up < 1 || bm_down < 1)
    HM_FAIL(HM_INTERNAL, "GEMM block_m %d (gate_up) / %d (down) for %lld rows", bm_up, bm_down,
            (long long)ids);
  hm_moe_align_config base = {.layout = p->layout,
                              .tokens = p->tokens,
                              .experts = l->cfg.router.experts + l->shared_fused,
                              .top_k = p->slots,
                              .block_m = 1};
  p->sets = 1;
  p->align[0] = p->align[1] = base;
  if (p->layout == HM_MOE_LAYOUT_CONTIGUOUS) {
    p->align[0].block_m = (int)(bm_up / gcd(bm_up, bm_down) * bm_down);
  } else if (p->layout == HM_MOE_LAYOUT_INDEXED) {
    p->align[0].block_m = bm_up;
    p->align[1].block_m = bm_down;
    p->sets = bm_up == bm_down ? 1 : 2;
  }
  for (int s = 0; s < p->sets; s++) HM_CHECK(hm_moe_align_get_sizes(&p->align[s], &p->sizes[s]));
  p->rows = p->sizes[0].rows;
  return HM_OK;
}

static void plan_metadata(const hm_moe_layer *l, hm_moe_plan *p) {
  size_t ids = (size_t)(p->tokens * l->cfg.router.top_k), E = (size_t)p->align[0].experts;
  p->ids = take(p, ids * sizeof(int32_t));
  p->weights = take(p, ids * sizeof(float));
  p->row_of = take(p, (size_t)(p->tokens * p->slots) * sizeof(int32_t));
  for (int s = 0; s < p->sets; s++) {
    p->counts[s] = take(p, E * sizeof(int32_t));
    p->offsets[s] = take(p, (E + 1) * sizeof(int32_t));
    p->num_padded[s] = take(p, sizeof(int32_t));
    p->sorted_ids[s] = take(p, (size_t)p->sizes[s].max_padded * sizeof(int32_t));
    p->expert_ids[s] = take(p, (size_t)p->sizes[s].max_blocks * sizeof(int32_t));
    p->align_ws[s] = take(p, p->sizes[s].workspace_bytes);
  }
}

static void plan_activations(const hm_moe_layer *l, hm_moe_plan *p) {
  const hm_quant_scheme *q = &l->cfg.scheme;
  size_t T = (size_t)p->tokens, rows = (size_t)p->rows, H = (size_t)l->cfg.hidden;
  size_t I = (size_t)l->cfg.intermediate, act = hm_moe_act_bytes(q);
  p->convert_x = q->act != HM_BF16;
  p->xq = p->xq_scale = p->a_perm = p->a_perm_scale = HM_MOE_NONE;
  if (p->convert_x) {
    p->xq = take(p, T * H * act);
    p->xq_scale = take(p, T * hm_moe_act_scale_row_bytes(q, l->cfg.hidden));
  }
  if (p->layout != HM_MOE_LAYOUT_INDEXED) {
    p->a_perm = take(p, rows * H * act);
    p->a_perm_scale = take(p, rows * hm_moe_act_scale_row_bytes(q, l->cfg.hidden));
  }
  p->h1 = take(p, rows * (size_t)l->gate_up_rows * 2);
  p->h2 = take(p, rows * I * act);
  p->h2_scale = take(p, rows * hm_moe_act_scale_row_bytes(q, l->cfg.intermediate));
  p->h3 = take(p, rows * H * 2);
  size_t S = l->shared_gate_up ? (size_t)l->shared_width : 0;
  size_t s_rows = l->cfg.activation == HM_MOE_ACT_RELU2 ? S : 2 * S;
  p->s1 = take(p, T * s_rows * 2);
  p->s2 = take(p, T * S * act);
  p->s2_scale = S ? take(p, T * hm_moe_act_scale_row_bytes(q, l->shared_width)) : HM_MOE_NONE;
  p->s3 = S ? take(p, T * H * 2) : HM_MOE_NONE;
}

hm_status hm_moe_plan_make(const hm_moe_layer *l, hm_moe_layout layout, int64_t tokens, hm_moe_plan *p) {
  memset(p, 0, sizeof(*p));
  p->layout = layout;
  p->tokens = tokens;
  p->slots = l->cfg.router.top_k + l->shared_fused;
  int64_t front_max = hm_param_moe_front_max_tokens();
  p->front = tokens <= front_max && tokens <= HM_FRONT_MAX_TOKENS &&
             hm_moe_front_fits(l->cfg.router.experts + l->shared_fused, l->cfg.router.top_k);
  HM_CHECK(plan_alignment(l, p));
  plan_metadata(l, p);
  plan_activations(l, p);
  return HM_OK;
}

hm_status hm_moe_workspace_ensure(hm_moe_layer *l, size_t bytes, hm_stream *stream) {
  if (bytes <= l->workspace_bytes) return HM_OK;
  /* A NULL stream is the default stream, which hm_stream_synchronize does not take. */
  HM_CHECK(l->engine->ops->stream_sync(l->engine, hm_stream_native(stream)));
  hm_mem_free(l->engine, l->workspace);
  l->workspace = NULL;
  l->workspace_bytes = 0;
  HM_CHECK(hm_mem_alloc(l->engine, bytes, &l->workspace));
  l->workspace_bytes = bytes;
  /* Padding rows are never read back, but zeros keep them finite for any GEMM kernel. */
  HM_CHECK(hm_engine_memset(l->engine, l->workspace, 0, bytes, NULL));
  HM_INFO(MOE, "MoE workspace grown to %.1f MiB", (double)bytes / (1024.0 * 1024.0));
  return HM_OK;
}
