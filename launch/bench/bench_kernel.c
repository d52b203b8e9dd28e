/* SPDX-License-Identifier: Apache-2.0 */
/*
 * kernel mode: one expert GEMM of the model (gate_up [2I, H] or down [H, I]) per M, in
 * the scheme under test and in bf16 through the same hm_layer, each checked against
 * the reference and then timed. M counts tokens; an indexed GEMM does M * top_k rows.
 * --plan all runs the scheme under test with the default, heuristic and tuned kernel
 * tables side by side, and every row holds the cost model's prediction against the
 * measured time. --chain R times R forwards back to back per sample (bench_chain.h).
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "bench/bench.h"
#include "bench/bench_chain.h"
#include "bench/bench_gemm.h"
#include "bench/bench_plan.h"
#include "bench/bench_torch.h"
#include "bench/bench_trace.h"
#include "check.h"

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
  COL_DEFAULT_US,
  COL_HEUR_US,
  COL_TUNED_US,
  COL_TUNED_VS_HEUR,
  COL_PRED,
  COL_PRED_ERR,
  COL_WRONG,
  COL_PLAN,
  COL_KERNEL,
  COL_HEUR_KERNEL,
  COL_ROWS,
  COL_MIN,
  COL_MAX,
  COL_BYTES,
  COL_FLOPS,
  COL_ACTIVE,
  COL_GRAPH,
  COL_COUNT
};

static hm_col kernel_cols[COL_COUNT] = {
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
    [COL_DEFAULT_US] = {"default_us", 0, 2, HM_COL_REAL},
    [COL_HEUR_US] = {"heur_us", 0, 2, HM_COL_REAL},
    [COL_TUNED_US] = {"tuned_us", 0, 2, HM_COL_REAL},
    [COL_TUNED_VS_HEUR] = {"tuned/heur", 0, 3, HM_COL_RATIO},
    [COL_PRED] = {"pred_us", 9, 2, HM_COL_REAL},
    [COL_PRED_ERR] = {"pred_err%", 9, 1, HM_COL_REAL},
    [COL_WRONG] = {"#wrong", 7, 0, HM_COL_INT},
    [COL_PLAN] = {"plan", 9, 0, HM_COL_TEXT},
    [COL_KERNEL] = {"kernel", 24, 0, HM_COL_TEXT},
    [COL_HEUR_KERNEL] = {"heur_kernel", 0, 0, HM_COL_TEXT},
    [COL_ROWS] = {"rows", 0, 0, HM_COL_INT},
    [COL_MIN] = {"min_us", 0, 2, HM_COL_REAL},
    [COL_MAX] = {"max_us", 0, 2, HM_COL_REAL},
    [COL_BYTES] = {"bytes", 0, 0, HM_COL_INT},
    [COL_FLOPS] = {"flops", 0, 0, HM_COL_INT},
    [COL_ACTIVE] = {"active_experts", 0, 0, HM_COL_INT},
    [COL_GRAPH] = {"graph", 0, 0, HM_COL_INT},
};

#define KERNEL_NAME_LEN 48
/* Tuned counts as slower than the heuristic beyond this much timing noise. */
#define TUNED_SLOWER_TOLERANCE 1.02

/* One layer's outcome at one M. */
typedef struct layer_result {
  hm_timing t;
  int64_t wrong;
  char kernel[KERNEL_NAME_LEN];
  double predicted_us; /* cost model's time of the kernel it ran; NaN without one */
  const char *source;  /* plan source of that kernel */
} layer_result;

struct kernel_bench {
  hm_bench *b;
  hm_bench_gemm_shape shape;
  hm_bench_plans plans;
  /* The scheme under test per plan, then the bf16 baseline; each as the chain's members need. */
  hm_bench_gemm_layer layers[HM_BENCH_PLANS_MAX + 1][HM_BENCH_CHAIN_MAX];
  int count, members;
  double *torch_us;   /* per M, or NULL */
  double log_vs_bf16; /* sum over sizes, for the geometric mean in the footer */
  int ratios;
  double log_tuned_vs_heur; /* --plan all: sum over sizes */
  int tuned_slower;
  double abs_pred_err; /* sum of |pred_err%| over sizes with a prediction */
  int preds;
};

static void kernel_shape(const hm_bench_opts *o, hm_bench_gemm_shape *s) {
  bool down = strcmp(o->gemm_name, "down") == 0;
  s->down = down;
  s->n = down ? o->model.hidden : 2 * o->model.moe_intermediate;
  s->k = down ? o->model.moe_intermediate : o->model.hidden;
  s->type = o->layout;
  /* A MoE GEMM as the layer launches it: with the shared expert fused where the layer fuses it,
   * so that the tuner's tables, keyed on the layer's GEMMs, serve it. */
  const hm_model_routed r = hm_model_preset_routed(&o->model, 1, 1);
  const bool dense = o->layout == HM_GEMM_DENSE;
  s->experts = dense ? 1 : r.experts;
  s->top_k = dense ? 1 : r.top_k;
  s->shared = dense ? 0 : r.shared_fused;
}

/* One layer of the run (quant per plan, or bf16), every chain member: check, then time. */
static hm_status measure(struct kernel_bench *kb, int which, const hm_bench_chain_inputs *in,
                         layer_result *r) {
  hm_bench *b = kb->b;
  hm_bench_chain chain;
  HM_CHECK(hm_bench_chain_make(b, &kb->shape, kb->layers[which], in, &chain));
  hm_status ret = HM_OK;
  r->wrong = 0;
  if (b->o.check)
    HM_CHECK_GOTO(hm_bench_chain_check(b, &kb->shape, kb->layers[which], in, &chain, &r->wrong), done);
  HM_CHECK_GOTO(hm_bench_chain_time(b, &chain, hm_bench_want_graph(b, in->in[0].tokens), &r->t), done);
  /* Members have the same M, so the same kernel and prediction. */
  const hm_bench_gemm_run *run = &chain.run[0];
  hm_bench_kernel_name(run->layer, &run->args, r->kernel, KERNEL_NAME_LEN);
  hm_bench_trace_report(b, run->layer, &run->args, r->kernel);
  hm_bench_plan_predict(&kb->plans, run->layer, &run->args, &r->predicted_us, &r->source);
done:
  hm_bench_chain_free(b, &chain);
  return ret;
}

/* The columns --plan all adds: each source's time, tuned over heuristic, the heuristic's kernel. */
static void plan_cells(const struct kernel_bench *kb, const layer_result *res, hm_cell *c) {
  const hm_bench_plans *p = &kb->plans;
  if (p->tuned < 0) return;
  const double heur = res[p->heuristic].t.median_us, tuned = res[p->tuned].t.median_us;
  c[COL_DEFAULT_US] = HM_NUM(res[p->dflt].t.median_us);
  c[COL_HEUR_US] = HM_NUM(heur);
  c[COL_TUNED_US] = HM_NUM(tuned);
  c[COL_TUNED_VS_HEUR] = HM_NUM(tuned / heur);
  c[COL_HEUR_KERNEL] = HM_TEXT(res[p->heuristic].kernel);
}

/* The prediction judged: the heuristic's under --plan all, else the one layer's. */
static const layer_result *judged(const struct kernel_bench *kb, const layer_result *res) {
  return &res[kb->plans.heuristic >= 0 ? kb->plans.heuristic : kb->plans.primary];
}

static void emit_row(struct kernel_bench *kb, const hm_bench_chain_inputs *chain, int mi,
                     const layer_result *res, const hm_timing *bf16, int64_t wrong) {
  hm_bench *b = kb->b;
  const layer_result *primary = &res[kb->plans.primary], *pred = judged(kb, res);
  const hm_timing *t = &primary->t;
  const hm_quant_scheme *q = &kb->layers[0][0].scheme;
  const hm_bench_gemm_inputs *in = &chain->in[0];
  double bytes = hm_bench_chain_bytes(&kb->shape, q, chain);
  double flops = hm_bench_gemm_flops(&kb->shape, in->tokens);
  double us = t->median_us;
  double torch = kb->torch_us ? kb->torch_us[mi] : NAN;
  char kernel[KERNEL_NAME_LEN + 8];
  snprintf(kernel, sizeof(kernel), "%s%s", primary->kernel, t->graph ? " graph" : "");
  hm_cell c[COL_COUNT] = {
      [COL_M] = HM_NUM(in->tokens),
      [COL_TIME] = HM_NUM(us),
      [COL_SPREAD] = HM_NUM(t->spread_pct),
      [COL_GBS] = HM_NUM(bytes / us / 1e3),
      [COL_TFLOPS] = HM_NUM(flops / us / 1e6),
      [COL_ROOF] = HM_NUM(hm_bench_roof_pct(b, bytes, flops, hm_bench_act8(q), us)),
      [COL_BF16] = bf16 ? HM_NUM(bf16->median_us) : HM_NONE,
      [COL_VS_BF16] = bf16 ? HM_NUM(bf16->median_us / us) : HM_NONE,
      [COL_TORCH] = HM_NUM(torch),
      [COL_VS_TORCH] = HM_NUM(torch / us),
      [COL_DEFAULT_US] = HM_NONE,
      [COL_HEUR_US] = HM_NONE,
      [COL_TUNED_US] = HM_NONE,
      [COL_TUNED_VS_HEUR] = HM_NONE,
      [COL_PRED] = HM_NUM(pred->predicted_us),
      [COL_PRED_ERR] = HM_NUM(100.0 * (pred->predicted_us - pred->t.median_us) / pred->t.median_us),
      [COL_WRONG] = HM_NUM(wrong),
      [COL_PLAN] = HM_TEXT(primary->source),
      [COL_KERNEL] = HM_TEXT(kernel),
      [COL_HEUR_KERNEL] = HM_TEXT(""),
      [COL_ROWS] = HM_NUM(in->tokens * kb->shape.top_k),
      [COL_MIN] = HM_NUM(t->min_us),
      [COL_MAX] = HM_NUM(t->max_us),
      [COL_BYTES] = HM_NUM(bytes),
      [COL_FLOPS] = HM_NUM(flops),
      [COL_ACTIVE] = HM_NUM(llround(hm_bench_chain_active_experts(&kb->shape, chain))),
      [COL_GRAPH] = HM_NUM(t->graph),
  };
  plan_cells(kb, res, c);
  hm_report_row(b->report, c);
}

/* Footer sums: vs bf16, tuned over heuristic, prediction error. */
static void add_stats(struct kernel_bench *kb, const layer_result *res, const hm_timing *bf16) {
  const hm_bench_plans *p = &kb->plans;
  const double us = res[p->primary].t.median_us;
  if (bf16) kb->log_vs_bf16 += log(bf16->median_us / us), kb->ratios++;
  if (p->tuned >= 0) {
    const double ratio = res[p->tuned].t.median_us / res[p->heuristic].t.median_us;
    kb->log_tuned_vs_heur += log(ratio);
    kb->tuned_slower += ratio > TUNED_SLOWER_TOLERANCE;
  }
  const layer_result *pred = judged(kb, res);
  if (isfinite(pred->predicted_us)) {
    kb->abs_pred_err += fabs(100.0 * (pred->predicted_us - pred->t.median_us) / pred->t.median_us);
    kb->preds++;
  }
}

static hm_status kernel_one_m(struct kernel_bench *kb, int mi, int64_t *wrong_total) {
  hm_bench *b = kb->b;
  hm_bench_chain_inputs in;
  HM_CHECK(hm_bench_chain_inputs_make(&kb->shape, b->o.m.v[mi], (uint64_t)b->o.seed + (uint64_t)mi * 101,
                                      (int)b->o.chain, &in));
  hm_status ret = HM_OK;
  layer_result res[HM_BENCH_PLANS_MAX + 1];
  int64_t wrong = 0;
  for (int i = 0; i < kb->count; i++) {
    HM_CHECK_GOTO(measure(kb, i, &in, &res[i]), done);
    wrong += res[i].wrong;
  }
  const hm_quant_scheme *q = &kb->layers[0][0].scheme;
  bool self = q->weight.weight == HM_BF16 && q->act == HM_BF16;
  const hm_timing *bf16 = kb->count > kb->plans.count ? &res[kb->plans.count].t
                          : self                      ? &res[kb->plans.primary].t
                                                      : NULL;
  add_stats(kb, res, bf16);
  *wrong_total += wrong;
  emit_row(kb, &in, mi, res, bf16, wrong);
done:
  hm_bench_chain_inputs_free(&in);
  return ret;
}

/* The next layer slot, one layer per chain member that needs its own (member j from seed j). */
static hm_status add_layers(struct kernel_bench *kb, const hm_quant_scheme *scheme, uint64_t seed,
                            hm_plan_source plan) {
  hm_bench_gemm_layer *members = kb->layers[kb->count++]; /* counted first: teardown frees a partial slot */
  for (int j = 0; j < kb->members; j++)
    HM_CHECK(hm_bench_gemm_layer_create(kb->b, &kb->shape, scheme, hm_bench_chain_seed(seed, j), plan,
                                        &members[j]));
  return HM_OK;
}

/* The scheme under test once per plan (same seed, so the same weights), then the bf16
 * baseline. A pinned kernel is the scheme's: the baseline plans its own, as auto would. */
static hm_status kernel_setup(struct kernel_bench *kb) {
  hm_bench *b = kb->b;
  kernel_shape(&b->o, &kb->shape);
  kb->members = hm_bench_chain_layers(&kb->shape, (int)b->o.chain);
  HM_CHECK(hm_bench_plans_make(b, &kb->plans));
  for (int i = 0; i < kb->plans.count; i++)
    HM_CHECK(add_layers(kb, &b->o.scheme, (uint64_t)b->o.seed, kb->plans.source[i]));
  hm_quant_scheme bf16;
  HM_CHECK(hm_quant_scheme_parse("bf16", &bf16));
  bool self = b->o.scheme.weight.weight == HM_BF16 && b->o.scheme.act == HM_BF16;
  const hm_plan_source primary = kb->plans.source[kb->plans.primary];
  if (!self && strcmp(b->o.baseline_name, "none") != 0)
    HM_CHECK(
        add_layers(kb, &bf16, (uint64_t)b->o.seed + 1, primary == HM_PLAN_PINNED ? HM_PLAN_AUTO : primary));
  return HM_OK;
}

static void kernel_teardown(struct kernel_bench *kb) {
  for (int i = 0; i < kb->count; i++)
    for (int j = 0; j < kb->members; j++) hm_bench_gemm_layer_destroy(&kb->layers[i][j]);
  hm_bench_torch_free(kb->torch_us);
}

static void show_plan_columns(bool all) {
  const int cols[] = {COL_DEFAULT_US, COL_HEUR_US, COL_TUNED_US, COL_TUNED_VS_HEUR, COL_HEUR_KERNEL};
  const int widths[] = {10, 10, 10, 10, 24};
  for (size_t i = 0; i < HM_ARRAY_SIZE(cols); i++) kernel_cols[cols[i]].width = all ? widths[i] : 0;
}

static void plan_header(const struct kernel_bench *kb) {
  const hm_bench_plans *p = &kb->plans;
  const char *cpu = kb->b->cuda ? "" : " (host times: the predictions are the GPU's)";
  if (p->tuned >= 0)
    hm_report_header(kb->b->report,
                     "plan=all: default, heuristic and tuned kernel tables; time_us = tuned; pred_us = the "
                     "heuristic's kernel on profile %s, pred_err%% against heur_us%s",
                     p->profile.name, cpu);
  else
    hm_report_header(kb->b->report,
                     "plan=%s; pred_us = its kernel on profile %s, pred_err%% against time_us%s",
                     hm_plan_source_name(p->source[0]), p->profile.name, cpu);
  hm_report_config(kb->b->report, "plan",
                   json_string(p->tuned >= 0 ? "all" : hm_plan_source_name(p->source[0])));
}

static void chain_header(const struct kernel_bench *kb) {
  hm_bench *b = kb->b;
  const int r = (int)b->o.chain;
  hm_report_config(b->report, "chain", json_integer(r));
  if (r == 1) {
    hm_report_header(b->report, "chain 1: one forward per sample, its launch latency and tail included");
    return;
  }
  const bool dense = kb->shape.type == HM_GEMM_DENSE;
  hm_report_header(b->report,
                   "chain %d: %d forwards back to back per sample, over %d %s; times per forward; bytes, "
                   "GB/s, %%roof and active_experts: means over the members (active rounded)",
                   r, r, r, dense ? "dense layers of distinct weights" : "distinct routings of one layer");
}

static void kernel_footer(const struct kernel_bench *kb, int64_t wrong) {
  hm_bench *b = kb->b;
  char geomean[48] = "", tuned[128] = "", pred[48] = "";
  if (kb->ratios)
    snprintf(geomean, sizeof(geomean), "; geomean vs_bf16 %.2fx", exp(kb->log_vs_bf16 / kb->ratios));
  if (kb->plans.tuned >= 0 && b->o.m.count > 0)
    snprintf(tuned, sizeof(tuned), "; geomean tuned/heur %.3fx, tuned slower by >%.0f%% at %d of %d sizes",
             exp(kb->log_tuned_vs_heur / b->o.m.count), 100.0 * (TUNED_SLOWER_TOLERANCE - 1.0),
             kb->tuned_slower, b->o.m.count);
  if (kb->preds) snprintf(pred, sizeof(pred), "; mean |pred_err| %.1f%%", kb->abs_pred_err / kb->preds);
  hm_report_footer(b->report, "%s: %d sizes, #wrong %lld%s%s%s%s", wrong ? "FAILED" : "OK", b->o.m.count,
                   (long long)wrong, wrong ? " (exit 1)" : "", geomean, tuned, pred);
}

int hm_bench_kernel(hm_bench *b) {
  struct kernel_bench kb = {.b = b};
  bool torch = strcmp(b->o.baseline_name, "torch") == 0;
  kernel_cols[COL_TORCH].width = torch ? 10 : 0;
  kernel_cols[COL_VS_TORCH].width = torch ? 8 : 0;
  show_plan_columns(strcmp(b->o.plan_name, "all") == 0);
  hm_status st = hm_bench_open_report(b, "kernel", kernel_cols, COL_COUNT);
  if (st != HM_OK) return hm_bench_fail(b, "report", st);
  st = kernel_setup(&kb);
  if (st == HM_OK && torch) kb.torch_us = hm_bench_torch_kernel(b, &kb.shape);
  hm_report_header(
      b->report, "gemm=%s N=%lld K=%lld experts=%lld top_k=%d%s; M = tokens, rows = M x top_k%s",
      b->o.gemm_name, (long long)kb.shape.n, (long long)kb.shape.k, (long long)kb.shape.experts,
      kb.shape.top_k,
      kb.shape.shared ? " (the last expert the fused shared one, every token's last slot)" : "",
      hm_bench_act8(&b->o.scheme) ? "; 8-bit A quantized before timing (layer mode times it)" : "");
  if (st == HM_OK) plan_header(&kb);
  if (st == HM_OK) chain_header(&kb);
  hm_report_columns(b->report);
  int64_t wrong = 0;
  for (int mi = 0; st == HM_OK && mi < b->o.m.count; mi++) st = kernel_one_m(&kb, mi, &wrong);
  kernel_teardown(&kb);
  if (st != HM_OK) return hm_bench_fail(b, "kernel", st);
  b->wrong += wrong;
  kernel_footer(&kb, wrong);
  return wrong ? HM_BENCH_EXIT_FAIL : 0;
}
