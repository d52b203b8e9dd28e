/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A whole Mixture-of-Experts layer (public part of humming.h): router, token alignment,
 * expert FFN (gate_up GEMM, activation, down GEMM), shared experts and the top-k
 * weighted combine, on the host backend or one GPU.
 * Tensors are row-major in the engine's memory: x and y [T, H] bf16; router logits
 * [T, E] f32; top-k ids int32 and weights f32 [T, top_k], slot j of token t at t*top_k+j.
 * An expert id of -1 marks a slot the caller masked: it is skipped everywhere.
 */
#ifndef HUMMING_MOE_H
#define HUMMING_MOE_H

#include "core.h"
#include "formats.h"
#include "layer.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Largest expert count and top_k the router and alignment kernels are built for. */
#define HM_MOE_MAX_EXPERTS 1024
#define HM_MOE_MAX_TOP_K 32
#define HM_MOE_MAX_GROUPS 32

/* How logits become scores. */
typedef enum hm_moe_scoring {
  HM_MOE_SCORING_SOFTMAX = 0, /* probabilities over the experts (Mixtral, Qwen) */
  HM_MOE_SCORING_SIGMOID      /* independent sigmoids (DeepSeek-V3) */
} hm_moe_scoring;

/*
 * The router. Scores s = softmax(logits) or sigmoid(logits); experts are chosen by a
 * choice value: the logit for softmax (same order as s), s + bias[e] with a correction
 * bias, else s. With groups > 1 the experts form equal consecutive groups; a group's
 * value is the sum of its two best choices with a correction bias (DeepSeek-V3), else
 * its best choice (DeepSeek-V2); the topk_group best groups stay and top_k experts are
 * chosen among theirs. Ties, of groups and of experts, go to the lower index. Weights
 * are s[id] (never the bias), divided by their sum when renormalize, times scaling.
 * Ids are in decreasing order of choice.
 */
typedef struct hm_moe_router_config {
  hm_moe_scoring scoring;
  int64_t experts;      /* E, 1..HM_MOE_MAX_EXPERTS */
  int top_k;            /* 1..min(E, HM_MOE_MAX_TOP_K) */
  int groups;           /* 1: no grouping; divides E; at most HM_MOE_MAX_GROUPS */
  int topk_group;       /* groups kept, 1..groups */
  bool correction_bias; /* an f32 bias [E] added to the choice only */
  bool renormalize;     /* weights sum to scaling */
  float scaling;        /* routed scaling factor (1 for none) */
} hm_moe_router_config;

#define HM_MOE_ROUTER_CONFIG_INIT \
  { HM_MOE_SCORING_SOFTMAX, 0, 0, 1, 1, false, false, 1.0f }

/* Activation between the two GEMMs, computed in f32. */
typedef enum hm_moe_activation {
  HM_MOE_ACT_SILU_MUL = 0, /* silu(gate) * up */
  HM_MOE_ACT_GELU_MUL,     /* gelu(gate) * up, exact (erf) GELU */
  HM_MOE_ACT_RELU2         /* relu(h)^2, not gated: gate_up has I rows, not 2I */
} hm_moe_activation;

/* How routed rows reach the expert GEMMs (hm_gemm_type). */
typedef enum hm_moe_layout {
  HM_MOE_LAYOUT_AUTO = 0,   /* HUMMING_MOE_LAYOUT, else masked for small T, indexed otherwise */
  HM_MOE_LAYOUT_INDEXED,    /* gathers from x through sorted_ids; no copy of x */
  HM_MOE_LAYOUT_CONTIGUOUS, /* rows copied into per-expert segments padded to block_m */
  HM_MOE_LAYOUT_MASKED      /* rows copied into [E, max_m, H]; fixed shapes (decode, graphs) */
} hm_moe_layout;

/* "auto", "indexed", "contiguous", "masked" ("invalid" otherwise). */
HM_API const char *hm_moe_layout_name(hm_moe_layout layout);

#define HM_MOE_CONFIG_MAGIC 0x686d6d63u /* "hmmc" */

/*
 * A MoE layer. Weights of each expert: gate_up (2I, H) whose rows [0, I) are the gate
 * projection and rows [I, 2I) the up projection ((I, H) for RELU2), and down (H, I).
 * Shared experts run on every token as one FFN of intermediate shared_experts *
 * shared_intermediate, added to the routed sum. When that width is I they run as one
 * more expert of the routed GEMMs (weight 1, last in each token's sum), else as a dense pair.
 */
typedef struct hm_moe_config {
  uint32_t size;
  uint32_t magic;
  int64_t hidden;              /* H */
  int64_t intermediate;        /* I, per expert */
  hm_moe_router_config router; /* experts and top_k live here */
  hm_moe_activation activation;
  hm_quant_scheme scheme; /* of the expert GEMMs (hm_quant_scheme_parse) */
  hm_moe_layout layout;
  int64_t shared_experts;      /* 0: none */
  int64_t shared_intermediate; /* per shared expert; 0: intermediate */
} hm_moe_config;

#define HM_MOE_CONFIG_INIT                                                                            \
  {                                                                                                   \
    sizeof(hm_moe_config), HM_MOE_CONFIG_MAGIC, 0, 0, HM_MOE_ROUTER_CONFIG_INIT, HM_MOE_ACT_SILU_MUL, \
        {{HM_BF16, HM_BF16, HM_SCALE_NONE, 0, 0, false, false}, HM_BF16, HM_ACT_SCALE_NONE},          \
        HM_MOE_LAYOUT_AUTO, 0, 0                                                                      \
  }

/*
 * Fills the architecture of a model preset (hidden, intermediate, router, activation,
 * shared experts), e.g. "deepseek-v3", "qwen3-30b-a3b", "mixtral-8x7b"; leaves scheme and
 * layout as they are. HM_INVALID_ARGUMENT naming the known models for an unknown one,
 * HM_UNSUPPORTED for a model whose activation or expert bias the layer lacks (gpt-oss).
 */
HM_API hm_status hm_moe_config_for_model(const char *model, hm_moe_config *config);

/*
 * Stages of a forward, in order, for hm_moe_stats. Fused work is timed in the first stage
 * it covers: a decode step's router, alignment and permutation are one kernel (router),
 * shared experts run as a routed expert are in the GEMM stages.
 */
typedef enum hm_moe_stage {
  HM_MOE_STAGE_ROUTER = 0,
  HM_MOE_STAGE_ALIGN,   /* alignment metadata */
  HM_MOE_STAGE_PERMUTE, /* quantization of x for 8-bit paths, rows copied into expert order */
  HM_MOE_STAGE_GEMM1,   /* gate_up */
  HM_MOE_STAGE_ACT,
  HM_MOE_STAGE_GEMM2,  /* down */
  HM_MOE_STAGE_SHARED, /* the dense shared pair's two GEMMs and activation */
  HM_MOE_STAGE_COMBINE,
  HM_MOE_STAGE_COUNT
} hm_moe_stage;

/* "router", "align", ... ("invalid" otherwise). */
HM_API const char *hm_moe_stage_name(hm_moe_stage stage);

/* What the last forward did. */
typedef struct hm_moe_stats {
  hm_moe_layout layout; /* the layout it used */
  int64_t tokens;
  int launches; /* kernels enqueued, each hm_layer_forward counted as one */
  bool timed;   /* stage_us is valid: profiling was on */
  float stage_us[HM_MOE_STAGE_COUNT];
  float total_us;
} hm_moe_stats;

/* Arguments of one forward; pointers in the engine's memory. */
typedef struct hm_moe_forward_args {
  int64_t tokens;             /* T; 0 is a no-op */
  const void *x;              /* [T, H] bf16 */
  const float *router_logits; /* [T, E]; ignored when topk_ids is set */
  const int32_t *topk_ids;    /* [T, top_k] from the caller (the router is skipped), or NULL */
  const float *topk_weights;  /* [T, top_k], with topk_ids */
  void *y;                    /* [T, H] bf16 */
} hm_moe_forward_args;

typedef struct hm_moe_layer hm_moe_layer;

/* Creates a layer (its GEMM layers included); checks the configuration. The engine must outlive it. */
HM_API hm_status hm_moe_layer_create(hm_engine *engine, const hm_moe_config *config, hm_moe_layer **out);
/* Destroys a layer; NULL is a no-op. */
HM_API void hm_moe_layer_destroy(hm_moe_layer *layer);
/* Quantizes f32 expert weights from the host: gate_up (E, 2I, H) (RELU2: (E, I, H)), down (E, H, I). */
HM_API hm_status hm_moe_layer_quantize(hm_moe_layer *layer, const float *gate_up, const float *down);
/* Loads expert weights in the canonical contract (hm_weights_view) from the host. */
HM_API hm_status hm_moe_layer_load(hm_moe_layer *layer, const hm_weights_view *gate_up,
                                   const hm_weights_view *down);
/*
 * Shared experts, f32 from the host: gate_up (2*S*Is, H), rows [0, S*Is) the gates of all
 * shared experts, then their ups ((S*Is, H) for RELU2); down (H, S*Is).
 */
HM_API hm_status hm_moe_layer_quantize_shared(hm_moe_layer *layer, const float *gate_up, const float *down);
/* Shared experts in the canonical contract, shapes as for hm_moe_layer_quantize_shared. */
HM_API hm_status hm_moe_layer_load_shared(hm_moe_layer *layer, const hm_weights_view *gate_up,
                                          const hm_weights_view *down);
/* The router's correction bias f32 [E] from the host (router.correction_bias only). */
HM_API hm_status hm_moe_layer_set_router_bias(hm_moe_layer *layer, const float *bias);
/*
 * The same three loads from the engine's memory (a framework's device tensors), for an
 * embedding host whose weights already live on the GPU. Copies are ordered after the
 * work queued on stream (NULL: the default stream). The expert weights are copied when
 * the call returns (the caller may free its arrays); the router bias is copied on
 * stream, so the caller keeps it until the stream passes this point.
 */
HM_API hm_status hm_moe_layer_load_device(hm_moe_layer *layer, const hm_weights_view *gate_up,
                                          const hm_weights_view *down, hm_stream *stream);
HM_API hm_status hm_moe_layer_load_shared_device(hm_moe_layer *layer, const hm_weights_view *gate_up,
                                                 const hm_weights_view *down, hm_stream *stream);
HM_API hm_status hm_moe_layer_set_router_bias_device(hm_moe_layer *layer, const float *bias, hm_stream *stream);
/*
 * [OUT] gate_up, down: bytes each canonical array of the routed experts (shared false) or
 * of the shared experts (shared true) must hold, for a binding to check its tensors.
 */
HM_API hm_status hm_moe_layer_weights_bytes(const hm_moe_layer *layer, bool shared, hm_weights_bytes *gate_up,
                                            hm_weights_bytes *down);
/*
 * Repacks every loaded weight for the kernels and compiles the layer's kernels; a forward
 * before transform is an error.
 */
HM_API hm_status hm_moe_layer_transform(hm_moe_layer *layer, hm_stream *stream);
/*
 * Allocates the workspace for up to max_tokens per forward, so that a forward of at
 * most that many tokens allocates nothing (or waits on the host): required before
 * capturing a forward in a CUDA graph.
 */
HM_API hm_status hm_moe_layer_reserve(hm_moe_layer *layer, int64_t max_tokens, hm_stream *stream);
/*
 * Runs the layer on stream: y = sum_k w[t,k] * expert(x[t]) (+ shared(x[t])). The call
 * only enqueues work (CUDA): the caller keeps x, logits, ids, weights and y alive and
 * unchanged until stream passes this point. stream may wrap the caller's own CUstream
 * (hm_stream_wrap), e.g. torch.cuda.current_stream(); NULL is the default stream. After
 * hm_moe_layer_reserve for T tokens and one forward, a forward of at most T tokens does
 * not wait on the host and may be captured into a CUDA graph (not while profiling).
 */
HM_API hm_status hm_moe_layer_forward(hm_moe_layer *layer, const hm_moe_forward_args *args,
                                      hm_stream *stream);
/* Times each stage of the following forwards with events (off by default; not for graph capture). */
HM_API hm_status hm_moe_layer_set_profiling(hm_moe_layer *layer, bool on);
/* Stats of the last forward; waits for its end when profiling is on. */
HM_API hm_status hm_moe_layer_stats(hm_moe_layer *layer, hm_moe_stats *out);

/* Rows already grouped by expert, e.g. what an expert-parallel dispatch delivers; engine memory. */
typedef struct hm_moe_grouped_args {
  hm_moe_layout layout;          /* HM_MOE_LAYOUT_CONTIGUOUS or HM_MOE_LAYOUT_MASKED */
  int64_t rows;                  /* rows of x and y: contiguous, expert_offsets[E]; masked, E * max_m */
  int64_t max_m;                 /* masked: rows per expert */
  hm_dtype x_dtype;              /* BF16, or the scheme's activation type (with x_scale when scaled) */
  const void *x;                 /* [rows, H] */
  const float *x_scale;          /* the scheme's activation scales of each row */
  const int32_t *expert_offsets; /* [E + 1] contiguous: segment starts */
  const int32_t *expert_counts;  /* [E] valid rows at the start of each segment */
  int64_t valid_rows;            /* rows that hold data (host value) */
  const int32_t *row_list;       /* [valid_rows] those rows; no other row of y is written */
  void *y;                       /* [rows, H] bf16: expert(x[r]) of each valid row, unweighted */
} hm_moe_grouped_args;

/*
 * The routed experts' FFN alone (gate_up, activation, down) on rows already in expert
 * order, as the last stage of a dispatch: no router, alignment or combine. The layer
 * must have no shared experts (they belong to the tokens' own rank).
 */
HM_API hm_status hm_moe_layer_forward_grouped(hm_moe_layer *layer, const hm_moe_grouped_args *args,
                                              hm_stream *stream);

/* ---- The stages as standalone calls (used by the layer, the benchmark and comm/) ---- */

/* Routes T tokens: logits [T, E] f32 -> ids [T, top_k] int32 and weights [T, top_k] f32. */
HM_API hm_status hm_moe_route(hm_engine *engine, const hm_moe_router_config *config, int64_t tokens,
                              const float *logits, const float *bias, int32_t *topk_ids, float *topk_weights,
                              hm_stream *stream);

/* What to align: top-k ids of T tokens for one layout (not AUTO) and block size. */
typedef struct hm_moe_align_config {
  hm_moe_layout layout;
  int64_t tokens;  /* T */
  int64_t experts; /* E */
  int top_k;
  int block_m;   /* indexed, contiguous: segments are padded to a multiple of it */
  int64_t max_m; /* masked: rows per expert; 0 means T */
} hm_moe_align_config;

/* Array lengths for an alignment (elements) and its scratch space (bytes). */
typedef struct hm_moe_align_sizes {
  int64_t rows;           /* rows of expert-ordered buffers: T*top_k | padded bound | E*max_m */
  int64_t max_padded;     /* indexed: length of sorted_ids */
  int64_t max_blocks;     /* indexed: length of expert_ids (max_padded / block_m) */
  size_t workspace_bytes; /* scratch for hm_moe_align */
} hm_moe_align_sizes;

HM_API hm_status hm_moe_align_get_sizes(const hm_moe_align_config *config, hm_moe_align_sizes *out);

/*
 * Alignment output, in the engine's memory. row_of[t*top_k+j] is the row of (t, j) in
 * the expert-ordered buffers (indexed: t*top_k+j itself; contiguous: inside its expert's
 * segment; masked: e*max_m + rank), -1 when skipped. Within an expert, rows keep the
 * order of t*top_k+j. NULL members are not written.
 */
typedef struct hm_moe_alignment {
  int32_t *row_of;         /* [T*top_k] */
  int32_t *expert_counts;  /* [E] valid rows (masked: at most max_m) */
  int32_t *expert_offsets; /* [E+1] indexed, contiguous: padded segment starts */
  int32_t *num_padded;     /* [1] indexed, contiguous: padded rows in use */
  int32_t *sorted_ids;     /* [max_padded] indexed: t*top_k+j, padding = T*top_k */
  int32_t *expert_ids;     /* [max_blocks] indexed: expert of each block, -1 past the end */
} hm_moe_alignment;

/*
 * Aligns topk_ids [T, top_k]. Ids outside [0, E) other than -1 are refused on the host;
 * on a GPU they are skipped, as are rows beyond max_m in the masked layout (a kernel
 * cannot fail), so ids of one token must be distinct there, as any router's are.
 */
HM_API hm_status hm_moe_align(hm_engine *engine, const hm_moe_align_config *config, const int32_t *topk_ids,
                              const hm_moe_alignment *out, void *workspace, hm_stream *stream);

/* The weighted sum of expert outputs back into token order. */
typedef struct hm_moe_combine_args {
  int64_t tokens;
  int64_t hidden;
  int top_k;
  const void *expert_out;    /* bf16 rows of H in expert order */
  const int32_t *row_of;     /* [T*top_k] row of each (t, j), -1 skipped */
  const float *topk_weights; /* [T, top_k] */
  const void *shared;        /* [T, H] bf16 added to each token, or NULL */
  void *y;                   /* [T, H] bf16 */
} hm_moe_combine_args;

/* y[t] = sum_j w[t,j] * expert_out[row_of[t,j]] (+ shared[t]), f32 sum in j order, one bf16 rounding. */
HM_API hm_status hm_moe_combine(hm_engine *engine, const hm_moe_combine_args *args, hm_stream *stream);

#ifdef __cplusplus
}
#endif

#endif
