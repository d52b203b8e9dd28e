/* SPDX-License-Identifier: Apache-2.0 */
/*
 * One forward of the distributed MoE layer, collective over the communicator: route at
 * home (or take the caller's ids), dispatch, the shard's expert FFN on the dispatched
 * rows, the shared experts at home, TP reduce and return in combine, and the weighted
 * sum at home with the same combine the single-rank layer runs, so that without TP a
 * token's output has the same bits as there.
 */
#include "moe_dist.h"

static hm_status check_args(const hm_moe_dist *d, const hm_moe_forward_args *a) {
  HM_CHECK_NOT_NULL(a);
  int64_t max = d->comm->cfg.max_tokens;
  if (a->tokens < 0 || a->tokens > max)
    HM_FAIL(HM_INVALID_ARGUMENT, "rank %d: MoE forward of %lld tokens, expected 0..max_tokens %lld",
            d->plan.rank, (long long)a->tokens, (long long)max);
  if (a->tokens == 0) return HM_OK;
  HM_CHECK_NOT_NULL(a->x);
  HM_CHECK_NOT_NULL(a->y);
  if (a->topk_ids != NULL && a->topk_weights == NULL)
    HM_FAIL(HM_INVALID_ARGUMENT, "rank %d: MoE forward: topk_ids given without topk_weights", d->plan.rank);
  if (a->topk_ids == NULL && a->router_logits == NULL)
    HM_FAIL(HM_INVALID_ARGUMENT, "rank %d: MoE forward needs router_logits or topk_ids and topk_weights",
            d->plan.rank);
  return HM_OK;
}

static hm_status route(hm_moe_dist *d, const hm_moe_forward_args *a, hm_comm_tokens *t, hm_stream *stream) {
  *t = (hm_comm_tokens){a->tokens, a->x, a->topk_ids, a->topk_weights};
  if (a->topk_ids != NULL || a->tokens == 0) return HM_OK;
  t->topk_ids = d->ids;
  t->topk_weights = d->weights;
  return hm_moe_route(d->engine, &d->cfg.router, a->tokens, a->router_logits, d->router_bias, d->ids,
                      d->weights, stream);
}

static hm_status experts(hm_moe_dist *d, const hm_comm_expert_batch *eb, hm_stream *stream) {
  hm_moe_grouped_args g = {
      .layout = eb->layout == HM_COMM_LAYOUT_MASKED ? HM_MOE_LAYOUT_MASKED : HM_MOE_LAYOUT_CONTIGUOUS,
      .rows = eb->rows,
      .max_m = eb->max_m,
      .x_dtype = eb->x_dtype,
      .x = eb->x,
      .x_scale = eb->x_scale,
      .expert_offsets = eb->expert_offsets,
      .expert_counts = eb->expert_counts,
      .valid_rows = eb->valid_rows,
      .row_list = eb->row_list,
      .y = eb->y,
  };
  return hm_moe_layer_forward_grouped(d->shard, &g, stream);
}

/* Queued after the dispatch, so that the dispatch's wait for the routing does not wait for it too. */
static hm_status shared_experts(hm_moe_dist *d, const hm_moe_forward_args *a, hm_stream *stream) {
  if (d->shared == NULL || a->tokens == 0) return HM_OK;
  hm_moe_forward_args s = {
      .tokens = a->tokens, .x = a->x, .topk_ids = d->zeros, .topk_weights = d->ones, .y = d->shared_out};
  return hm_moe_layer_forward(d->shared, &s, stream);
}

hm_status hm_moe_dist_forward(hm_moe_dist *d, const hm_moe_forward_args *args, hm_stream *stream) {
  HM_CHECK_NOT_NULL(d);
  HM_CHECK(hm_comm_check_usable(d->comm));
  HM_CHECK(check_args(d, args));
  hm_comm_tokens tokens;
  HM_CHECK(route(d, args, &tokens, stream));
  hm_comm_expert_batch eb;
  HM_CHECK(hm_comm_dispatch(d->batch, &tokens, stream, &eb));
  HM_CHECK(experts(d, &eb, stream));
  HM_CHECK(shared_experts(d, args, stream));
  const void *rows = NULL;
  const int32_t *pos = NULL;
  HM_CHECK(hm_comm_combine_rows(d->batch, stream, &rows, &pos));
  hm_moe_combine_args c = {.tokens = args->tokens,
                           .hidden = d->cfg.hidden,
                           .top_k = d->cfg.router.top_k,
                           .expert_out = rows,
                           .row_of = pos,
                           .topk_weights = tokens.topk_weights,
                           .shared = d->shared ? d->shared_out : NULL,
                           .y = args->y};
  return hm_moe_combine(d->engine, &c, stream);
}
