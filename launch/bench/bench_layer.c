/* SPDX-License-Identifier: Apache-2.0 */
/*
 * layer mode: one whole MoE layer (router from logits, alignment, activation
 * quantization, both expert GEMMs, shared experts, combine) per M, in the scheme under
 * test and in bf16, each checked against the same layer on the host backend, timed,
 * then run once more with per-stage profiling for the breakdown kept in the JSON.
 * Under mpirun with --ep x --tp = ranks, the layer is sharded (hm_moe_dist): M tokens
 * on every rank, dispatch and combine included, the slowest rank's time reported.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench.h"
#include "bench/bench_align.h"
#include "bench/bench_layer.h"
#include "bench/bench_moe.h"
#include "bench/bench_moe_dist.h"
#include "bench/bench_torch.h"
#include "check.h"
#include "cuda_driver.h"

enum {
  COL_M,
  COL_TIME,
  COL_SPREAD,
  COL_GBS,
  COL_TFLOPS,
  COL_ROOF,
  COL_BF16,
  COL_VS_BF16,
  COL_TORCH,
  COL_VS_TORCH,
  COL_WRONG,
  COL_LAYOUT,
  COL_MIN,
  COL_MAX,
  COL_BYTES,
  COL_FLOPS,
  COL_ACTIVE,
  COL_GRAPH,
  COL_LAUNCHES,
  COL_STAGE0,
  COL_COUNT = COL_STAGE0 + HM_MOE_STAGE_COUNT
};

static hm_col layer_cols[COL_COUNT] = {
    [COL_M] = {"M", 8, 0, HM_COL_INT},
    [COL_TIME] = {"time_us", 10, 2, HM_COL_REAL},
    [COL_SPREAD] = {"spread%", 7, 1, HM_COL_REAL},
    [COL_GBS] = {"GB/s", 8, 1, HM_COL_REAL},
    [COL_TFLOPS] = {"TFLOP/s", 8, 2, HM_COL_REAL},
    [COL_ROOF] = {"%roof", 6, 1, HM_COL_REAL},
    [COL_BF16] = {"bf16_us", 10, 2, HM_COL_REAL},
    [COL_VS_BF16] = {"vs_bf16", 7, 2, HM_COL_RATIO},
    [COL_TORCH] = {"torch_us", 0, 2, HM_COL_REAL},
    [COL_VS_TORCH] = {"vs_torch", 0, 2, HM_COL_RATIO},
    [COL_WRONG] = {"#wrong", 7, 0, HM_COL_INT},
    [COL_LAYOUT] = {"layout", 10, 0, HM_COL_TEXT},
    [COL_MIN] = {"min_us", 0, 2, HM_COL_REAL},
    [COL_MAX] = {"max_us", 0, 2, HM_COL_REAL},
    [COL_BYTES] = {"bytes", 0, 0, HM_COL_INT},
    [COL_FLOPS] = {"flops", 0, 0, HM_COL_INT},
    [COL_ACTIVE] = {"active_experts", 0, 0, HM_COL_INT},
    [COL_GRAPH] = {"graph", 0, 0, HM_COL_INT},
    [COL_LAUNCHES] = {"launches", 0, 0, HM_COL_INT},
    [COL_STAGE0 + HM_MOE_STAGE_ROUTER] = {"router_us", 0, 2, HM_COL_REAL},
    [COL_STAGE0 + HM_MOE_STAGE_ALIGN] = {"align_us", 0, 2, HM_COL_REAL},
    [COL_STAGE0 + HM_MOE_STAGE_PERMUTE] = {"permute_us", 0, 2, HM_COL_REAL},
    [COL_STAGE0 + HM_MOE_STAGE_GEMM1] = {"gemm1_us", 0, 2, HM_COL_REAL},
    [COL_STAGE0 + HM_MOE_STAGE_ACT] = {"act_us", 0, 2, HM_COL_REAL},
    [COL_STAGE0 + HM_MOE_STAGE_GEMM2] = {"gemm2_us", 0, 2, HM_COL_REAL},
    [COL_STAGE0 + HM_MOE_STAGE_SHARED] = {"shared_us", 0, 2, HM_COL_REAL},
    [COL_STAGE0 + HM_MOE_STAGE_COMBINE] = {"combine_us", 0, 2, HM_COL_REAL},
};

/* One scheme: the layer on the device and, for the check, the same weights on the host. */
struct layer_variant {
  hm_moe_config config;
  hm_bench_moe moe;
  hm_comm *comm; /* the sharded layer's */
  hm_moe_layer *ref;
  float *router_bias; /* to count the experts a batch activates */
};

struct layer_bench {
  hm_bench *b;
  struct layer_variant v[2]; /* the scheme under test, then bf16 */
  int count;
  double *torch_us;
  double log_vs_bf16; /* sum over sizes, for the geometric mean in the footer */
  int ratios;
};

/* The timed body: one forward. */
struct layer_run {
  const hm_bench_moe *moe;
  hm_moe_forward_args args;
};

static hm_status layer_forward(void *ctx, hm_stream *stream) {
  struct layer_run *r = ctx;
  return hm_bench_moe_forward(r->moe, &r->args, stream);
}

/* This rank's shard, the whole layer on the host for the check when it is small, the bias to count experts.
 */
static hm_status dist_variant_make(hm_bench *b, uint64_t seed, int64_t max_tokens, struct layer_variant *v) {
  HM_CHECK(hm_bench_dist_comm(b, &v->config, max_tokens, &v->comm));
  HM_CHECK(hm_bench_dist_layer(b, v->comm, &v->config, seed, &v->moe));
  if (hm_bench_dist_checkable(b, &v->config))
    HM_CHECK(hm_bench_dist_reference(b, &v->config, seed, hm_bench_layer_sample(b, &v->config, max_tokens),
                                     &v->ref));
  hm_bench_moe_weights w;
  memset(&w, 0, sizeof(w));
  hm_status ret = hm_bench_moe_weights_shared(&v->config, seed, &w);
  v->router_bias = w.router_bias;
  w.router_bias = NULL;
  hm_bench_moe_weights_free(&w);
  return ret;
}

static hm_status variant_make(hm_bench *b, const hm_quant_scheme *scheme, uint64_t seed,
                              struct layer_variant *v) {
  int64_t max_tokens = 1;
  for (int i = 0; i < b->o.m.count; i++)
    if (b->o.m.v[i] > max_tokens) max_tokens = b->o.m.v[i];
  HM_CHECK(hm_bench_moe_config(&b->o, scheme, &v->config));
  if (hm_bench_dist(b)) return dist_variant_make(b, seed, max_tokens, v);
  hm_bench_moe_weights w;
  HM_CHECK(hm_bench_moe_weights_make(&v->config, seed, &w));
  hm_status ret = HM_OK;
  HM_CHECK_GOTO(hm_bench_moe_layer_make(b->engine, b->stream, &v->config, &w, max_tokens, &v->moe.layer),
                done);
  if (b->o.check) {
    int64_t sample = hm_bench_layer_sample(b, &v->config, max_tokens);
    HM_CHECK_GOTO(hm_bench_moe_layer_make(b->host, b->host_stream, &v->config, &w, sample, &v->ref), done);
  }
done:
  v->router_bias = w.router_bias;
  w.router_bias = NULL;
  hm_bench_moe_weights_free(&w);
  return ret;
}

static void variant_free(struct layer_variant *v) {
  hm_bench_moe_destroy(&v->moe);
  hm_comm_destroy(v->comm);
  hm_moe_layer_destroy(v->ref);
  free(v->router_bias);
  memset(v, 0, sizeof(*v));
}

/*
 * Time, and then the stage breakdown and layout of one more forward with profiling on
 * (one GPU's layer: the sharded one waits on the host for its routing, so it is neither
 * captured in a graph nor broken down by stage). #wrong is -1 where nothing was checked.
 */
static hm_status measure(struct layer_bench *lb, int which, const hm_bench_layer_inputs *in, hm_timing *t,
                         hm_moe_stats *stats, int64_t *wrong) {
  hm_bench *b = lb->b;
  struct layer_variant *v = &lb->v[which];
  struct layer_run run = {&v->moe, in->args};
  *wrong = b->o.check && v->ref ? 0 : -1;
  if (*wrong == 0) HM_CHECK(hm_bench_layer_check(b, &v->config, &v->moe, v->ref, in, wrong));
  if (v->moe.dist) {
    bool masked = v->config.layout == HM_MOE_LAYOUT_MASKED;
    *stats = (hm_moe_stats){.layout = masked ? HM_MOE_LAYOUT_MASKED : HM_MOE_LAYOUT_CONTIGUOUS};
    if (*wrong >= 0) *wrong = (int64_t)hm_bench_reduce_sum(b, (double)*wrong);
    return hm_bench_time(b, layer_forward, &run, false, t);
  }
  HM_CHECK(hm_bench_time(b, layer_forward, &run, hm_bench_want_graph(b, in->tokens), t));
  HM_CHECK(hm_moe_layer_set_profiling(v->moe.layer, true));
  hm_status ret = HM_OK;
  HM_CHECK_GOTO(layer_forward(&run, b->stream), done);
  HM_CHECK_GOTO(hm_moe_layer_stats(v->moe.layer, stats), done);
done:
  hm_moe_layer_set_profiling(v->moe.layer, false);
  return ret;
}

static void emit_row(struct layer_bench *lb, const hm_bench_layer_inputs *in, int mi, const hm_timing *t,
                     const hm_timing *bf16, const hm_moe_stats *stats, int64_t wrong) {
  hm_bench *b = lb->b;
  const hm_moe_config *c = &lb->v[0].config;
  double bytes = lb->v[0].moe.dist ? hm_bench_moe_rank_bytes(c, in->tokens, in->active_experts, b->world)
                                   : hm_bench_moe_bytes(c, in->tokens, in->active_experts);
  double flops = hm_bench_moe_flops(c, in->tokens);
  double us = t->median_us, torch = lb->torch_us ? lb->torch_us[mi] : NAN;
  hm_cell cells[COL_COUNT] = {
      [COL_M] = HM_NUM(in->tokens),
      [COL_TIME] = HM_NUM(us),
      [COL_SPREAD] = HM_NUM(t->spread_pct),
      [COL_GBS] = HM_NUM(bytes / us / 1e3),
      [COL_TFLOPS] = HM_NUM(flops / us / 1e6),
      [COL_ROOF] = HM_NUM(hm_bench_roof_pct(b, bytes, flops, hm_bench_act8(&c->scheme), us)),
      [COL_BF16] = bf16 ? HM_NUM(bf16->median_us) : HM_NONE,
      [COL_VS_BF16] = bf16 ? HM_NUM(bf16->median_us / us) : HM_NONE,
      [COL_TORCH] = HM_NUM(torch),
      [COL_VS_TORCH] = HM_NUM(torch / us),
      [COL_WRONG] = wrong >= 0 ? HM_NUM(wrong) : HM_NONE,
      [COL_LAYOUT] = HM_TEXT(hm_moe_layout_name(stats->layout)),
      [COL_MIN] = HM_NUM(t->min_us),
      [COL_MAX] = HM_NUM(t->max_us),
      [COL_BYTES] = HM_NUM(bytes),
      [COL_FLOPS] = HM_NUM(flops),
      [COL_ACTIVE] = HM_NUM(in->active_experts),
      [COL_GRAPH] = HM_NUM(t->graph),
      [COL_LAUNCHES] = stats->launches ? HM_NUM(stats->launches) : HM_NONE,
  };
  for (int s = 0; s < HM_MOE_STAGE_COUNT; s++)
    cells[COL_STAGE0 + s] = stats->timed ? HM_NUM(stats->stage_us[s]) : HM_NONE;
  hm_report_row(b->report, cells);
}

static hm_status layer_one_m(struct layer_bench *lb, int mi, int64_t *wrong_total) {
  hm_bench *b = lb->b;
  hm_bench_layer_inputs in;
  /* Each rank its own tokens (one rank: the seed of the single-GPU run). */
  uint64_t seed = (uint64_t)b->o.seed + 31 * (uint64_t)mi + 7919 * (uint64_t)b->rank;
  HM_CHECK(hm_bench_layer_inputs_make(b, &lb->v[0].config, lb->v[0].router_bias, b->o.m.v[mi], seed, &in));
  hm_status ret = HM_OK;
  hm_timing t[2];
  hm_moe_stats stats[2];
  int64_t wrong[2] = {-1, -1};
  for (int i = 0; i < lb->count; i++) HM_CHECK_GOTO(measure(lb, i, &in, &t[i], &stats[i], &wrong[i]), done);
  bool self = lb->v[0].config.scheme.weight.weight == HM_BF16 && lb->v[0].config.scheme.act == HM_BF16;
  const hm_timing *bf16 = lb->count > 1 ? &t[1] : self ? &t[0] : NULL;
  if (bf16) lb->log_vs_bf16 += log(bf16->median_us / t[0].median_us), lb->ratios++;
  int64_t wrong_sum =
      wrong[0] < 0 && wrong[1] < 0 ? -1 : (wrong[0] > 0 ? wrong[0] : 0) + (wrong[1] > 0 ? wrong[1] : 0);
  if (wrong_sum > 0) *wrong_total += wrong_sum;
  emit_row(lb, &in, mi, &t[0], bf16, &stats[0], wrong_sum);
done:
  hm_bench_layer_inputs_free(b, &in);
  return ret;
}

static hm_status layer_setup(struct layer_bench *lb) {
  hm_bench *b = lb->b;
  HM_CHECK(variant_make(b, &b->o.scheme, (uint64_t)b->o.seed, &lb->v[0]));
  lb->count = 1;
  bool self = b->o.scheme.weight.weight == HM_BF16 && b->o.scheme.act == HM_BF16;
  if (self || strcmp(b->o.baseline_name, "none") == 0) return HM_OK;
  hm_quant_scheme bf16;
  HM_CHECK(hm_quant_scheme_parse("bf16", &bf16));
  lb->count = 2;
  return variant_make(b, &bf16, (uint64_t)b->o.seed + 1, &lb->v[1]);
}

static void layer_header(hm_bench *b, const struct layer_variant *v) {
  const hm_moe_config *c = &v->config;
  if (v->comm) hm_bench_dist_header(b, v->comm, c, v->ref != NULL);
  hm_report_header(b->report,
                   "layer: H=%lld I=%lld E=%lld top_k=%d shared=%lld router=%s layout=%s; M = tokens%s; "
                   "x bf16 and router logits in, y bf16 out%s",
                   (long long)c->hidden, (long long)c->intermediate, (long long)c->router.experts,
                   c->router.top_k, (long long)c->shared_experts, hm_model_router_name(b->o.model.router),
                   hm_moe_layout_name(c->layout), v->comm ? " per rank" : "",
                   hm_bench_moe_act_approximated(&b->o.model) ? "; swiglu-oai timed as silu*up" : "");
}

/*
 * Grouped-masked holds [E, max_m, .] buffers with max_m = T (any expert may receive every
 * token): E x T rows of x, gate_up output, activation and down output. Sizes whose rows
 * would take more than a quarter of the GPU are dropped, and the header says which, rather
 * than failing the whole run on the reservation of the largest one.
 */
static void drop_masked_sizes_that_do_not_fit(hm_bench *b) {
  if (!b->cuda || strcmp(b->o.layout_name, "masked") != 0) return;
  size_t free_bytes = 0, total_bytes = 0;
  if (hm_cu.cuMemGetInfo(&free_bytes, &total_bytes) != CUDA_SUCCESS) return;
  const hm_model_preset *m = &b->o.model;
  double row_bytes = 2.0 * (2.0 * (double)m->hidden + 3.0 * (double)m->moe_intermediate);
  int kept = 0;
  for (int i = 0; i < b->o.m.count; i++) {
    double need = (double)m->experts * (double)b->o.m.v[i] * row_bytes;
    if (need <= (double)total_bytes / 4) {
      b->o.m.v[kept++] = b->o.m.v[i];
      continue;
    }
    hm_report_header(b->report,
                     "layer: masked M=%lld skipped: E x M rows need %.1f GB (limit a quarter of %.0f GB)",
                     (long long)b->o.m.v[i], need / 1e9, (double)total_bytes / 1e9);
  }
  b->o.m.count = kept;
}

int hm_bench_layer(hm_bench *b) {
  struct layer_bench lb = {.b = b};
  bool torch = strcmp(b->o.baseline_name, "torch") == 0;
  layer_cols[COL_TORCH].width = torch ? 10 : 0;
  layer_cols[COL_VS_TORCH].width = torch ? 8 : 0;
  hm_status st = hm_bench_open_report(b, "layer", layer_cols, COL_COUNT);
  if (st != HM_OK) return hm_bench_fail(b, "report", st);
  drop_masked_sizes_that_do_not_fit(b);
  st = layer_setup(&lb);
  if (st == HM_OK && torch) lb.torch_us = hm_bench_torch_layer(b);
  if (st == HM_OK) layer_header(b, &lb.v[0]);
  hm_report_columns(b->report);
  int64_t wrong = 0;
  for (int mi = 0; st == HM_OK && mi < b->o.m.count; mi++) st = layer_one_m(&lb, mi, &wrong);
  for (int i = 0; i < 2; i++) variant_free(&lb.v[i]);
  hm_bench_torch_free(lb.torch_us);
  if (st != HM_OK) return hm_bench_fail(b, "layer", st);
  b->wrong += wrong;
  char geomean[48] = "";
  if (lb.ratios)
    snprintf(geomean, sizeof(geomean), "; geomean vs_bf16 %.2fx", exp(lb.log_vs_bf16 / lb.ratios));
  hm_report_footer(b->report, "%s: %d sizes, #wrong %lld%s%s", wrong ? "FAILED" : "OK", b->o.m.count,
                   (long long)wrong, wrong ? " (exit 1)" : "", geomean);
  return wrong ? HM_BENCH_EXIT_FAIL : 0;
}
