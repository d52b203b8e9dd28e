/* SPDX-License-Identifier: Apache-2.0 */
/* humming-moe-bench options: the table, the defaults, and resolving names into shapes. */
#include <string.h>

#include "bench/bench.h"
#include "heuristics/choose_engine.h"

static const char *const mode_names[] = {"kernel", "layer", "comm", "e2e"};

#define NO_LIMIT 1e15
#define MAX_OPTS 48

/* The whole option table; one entry per flag, shared by the parser and the usage text. */
static int option_table(hm_bench_opts *o, hm_opt *t) {
  const hm_opt table[] = {
      {"--model", HM_OPT_STR, o->model_name, 0, 0, "NAME", "model preset (--list-models)", NULL},
      {"--hidden", HM_OPT_INT, &o->hidden, 0, 1 << 20, "H", "override the preset's hidden size", NULL},
      {"--intermediate", HM_OPT_INT, &o->intermediate, 0, 1 << 20, "I", "override the expert width", NULL},
      {"--experts", HM_OPT_INT, &o->experts, 0, 1 << 16, "E", "override the number of experts", NULL},
      {"--top-k", HM_OPT_INT, &o->top_k, 0, 1024, "K", "override experts per token", NULL},
      {"--shared-experts", HM_OPT_INT, &o->shared_experts, 0, 64, "S",
       "override the shared experts (0: a plain grouped GEMM in kernel mode)", &o->seen_shared},
      {"--layers", HM_OPT_INT, &o->layers, 0, 1024, "L", "override the number of layers (e2e)", NULL},
      {"--quant", HM_OPT_STR, o->quant_name, 0, 0, "SCHEME", HM_QUANT_SCHEMES, &o->seen_quant},
      {"--layout", HM_OPT_STR, o->layout_name, 0, 0, "L",
       "kernel: indexed|contiguous|masked|dense; else auto|indexed|contiguous|masked", NULL},
      {"--gemm", HM_OPT_STR, o->gemm_name, 0, 0, "G", "kernel mode: gate_up | down", NULL},
      {"--acc", HM_OPT_STR, o->acc_name, 0, 0, "A",
       "kernel mode: f32 | f16 accumulation of fp8 MMAs (f16: per-channel, mxfp4 or nvfp4 weights, "
       "per-token scales)",
       NULL},
      {"--plan", HM_OPT_STR, o->plan_name, 0, 0, "P",
       "kernel mode: kernel tables from auto|heuristic|tuned|default, all three side by side, or one "
       "kernel pinned for every M (bm128_bn256_bk128_w1x8x1_s4_sk4_c1_wgmma[_ws]) (default: HUMMING_GEMM_PLAN)",
       NULL},
      {"--m", HM_OPT_LIST, &o->m, 1, 1 << 24, "LIST",
       "token counts: 1:8192:x2, 16:256:+16 or 1,8,64 (host: 1:256:x4)", &o->seen_m},
      {"--ep", HM_OPT_INT, &o->ep, 1, 4096, "N", "expert-parallel ranks", &o->seen_ep},
      {"--tp", HM_OPT_INT, &o->tp, 1, 4096, "N", "tensor-parallel ranks", &o->seen_ep},
      {"--iters", HM_OPT_INT, &o->iters, 1, 1000000, "N", "timed runs per size (host: 5)", &o->seen_iters},
      {"--warmup", HM_OPT_INT, &o->warmup, 0, 1000000, "N", "untimed runs first (host: 1)", &o->seen_warmup},
      {"--check", HM_OPT_INT, &o->check, 0, 1, "0|1", "compare with the host reference before timing", NULL},
      {"--graph", HM_OPT_INT, &o->graph, -1, 1, "-1|0|1", "CUDA graph replay: -1 = for M <= 256", NULL},
      {"--chain", HM_OPT_INT, &o->chain, 1, HM_BENCH_CHAIN_MAX, "R",
       "kernel mode: R forwards back to back per timed sample, over distinct weights (dense) or routings "
       "(MoE), as layers run in a serving engine; times per forward",
       NULL},
      {"--warm-next", HM_OPT_INT, &o->warm_next, 0, 1, "0|1",
       "kernel-mode chains: each forward names the next member's layer (hm_gemm_args.next_layer), whose "
       "weights a dense decode launch warms in L2 (level on an H100; not yet timed on an H200)",
       NULL},
      {"--flush", HM_OPT_INT, &o->flush, 0, 1, "0|1", "flush L2 between timed runs", NULL},
      {"--seed", HM_OPT_INT, &o->seed, 0, NO_LIMIT, "N", "seed of the random data", NULL},
      {"--backend", HM_OPT_STR, o->backend_name, 0, 0, "B", "auto | host | cuda", NULL},
      {"--baseline", HM_OPT_STR, o->baseline_name, 0, 0, "B", "ours (bf16 through hm_layer) | torch | none",
       NULL},
      {"--roof-bw", HM_OPT_DOUBLE, &o->roof_bw_tbs, 0, 1000, "TB/s", "memory roofline (0: device's)", NULL},
      {"--roof-tflops", HM_OPT_DOUBLE, &o->roof_tflops, 0, 1e6, "TF", "bf16 tensor roofline (0: device's)",
       NULL},
      {"--json", HM_OPT_STR, o->json_path, 0, 0, "FILE", "write the report as JSON", NULL},
      {"--csv", HM_OPT_STR, o->csv_path, 0, 0, "FILE", "write the rows as CSV", NULL},
      {"--concurrency", HM_OPT_LIST, &o->concurrency, 1, 65536, "LIST",
       "e2e: requests in flight (host: 1,4,16)", &o->seen_concurrency},
      {"--rate", HM_OPT_DOUBLE, &o->rate, 0, 1e9, "R", "e2e: Poisson arrivals per second (0: closed loop)",
       NULL},
      {"--requests", HM_OPT_INT, &o->requests, 0, 1 << 24, "N",
       "e2e: requests per run (0: 2 x concurrency, at least 4)", &o->seen_requests},
      {"--input-len", HM_OPT_STR, o->input_len, 0, 0, "N|LO:HI",
       "e2e: prompt tokens, LO:HI uniform (host: 32)", &o->seen_input},
      {"--output-len", HM_OPT_STR, o->output_len, 0, 0, "N|LO:HI", "e2e: generated tokens (host: 8)",
       &o->seen_output},
      {"--max-step-tokens", HM_OPT_INT, &o->max_step_tokens, 1, 1 << 20, "N",
       "e2e: tokens per batch step (host: 256)", &o->seen_step},
      {"--distinct-layers", HM_OPT_INT, &o->distinct_layers, 0, 1024, "N",
       "e2e: layers with their own weights, cycled (0: as many as fit)", NULL},
      {"--list-models", HM_OPT_FLAG, &o->list_models, 0, 0, NULL, "print the presets and exit", NULL},
      {"--help", HM_OPT_FLAG, &o->help, 0, 0, NULL, "this text", NULL},
  };
  _Static_assert(sizeof(table) / sizeof(table[0]) <= MAX_OPTS, "raise MAX_OPTS");
  int n = (int)(sizeof(table) / sizeof(table[0]));
  if (t != NULL) memcpy(t, table, sizeof(table));
  return n;
}

static void set_defaults(hm_bench_opts *o) {
  memset(o, 0, sizeof(*o));
  o->mode = HM_MODE_LAYER;
  strcpy(o->model_name, "deepseek-mini");
  strcpy(o->quant_name, "w4a16");
  strcpy(o->gemm_name, "gate_up");
  strcpy(o->acc_name, "f32");
  strcpy(o->backend_name, "auto");
  strcpy(o->baseline_name, "ours");
  strcpy(o->input_len, "512");
  strcpy(o->output_len, "128");
  hm_int_list_parse("1:8192:x2", 1, 1 << 24, &o->m, NULL, 0);
  hm_int_list_parse("1:256:x4", 1, 65536, &o->concurrency, NULL, 0);
  o->ep = o->tp = 1;
  o->iters = 100;
  o->warmup = 10;
  o->check = 1;
  o->graph = -1;
  o->flush = 1;
  o->chain = 1;
  o->seed = 1234;
  o->max_step_tokens = 2048;
}

/* The defaults above are the GPU's; the host backend gets sizes a 2-core machine runs in seconds. */
void hm_bench_backend_defaults(hm_bench_opts *o, bool cuda) {
  if (cuda) return;
  if (!o->seen_m) hm_int_list_parse("1:256:x4", 1, 1 << 24, &o->m, NULL, 0);
  if (!o->seen_iters) o->iters = 5;
  if (!o->seen_warmup) o->warmup = 1;
  if (!o->seen_input) strcpy(o->input_len, "32");
  if (!o->seen_output) strcpy(o->output_len, "8");
  if (!o->seen_step) o->max_step_tokens = 256;
  if (!o->seen_concurrency) hm_int_list_parse("1,4,16", 1, 65536, &o->concurrency, NULL, 0);
}

void hm_bench_usage(FILE *out) {
  hm_bench_opts o;
  hm_opt table[MAX_OPTS];
  set_defaults(&o);
  int n = option_table(&o, table);
  fprintf(out,
          "usage: humming-moe-bench [kernel|layer|comm|e2e] [options]\n"
          "  kernel  one expert GEMM (--gemm) per M\n"
          "  layer   one MoE layer (router, dispatch, experts, combine) per M   [default]\n"
          "  comm    expert-parallel dispatch + combine per M (under mpirun)\n"
          "  e2e     a stack of layers serving a request stream, per concurrency\n"
          "With no arguments: layer mode on deepseek-mini, w4a16, GPU if present else host.\n"
          "Exit status: 0 ok, 1 a run failed or a check found wrong values, 2 bad usage.\n\n");
  hm_opts_usage(out, table, n);
}

static bool resolve_layout(const char *name, hm_gemm_type *out) {
  static const struct {
    const char *name;
    hm_gemm_type type;
  } names[] = {{"indexed", HM_GEMM_INDEXED},
               {"contiguous", HM_GEMM_GROUPED_CONTIGUOUS},
               {"masked", HM_GEMM_GROUPED_MASKED},
               {"dense", HM_GEMM_DENSE},
               {"grouped_contiguous", HM_GEMM_GROUPED_CONTIGUOUS},
               {"grouped_masked", HM_GEMM_GROUPED_MASKED}};
  for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
    if (strcmp(names[i].name, name) == 0) return (*out = names[i].type), true;
  return false;
}

static void apply_overrides(hm_bench_opts *o) {
  hm_model_preset *m = &o->model;
  if (o->hidden) m->hidden = o->hidden;
  if (o->intermediate) m->moe_intermediate = o->intermediate;
  if (o->experts) {
    m->experts = o->experts;
    if (m->experts % m->n_group != 0) m->n_group = m->topk_group = 1;
  }
  if (o->top_k) m->top_k = (int)o->top_k;
  if (o->seen_shared) m->shared_experts = (int)o->shared_experts;
  if (o->layers) {
    m->layers = (int)o->layers;
    if (m->dense_layers > m->layers) m->dense_layers = m->layers;
  }
}

static bool resolve_lengths(const hm_bench_opts *o) {
  const char *names[2] = {"--input-len", "--output-len"};
  const char *values[2] = {o->input_len, o->output_len};
  for (int i = 0; i < 2; i++) {
    int64_t lo, hi;
    char err[160];
    if (!hm_range_parse(values[i], 1, 1 << 20, &lo, &hi, err, sizeof(err))) {
      fprintf(stderr, "humming-moe-bench: %s %s: %s\n", names[i], values[i], err);
      return false;
    }
  }
  return true;
}

/* Turns names into the preset, scheme and layout; an error message on stderr otherwise. */
static bool resolve(hm_bench_opts *o) {
  if (hm_model_preset_get(o->model_name, &o->model) != HM_OK) {
    fprintf(stderr, "humming-moe-bench: --model: %s\n", hm_last_error());
    return false;
  }
  apply_overrides(o);
  if (hm_model_preset_check(&o->model) != HM_OK) {
    fprintf(stderr, "humming-moe-bench: %s\n", hm_last_error());
    return false;
  }
  if (hm_quant_scheme_parse(o->quant_name, &o->scheme) != HM_OK) {
    fprintf(stderr, "humming-moe-bench: --quant: %s\n", hm_last_error());
    return false;
  }
  const char *bad = NULL;
  hm_plan_source plan;
  bool kernel = o->mode == HM_MODE_KERNEL;
  o->fp16_accumulate = strcmp(o->acc_name, "f16") == 0;
  if (o->layout_name[0] == '\0') strcpy(o->layout_name, kernel ? "indexed" : "auto");
  o->layout = HM_GEMM_INDEXED;
  bool layer_auto = !kernel && strcmp(o->layout_name, "auto") == 0;
  if (!layer_auto && !resolve_layout(o->layout_name, &o->layout))
    bad = kernel ? "--layout: expected indexed, contiguous, masked or dense"
                 : "--layout: expected auto, indexed, contiguous or masked";
  else if (!kernel && o->layout == HM_GEMM_DENSE)
    bad = "--layout dense is a kernel-mode layout";
  else if (!kernel && o->chain > 1)
    bad = "--chain is a kernel-mode option (layer, comm and e2e time one forward per sample)";
  else if (o->mode == HM_MODE_KERNEL && o->ep * o->tp > 1)
    bad = "--ep/--tp shard the comm, layer and e2e modes; kernel mode times one GPU a rank";
  else if (strcmp(o->gemm_name, "gate_up") != 0 && strcmp(o->gemm_name, "down") != 0)
    bad = "--gemm: expected gate_up or down";
  else if (strcmp(o->acc_name, "f32") != 0 && strcmp(o->acc_name, "f16") != 0)
    bad = "--acc: expected f32 or f16";
  else if (o->fp16_accumulate && (!kernel || o->scheme.act != HM_F8E4M3))
    bad = "--acc f16 is a kernel-mode option of fp8 activations (--quant w8a8-fp8-ch, w4a8-mxfp4 or "
          "w4a8-nvfp4)";
  else if (o->plan_name[0] && strcmp(o->plan_name, "all") &&
           hm_plan_source_parse(o->plan_name, &plan) != HM_OK)
    bad = "--plan: expected auto, heuristic, tuned, default, all or a kernel tuning";
  else if (strcmp(o->backend_name, "auto") && strcmp(o->backend_name, "host") &&
           strcmp(o->backend_name, "cuda"))
    bad = "--backend: expected auto, host or cuda";
  else if (strcmp(o->baseline_name, "ours") && strcmp(o->baseline_name, "torch") &&
           strcmp(o->baseline_name, "none"))
    bad = "--baseline: expected ours, torch or none";
  if (bad) {
    fprintf(stderr, "humming-moe-bench: %s\n", bad);
    return false;
  }
  return resolve_lengths(o);
}

static void list_models(void) {
  for (int i = 0; i < hm_model_preset_count(); i++) {
    char line[256];
    hm_model_preset_describe(hm_model_preset_at(i), line, sizeof(line));
    printf("%s\n", line);
  }
}

int hm_bench_parse(int argc, char **argv, hm_bench_opts *o) {
  set_defaults(o);
  int first = 1;
  if (argc > 1 && argv[1][0] != '-') {
    int mode = -1;
    for (int i = 0; i < (int)(sizeof(mode_names) / sizeof(mode_names[0])); i++)
      if (strcmp(argv[1], mode_names[i]) == 0) mode = i;
    if (mode < 0) {
      fprintf(stderr, "humming-moe-bench: unknown mode '%s' (kernel, layer, comm, e2e)\n", argv[1]);
      return HM_BENCH_EXIT_USAGE;
    }
    o->mode = (hm_bench_mode)mode;
    first = 2;
  }
  hm_opt table[MAX_OPTS];
  int n = option_table(o, table);
  char err[512];
  if (hm_opts_parse(table, n, argc, argv, first, err, sizeof(err)) < 0) {
    fprintf(stderr, "humming-moe-bench: %s\n", err);
    return HM_BENCH_EXIT_USAGE;
  }
  if (o->help || o->list_models) {
    if (o->help)
      hm_bench_usage(stdout);
    else
      list_models();
    return 0;
  }
  return resolve(o) ? 0 : HM_BENCH_EXIT_USAGE;
}
