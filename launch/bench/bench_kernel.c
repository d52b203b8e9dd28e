/* SPDX-License-Identifier: Apache-2.0 */
/*
 * kernel mode: one expert GEMM of the model (gate_up [2I, H] or down [H, I]) per M, in
 * the scheme under test and in bf16 through the same hm_layer, each checked against
 * the reference and then timed. M counts tokens; an indexed GEMM does M * top_k rows.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "bench/bench.h"
#include "bench/bench_gemm.h"
#include "bench/bench_torch.h"
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
  COL_WRONG,
  COL_KERNEL,
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
    [COL_WRONG] = {"#wrong", 7, 0, HM_COL_INT},
    [COL_KERNEL] = {"kernel", 20, 0, HM_COL_TEXT},
    [COL_ROWS] = {"rows", 0, 0, HM_COL_INT},
    [COL_MIN] = {"min_us", 0, 2, HM_COL_REAL},
    [COL_MAX] = {"max_us", 0, 2, HM_COL_REAL},
    [COL_BYTES] = {"bytes", 0, 0, HM_COL_INT},
    [COL_FLOPS] = {"flops", 0, 0, HM_COL_INT},
    [COL_ACTIVE] = {"active_experts", 0, 0, HM_COL_INT},
    [COL_GRAPH] = {"graph", 0, 0, HM_COL_INT},
};

#define KERNEL_NAME_LEN 48

struct kernel_bench {
  hm_bench *b;
  hm_bench_gemm_shape shape;
  hm_bench_gemm_layer layers[2]; /* the scheme under test, then the bf16 baseline */
  int count;
  double *torch_us;   /* per M, or NULL */
  double log_vs_bf16; /* sum over sizes, for the geometric mean in the footer */
  int ratios;
};

static void kernel_shape(const hm_bench_opts *o, hm_bench_gemm_shape *s) {
  bool down = strcmp(o->gemm_name, "down") == 0;
  s->down = down;
  s->n = down ? o->model.hidden : 2 * o->model.moe_intermediate;
  s->k = down ? o->model.moe_intermediate : o->model.hidden;
  s->type = o->layout;
  s->experts = o->layout == HM_GEMM_DENSE ? 1 : o->model.experts;
  s->top_k = o->layout == HM_GEMM_DENSE ? 1 : o->model.top_k;
}

/* One layer of the run (quant or bf16): check, then time. */
static hm_status measure(struct kernel_bench *kb, int which, const hm_bench_gemm_inputs *in, hm_timing *t,
                         int64_t *wrong, char *kernel) {
  hm_bench *b = kb->b;
  hm_bench_gemm_run run;
  HM_CHECK(hm_bench_gemm_run_make(b, &kb->shape, &kb->layers[which], in, &run));
  hm_status ret = HM_OK;
  *wrong = 0;
  if (b->o.check)
    HM_CHECK_GOTO(hm_bench_gemm_check(b, &kb->shape, &kb->layers[which], in, &run, wrong), done);
  HM_CHECK_GOTO(hm_bench_time(b, hm_bench_gemm_forward, &run, hm_bench_want_graph(b, in->tokens), t), done);
  hm_bench_kernel_name(run.layer, &run.args, kernel, KERNEL_NAME_LEN);
done:
  hm_bench_gemm_run_free(b, &run);
  return ret;
}

static void emit_row(struct kernel_bench *kb, const hm_bench_gemm_inputs *in, int mi, const hm_timing *t,
                     const hm_timing *bf16, int64_t wrong, const char *kernel_name) {
  hm_bench *b = kb->b;
  const hm_quant_scheme *q = &kb->layers[0].scheme;
  double bytes = hm_bench_gemm_bytes(&kb->shape, q, in);
  double flops = hm_bench_gemm_flops(&kb->shape, in->tokens);
  double us = t->median_us;
  double torch = kb->torch_us ? kb->torch_us[mi] : NAN;
  char kernel[KERNEL_NAME_LEN + 8];
  snprintf(kernel, sizeof(kernel), "%s%s", kernel_name, t->graph ? " graph" : "");
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
      [COL_WRONG] = HM_NUM(wrong),
      [COL_KERNEL] = HM_TEXT(kernel),
      [COL_ROWS] = HM_NUM(in->tokens * kb->shape.top_k),
      [COL_MIN] = HM_NUM(t->min_us),
      [COL_MAX] = HM_NUM(t->max_us),
      [COL_BYTES] = HM_NUM(bytes),
      [COL_FLOPS] = HM_NUM(flops),
      [COL_ACTIVE] =
          HM_NUM(kb->shape.type == HM_GEMM_DENSE
                     ? 1
                     : hm_bench_active_experts(in->ids, in->tokens * kb->shape.top_k, kb->shape.experts)),
      [COL_GRAPH] = HM_NUM(t->graph),
  };
  hm_report_row(b->report, c);
}

static hm_status kernel_one_m(struct kernel_bench *kb, int mi, int64_t *wrong_total) {
  hm_bench *b = kb->b;
  hm_bench_gemm_inputs in;
  HM_CHECK(
      hm_bench_gemm_inputs_make(&kb->shape, b->o.m.v[mi], (uint64_t)b->o.seed + (uint64_t)mi * 101, &in));
  hm_status ret = HM_OK;
  hm_timing t[2];
  int64_t wrong[2] = {0, 0};
  char kernel[2][KERNEL_NAME_LEN];
  for (int i = 0; i < kb->count; i++) HM_CHECK_GOTO(measure(kb, i, &in, &t[i], &wrong[i], kernel[i]), done);
  bool self = kb->layers[0].scheme.weight.weight == HM_BF16 && kb->layers[0].scheme.act == HM_BF16;
  const hm_timing *bf16 = kb->count > 1 ? &t[1] : self ? &t[0] : NULL;
  if (bf16) kb->log_vs_bf16 += log(bf16->median_us / t[0].median_us), kb->ratios++;
  *wrong_total += wrong[0] + wrong[1];
  emit_row(kb, &in, mi, &t[0], bf16, wrong[0] + wrong[1], kernel[0]);
done:
  hm_bench_gemm_inputs_free(&in);
  return ret;
}

static hm_status kernel_setup(struct kernel_bench *kb) {
  hm_bench *b = kb->b;
  kernel_shape(&b->o, &kb->shape);
  HM_CHECK(hm_bench_gemm_layer_create(b, &kb->shape, &b->o.scheme, (uint64_t)b->o.seed, &kb->layers[0]));
  kb->count = 1;
  hm_quant_scheme bf16;
  HM_CHECK(hm_quant_scheme_parse("bf16", &bf16));
  bool self = b->o.scheme.weight.weight == HM_BF16 && b->o.scheme.act == HM_BF16;
  if (!self && strcmp(b->o.baseline_name, "none") != 0) {
    HM_CHECK(hm_bench_gemm_layer_create(b, &kb->shape, &bf16, (uint64_t)b->o.seed + 1, &kb->layers[1]));
    kb->count = 2;
  }
  return HM_OK;
}

static void kernel_teardown(struct kernel_bench *kb) {
  for (int i = 0; i < kb->count; i++) hm_bench_gemm_layer_destroy(&kb->layers[i]);
  hm_bench_torch_free(kb->torch_us);
}

int hm_bench_kernel(hm_bench *b) {
  struct kernel_bench kb = {.b = b};
  bool torch = strcmp(b->o.baseline_name, "torch") == 0;
  kernel_cols[COL_TORCH].width = torch ? 10 : 0;
  kernel_cols[COL_VS_TORCH].width = torch ? 8 : 0;
  hm_status st = hm_bench_open_report(b, "kernel", kernel_cols, COL_COUNT);
  if (st != HM_OK) return hm_bench_fail(b, "report", st);
  st = kernel_setup(&kb);
  if (st == HM_OK && torch) kb.torch_us = hm_bench_torch_kernel(b, &kb.shape);
  hm_report_header(
      b->report, "gemm=%s N=%lld K=%lld experts=%lld top_k=%d; M = tokens, rows = M x top_k%s",
      b->o.gemm_name, (long long)kb.shape.n, (long long)kb.shape.k, (long long)kb.shape.experts,
      kb.shape.top_k,
      hm_bench_act8(&b->o.scheme) ? "; 8-bit A quantized before timing (layer mode times it)" : "");
  hm_report_columns(b->report);
  int64_t wrong = 0;
  for (int mi = 0; st == HM_OK && mi < b->o.m.count; mi++) st = kernel_one_m(&kb, mi, &wrong);
  kernel_teardown(&kb);
  if (st != HM_OK) return hm_bench_fail(b, "kernel", st);
  b->wrong += wrong;
  char geomean[48] = "";
  if (kb.ratios)
    snprintf(geomean, sizeof(geomean), "; geomean vs_bf16 %.2fx", exp(kb.log_vs_bf16 / kb.ratios));
  hm_report_footer(b->report, "%s: %d sizes, #wrong %lld%s%s", wrong ? "FAILED" : "OK", b->o.m.count,
                   (long long)wrong, wrong ? " (exit 1)" : "", geomean);
  return wrong ? HM_BENCH_EXIT_FAIL : 0;
}
