/* SPDX-License-Identifier: Apache-2.0 */
/*
 * humming-moe tune: times the GEMM candidates of a model's layers per M bucket on this
 * node's GPU and stores the winners in the tuning table next to the kernel cache. With
 * --plan it prints the analytic choices and their predicted times instead (no GPU
 * needed; HUMMING_DEVICE_PROFILE picks the GPU to plan for), and with --plan --gaps where
 * those tables lose to the cost model's best kernel over M (cli/tune_gaps.h).
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "cli/tune_gaps.h"
#include "common/options.h"
#include "engine.h"
#include "heuristics/tuner.h"
#include "kernels/cache.h"
#include "model_layers.h"

#define EXIT_USAGE 2

typedef struct tune_opts {
  char model[HM_OPT_STR_LEN];
  char quant[HM_OPT_STR_LEN];
  char layout[HM_OPT_STR_LEN];
  char layer[HM_OPT_STR_LEN];
  int64_t tp, ep, candidates, reps, chain, max_m;
  bool plan, gaps, help;
} tune_opts;

static int plan_layer(const hm_model_layer *l, hm_gemm_type type, const hm_device_profile *p, int64_t max_m) {
  for (int b = 0; b < hm_choose_bucket_count(); b++) {
    int64_t lo, hi;
    hm_gemm_config cfg;
    double predicted = 0;
    hm_choose_bucket(&l->config, type, b, &lo, &hi);
    if (max_m > 0 && lo >= max_m) break;
    if (hm_choose_config(&l->config, type, p, lo, hi, &cfg, &predicted) != HM_OK) {
      printf("  %-16s %-18s unsupported: %s\n", l->role, hm_gemm_type_name(type), hm_last_error());
      return 0;
    }
    hm_choose_cost c;
    const int64_t m = hm_choose_bucket_m(lo, hi);
    if (hm_choose_cost_of(&l->config, &cfg, m, p, &c) != HM_OK) return 1;
    char t[96];
    hm_gemm_tuning_name(&cfg.tuning, t, sizeof(t));
    printf("  %-16s %-18s %9lld %11.2f %11.2f  %s\n", l->role, hm_gemm_type_name(type), (long long)m,
           c.roofline_us, predicted, t);
  }
  return 0;
}

static int tune_layer(hm_engine *e, const hm_model_layer *l, hm_gemm_type type, const tune_opts *o,
                      const char *root) {
  const hm_tune_request req = {.layer = &l->config,
                               .type = type,
                               .candidates = (int)o->candidates,
                               .reps = (int)o->reps,
                               .chain = (int)o->chain,
                               .shared = l->shared,
                               .a_per_slot = l->a_per_slot,
                               .max_m = o->max_m};
  hm_tune_result r;
  if (hm_tuner_run(e, &req, &r) != HM_OK || hm_tune_table_store(root, r.entries, r.count) != HM_OK) {
    fprintf(stderr, "humming-moe tune: %s: %s\n", l->role, hm_last_error());
    return 1;
  }
  for (int i = 0; i < r.count; i++) {
    const hm_tune_bucket *b = &r.buckets[i];
    char t[96];
    hm_gemm_tuning_name(&b->tuned, t, sizeof(t));
    const double err =
        b->heuristic_us > 0 ? 100.0 * (b->predicted_us - b->heuristic_us) / b->heuristic_us : 0;
    printf("  %-16s %-18s %9lld %11.2f %11.2f %11.2f %11.2f %7.2fx %+7.1f%%  %s\n", l->role,
           hm_gemm_type_name(type), (long long)b->m, b->predicted_us, b->heuristic_us, b->default_us,
           b->tuned_us, b->tuned_us > 0 ? b->heuristic_us / b->tuned_us : 0, err, t);
  }
  return 0;
}

/* The grouped GEMM types a MoE layer runs (the auto layout: masked for decode, indexed,
 * contiguous for prefill), by the names --layout takes. */
static const struct {
  const char *name;
  hm_gemm_type type;
} moe_layouts[] = {{"masked", HM_GEMM_GROUPED_MASKED},
                   {"indexed", HM_GEMM_INDEXED},
                   {"contiguous", HM_GEMM_GROUPED_CONTIGUOUS}};

static bool layout_selects(const char *layout, size_t i) {
  return strcmp(layout, "all") == 0 || strcmp(layout, moe_layouts[i].name) == 0;
}

static int parse(int argc, char **argv, tune_opts *o) {
  const hm_opt table[] = {
      {"--model", HM_OPT_STR, o->model, 0, 0, "NAME", "model preset", NULL},
      {"--quant", HM_OPT_STR, o->quant, 0, 0, "SCHEME", "quantization scheme: " HM_QUANT_SCHEMES, NULL},
      {"--layout", HM_OPT_STR, o->layout, 0, 0, "L",
       "MoE layouts to tune or plan: all (default), masked, indexed or contiguous", NULL},
      {"--layer", HM_OPT_STR, o->layer, 0, 0, "ROLE",
       "only this layer of the model (experts.gate_up, experts.down, shared.*, dense.*); default all", NULL},
      {"--tp", HM_OPT_INT, &o->tp, 1, 4096, "N", "tensor-parallel ranks (shapes of one rank)", NULL},
      {"--ep", HM_OPT_INT, &o->ep, 1, 4096, "N", "expert-parallel ranks", NULL},
      {"--candidates", HM_OPT_INT, &o->candidates, 1, 14, "N", "cost-model candidates timed per bucket",
       NULL},
      {"--reps", HM_OPT_INT, &o->reps, 1, 1000, "N", "timed samples per candidate (median)", NULL},
      {"--chain", HM_OPT_INT, &o->chain, 1, 64, "R",
       "launches back to back in a sample, each on other weights, as layers run in serving (default 1)",
       NULL},
      {"--max-m", HM_OPT_INT, &o->max_m, 1, INT64_MAX, "M",
       "only the buckets that start below this valid M (the valid_M column: tokens x top_k for MoE "
       "layouts); the table keeps its other entries",
       NULL},
      {"--plan", HM_OPT_FLAG, &o->plan, 0, 0, NULL, "print the analytic choices, time nothing", NULL},
      {"--gaps", HM_OPT_FLAG, &o->gaps, 0, 0, NULL,
       "with --plan: where the tables lose to the cost model's best kernel, over token counts", NULL},
      {"--help", HM_OPT_FLAG, &o->help, 0, 0, NULL, "this text", NULL},
  };
  const int n = (int)(sizeof(table) / sizeof(table[0]));
  char err[512];
  if (hm_opts_parse(table, n, argc, argv, 2, err, sizeof(err)) < 0) {
    fprintf(stderr, "humming-moe tune: %s\n", err);
    return EXIT_USAGE;
  }
  bool known = false;
  for (size_t i = 0; i < HM_ARRAY_SIZE(moe_layouts); i++) known |= layout_selects(o->layout, i);
  if (!known) {
    fprintf(stderr, "humming-moe tune: --layout %s: expected all, masked, indexed or contiguous\n",
            o->layout);
    return EXIT_USAGE;
  }
  if (o->gaps && !o->plan) {
    fprintf(stderr, "humming-moe tune: --gaps prints the cost model's view and goes with --plan\n");
    return EXIT_USAGE;
  }
  if (o->help) {
    printf("usage: humming-moe tune --model NAME --quant SCHEME [options]\n");
    hm_opts_usage(stdout, table, n);
    return 0;
  }
  return -1;
}

/* The GEMM types of a layer: a dense layer's one, a MoE layer's that --layout selects. */
static int layer_types(const hm_model_layer *l, const char *layout, hm_gemm_type types[3]) {
  int n = 0;
  if (l->config.experts == 1) {
    types[n++] = HM_GEMM_DENSE;
    return n;
  }
  for (size_t i = 0; i < HM_ARRAY_SIZE(moe_layouts); i++)
    if (layout_selects(layout, i)) types[n++] = moe_layouts[i].type;
  return n;
}

/* One GEMM type of one layer, as the options ask: the gaps, the plan, or a tuning run. */
static int run_type(hm_engine *e, const hm_model_layer *l, hm_gemm_type type, const tune_opts *o,
                    const hm_device_profile *p, const char *root) {
  if (!o->gaps) return o->plan ? plan_layer(l, type, p, o->max_m) : tune_layer(e, l, type, o, root);
  if (hm_cli_tune_gaps(l, type, p) == HM_OK) return 0;
  fprintf(stderr, "humming-moe tune: %s: %s\n", l->role, hm_last_error());
  return 1;
}

static int run_layers(hm_engine *e, const hm_model_layer *layers, int count, const tune_opts *o,
                      const hm_device_profile *p, const char *root) {
  int rc = 0;
  for (int i = 0; i < count && rc == 0; i++) {
    if (o->layer[0] != '\0' && strcmp(o->layer, layers[i].role) != 0) continue;
    hm_gemm_type types[3];
    const int n = layer_types(&layers[i], o->layout, types);
    for (int t = 0; t < n && rc == 0; t++) rc = run_type(e, &layers[i], types[t], o, p, root);
  }
  return rc;
}

/* Whether --layer names one of the model's layers (or is not given); says which it has if not. */
static bool layer_known(const hm_model_layer *layers, int count, const tune_opts *o) {
  if (o->layer[0] == '\0') return true;
  for (int i = 0; i < count; i++)
    if (strcmp(o->layer, layers[i].role) == 0) return true;
  fprintf(stderr, "humming-moe tune: --layer %s: %s has no such layer; it has", o->layer, o->model);
  for (int i = 0; i < count; i++) fprintf(stderr, " %s", layers[i].role);
  fprintf(stderr, "\n");
  return false;
}

int hm_cli_tune(int argc, char **argv) {
  tune_opts o = {.model = "deepseek-v3", .quant = "w4a16", .layout = "all", .tp = 1, .ep = 1, .chain = 1};
  int rc = parse(argc, argv, &o);
  if (rc >= 0) return rc;
  hm_model_preset preset;
  hm_quant_scheme scheme;
  hm_model_layer layers[HM_MODEL_MAX_LAYERS];
  int count = 0;
  if (hm_model_preset_get(o.model, &preset) != HM_OK || hm_quant_scheme_parse(o.quant, &scheme) != HM_OK ||
      hm_model_layers(&preset, &scheme, (int)o.tp, (int)o.ep, layers, &count) != HM_OK) {
    fprintf(stderr, "humming-moe tune: %s\n", hm_last_error());
    return EXIT_USAGE;
  }
  if (!layer_known(layers, count, &o)) return EXIT_USAGE;
  hm_engine_config ec = HM_ENGINE_CONFIG_INIT;
  ec.backend = o.plan ? HM_BACKEND_HOST : HM_BACKEND_CUDA;
  hm_engine *e = NULL;
  hm_device_profile p;
  char root[1024] = "";
  if (hm_engine_create(&ec, &e) != HM_OK || hm_device_profile_for_engine(e, &p) != HM_OK ||
      (!o.plan && hm_cache_default_root(root, sizeof(root)) != HM_OK)) {
    fprintf(stderr, "humming-moe tune: %s\n", hm_last_error());
    hm_engine_destroy(e);
    return 1;
  }
  printf(
      "# humming-moe tune  model=%s quant=%s layout=%s tp=%lld ep=%lld chain=%lld  dev=%s  profile=%s%s%s\n",
      o.model, o.quant, o.layout, (long long)o.tp, (long long)o.ep, (long long)o.chain,
      hm_engine_device_name(e), p.name, o.plan ? "" : "  table=", root);
  if (o.gaps)
    hm_cli_tune_gaps_header();
  else if (o.plan)
    printf("# %-16s %-18s %9s %11s %11s  %s\n", "layer", "type", "valid_M", "roofline_us", "predict_us",
           "choice");
  else
    printf("# %-16s %-18s %9s %11s %11s %11s %11s %8s %8s  %s\n", "layer", "type", "valid_M", "predict_us",
           "heur_us", "default_us", "tuned_us", "speedup", "pred_err", "tuned");
  rc = run_layers(e, layers, count, &o, &p, root);
  hm_engine_destroy(e);
  hm_shutdown();
  return rc;
}
