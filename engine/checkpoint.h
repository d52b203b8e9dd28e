/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Hugging Face checkpoint directories (library-internal): config.json (model shape,
 * MoE layers, quantization_config; hf_quant_config.json for ModelOpt), the
 * safetensors shards (model.safetensors.index.json or one model.safetensors), and
 * loading one layer of one rank into the canonical contract through a format adapter.
 * Shards are mapped on first use, so a rank touches only the files, and within them
 * only the bytes, of its experts and tensor-parallel slices. A handle is used by one
 * thread at a time.
 */
#ifndef HM_CHECKPOINT_H
#define HM_CHECKPOINT_H

#include <jansson.h>

#include "quant.h"
#include "safetensors.h"

typedef enum hm_ckpt_family {
  HM_CKPT_DEEPSEEK, /* model_type deepseek_v2, deepseek_v3 */
  HM_CKPT_QWEN_MOE, /* qwen2_moe, qwen3_moe */
  HM_CKPT_MIXTRAL,  /* mixtral */
  HM_CKPT_GPT_OSS   /* gpt_oss */
} hm_ckpt_family;

typedef enum hm_ckpt_ffn_kind {
  HM_FFN_ROUTED, /* routed experts, modules <prefix>.<e>.<proj> (gpt-oss: fused tensors) */
  HM_FFN_SHARED, /* shared expert(s) of a MoE layer, one FFN */
  HM_FFN_DENSE   /* the MLP of a layer without experts */
} hm_ckpt_ffn_kind;

/*
 * One feed-forward block. Its two layers are named "<prefix>.gate_up" (gate and up
 * fused along N as [gate; up], N = 2I, K = H) and "<prefix>.down" (N = H, K = I).
 */
typedef struct hm_ckpt_ffn {
  char prefix[96]; /* "model.layers.3.mlp.experts" */
  hm_ckpt_ffn_kind kind;
  int layer;
  int64_t experts; /* 1 unless routed */
  int64_t hidden, intermediate;
  bool fused; /* gpt-oss: <prefix>.gate_up_proj* (E, 2I, ...) with gate/up rows interleaved */
  const char *gate, *up, *down; /* projection module names */
} hm_ckpt_ffn;

typedef struct hm_ckpt_model {
  hm_ckpt_family family;
  char model_type[32];
  int64_t hidden, layers;
  int64_t intermediate;     /* dense MLP */
  int64_t moe_intermediate; /* one routed expert */
  int64_t experts, top_k;
  int64_t shared_intermediate; /* 0: no shared expert */
  char quant_method[32];       /* normalized: "" (unquantized), gptq, awq, auto-round, fp8, mxfp4,
                                  compressed-tensors, modelopt */
} hm_ckpt_model;

typedef struct hm_ckpt hm_ckpt;

/* Opens a checkpoint directory; errors name the file and field at fault. */
hm_status hm_ckpt_open(const char *dir, hm_ckpt **out);
/* NULL is a no-op. */
void hm_ckpt_close(hm_ckpt *ck);
const char *hm_ckpt_dir(const hm_ckpt *ck);
const hm_ckpt_model *hm_ckpt_model_info(const hm_ckpt *ck);
/* The quantization config object (NULL when unquantized); owned by ck. */
json_t *hm_ckpt_quant_config(const hm_ckpt *ck);
/* The file the quantization config came from ("config.json" or "hf_quant_config.json"). */
const char *hm_ckpt_quant_file(const hm_ckpt *ck);

/* FFN blocks in layer order. */
size_t hm_ckpt_ffn_count(const hm_ckpt *ck);
const hm_ckpt_ffn *hm_ckpt_ffn_at(const hm_ckpt *ck, size_t i);

typedef enum hm_ckpt_proj { HM_PROJ_GATE_UP, HM_PROJ_DOWN } hm_ckpt_proj;
/* Resolves a layer name "<prefix>.gate_up" or "<prefix>.down". */
hm_status hm_ckpt_layer_find(const hm_ckpt *ck, const char *layer, const hm_ckpt_ffn **ffn,
                             hm_ckpt_proj *proj);

/* A tensor and the shard file it lives in. */
typedef struct hm_ckpt_tensor {
  const hm_st_tensor *st;
  const char *file;
} hm_ckpt_tensor;

/* Whether the checkpoint lists a tensor (no file is opened). */
bool hm_ckpt_has(const hm_ckpt *ck, const char *name);
/* Finds a tensor, mapping its shard on first use; HM_CORRUPT naming it if missing. */
hm_status hm_ckpt_get(hm_ckpt *ck, const char *name, hm_ckpt_tensor *out);
/* hm_ckpt_get, then checks dtype and shape: the error names file, tensor, found and expected. */
hm_status hm_ckpt_expect(hm_ckpt *ck, const char *name, hm_st_dtype dtype, int ndim, const int64_t *shape,
                         hm_ckpt_tensor *out);
/* Same for a one-element tensor of shape [], [1] or [1, 1]. */
hm_status hm_ckpt_expect_scalar(hm_ckpt *ck, const char *name, hm_st_dtype dtype, hm_ckpt_tensor *out);
/* Shards mapped so far (tests check that a rank leaves the others alone). */
size_t hm_ckpt_open_files(const hm_ckpt *ck);
/* Every shard file name, in index order, and every tensor name (for inspect). */
size_t hm_ckpt_file_count(const hm_ckpt *ck);
const char *hm_ckpt_file_at(const hm_ckpt *ck, size_t i);
/* Maps shard i (if not yet) and returns it. */
hm_status hm_ckpt_file_open(hm_ckpt *ck, size_t i, hm_safetensors **out);

/* Experts [first, first + count) of a routed FFN; {0, 1} for shared and dense ones. */
typedef struct hm_expert_range {
  int64_t first, count;
} hm_expert_range;

/* The experts of EP rank ep_rank out of ep_size (experts must divide evenly). */
hm_status hm_expert_range_of_rank(int64_t experts, int ep_rank, int ep_size, hm_expert_range *out);

/*
 * What a layer needs besides its weights. k_perm (E, K) int32: output column j of
 * expert e reads activation column k_perm[e*K + j] (GPTQ act-order on gate_up); NULL
 * when every expert keeps the natural order. bias (E, N) f32 (gpt-oss), or NULL.
 */
typedef struct hm_ckpt_extras {
  int32_t *k_perm;
  float *bias;
} hm_ckpt_extras;

void hm_ckpt_extras_free(hm_ckpt_extras *x);

/*
 * Loads layer `layer` of the experts in range for TP rank tp_rank of tp_size into out
 * (allocated here; free with hm_host_weights_free). gate_up keeps rows
 * [r*I/tp, (r+1)*I/tp) of gate and of up, down the same columns. With act-order
 * (g_idx) on down, the intermediate dimension is taken in down's group order for both
 * layers of the FFN (gate_up rows and down columns alike), which leaves the FFN's output
 * unchanged and the down layer without a permutation; act-order on gate_up is a
 * weight-row reorder exposed in extras->k_perm. extras may be NULL only for layers that
 * need neither a permutation nor a bias.
 */
hm_status hm_ckpt_load_layer(hm_ckpt *ck, const char *layer, hm_expert_range experts, int tp_rank,
                             int tp_size, hm_host_weights *out, hm_ckpt_extras *extras);
/* Opens dir, loads one layer as above, closes. */
hm_status hm_checkpoint_load_layer(const char *dir, const char *layer, hm_expert_range experts, int tp_rank,
                                   int tp_size, hm_host_weights *out, hm_ckpt_extras *extras);

/* Format of a layer (from its first expert) without loading it. */
hm_status hm_ckpt_layer_format(hm_ckpt *ck, const char *layer, hm_quant_format *fmt);

/* One layer as one rank of an EP x TP grid holds it. */
typedef struct hm_ckpt_layer_info {
  char name[112]; /* "<prefix>.gate_up" */
  hm_ckpt_ffn_kind kind;
  hm_quant_format fmt;
  int64_t experts, n, k;                /* the whole layer */
  int64_t rank_experts, rank_n, rank_k; /* one rank's share */
  uint64_t rank_bytes;                  /* its canonical weights, scales, zeros, global scales */
  char problem[160];                    /* why this grid cannot load the layer; "" if it can */
} hm_ckpt_layer_info;

/* What inspect reports: the files, the layers, memory per rank for EP x TP. */
typedef struct hm_ckpt_summary {
  size_t files, tensors;
  uint64_t tensor_bytes;                   /* all tensors, as stored */
  uint64_t dtype_bytes[HM_ST_DTYPE_COUNT]; /* the same by dtype */
  hm_ckpt_layer_info *layers;
  size_t layer_count;
  uint64_t ffn_rank_bytes;   /* sum of the layers' rank_bytes */
  uint64_t other_bytes;      /* tensors outside the FFN layers, as stored */
  uint64_t other_rank_bytes; /* estimated share: split over TP, replicated over EP */
  size_t problems;           /* layers with a problem */
} hm_ckpt_summary;

/* Reads every shard header and each layer's format (first expert) for an EP x TP grid. */
hm_status hm_ckpt_summarize(hm_ckpt *ck, int ep, int tp, hm_ckpt_summary *out);
void hm_ckpt_summary_free(hm_ckpt_summary *s);

/* Used by checkpoint*.c: config.json parsing into the model and its FFN list. */
hm_status hm_ckpt_parse_model(const char *path, json_t *config, hm_ckpt_model *model, hm_ckpt_ffn **ffns,
                              size_t *count);

#endif
