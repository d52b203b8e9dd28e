/* SPDX-License-Identifier: Apache-2.0 */
/*
 * One GEMM of a model made runnable: a layer with random weights of a scheme, random
 * routed inputs for M tokens laid out as the GEMM type wants, the forward as a bench
 * body, its check against hm_ref_gemm, and the bytes and flops it must move and do.
 */
#ifndef HM_BENCH_GEMM_H
#define HM_BENCH_GEMM_H

#include "bench/bench.h"
#include "bench/bench_align.h"
#include "heuristics/choose_engine.h"
#include "quant.h"

typedef struct hm_bench_gemm_shape {
  int64_t n, k, experts; /* experts 1 and top_k 1 for dense */
  int top_k;
  int shared; /* fused shared experts: the last experts, each token's last slots (hm_model_preset_routed) */
  bool down;  /* A holds one row per (token, slot), not per token */
  hm_gemm_type type;
} hm_bench_gemm_shape;

typedef struct hm_bench_gemm_layer {
  hm_quant_scheme scheme;
  hm_host_weights w; /* kept for the reference */
  hm_layer *layer;
} hm_bench_gemm_layer;

/* Inputs of one M, shared by every layer of the shape. */
typedef struct hm_bench_gemm_inputs {
  int64_t tokens;
  int32_t *ids;   /* [tokens, top_k] */
  float *weights; /* [tokens, top_k] */
  float *rows;    /* logical A rows, f32: [tokens, K], or [tokens*top_k, K] when down */
  int64_t rows_count;
} hm_bench_gemm_inputs;

/* One layer at one M: device buffers and the forward's arguments. */
typedef struct hm_bench_gemm_run {
  hm_engine *engine;
  hm_layer *layer;
  hm_gemm_args args;
  hm_bench_align host_align, dev_align;
  void *a, *c;
  float *a_scale, *topk_weights;
  int64_t c_rows;
  int64_t routed_rows; /* tokens x top_k */
  int block_m;
} hm_bench_gemm_run;

/* A layer of the shape with random weights, its kernel tables from plan (HUMMING_GEMM_PLAN's under auto). */
hm_status hm_bench_gemm_layer_create(hm_bench *b, const hm_bench_gemm_shape *shape,
                                     const hm_quant_scheme *scheme, uint64_t seed, hm_plan_source plan,
                                     hm_bench_gemm_layer *out);
void hm_bench_gemm_layer_destroy(hm_bench_gemm_layer *l);

hm_status hm_bench_gemm_inputs_make(const hm_bench_gemm_shape *shape, int64_t tokens, uint64_t seed,
                                    hm_bench_gemm_inputs *out);
void hm_bench_gemm_inputs_free(hm_bench_gemm_inputs *in);

hm_status hm_bench_gemm_run_make(hm_bench *b, const hm_bench_gemm_shape *shape, const hm_bench_gemm_layer *l,
                                 const hm_bench_gemm_inputs *in, hm_bench_gemm_run *out);
void hm_bench_gemm_run_free(hm_bench *b, hm_bench_gemm_run *run);
/* The bench body: one hm_layer_forward of a run. */
hm_status hm_bench_gemm_forward(void *run, hm_stream *stream);
/* Runs once, then counts wrong elements on a sample of tokens against hm_ref_gemm. */
hm_status hm_bench_gemm_check(hm_bench *b, const hm_bench_gemm_shape *shape, const hm_bench_gemm_layer *l,
                              const hm_bench_gemm_inputs *in, hm_bench_gemm_run *run, int64_t *wrong);

/*
 * A short name of the kernel the layer runs for args ("bm16_bn128_bk256_s4", "_sk" with
 * Stream-K), read from the layer's kernel table; "host:" before it on the host, where
 * the reference runs, and "host" alone for schemes no kernel takes.
 */
void hm_bench_kernel_name(const hm_layer *layer, const hm_gemm_args *args, char *buf, size_t len);

/* Bytes a forward must move: weights of the experts it touches, A, scales, C. */
double hm_bench_gemm_bytes(const hm_bench_gemm_shape *shape, const hm_quant_scheme *scheme,
                           const hm_bench_gemm_inputs *in);
double hm_bench_gemm_flops(const hm_bench_gemm_shape *shape, int64_t tokens);
/* Bytes of one expert's weights, scales and zero points in a format. */
double hm_bench_weight_bytes(const hm_quant_format *fmt, int64_t n, int64_t k);
/* Bytes of rows activation rows of K elements with their scales. */
double hm_bench_act_bytes(const hm_quant_scheme *scheme, int64_t rows, int64_t k);
/* Whether the scheme's activations are 8-bit (the tensor rate of the roofline). */
bool hm_bench_act8(const hm_quant_scheme *scheme);

#endif
