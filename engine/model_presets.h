/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Shapes of the MoE models the benchmark and the precompiler know by name, taken from
 * each model's published config, plus "tiny" (CI) and "deepseek-mini" (the embedded
 * default: DeepSeek-style routing, small enough for the host backend).
 */
#ifndef HM_MODEL_PRESETS_H
#define HM_MODEL_PRESETS_H

#include <stddef.h>
#include <stdint.h>

#include "humming.h"

/* How router logits become top-k experts and weights. */
typedef enum hm_model_router {
  HM_MODEL_ROUTER_SOFTMAX = 0,    /* softmax over experts, top-k, optional renormalize */
  HM_MODEL_ROUTER_SIGMOID_GROUPED /* sigmoid + bias, top groups then top-k (DeepSeek-V3) */
} hm_model_router;

/* The gated activation between the two expert GEMMs. */
typedef enum hm_model_act {
  HM_MODEL_ACT_SILU = 0,  /* SiLU(gate) * up */
  HM_MODEL_ACT_GELU,      /* GELU(gate) * up */
  HM_MODEL_ACT_SWIGLU_OAI /* gpt-oss: clamped gate * sigmoid(1.702 gate) * (up + 1) */
} hm_model_act;

/* Attention projections: plain multi-head/grouped-query, or DeepSeek's latent attention. */
typedef enum hm_model_attn { HM_MODEL_ATTN_GQA = 0, HM_MODEL_ATTN_MLA } hm_model_attn;

typedef struct hm_model_preset {
  char name[32];
  int64_t hidden;           /* model width H */
  int64_t moe_intermediate; /* I of one expert */
  int64_t experts;          /* routed experts E */
  int top_k;
  int shared_experts; /* always-on experts of width moe_intermediate */
  hm_model_router router;
  int n_group, topk_group; /* grouped routing; 1 and 1 when ungrouped */
  double routed_scaling;   /* multiplies the routed experts' sum */
  bool renormalize;        /* top-k weights renormalized to sum to 1 */
  hm_model_act act;
  bool expert_bias;           /* expert GEMMs carry a bias (gpt-oss) */
  int layers;                 /* decoder layers */
  int dense_layers;           /* leading layers with a dense MLP instead of MoE */
  int64_t dense_intermediate; /* width of that dense MLP */
  hm_model_attn attn;
  int heads, kv_heads, head_dim; /* GQA; for MLA, heads and v_head_dim in head_dim */
  int q_lora_rank, kv_lora_rank; /* MLA only (q_lora_rank 0: no query compression) */
  int qk_nope_dim, qk_rope_dim;  /* MLA only */
  int64_t vocab;                 /* LM head rows */
} hm_model_preset;

/* Finds a preset by name; HM_INVALID_ARGUMENT listing the known names otherwise. */
hm_status hm_model_preset_get(const char *name, hm_model_preset *out);
/* Number of presets, and the i-th one (NULL past the end), for listings. */
int hm_model_preset_count(void);
const hm_model_preset *hm_model_preset_at(int i);
/* Whether a MoE layer of `experts` routed experts and top_k runs shared experts of total
 * width shared_width as one more routed expert (moe/layer.c): they are exactly one expert
 * wide, and the expert and top-k counts have room for one more. */
bool hm_moe_fuses_shared(int64_t experts, int top_k, int64_t shared_width, int64_t intermediate);

/*
 * The routed experts' GEMMs of preset p on one of tp x ep ranks, as the MoE layers make
 * them. One rank (hm_moe_layer_create) runs shared experts as one more routed expert where
 * hm_moe_fuses_shared says so, a row more a token; ranks of a group (comm/moe_dist.c) take
 * dispatched rows one at a time and run shared experts as a layer of their own.
 */
typedef struct hm_model_routed {
  int64_t experts;   /* the GEMMs' expert dimension */
  int top_k;         /* rows a token brings to a launch (hm_layer_config's top_k) */
  bool shared_fused; /* no dense shared-expert GEMMs */
} hm_model_routed;
hm_model_routed hm_model_preset_routed(const hm_model_preset *p, int tp, int ep);
/* Checks the shape is usable (positive sizes, top_k <= experts, groups divide experts). */
hm_status hm_model_preset_check(const hm_model_preset *p);
/* Names of the enums, for headers and JSON. */
const char *hm_model_router_name(hm_model_router router);
const char *hm_model_act_name(hm_model_act act);
/* Parameters of one routed expert's gate_up and down weights (3*H*I). */
int64_t hm_model_expert_params(const hm_model_preset *p);
/* "deepseek-v3 H=7168 I=2048 E=256 k=8 ..." into buf. */
void hm_model_preset_describe(const hm_model_preset *p, char *buf, size_t len);

#endif
