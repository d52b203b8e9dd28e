/* SPDX-License-Identifier: Apache-2.0 */
/* The MoE layer object and the plan of one forward's workspace, private to moe/. */
#ifndef HM_MOE_LAYER_INTERNAL_H
#define HM_MOE_LAYER_INTERNAL_H

#include "moe_internal.h"

/* The layer's kernels, compiled at transform (specializations are fixed per layer). */
typedef struct hm_moe_kernels {
  hm_kernel *router, *front, *permute, *convert_x, *act, *shared_act, *combine;
  hm_moe_align_kernels align;
} hm_moe_kernels;

struct hm_moe_layer {
  hm_engine *engine;
  hm_moe_config cfg;
  int64_t gate_up_rows; /* per expert: 2I, or I for RELU2 */
  int64_t shared_width; /* S * Is, 0 without shared experts */
  /*
   * Shared experts as one width-I expert run as expert E of gate_up and down, which
   * then have E + 1 experts: every token takes it as its last slot with weight 1. Else
   * (another width) they are the dense pair shared_gate_up, shared_down.
   */
  bool shared_fused;
  hm_layer *gate_up, *down;
  hm_layer *shared_gate_up, *shared_down;
  float *router_bias; /* engine memory [E], correction_bias only */
  hm_stream *side;    /* CUDA with a dense shared pair: it overlaps the routed path here */
  bool loaded, shared_loaded, bias_set, transformed;
  void *workspace;
  size_t workspace_bytes;
  hm_moe_kernels kernels;
  hm_moe_layout last_layout; /* logged when it changes */
  bool profiling;
  hm_event *events[HM_MOE_STAGE_COUNT + 1];
  hm_moe_stats stats;
};

/* Where the routed (or the shared) experts' weights live: two GEMM layers and an expert range. */
typedef struct hm_moe_weights_at {
  hm_layer *gate_up, *down;
  int64_t first, count;
  int64_t experts; /* of the two GEMM layers, the range's and the others */
} hm_moe_weights_at;

hm_moe_weights_at hm_moe_weights_of(const hm_moe_layer *l, bool shared);

/* Where expert weights come from: f32 to quantize, or weight views in host or engine memory. */
typedef enum hm_moe_fill { HM_MOE_FILL_QUANTIZE, HM_MOE_FILL_HOST, HM_MOE_FILL_DEVICE } hm_moe_fill;

/* Fills the routed (or shared) experts' gate_up and down from two sources of that kind (float
 * arrays or hm_weights_view); the layer needs a transform afterwards. */
hm_status hm_moe_fill_experts(hm_moe_layer *l, bool shared, hm_moe_fill kind, const void *gate_up,
                              const void *down, hm_stream *stream);

/* Alignment metadata sets: one per distinct block_m of the two GEMMs (indexed). */
#define HM_MOE_MAX_SETS 2

/* Byte offsets of one forward's buffers in the workspace; HM_MOE_NONE when absent. */
#define HM_MOE_NONE SIZE_MAX

typedef struct hm_moe_plan {
  hm_moe_layout layout;
  int64_t tokens;
  int slots;  /* per token in the alignment: top_k, + 1 with the shared expert fused */
  bool front; /* router (or given ids), alignment and permutation in one kernel (decode) */
  int sets;
  hm_moe_align_config align[HM_MOE_MAX_SETS]; /* [0] for gate_up, [sets-1] for down */
  hm_moe_align_sizes sizes[HM_MOE_MAX_SETS];
  int64_t rows;   /* rows of the expert-ordered buffers */
  bool convert_x; /* x is not already in the activation type */
  size_t bytes;
  size_t ids, weights, row_of;
  size_t counts[HM_MOE_MAX_SETS], offsets[HM_MOE_MAX_SETS], num_padded[HM_MOE_MAX_SETS];
  size_t sorted_ids[HM_MOE_MAX_SETS], expert_ids[HM_MOE_MAX_SETS], align_ws[HM_MOE_MAX_SETS];
  size_t xq, xq_scale, a_perm, a_perm_scale, h1, h2, h2_scale, h3;
  size_t s1, s2, s2_scale, s3;
} hm_moe_plan;

/* layer_plan.c: the layout for T tokens (config > HUMMING_MOE_LAYOUT > T threshold). */
hm_status hm_moe_choose_layout(const hm_moe_layer *l, int64_t tokens, hm_moe_layout *out);
hm_status hm_moe_plan_make(const hm_moe_layer *l, hm_moe_layout layout, int64_t tokens, hm_moe_plan *plan);
/* Grows the workspace to bytes (waits for the stream first: earlier forwards may use it). */
hm_status hm_moe_workspace_ensure(hm_moe_layer *l, size_t bytes, hm_stream *stream);
/* Bytes of one activation-type element and of the scales of one row of k columns. */
size_t hm_moe_act_bytes(const hm_quant_scheme *s);
size_t hm_moe_act_scale_row_bytes(const hm_quant_scheme *s, int64_t k);

/* layer_forward.c */
hm_status hm_moe_compile_kernels(hm_moe_layer *l);

#endif
