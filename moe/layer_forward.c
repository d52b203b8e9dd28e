/* SPDX-License-Identifier: Apache-2.0 */
/*
 * One forward of the MoE layer, stage by stage (hm_moe_stage order): router, alignment,
 * permutation, gate_up GEMM, activation, down GEMM, shared experts, combine. A decode
 * step runs the first three as one kernel (front.c), timed as the router stage. Shared
 * experts fused into the routed GEMMs (layer.c) ride along with the routed rows; a dense
 * shared pair runs on a side stream beside the routed GEMMs unless profiling. Nothing
 * waits on the host once the workspace is large enough, so a forward can be captured
 * in a CUDA graph after hm_moe_layer_reserve and a warm-up forward.
 */
#include "check.h"
#include "layer_internal.h"
#include "log.h"
#include "params.h"

typedef struct hm_moe_fwd {
  hm_moe_layer *l;
  hm_moe_exec x;
  const hm_moe_plan *p;
  const hm_moe_forward_args *args;
  const int32_t *ids;
  const float *weights;
  const void *xa; /* x in the activation type */
  const float *xa_scale;
  hm_moe_alignment meta[HM_MOE_MAX_SETS];
} hm_moe_fwd;

static void *at(const hm_moe_fwd *f, size_t offset) {
  return offset == HM_MOE_NONE ? NULL : (char *)f->l->workspace + offset;
}

/* Where the ids and weights come from: the caller's, or the router's in the workspace. */
static void take_routing(hm_moe_fwd *f) {
  bool given = f->args->topk_ids != NULL;
  f->ids = given ? f->args->topk_ids : at(f, f->p->ids);
  f->weights = given ? f->args->topk_weights : at(f, f->p->weights);
}

/* The alignment's arrays in the workspace; only set 0 places rows (row_of). */
static void take_metadata(hm_moe_fwd *f) {
  for (int s = 0; s < f->p->sets; s++)
    f->meta[s] = (hm_moe_alignment){
        .row_of = s == 0 ? at(f, f->p->row_of) : NULL,
        .expert_counts = at(f, f->p->counts[s]),
        .expert_offsets = at(f, f->p->offsets[s]),
        .num_padded = at(f, f->p->num_padded[s]),
        .sorted_ids = at(f, f->p->sorted_ids[s]),
        .expert_ids = at(f, f->p->expert_ids[s]),
    };
}

/* x -> activation type (8-bit or f16 paths). */
static hm_status convert_x(hm_moe_fwd *f) {
  const hm_moe_config *c = &f->l->cfg;
  f->xa = f->args->x;
  f->xa_scale = NULL;
  if (f->p->convert_x) {
    hm_moe_act_args a = {.fn = HM_ACT_FN_IDENTITY,
                         .items = f->p->tokens,
                         .in = f->args->x,
                         .in_stride = c->hidden,
                         .width = c->hidden,
                         .out_type = c->scheme.act,
                         .scale = c->scheme.act_scale,
                         .out = at(f, f->p->xq),
                         .out_scale = at(f, f->p->xq_scale)};
    HM_CHECK(hm_moe_act_run(&f->x, &f->l->kernels.convert_x, &a));
    f->xa = a.out;
    f->xa_scale = a.out_scale;
  }
  return HM_OK;
}

/* Rows of x into expert order (grouped layouts); dst NULL for indexed, which gathers. */
static hm_moe_permute_args permutation(const hm_moe_fwd *f) {
  const hm_moe_config *c = &f->l->cfg;
  hm_moe_permute_args a = {.items = f->p->tokens * f->p->slots, .top_k = f->p->slots};
  if (f->p->layout == HM_MOE_LAYOUT_INDEXED) return a;
  a.row_of = f->meta[0].row_of;
  a.src = f->xa;
  a.dst = at(f, f->p->a_perm);
  a.row_bytes = (size_t)c->hidden * hm_moe_act_bytes(&c->scheme);
  a.src2 = f->xa_scale;
  a.dst2 = f->xa_scale ? at(f, f->p->a_perm_scale) : NULL;
  a.row_bytes2 = hm_moe_act_scale_row_bytes(&c->scheme, c->hidden);
  return a;
}

/* Router (or the given ids), alignment and permutation as one kernel; x converted first. */
static hm_status run_front(hm_moe_fwd *f) {
  take_routing(f);
  take_metadata(f);
  HM_CHECK(convert_x(f));
  bool route = f->args->topk_ids == NULL;
  hm_moe_front_args a = {
      .router = &f->l->cfg.router,
      .tokens = f->p->tokens,
      .logits = route ? f->args->router_logits : NULL,
      .bias = route ? f->l->router_bias : NULL,
      .given_ids = f->args->topk_ids,
      .topk_ids = route ? at(f, f->p->ids) : NULL,
      .topk_weights = route ? at(f, f->p->weights) : NULL,
      .appended = f->l->shared_fused,
      .sets = f->p->sets,
      .align = f->p->align,
      .meta = f->meta,
      .permute = permutation(f),
  };
  return hm_moe_front_run(&f->x, &f->l->kernels.front, &a);
}

static hm_status stage_router(hm_moe_fwd *f) {
  if (f->p->front) return run_front(f);
  take_routing(f);
  if (f->args->topk_ids != NULL) return HM_OK;
  return hm_moe_route_run(&f->x, &f->l->kernels.router, &f->l->cfg.router, f->p->tokens,
                          f->args->router_logits, f->l->router_bias, at(f, f->p->ids), at(f, f->p->weights));
}

static hm_status stage_align(hm_moe_fwd *f) {
  if (f->p->front) return HM_OK;
  take_metadata(f);
  for (int s = 0; s < f->p->sets; s++)
    HM_CHECK(hm_moe_align_run(&f->x, &f->l->kernels.align, &f->p->align[s], f->l->shared_fused, f->ids,
                              &f->meta[s], at(f, f->p->align_ws[s])));
  return HM_OK;
}

static hm_status stage_permute(hm_moe_fwd *f) {
  if (f->p->front) return HM_OK;
  HM_CHECK(convert_x(f));
  hm_moe_permute_args a = permutation(f);
  if (a.dst == NULL) return HM_OK;
  return hm_moe_permute_run(&f->x, &f->l->kernels.permute, &a);
}

/* Layout metadata of an expert GEMM; set 0 for gate_up, the last set for down. */
static hm_gemm_args expert_args(const hm_moe_fwd *f, int set) {
  const hm_moe_plan *p = f->p;
  const hm_moe_alignment *m = &f->meta[set];
  hm_gemm_args g = {.top_k = p->slots, .a_rows_per_token = 1};
  switch (p->layout) {
    case HM_MOE_LAYOUT_CONTIGUOUS:
      g.type = HM_GEMM_GROUPED_CONTIGUOUS;
      g.m = p->rows;
      g.expert_offsets = m->expert_offsets;
      g.expert_counts = m->expert_counts;
      g.block_m = p->align[set].block_m;
      g.routed_rows = p->tokens * p->slots;
      break;
    case HM_MOE_LAYOUT_MASKED:
      g.type = HM_GEMM_GROUPED_MASKED;
      g.m = p->tokens;
      g.expert_counts = m->expert_counts;
      g.routed_rows = p->tokens * p->slots;
      break;
    default:
      g.type = HM_GEMM_INDEXED;
      g.m = p->tokens;
      g.sorted_ids = m->sorted_ids;
      g.expert_ids = m->expert_ids;
      g.num_padded = m->num_padded;
      g.max_padded = p->sizes[set].max_padded;
      g.block_m = p->align[set].block_m;
      break;
  }
  return g;
}

static hm_status stage_gemm1(hm_moe_fwd *f) {
  hm_gemm_args g = expert_args(f, 0);
  bool indexed = f->p->layout == HM_MOE_LAYOUT_INDEXED;
  g.a = indexed ? f->xa : at(f, f->p->a_perm);
  g.a_scale = indexed ? f->xa_scale : at(f, f->p->a_perm_scale);
  if (indexed) g.a_rows_per_token = f->p->slots; /* gathers token rows of x */
  g.c = at(f, f->p->h1);
  return hm_moe_gemm(&f->x, f->l->gate_up, &g);
}

static hm_status stage_act(hm_moe_fwd *f) {
  const hm_moe_config *c = &f->l->cfg;
  hm_moe_act_args a = {.fn = hm_moe_act_fn_of(c->activation),
                       .items = f->p->tokens * f->p->slots,
                       .row_of = f->meta[0].row_of,
                       .in = at(f, f->p->h1),
                       .in_stride = f->l->gate_up_rows,
                       .width = c->intermediate,
                       .out_type = c->scheme.act,
                       .scale = c->scheme.act_scale,
                       .out = at(f, f->p->h2),
                       .out_scale = at(f, f->p->h2_scale)};
  return hm_moe_act_run(&f->x, &f->l->kernels.act, &a);
}

static hm_status stage_gemm2(hm_moe_fwd *f) {
  hm_gemm_args g = expert_args(f, f->p->sets - 1);
  /* The activation kernel before it starts only once gate_up is done, and gate_up waited
   * for the routing: the routing is there before the activation kernel starts. */
  g.routing_ready = true;
  g.a = at(f, f->p->h2);
  g.a_scale = at(f, f->p->h2_scale);
  g.c = at(f, f->p->h3);
  return hm_moe_gemm(&f->x, f->l->down, &g);
}

static hm_status stage_shared(hm_moe_fwd *f) {
  hm_moe_layer *l = f->l;
  if (l->shared_gate_up == NULL) return HM_OK;
  const hm_moe_config *c = &l->cfg;
  hm_gemm_args up = {
      .type = HM_GEMM_DENSE, .m = f->p->tokens, .a = f->xa, .a_scale = f->xa_scale, .c = at(f, f->p->s1)};
  HM_CHECK(hm_moe_gemm(&f->x, l->shared_gate_up, &up));
  int64_t rows = c->activation == HM_MOE_ACT_RELU2 ? l->shared_width : 2 * l->shared_width;
  hm_moe_act_args a = {.fn = hm_moe_act_fn_of(c->activation),
                       .items = f->p->tokens,
                       .in = up.c,
                       .in_stride = rows,
                       .width = l->shared_width,
                       .out_type = c->scheme.act,
                       .scale = c->scheme.act_scale,
                       .out = at(f, f->p->s2),
                       .out_scale = at(f, f->p->s2_scale)};
  HM_CHECK(hm_moe_act_run(&f->x, &l->kernels.shared_act, &a));
  hm_gemm_args down = {
      .type = HM_GEMM_DENSE, .m = f->p->tokens, .a = a.out, .a_scale = a.out_scale, .c = at(f, f->p->s3)};
  return hm_moe_gemm(&f->x, l->shared_down, &down);
}

static hm_status stage_combine(hm_moe_fwd *f) {
  const hm_moe_config *c = &f->l->cfg;
  hm_moe_combine_args a = {.tokens = f->p->tokens,
                           .hidden = c->hidden,
                           .top_k = c->router.top_k,
                           .expert_out = at(f, f->p->h3),
                           .row_of = f->meta[0].row_of,
                           .topk_weights = f->weights,
                           .shared = at(f, f->p->s3),
                           .y = f->args->y};
  return hm_moe_combine_run(&f->x, &f->l->kernels.combine, &a, f->l->shared_fused);
}

typedef hm_status (*hm_moe_stage_fn)(hm_moe_fwd *f);

static const hm_moe_stage_fn stages[HM_MOE_STAGE_COUNT] = {
    stage_router, stage_align, stage_permute, stage_gemm1,
    stage_act,    stage_gemm2, stage_shared,  stage_combine,
};

static hm_status check_args(const hm_moe_layer *l, const hm_moe_forward_args *a) {
  HM_CHECK_NOT_NULL(a);
  if (a->tokens < 0)
    HM_FAIL(HM_INVALID_ARGUMENT, "MoE forward tokens = %lld is negative", (long long)a->tokens);
  if (!l->transformed) HM_FAIL(HM_NOT_READY, "MoE forward before hm_moe_layer_transform");
  if (a->tokens == 0) return HM_OK;
  HM_CHECK_NOT_NULL(a->x);
  HM_CHECK_NOT_NULL(a->y);
  if (a->topk_ids != NULL && a->topk_weights == NULL)
    HM_FAIL(HM_INVALID_ARGUMENT, "MoE forward: topk_ids given without topk_weights");
  if (a->topk_ids == NULL && a->router_logits == NULL)
    HM_FAIL(HM_INVALID_ARGUMENT, "MoE forward needs router_logits or topk_ids and topk_weights");
  return HM_OK;
}

/*
 * Shared experts on the side stream: they start once x is in the activation type and
 * the combine waits for them. Launches still count into the forward's total.
 */
static hm_status fork_shared(hm_moe_fwd *f) {
  hm_engine *e = f->l->engine;
  hm_stream *main_stream = f->x.stream;
  HM_CHECK(e->ops->stream_wait(e, f->l->side->native, hm_stream_native(main_stream)));
  f->x.stream = f->l->side;
  hm_status ret = stage_shared(f);
  f->x.stream = main_stream;
  return ret;
}

static hm_status join_shared(hm_moe_fwd *f) {
  hm_engine *e = f->l->engine;
  return e->ops->stream_wait(e, hm_stream_native(f->x.stream), f->l->side->native);
}

/* Records the event that opens stage s (s = COUNT: the end), when profiling. */
static hm_status mark(hm_moe_layer *l, int s, hm_stream *stream) {
  return l->profiling ? hm_event_record(l->events[s], stream) : HM_OK;
}

static hm_status prepare(hm_moe_layer *l, int64_t tokens, hm_stream *stream, hm_moe_plan *plan) {
  hm_moe_layout layout;
  HM_CHECK(hm_moe_choose_layout(l, tokens, &layout));
  if (layout != l->last_layout)
    HM_INFO(MOE,
            "MoE layout %s from T = %lld (config %s; auto: masked up to HUMMING_MOE_MASKED_MAX_TOKENS, "
            "contiguous from HUMMING_MOE_CONTIGUOUS_MIN_TOKENS, indexed between)",
            hm_moe_layout_name(layout), (long long)tokens, hm_moe_layout_name(l->cfg.layout));
  l->last_layout = layout;
  HM_CHECK(hm_moe_plan_make(l, layout, tokens, plan));
  return hm_moe_workspace_ensure(l, plan->bytes, stream);
}

hm_status hm_moe_layer_forward(hm_moe_layer *l, const hm_moe_forward_args *args, hm_stream *stream) {
  HM_CHECK_NOT_NULL(l);
  HM_CHECK(check_args(l, args));
  l->stats = (hm_moe_stats){.layout = HM_MOE_LAYOUT_AUTO, .tokens = args->tokens};
  if (args->tokens == 0) return HM_OK;
  hm_moe_plan plan;
  HM_CHECK(prepare(l, args->tokens, stream, &plan));
  hm_moe_fwd f = {.l = l, .x = {.engine = l->engine, .stream = stream}, .p = &plan, .args = args};
  /* Profiling keeps the stages in sequence, so that each one's time is its own. */
  bool overlap = l->side != NULL && !l->profiling;
  for (int s = 0; s < HM_MOE_STAGE_COUNT; s++) {
    if (overlap && s == HM_MOE_STAGE_SHARED) continue;
    if (overlap && s == HM_MOE_STAGE_COMBINE) HM_CHECK(join_shared(&f));
    HM_CHECK(mark(l, s, stream));
    HM_CHECK(stages[s](&f));
    if (overlap && s == HM_MOE_STAGE_PERMUTE) HM_CHECK(fork_shared(&f));
  }
  HM_CHECK(mark(l, HM_MOE_STAGE_COUNT, stream));
  l->stats.layout = plan.layout;
  l->stats.launches = f.x.launches;
  l->stats.timed = l->profiling;
  return HM_OK;
}

hm_status hm_moe_layer_reserve(hm_moe_layer *l, int64_t max_tokens, hm_stream *stream) {
  HM_CHECK_NOT_NULL(l);
  if (max_tokens < 1) HM_FAIL(HM_INVALID_ARGUMENT, "MoE reserve of %lld tokens", (long long)max_tokens);
  /* Within a layout the sizes grow with T, so the largest T of each of auto's ranges up to
   * max_tokens bounds them all. */
  int64_t masked_max = hm_param_moe_masked_max_tokens(),
          indexed_max = hm_param_moe_contiguous_min_tokens() - 1;
  int64_t probes[3] = {max_tokens, masked_max < max_tokens ? masked_max : max_tokens,
                       indexed_max < max_tokens ? indexed_max : max_tokens};
  size_t bytes = 0;
  for (int i = 0; i < 3; i++) {
    if (probes[i] < 1) continue;
    hm_moe_layout layout;
    hm_moe_plan plan;
    HM_CHECK(hm_moe_choose_layout(l, probes[i], &layout));
    HM_CHECK(hm_moe_plan_make(l, layout, probes[i], &plan));
    if (plan.bytes > bytes) bytes = plan.bytes;
  }
  return hm_moe_workspace_ensure(l, bytes, stream);
}

/* Every kernel a forward may launch, so that the first forward compiles nothing. */
hm_status hm_moe_compile_kernels(hm_moe_layer *l) {
  const hm_moe_config *c = &l->cfg;
  hm_moe_exec x = {.engine = l->engine};
  hm_moe_kernels *k = &l->kernels;
  hm_kernel *kernel = NULL;
  int64_t experts = c->router.experts + l->shared_fused;
  HM_CHECK(hm_moe_route_kernel(&x, &k->router, &c->router, &kernel));
  HM_CHECK(hm_moe_align_kernels_get(&x, &k->align, experts));
  if (hm_moe_front_fits(experts, c->router.top_k))
    HM_CHECK(hm_moe_front_kernel(&x, &k->front, &c->router, experts, &kernel));
  HM_CHECK(hm_moe_permute_kernel(&x, &k->permute, &kernel));
  hm_moe_act_args a = {
      .fn = HM_ACT_FN_IDENTITY, .width = c->hidden, .out_type = c->scheme.act, .scale = c->scheme.act_scale};
  if (c->scheme.act != HM_BF16) HM_CHECK(hm_moe_act_kernel(&x, &k->convert_x, &a, &kernel));
  a.fn = hm_moe_act_fn_of(c->activation);
  a.width = c->intermediate;
  HM_CHECK(hm_moe_act_kernel(&x, &k->act, &a, &kernel));
  a.width = l->shared_width;
  if (l->shared_gate_up != NULL) HM_CHECK(hm_moe_act_kernel(&x, &k->shared_act, &a, &kernel));
  return hm_moe_combine_kernel(&x, &k->combine, c->hidden, c->router.top_k, l->shared_gate_up != NULL,
                               l->shared_fused, &kernel);
}
