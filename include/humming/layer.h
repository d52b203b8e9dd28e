/* SPDX-License-Identifier: Apache-2.0 */
/* Quantized linear layers, dense or with an expert dimension (public part of humming.h). */
#ifndef HUMMING_LAYER_H
#define HUMMING_LAYER_H

#include "core.h"
#include "formats.h"

#ifdef __cplusplus
extern "C" {
#endif

/* How rows of A reach an expert's weights. */
typedef enum hm_gemm_type {
  HM_GEMM_DENSE = 0,          /* C[M,N] = A[M,K] W^T (expert 0) */
  HM_GEMM_INDEXED,            /* rows gathered through sorted_ids, scattered to C */
  HM_GEMM_GROUPED_CONTIGUOUS, /* A rows grouped by expert, segments at expert_offsets */
  HM_GEMM_GROUPED_MASKED      /* A[E, max_m, K], expert_counts valid rows each */
} hm_gemm_type;

/* Name of a GEMM type ("dense", "indexed", "grouped_contiguous", "grouped_masked"). */
HM_API const char *hm_gemm_type_name(hm_gemm_type type);

#define HM_LAYER_CONFIG_MAGIC 0x686d6c63u /* "hmlc" */

typedef struct hm_layer_config {
  uint32_t size;
  uint32_t magic;
  int64_t n;              /* output features */
  int64_t k;              /* input features */
  int64_t experts;        /* 1 for a dense layer */
  hm_quant_scheme scheme; /* weight format and activation type */
  hm_dtype out;           /* F16 or BF16 */
  bool bias;              /* a bias (E, N) in the output type */
  bool batch_invariant;   /* a row's result does not depend on M */
  /* fp8 activations on CUDA: each k32 MMA sums in f16, then in f32 (GeForce Ada runs it at
   * twice the f32 rate; data-center Ada and Hopper at the same). For per-channel fp8,
   * mxfp4 or nvfp4 weights with per-token activation scales; refused for block scales, 1x128
   * activation scales and int8. Off by default; the host reference always sums in f32. */
  bool fp16_accumulate;
  /* Rows one token brings to a launch of this routed layer: the router's top_k where every
   * expert is local. 0 or 1: each row may be a token of its own (dense, expert-parallel
   * shards, unknown). Only ranks kernel plans: a launch's first token already takes top_k
   * experts' weights. */
  int top_k;
} hm_layer_config;

#define HM_LAYER_CONFIG_INIT                                                                           \
  {                                                                                                    \
    sizeof(hm_layer_config), HM_LAYER_CONFIG_MAGIC, 0, 0, 1, {{0}, HM_BF16, 0}, HM_BF16, false, false, \
        false, 0                                                                                       \
  }

/*
 * Weights in the canonical contract, on the host: qweight int32 (E, N, K*bits/32),
 * K-contiguous, LSB-first; scales as hm_scale_kind says; zeros int32 (E, K/g, N*bits/32);
 * global_scale f32 (E); bias (E, N) in the output type. Unused pointers are NULL.
 */
typedef struct hm_weights_view {
  const uint32_t *qweight;
  const void *scales;
  const uint32_t *zeros;
  const float *global_scale;
  const void *bias;
} hm_weights_view;

/*
 * Arguments of one forward. Pointers are in the engine's memory. M-like sizes and
 * top_k are run-time values; the layer picks its kernel from the valid M.
 */
typedef struct hm_gemm_args {
  hm_gemm_type type;
  int64_t m;                    /* dense/contiguous: rows of A; indexed: tokens; masked: max_m */
  const void *a;                /* activations, scheme.act (row stride K) */
  const float *a_scale;         /* for 8-bit activations: per row or per row x 128 columns */
  void *c;                      /* output, config.out (row stride N) */
  const int32_t *expert_offsets; /* contiguous: (E+1) padded segment starts */
  const int32_t *expert_counts;  /* contiguous and masked: (E) valid rows */
  const int32_t *sorted_ids;     /* indexed: token*top_k+slot, or sentinel m*top_k */
  const int32_t *expert_ids;     /* indexed: expert per block of block_m rows, -1 skips */
  const int32_t *num_padded;     /* indexed: device scalar, rows of sorted_ids in use */
  int64_t max_padded;            /* indexed: host upper bound of *num_padded, the rows
                                  * sorted_ids holds; a larger count is read as this */
  int block_m;                   /* indexed: block size the metadata was padded to; contiguous:
                                  * each segment's padding, 0 if unknown (it lets the kernel
                                  * choice estimate the rows routed, not the rows padded) */
  int64_t routed_rows;           /* contiguous and masked: the sum of expert_counts if the host
                                  * knows it, 0 if not; only the kernel choice reads it (m is
                                  * padded rows or the largest expert's, which overstate it) */
  int top_k;                     /* indexed: slots per token; A row = id / a_rows_per_token */
  int a_rows_per_token;          /* indexed: top_k for gate_up (gather), 1 for down */
  const float *topk_weights;     /* indexed: if set, C row id is scaled by topk_weights[id] */
  bool routing_ready;            /* grouped: the routing above (and topk_weights) was complete
                                  * before the kernel just before this launch on the stream
                                  * started, as for an MoE down GEMM after its gate_up; an
                                  * sm_90 decode launch then reads it to warm L2 with its first
                                  * weights while that kernel still drains. Only A and a_scale
                                  * may be that kernel's output. */
  const struct hm_layer *next_layer; /* optional: the layer whose forward follows this one on
                                      * the stream (same engine, transformed). Where that is a
                                      * dense layer, an sm_90 dense decode launch warms L2 with
                                      * the start of its weights once its own are on the way,
                                      * so that the next launch's first weight copies do not
                                      * wait for the DRAM. */
} hm_gemm_args;

typedef struct hm_layer hm_layer;

/* Creates a layer; checks the scheme against the support matrix of the engine's device. */
HM_API hm_status hm_layer_create(hm_engine *engine, const hm_layer_config *config, hm_layer **out);
/* Destroys a layer; NULL is a no-op. */
HM_API void hm_layer_destroy(hm_layer *layer);
/* Loads weights in the canonical contract from host memory. */
HM_API hm_status hm_layer_load(hm_layer *layer, const hm_weights_view *weights);
/*
 * Loads weights in the canonical contract from the engine's memory (device pointers
 * on CUDA, e.g. a framework's tensors; host memory on the host backend). The copies
 * are ordered after the work queued on stream (NULL: the default stream) and done when
 * the call returns: the caller may free or overwrite its arrays afterwards. The layer
 * keeps its own copy; sizes are those of hm_layer_weights_bytes.
 */
HM_API hm_status hm_layer_load_device(hm_layer *layer, const hm_weights_view *weights, hm_stream *stream);

/* Bytes of each canonical weight array of a whole layer (every expert); 0 for an absent one. */
typedef struct hm_weights_bytes {
  size_t qweight, scales, zeros, global_scale, bias;
} hm_weights_bytes;

/* [OUT] out: what hm_layer_load and hm_layer_load_device read from each pointer. */
HM_API hm_status hm_layer_weights_bytes(const hm_layer *layer, hm_weights_bytes *out);
/* Quantizes f32 weights (E, N, K) (round to nearest) and an optional f32 bias (E, N). */
HM_API hm_status hm_layer_quantize(hm_layer *layer, const float *weights, const float *bias);
/*
 * Experts [first, first + count) only, from weights of count experts (views, or f32
 * (count, N, K) and bias (count, N)); the other experts keep theirs, zero before any
 * load. The _device form reads the engine's memory as hm_layer_load_device does.
 */
HM_API hm_status hm_layer_load_experts(hm_layer *layer, int64_t first, int64_t count, const hm_weights_view *weights);
HM_API hm_status hm_layer_load_experts_device(hm_layer *layer, int64_t first, int64_t count,
                                              const hm_weights_view *weights, hm_stream *stream);
HM_API hm_status hm_layer_quantize_experts(hm_layer *layer, int64_t first, int64_t count, const float *weights,
                                           const float *bias);
/* Repacks loaded weights into the kernel's order; forward before transform is an error. */
HM_API hm_status hm_layer_transform(hm_layer *layer, hm_stream *stream);
/* Runs C = A W^T (+ bias) as args says, on stream. */
HM_API hm_status hm_layer_forward(hm_layer *layer, const hm_gemm_args *args, hm_stream *stream);
/* The block_m the layer's kernel uses for a valid row count (indexed metadata must use it). */
HM_API int hm_layer_block_m(const hm_layer *layer, int64_t valid_m);

#ifdef __cplusplus
}
#endif

#endif
