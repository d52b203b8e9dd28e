/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The expert FFN alone on rows already grouped by expert (an expert-parallel dispatch's
 * output): x into the activation type when it is not, gate_up GEMM, activation, down
 * GEMM into the caller's y, in the same rows. No router, alignment, permutation or
 * combine: the rows' owners weight and sum them. Only the rows listed hold data; the
 * conversions and the activation touch those alone, so a masked layout's empty tail
 * costs nothing.
 */
#include "check.h"
#include "layer_internal.h"

/* Byte offsets of the grouped forward's buffers in the layer's workspace. */
typedef struct grouped_plan {
  size_t xq, xq_scale, h1, h2, h2_scale, bytes;
} grouped_plan;

#define GROUPED_ALIGN_BYTES 256

static size_t take(grouped_plan *p, size_t bytes) {
  size_t at = p->bytes;
  p->bytes += (bytes + GROUPED_ALIGN_BYTES - 1) / GROUPED_ALIGN_BYTES * GROUPED_ALIGN_BYTES;
  return at;
}

static bool x_needs_conversion(const hm_moe_layer *l, const hm_moe_grouped_args *a) {
  return a->x_dtype != l->cfg.scheme.act;
}

static void plan_make(const hm_moe_layer *l, const hm_moe_grouped_args *a, grouped_plan *p) {
  const hm_moe_config *c = &l->cfg;
  size_t rows = (size_t)a->rows, act = hm_moe_act_bytes(&c->scheme);
  *p = (grouped_plan){0};
  if (x_needs_conversion(l, a)) {
    p->xq = take(p, rows * (size_t)c->hidden * act);
    p->xq_scale = take(p, rows * hm_moe_act_scale_row_bytes(&c->scheme, c->hidden));
  }
  p->h1 = take(p, rows * (size_t)l->gate_up_rows * 2);
  p->h2 = take(p, rows * (size_t)c->intermediate * act);
  p->h2_scale = take(p, rows * hm_moe_act_scale_row_bytes(&c->scheme, c->intermediate));
}

static hm_status check_x_type(const hm_moe_layer *l, const hm_moe_grouped_args *a) {
  const hm_quant_scheme *s = &l->cfg.scheme;
  if (a->x_dtype == HM_BF16) return HM_OK;
  if (a->x_dtype != s->act)
    HM_FAIL(HM_INVALID_ARGUMENT, "grouped MoE forward: x is %s, expected bf16 or the scheme's activation %s",
            hm_dtype_name(a->x_dtype), hm_dtype_name(s->act));
  if (s->act_scale != HM_ACT_SCALE_NONE && a->x_scale == NULL)
    HM_FAIL(HM_INVALID_ARGUMENT, "grouped MoE forward: x in %s needs x_scale", hm_dtype_name(a->x_dtype));
  return HM_OK;
}

static hm_status check_args(const hm_moe_layer *l, const hm_moe_grouped_args *a) {
  HM_CHECK_NOT_NULL(a);
  if (!l->transformed) HM_FAIL(HM_NOT_READY, "grouped MoE forward before hm_moe_layer_transform");
  if (l->shared_width > 0)
    HM_FAIL(HM_INVALID_ARGUMENT,
            "grouped MoE forward runs routed experts only; this layer has %lld shared expert columns",
            (long long)l->shared_width);
  if (a->layout != HM_MOE_LAYOUT_CONTIGUOUS && a->layout != HM_MOE_LAYOUT_MASKED)
    HM_FAIL(HM_INVALID_ARGUMENT, "grouped MoE forward: layout %s, expected contiguous or masked",
            hm_moe_layout_name(a->layout));
  if (a->rows < 0 || a->valid_rows < 0 || a->valid_rows > a->rows)
    HM_FAIL(HM_INVALID_ARGUMENT, "grouped MoE forward: %lld valid rows of %lld", (long long)a->valid_rows,
            (long long)a->rows);
  if (a->layout == HM_MOE_LAYOUT_MASKED && (a->max_m < 1 || a->rows != l->cfg.router.experts * a->max_m))
    HM_FAIL(HM_INVALID_ARGUMENT, "grouped MoE forward: masked rows %lld are not experts %lld x max_m %lld",
            (long long)a->rows, (long long)l->cfg.router.experts, (long long)a->max_m);
  if (a->valid_rows == 0) return HM_OK;
  HM_CHECK_NOT_NULL(a->x);
  HM_CHECK_NOT_NULL(a->y);
  HM_CHECK_NOT_NULL(a->expert_counts);
  HM_CHECK_NOT_NULL(a->row_list);
  if (a->layout == HM_MOE_LAYOUT_CONTIGUOUS) HM_CHECK_NOT_NULL(a->expert_offsets);
  return check_x_type(l, a);
}

typedef struct grouped_fwd {
  hm_moe_layer *l;
  hm_moe_exec x;
  const hm_moe_grouped_args *a;
  grouped_plan p;
  const void *xa; /* x in the activation type */
  const float *xa_scale;
} grouped_fwd;

static void *at(const grouped_fwd *f, size_t offset) {
  return (char *)f->l->workspace + offset;
}

static hm_status convert_x(grouped_fwd *f) {
  const hm_moe_config *c = &f->l->cfg;
  f->xa = f->a->x;
  f->xa_scale = f->a->x_scale;
  if (!x_needs_conversion(f->l, f->a)) return HM_OK;
  hm_moe_act_args a = {.fn = HM_ACT_FN_IDENTITY,
                       .items = f->a->valid_rows,
                       .row_of = f->a->row_list,
                       .in = f->a->x,
                       .in_stride = c->hidden,
                       .width = c->hidden,
                       .out_type = c->scheme.act,
                       .scale = c->scheme.act_scale,
                       .out = at(f, f->p.xq),
                       .out_scale = c->scheme.act_scale == HM_ACT_SCALE_NONE ? NULL : at(f, f->p.xq_scale)};
  HM_CHECK(hm_moe_act_run(&f->x, &f->l->kernels.convert_x, &a));
  f->xa = a.out;
  f->xa_scale = a.out_scale;
  return HM_OK;
}

static hm_gemm_args grouped_gemm(const grouped_fwd *f, const void *a, const float *a_scale, void *c) {
  hm_gemm_args g = {.a = a, .a_scale = a_scale, .c = c, .expert_counts = f->a->expert_counts};
  if (f->a->layout == HM_MOE_LAYOUT_MASKED) {
    g.type = HM_GEMM_GROUPED_MASKED;
    g.m = f->a->max_m;
  } else {
    g.type = HM_GEMM_GROUPED_CONTIGUOUS;
    g.m = f->a->rows;
    g.expert_offsets = f->a->expert_offsets;
  }
  return g;
}

static hm_status ffn(grouped_fwd *f) {
  const hm_moe_config *c = &f->l->cfg;
  HM_CHECK(convert_x(f));
  hm_gemm_args up = grouped_gemm(f, f->xa, f->xa_scale, at(f, f->p.h1));
  HM_CHECK(hm_moe_gemm(&f->x, f->l->gate_up, &up));
  bool scaled = c->scheme.act_scale != HM_ACT_SCALE_NONE;
  hm_moe_act_args a = {.fn = hm_moe_act_fn_of(c->activation),
                       .items = f->a->valid_rows,
                       .row_of = f->a->row_list,
                       .in = up.c,
                       .in_stride = f->l->gate_up_rows,
                       .width = c->intermediate,
                       .out_type = c->scheme.act,
                       .scale = c->scheme.act_scale,
                       .out = at(f, f->p.h2),
                       .out_scale = scaled ? at(f, f->p.h2_scale) : NULL};
  HM_CHECK(hm_moe_act_run(&f->x, &f->l->kernels.act, &a));
  hm_gemm_args down = grouped_gemm(f, a.out, a.out_scale, f->a->y);
  down.routing_ready = true; /* counted before gate_up, which the activation kernel follows */
  return hm_moe_gemm(&f->x, f->l->down, &down);
}

hm_status hm_moe_layer_forward_grouped(hm_moe_layer *l, const hm_moe_grouped_args *args, hm_stream *stream) {
  HM_CHECK_NOT_NULL(l);
  HM_CHECK(check_args(l, args));
  l->stats = (hm_moe_stats){.layout = args->layout, .tokens = args->valid_rows};
  if (args->valid_rows == 0) return HM_OK;
  grouped_fwd f = {.l = l, .x = {.engine = l->engine, .stream = stream}, .a = args};
  plan_make(l, args, &f.p);
  HM_CHECK(hm_moe_workspace_ensure(l, f.p.bytes, stream));
  HM_CHECK(ffn(&f));
  l->stats.launches = f.x.launches;
  return HM_OK;
}
