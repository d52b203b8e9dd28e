/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The communicator's configuration: defaults resolved, checked on each rank, then
 * compared across ranks. A rank's own check is not reported alone: its result travels
 * with its config, so every rank fails together, naming the rank at fault, instead of
 * the bad one failing and the others waiting for it until the timeout.
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm.h"
#include "params.h"

struct fingerprint {
  int32_t status;
  int32_t backend;
  int32_t ep, tp, top_k, payload, combine_dtype, layout, block_m, timeout_s;
  int64_t experts, hidden, intermediate, max_tokens, max_m;
  char error[256];
};

/* Fields every rank must agree on, with the names the messages use. */
#define HM_FINGERPRINT_FIELDS(X) \
  X(backend, "backend")          \
  HM_FINGERPRINT_CONFIG(X)

/* Those copied from the resolved config. */
#define HM_FINGERPRINT_CONFIG(X)    \
  X(ep, "ep")                       \
  X(tp, "tp")                       \
  X(experts, "experts")             \
  X(hidden, "hidden")               \
  X(intermediate, "intermediate")   \
  X(top_k, "top_k")                 \
  X(max_tokens, "max_tokens")       \
  X(payload, "payload")             \
  X(combine_dtype, "combine_dtype") \
  X(layout, "layout")               \
  X(block_m, "block_m")             \
  X(max_m, "max_m")                 \
  X(timeout_s, "timeout_s")

static hm_status resolve_sizes(hm_comm_config *cfg, int world) {
  if (cfg->ep < 0 || cfg->tp < 0)
    HM_FAIL(HM_INVALID_ARGUMENT, "EP %d and TP %d must not be negative", cfg->ep, cfg->tp);
  if (cfg->ep == 0 && cfg->tp == 0) cfg->tp = 1;
  if (cfg->ep == 0) {
    if (world % cfg->tp)
      HM_FAIL(HM_INVALID_ARGUMENT, "world size %d is not divisible by TP %d", world, cfg->tp);
    cfg->ep = world / cfg->tp;
  }
  if (cfg->tp == 0) {
    if (world % cfg->ep)
      HM_FAIL(HM_INVALID_ARGUMENT, "world size %d is not divisible by EP %d", world, cfg->ep);
    cfg->tp = world / cfg->ep;
  }
  if ((int64_t)cfg->ep * cfg->tp != world)
    HM_FAIL(HM_INVALID_ARGUMENT, "EP %d x TP %d = %d, but the world has %d ranks", cfg->ep, cfg->tp,
            cfg->ep * cfg->tp, world);
  return HM_OK;
}

static hm_status check_shape(const hm_comm_config *cfg) {
  if (cfg->experts <= 0 || cfg->experts % cfg->ep)
    HM_FAIL(HM_INVALID_ARGUMENT, "experts %lld is not divisible by EP %d", (long long)cfg->experts, cfg->ep);
  if (cfg->hidden <= 0 || cfg->hidden % 128)
    HM_FAIL(HM_INVALID_ARGUMENT, "hidden %lld is not a positive multiple of 128", (long long)cfg->hidden);
  if (cfg->intermediate < 0 || cfg->intermediate % cfg->tp)
    HM_FAIL(HM_INVALID_ARGUMENT, "intermediate %lld is not divisible by TP %d", (long long)cfg->intermediate,
            cfg->tp);
  if (cfg->top_k < 1 || cfg->top_k > cfg->experts)
    HM_FAIL(HM_INVALID_ARGUMENT, "top_k %d is not in [1, experts %lld]", cfg->top_k, (long long)cfg->experts);
  if (cfg->max_tokens < 1)
    HM_FAIL(HM_INVALID_ARGUMENT, "max_tokens %lld must be positive", (long long)cfg->max_tokens);
  return HM_OK;
}

static hm_status check_formats(hm_comm_config *cfg, int world) {
  if (cfg->payload != HM_COMM_PAYLOAD_BF16 && cfg->payload != HM_COMM_PAYLOAD_FP8)
    HM_FAIL(HM_INVALID_ARGUMENT, "unknown payload %d", (int)cfg->payload);
  if (cfg->combine_dtype != HM_BF16 && cfg->combine_dtype != HM_F32)
    HM_FAIL(HM_INVALID_ARGUMENT, "combine_dtype %s: expected bf16 or f32", hm_dtype_name(cfg->combine_dtype));
  if (cfg->layout != HM_COMM_LAYOUT_CONTIGUOUS && cfg->layout != HM_COMM_LAYOUT_MASKED)
    HM_FAIL(HM_INVALID_ARGUMENT, "unknown layout %d", (int)cfg->layout);
  if (cfg->block_m < 0 || cfg->max_m < 0)
    HM_FAIL(HM_INVALID_ARGUMENT, "block_m %d and max_m %lld must not be negative", cfg->block_m,
            (long long)cfg->max_m);
  if (cfg->block_m == 0) cfg->block_m = 1;
  if (cfg->max_m == 0) cfg->max_m = world * cfg->max_tokens;
  /* Offsets and row indices are int32 on the device, as the GEMM metadata is. */
  int64_t worst = (int64_t)world * cfg->max_tokens * cfg->top_k + cfg->experts * (cfg->block_m + cfg->max_m);
  if (worst > INT32_MAX)
    HM_FAIL(HM_INVALID_ARGUMENT, "world %d x max_tokens %lld x top_k %d rows overflow 32-bit row indices",
            world, (long long)cfg->max_tokens, cfg->top_k);
  return HM_OK;
}

static void fill_plan(hm_comm *c, int rank) {
  const hm_comm_config *cfg = &c->cfg;
  hm_comm_plan *p = &c->plan;
  p->ep = cfg->ep;
  p->tp = cfg->tp;
  p->ep_rank = rank / cfg->tp;
  p->tp_rank = rank % cfg->tp;
  p->experts = cfg->experts;
  p->local_experts = cfg->experts / cfg->ep;
  p->first_expert = p->ep_rank * p->local_experts;
  p->intermediate = cfg->intermediate;
  p->local_intermediate = cfg->intermediate / cfg->tp;
  p->first_intermediate = p->tp_rank * p->local_intermediate;
}

hm_status hm_comm_config_resolve(hm_comm *c, const hm_comm_config *in, int world, int rank) {
  c->plan.rank = rank;
  c->plan.world = world;
  c->plan.ep = c->plan.tp = 1;
  c->cfg.timeout_s = (int)hm_param_comm_timeout();
  if (in->magic != HM_COMM_CONFIG_MAGIC || in->size < sizeof(hm_comm_config))
    HM_FAIL(HM_INVALID_ARGUMENT, "comm config not initialized with HM_COMM_CONFIG_INIT");
  c->cfg = *in;
  c->cfg.topology = NULL; /* not kept: the caller's string may not outlive create */
  if (c->cfg.timeout_s <= 0) c->cfg.timeout_s = (int)hm_param_comm_timeout();
  HM_CHECK(resolve_sizes(&c->cfg, world));
  HM_CHECK(check_shape(&c->cfg));
  HM_CHECK(check_formats(&c->cfg, world));
  fill_plan(c, rank);
  return HM_OK;
}

static void fingerprint_of(const hm_comm *c, hm_status local, const char *local_error,
                           struct fingerprint *f) {
  memset(f, 0, sizeof(*f));
  f->status = (int32_t)local;
  f->backend = (int32_t)c->engine->kind;
#define HM_FP_COPY_(field, name) f->field = c->cfg.field;
  HM_FINGERPRINT_CONFIG(HM_FP_COPY_)
#undef HM_FP_COPY_
  if (local != HM_OK) snprintf(f->error, sizeof(f->error), "%s", local_error);
}

/* The first rank whose local check failed, reported the same way on every rank. */
static hm_status report_failed_rank(const hm_comm *c, const struct fingerprint *all) {
  int world = c->plan.world, failed = 0, first = -1;
  for (int r = 0; r < world; r++) {
    if (all[r].status == HM_OK) continue;
    failed++;
    if (first < 0) first = r;
  }
  if (first < 0) return HM_OK;
  hm_status mine = (hm_status)all[c->plan.rank].status;
  hm_status st = mine != HM_OK ? mine : HM_REMOTE;
  HM_FAIL(st, "rank %d (and %d more) failed the comm config check: %s", first, failed - 1, all[first].error);
}

static hm_status report_mismatch(const hm_comm *c, const struct fingerprint *all) {
  for (int r = 1; r < c->plan.world; r++) {
#define HM_FP_CMP_(field, name)                                                                            \
  if (all[r].field != all[0].field)                                                                        \
    HM_FAIL(HM_INVALID_ARGUMENT, "comm config mismatch: rank %d has %s=%lld, rank 0 has %s=%lld", r, name, \
            (long long)all[r].field, name, (long long)all[0].field);
    HM_FINGERPRINT_FIELDS(HM_FP_CMP_)
#undef HM_FP_CMP_
  }
  return HM_OK;
}

hm_status hm_comm_config_agree(hm_comm *c, hm_transport *t, hm_status local, const char *local_error) {
  struct fingerprint mine;
  fingerprint_of(c, local, local_error, &mine);
  struct fingerprint *all = calloc((size_t)c->plan.world, sizeof(*all));
  if (all == NULL) HM_FAIL(HM_OUT_OF_MEMORY, "config check of %d ranks", c->plan.world);
  hm_status ret = hm_comm_allgather_host(c, t, &mine, all, sizeof(mine), NULL, "comm config check");
  if (ret == HM_OK) ret = report_failed_rank(c, all);
  if (ret == HM_OK) ret = report_mismatch(c, all);
  free(all);
  return ret;
}
