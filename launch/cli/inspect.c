/* SPDX-License-Identifier: Apache-2.0 */
/*
 * humming-moe inspect <dir> [--ep N] [--tp N] [--json PATH]: what a checkpoint holds
 * (model, quantization, files by dtype), its FFN layers as one rank of an EP x TP grid
 * holds them, the distinct layer configs (one kernel set each) and memory per rank.
 */
#include <stdio.h>
#include <string.h>

#include "checkpoint.h"
#include "common/options.h"
#include "common/report.h"

int hm_cli_inspect(int argc, char **argv);

static const char *family_name(hm_ckpt_family f) {
  switch (f) {
    case HM_CKPT_DEEPSEEK: return "DeepSeek";
    case HM_CKPT_QWEN_MOE: return "Qwen-MoE";
    case HM_CKPT_MIXTRAL: return "Mixtral";
    case HM_CKPT_GPT_OSS: return "gpt-oss";
  }
  return "?";
}

static const char *kind_name(hm_ckpt_ffn_kind k) {
  return k == HM_FFN_ROUTED ? "routed" : k == HM_FFN_SHARED ? "shared" : "dense";
}

static void format_text(const hm_quant_format *f, char *buf, size_t len) {
  char scale[48] = "";
  switch (f->scale_kind) {
    case HM_SCALE_GROUP:
      snprintf(scale, sizeof(scale), " g%d %s", f->group_k, hm_dtype_name(f->scale));
      break;
    case HM_SCALE_CHANNEL: snprintf(scale, sizeof(scale), " channel %s", hm_dtype_name(f->scale)); break;
    case HM_SCALE_BLOCK:
      snprintf(scale, sizeof(scale), " block%dx%d %s", f->group_n, f->group_k, hm_dtype_name(f->scale));
      break;
    case HM_SCALE_TENSOR: snprintf(scale, sizeof(scale), " tensor %s", hm_dtype_name(f->scale)); break;
    default: break;
  }
  snprintf(buf, len, "%s%s%s%s", hm_dtype_name(f->weight), f->zero_point ? " zp" : "", scale,
           f->global_scale ? " +global" : "");
}

/* The oldest GPU generation whose kernels take the weight type (DESIGN.md support matrix). */
static const char *min_arch(hm_dtype w) {
  switch (w) {
    case HM_F8E4M3:
    case HM_F8E5M2: return "sm89+";
    case HM_F4E2M1: return "sm80+";
    case HM_F16:
    case HM_I8:
    case HM_U8: return "sm75+";
    default: return "sm80+";
  }
}

static double gib(uint64_t bytes) {
  return (double)bytes / (1024.0 * 1024.0 * 1024.0);
}

static void print_header(const hm_ckpt *ck, const hm_ckpt_summary *s, int ep, int tp) {
  const hm_ckpt_model *m = hm_ckpt_model_info(ck);
  printf("# humming-moe inspect %s\n", hm_ckpt_dir(ck));
  printf("# model: %s (%s), %lld layers, hidden %lld, %lld experts (top-%lld), expert intermediate %lld\n",
         m->model_type, family_name(m->family), (long long)m->layers, (long long)m->hidden,
         (long long)m->experts, (long long)m->top_k, (long long)m->moe_intermediate);
  printf("# quantization: %s (%s)\n", m->quant_method[0] ? m->quant_method : "none",
         m->quant_method[0] ? hm_ckpt_quant_file(ck) : "no quantization_config");
  printf("# files: %zu, tensors: %zu, %.2f GiB:", s->files, s->tensors, gib(s->tensor_bytes));
  for (int d = 0; d < HM_ST_DTYPE_COUNT; d++)
    if (s->dtype_bytes[d]) printf(" %s %.2f GiB", hm_st_dtype_name((hm_st_dtype)d), gib(s->dtype_bytes[d]));
  printf("\n# grid: EP %d x TP %d = %d ranks; per rank: experts, N x K of its share\n", ep, tp, ep * tp);
}

static bool same_format(const hm_quant_format *a, const hm_quant_format *b) {
  return a->weight == b->weight && a->scale == b->scale && a->scale_kind == b->scale_kind &&
         a->group_k == b->group_k && a->group_n == b->group_n && a->zero_point == b->zero_point &&
         a->global_scale == b->global_scale;
}

static void print_kernels(const hm_ckpt_summary *s) {
  printf("# layer configs (each a kernel set; routed layers run the MoE GEMM layouts):\n");
  for (size_t i = 0; i < s->layer_count; i++) {
    const hm_ckpt_layer_info *a = &s->layers[i];
    bool seen = false;
    int count = 0;
    for (size_t j = 0; j < s->layer_count; j++) {
      const hm_ckpt_layer_info *b = &s->layers[j];
      bool same = a->rank_n == b->rank_n && a->rank_k == b->rank_k && a->rank_experts == b->rank_experts &&
                  (a->kind == HM_FFN_ROUTED) == (b->kind == HM_FFN_ROUTED) && same_format(&a->fmt, &b->fmt);
      if (same && j < i) seen = true;
      count += same;
    }
    if (seen) continue;
    char fmt[64];
    format_text(&a->fmt, fmt, sizeof(fmt));
    printf("#   N %6lld x K %6lld x E %4lld  %-28s %-6s %-6s layers: %d\n", (long long)a->rank_n,
           (long long)a->rank_k, (long long)a->rank_experts, fmt, a->kind == HM_FFN_ROUTED ? "moe" : "dense",
           min_arch(a->fmt.weight), count);
  }
}

static const hm_col layer_cols[] = {
    {"layer", 48, 0, HM_COL_TEXT}, {"kind", 7, 0, HM_COL_TEXT}, {"experts", 8, 0, HM_COL_INT},
    {"N", 7, 0, HM_COL_INT},       {"K", 7, 0, HM_COL_INT},     {"format", 30, 0, HM_COL_TEXT},
    {"MiB", 10, 2, HM_COL_REAL},
};

static int report(const hm_ckpt *ck, const hm_ckpt_summary *s, int ep, int tp, const char *json) {
  print_header(ck, s, ep, tp);
  hm_report *r = hm_report_create("humming-moe inspect", layer_cols, 7, stdout, true);
  if (r == NULL) return 1;
  hm_report_columns(r);
  for (size_t i = 0; i < s->layer_count; i++) {
    const hm_ckpt_layer_info *l = &s->layers[i];
    char fmt[64];
    format_text(&l->fmt, fmt, sizeof(fmt));
    hm_cell cells[7] = {HM_TEXT(l->name),
                        HM_TEXT(kind_name(l->kind)),
                        HM_NUM(l->rank_experts),
                        HM_NUM(l->rank_n),
                        HM_NUM(l->rank_k),
                        HM_TEXT(fmt),
                        HM_NUM((double)l->rank_bytes / (1024.0 * 1024.0))};
    hm_report_row(r, cells);
  }
  print_kernels(s);
  hm_report_footer(
      r,
      "memory per rank: FFN %.3f GiB + other %.3f GiB (non-FFN tensors as stored, split over TP) "
      "= %.3f GiB",
      gib(s->ffn_rank_bytes), gib(s->other_rank_bytes), gib(s->ffn_rank_bytes + s->other_rank_bytes));
  int rc = 0;
  for (size_t i = 0; i < s->layer_count; i++) {
    if (s->layers[i].problem[0] == '\0') continue;
    fprintf(stderr, "humming-moe inspect: %s cannot be split for EP %d x TP %d: %s\n", s->layers[i].name, ep,
            tp, s->layers[i].problem);
    rc = 1;
  }
  if (json[0] && !hm_report_write_json(r, json)) {
    fprintf(stderr, "humming-moe inspect: cannot write %s\n", json);
    rc = 1;
  }
  hm_report_destroy(r);
  return rc;
}

int hm_cli_inspect(int argc, char **argv) {
  int64_t ep = 1, tp = 1;
  char json[HM_OPT_STR_LEN] = "", err[256];
  const hm_opt opts[] = {
      {"--ep", HM_OPT_INT, &ep, 1, 1 << 16, "N", "expert-parallel ranks", NULL},
      {"--tp", HM_OPT_INT, &tp, 1, 1 << 16, "N", "tensor-parallel ranks", NULL},
      {"--json", HM_OPT_STR, json, 0, 0, "PATH", "also write the report as JSON", NULL},
  };
  if (argc < 1 || argv[0][0] == '-' || hm_opts_parse(opts, 3, argc, argv, 1, err, sizeof(err)) < 0) {
    if (argc >= 1 && argv[0][0] != '-') fprintf(stderr, "humming-moe inspect: %s\n", err);
    fprintf(stderr, "usage: humming-moe inspect <checkpoint dir> [options]\n");
    hm_opts_usage(stderr, opts, 3);
    return 2;
  }
  hm_ckpt *ck = NULL;
  hm_ckpt_summary s;
  if (hm_ckpt_open(argv[0], &ck) != HM_OK || hm_ckpt_summarize(ck, (int)ep, (int)tp, &s) != HM_OK) {
    fprintf(stderr, "humming-moe inspect: %s\n", hm_last_error());
    hm_ckpt_close(ck);
    return 1;
  }
  int rc = report(ck, &s, (int)ep, (int)tp, json);
  hm_ckpt_summary_free(&s);
  hm_ckpt_close(ck);
  return rc;
}
