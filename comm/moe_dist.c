/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The expert/tensor-parallel MoE layer: this rank's shard of the routed experts as an
 * hm_moe_layer (its EP group's experts, its TP slice of the intermediate dimension),
 * the shared experts whole (they run on each token's own rank), and one forward: route
 * at home, dispatch, the shard's FFN on the dispatched rows, TP reduce and return in
 * combine, then the weighted sum with the shared experts' output at home.
 */
#include <stdlib.h>
#include <string.h>

#include "moe_dist.h"

/* The shard's own router is never run (ids come from the home rank); it only has to be valid. */
static hm_moe_router_config idle_router(int64_t experts) {
  hm_moe_router_config r = HM_MOE_ROUTER_CONFIG_INIT;
  r.experts = experts;
  r.top_k = 1;
  return r;
}

static hm_status check_against_comm(const hm_moe_dist *d, const hm_moe_config *m) {
  const hm_comm_config *cc = &d->comm->cfg;
  int rank = d->plan.rank;
  if (m->magic != HM_MOE_CONFIG_MAGIC || m->size < sizeof(hm_moe_config))
    HM_FAIL(HM_INVALID_ARGUMENT, "rank %d: MoE config not initialized with HM_MOE_CONFIG_INIT", rank);
  const struct {
    const char *name;
    int64_t layer, comm;
  } same[] = {{"experts", m->router.experts, cc->experts},
              {"hidden", m->hidden, cc->hidden},
              {"intermediate", m->intermediate, cc->intermediate},
              {"top_k", m->router.top_k, cc->top_k}};
  for (size_t i = 0; i < sizeof(same) / sizeof(same[0]); i++)
    if (same[i].layer != same[i].comm)
      HM_FAIL(HM_INVALID_ARGUMENT, "rank %d: MoE config has %s=%lld, its communicator %s=%lld", rank,
              same[i].name, (long long)same[i].layer, same[i].name, (long long)same[i].comm);
  if (cc->combine_dtype != HM_BF16)
    HM_FAIL(HM_INVALID_ARGUMENT, "rank %d: the MoE layer combines bf16 rows; the communicator has %s", rank,
            hm_dtype_name(cc->combine_dtype));
  if (cc->payload == HM_COMM_PAYLOAD_FP8 &&
      (m->scheme.act != HM_F8E4M3 || m->scheme.act_scale != HM_ACT_SCALE_GROUP128))
    HM_FAIL(HM_INVALID_ARGUMENT,
            "rank %d: an fp8 payload feeds the experts as is, so the scheme needs f8e4m3 activations with "
            "1x128 scales, not %s",
            rank, hm_dtype_name(m->scheme.act));
  return HM_OK;
}

static hm_status make_layers(hm_moe_dist *d) {
  hm_moe_config shard = d->cfg;
  shard.router = idle_router(d->plan.local_experts);
  shard.intermediate = d->plan.local_intermediate;
  shard.shared_experts = shard.shared_intermediate = 0;
  HM_CHECK(hm_moe_layer_create(d->engine, &shard, &d->shard));
  if (d->cfg.shared_experts == 0) return HM_OK;
  int64_t per = d->cfg.shared_intermediate > 0 ? d->cfg.shared_intermediate : d->cfg.intermediate;
  hm_moe_config shared = d->cfg;
  shared.router = idle_router(1);
  shared.intermediate = d->cfg.shared_experts * per;
  shared.shared_experts = shared.shared_intermediate = 0;
  return hm_moe_layer_create(d->engine, &shared, &d->shared);
}

/* Routing buffers, and the shared layer's fixed routing: expert 0 with weight 1 for every token. */
static hm_status make_buffers(hm_moe_dist *d) {
  size_t t = (size_t)d->comm->cfg.max_tokens, k = (size_t)d->cfg.router.top_k;
  HM_CHECK(hm_mem_alloc(d->engine, t * k * sizeof(int32_t), (void **)&d->ids));
  HM_CHECK(hm_mem_alloc(d->engine, t * k * sizeof(float), (void **)&d->weights));
  if (d->cfg.router.correction_bias)
    HM_CHECK(
        hm_mem_alloc(d->engine, (size_t)d->cfg.router.experts * sizeof(float), (void **)&d->router_bias));
  if (d->shared == NULL) return HM_OK;
  HM_CHECK(hm_mem_alloc(d->engine, t * (size_t)d->cfg.hidden * 2, &d->shared_out));
  HM_CHECK(hm_mem_alloc(d->engine, t * sizeof(int32_t), (void **)&d->zeros));
  HM_CHECK(hm_mem_alloc(d->engine, t * sizeof(float), (void **)&d->ones));
  float *ones = malloc(t * sizeof(float));
  if (ones == NULL) HM_FAIL(HM_OUT_OF_MEMORY, "%zu shared expert weights", t);
  for (size_t i = 0; i < t; i++) ones[i] = 1.0f;
  hm_status ret = hm_engine_memset(d->engine, d->zeros, 0, t * sizeof(int32_t), NULL);
  if (ret == HM_OK) ret = hm_mem_upload(d->engine, d->ones, ones, t * sizeof(float));
  free(ones);
  return ret;
}

/* Everything a rank can get wrong alone; the agreement then tells every rank. */
static hm_status build_local(hm_moe_dist *d, const hm_moe_config *config) {
  HM_CHECK_NOT_NULL(config);
  HM_CHECK(check_against_comm(d, config));
  d->cfg = *config;
  HM_CHECK(make_layers(d));
  HM_CHECK(make_buffers(d));
  return hm_comm_batch_create(d->comm, &d->batch);
}

hm_status hm_moe_dist_create(hm_engine *engine, hm_comm *comm, const hm_moe_config *config,
                             hm_moe_dist **out) {
  HM_CHECK_NOT_NULL(out);
  *out = NULL;
  HM_CHECK_NOT_NULL(engine);
  HM_CHECK(hm_comm_check_usable(comm));
  if (comm->engine != engine)
    HM_FAIL(HM_INVALID_ARGUMENT, "rank %d: the MoE layer's engine is not its communicator's",
            comm->plan.rank);
  hm_moe_dist *d = calloc(1, sizeof(*d));
  if (d == NULL) HM_FAIL(HM_OUT_OF_MEMORY, "distributed MoE layer");
  d->engine = engine;
  d->comm = comm;
  d->plan = comm->plan;
  char error[256] = "";
  hm_status local = build_local(d, config);
  if (local != HM_OK) hm_comm_last_message(local, error, sizeof(error));
  hm_status ret = hm_moe_dist_agree(comm, config, local, error);
  if (ret != HM_OK) {
    hm_moe_dist_destroy(d);
    return ret;
  }
  HM_INFO(COMM, "rank %d: MoE shard experts [%lld, %lld) intermediate [%lld, %lld)%s", d->plan.rank,
          (long long)d->plan.first_expert, (long long)(d->plan.first_expert + d->plan.local_experts),
          (long long)d->plan.first_intermediate,
          (long long)(d->plan.first_intermediate + d->plan.local_intermediate),
          d->shared ? ", shared experts whole" : "");
  *out = d;
  return HM_OK;
}

void hm_moe_dist_destroy(hm_moe_dist *d) {
  if (d == NULL) return;
  hm_comm_batch_destroy(d->batch);
  hm_moe_layer_destroy(d->shard);
  hm_moe_layer_destroy(d->shared);
  hm_engine *e = d->engine;
  hm_mem_free(e, d->router_bias);
  hm_mem_free(e, d->ids);
  hm_mem_free(e, d->weights);
  hm_mem_free(e, d->zeros);
  hm_mem_free(e, d->ones);
  hm_mem_free(e, d->shared_out);
  free(d);
}

/* RELU2's gate_up is not gated: its slice is one run of rows, not a gate run and an up run. */
static hm_status shard_gate_up(const hm_moe_dist *d, const float *full, float *local) {
  if (d->cfg.activation != HM_MOE_ACT_RELU2)
    return hm_comm_shard_gate_up(&d->plan, d->cfg.hidden, full, local);
  const hm_comm_plan *p = &d->plan;
  int64_t h = d->cfg.hidden, li = p->local_intermediate;
  for (int64_t j = 0; j < p->local_experts; j++)
    memcpy(local + j * li * h, full + ((p->first_expert + j) * p->intermediate + p->first_intermediate) * h,
           (size_t)(li * h) * sizeof(float));
  return HM_OK;
}

hm_status hm_moe_dist_quantize(hm_moe_dist *d, const float *gate_up, const float *down) {
  HM_CHECK_NOT_NULL(d);
  HM_CHECK_NOT_NULL(gate_up);
  HM_CHECK_NOT_NULL(down);
  const hm_comm_plan *p = &d->plan;
  int64_t rows = d->cfg.activation == HM_MOE_ACT_RELU2 ? 1 : 2;
  size_t gu = (size_t)(p->local_experts * rows * p->local_intermediate * d->cfg.hidden);
  size_t dn = (size_t)(p->local_experts * d->cfg.hidden * p->local_intermediate);
  float *local_gu = malloc(gu * sizeof(float)), *local_dn = malloc(dn * sizeof(float));
  hm_status ret = HM_OK;
  if (local_gu == NULL || local_dn == NULL)
    HM_FAIL_GOTO(HM_OUT_OF_MEMORY, done, "rank %d: f32 shard of %zu weights", p->rank, gu + dn);
  HM_CHECK_GOTO(shard_gate_up(d, gate_up, local_gu), done);
  HM_CHECK_GOTO(hm_comm_shard_down(p, d->cfg.hidden, down, local_dn), done);
  HM_CHECK_GOTO(hm_moe_layer_quantize(d->shard, local_gu, local_dn), done);
done:
  free(local_gu);
  free(local_dn);
  return ret;
}

hm_status hm_moe_dist_load_shard(hm_moe_dist *d, const hm_weights_view *gate_up,
                                 const hm_weights_view *down) {
  HM_CHECK_NOT_NULL(d);
  return hm_moe_layer_load(d->shard, gate_up, down);
}

static hm_status check_shared(const hm_moe_dist *d) {
  if (d->shared == NULL)
    HM_FAIL(HM_INVALID_ARGUMENT, "rank %d: shared expert weights given to a layer without shared experts",
            d->plan.rank);
  return HM_OK;
}

hm_status hm_moe_dist_quantize_shared(hm_moe_dist *d, const float *gate_up, const float *down) {
  HM_CHECK_NOT_NULL(d);
  HM_CHECK(check_shared(d));
  return hm_moe_layer_quantize(d->shared, gate_up, down);
}

hm_status hm_moe_dist_load_shared(hm_moe_dist *d, const hm_weights_view *gate_up,
                                  const hm_weights_view *down) {
  HM_CHECK_NOT_NULL(d);
  HM_CHECK(check_shared(d));
  return hm_moe_layer_load(d->shared, gate_up, down);
}

hm_status hm_moe_dist_set_router_bias(hm_moe_dist *d, const float *bias) {
  HM_CHECK_NOT_NULL(d);
  HM_CHECK_NOT_NULL(bias);
  if (!d->cfg.router.correction_bias)
    HM_FAIL(HM_INVALID_ARGUMENT,
            "rank %d: a router bias was given to a layer whose router has no correction_bias", d->plan.rank);
  HM_CHECK(hm_mem_upload(d->engine, d->router_bias, bias, (size_t)d->cfg.router.experts * sizeof(float)));
  d->bias_set = true;
  return HM_OK;
}

hm_status hm_moe_dist_transform(hm_moe_dist *d, hm_stream *stream) {
  HM_CHECK_NOT_NULL(d);
  if (d->cfg.router.correction_bias && !d->bias_set)
    HM_FAIL(HM_NOT_READY, "rank %d: MoE transform before the router's correction bias was set", d->plan.rank);
  if (d->shared) HM_CHECK(hm_moe_layer_transform(d->shared, stream));
  return hm_moe_layer_transform(d->shard, stream);
}
