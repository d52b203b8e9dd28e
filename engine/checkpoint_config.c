/* SPDX-License-Identifier: Apache-2.0 */
/*
 * config.json: model shape and, per architecture family, which layers are MoE and how
 * their tensors are named.
 *   DeepSeek-V2/V3  model.layers.L.mlp.experts.E.{gate,up,down}_proj, shared experts in
 *                   mlp.shared_experts, MoE from first_k_dense_replace every moe_layer_freq
 *   Qwen2/3-MoE     model.layers.L.mlp.experts.E.{gate,up,down}_proj (qwen2: mlp.shared_expert),
 *                   MoE where (L+1) % decoder_sparse_step == 0 and L not in mlp_only_layers
 *   Mixtral         model.layers.L.block_sparse_moe.experts.E.{w1,w3,w2}, every layer
 *   gpt-oss         model.layers.L.mlp.experts.{gate_up,down}_proj* fused over experts
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "checkpoint.h"

/* Bounds that keep every size product of one layer far from int64 overflow. */
#define DIM_MAX (1 << 20)
#define EXPERTS_MAX (1 << 14)
#define LAYERS_MAX 4096

static hm_status get_int(const char *path, json_t *cfg, const char *key, int64_t def, int64_t lo, int64_t hi,
                         int64_t *out) {
  json_t *v = json_object_get(cfg, key);
  if (v == NULL || json_is_null(v)) {
    if (def < lo) HM_FAIL(HM_CORRUPT, "%s: '%s' is missing", path, key);
    *out = def;
    return HM_OK;
  }
  if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi)
    HM_FAIL(HM_CORRUPT, "%s: '%s' must be an integer in %lld..%lld", path, key, (long long)lo, (long long)hi);
  *out = (int64_t)json_integer_value(v);
  return HM_OK;
}

struct ffn_list {
  hm_ckpt_ffn *items;
  size_t count, capacity;
};

static hm_status add_ffn(struct ffn_list *list, const hm_ckpt_ffn *ffn) {
  if (list->count == list->capacity) {
    size_t capacity = list->capacity ? 2 * list->capacity : 64;
    hm_ckpt_ffn *items = realloc(list->items, capacity * sizeof(*items));
    if (items == NULL) HM_FAIL(HM_OUT_OF_MEMORY, "FFN list of %zu entries", capacity);
    list->items = items;
    list->capacity = capacity;
  }
  list->items[list->count++] = *ffn;
  return HM_OK;
}

static hm_ckpt_ffn make_ffn(int layer, const char *suffix, hm_ckpt_ffn_kind kind, int64_t experts,
                            int64_t hidden, int64_t intermediate) {
  hm_ckpt_ffn f;
  memset(&f, 0, sizeof(f));
  snprintf(f.prefix, sizeof(f.prefix), "model.layers.%d.%s", layer, suffix);
  f.kind = kind;
  f.layer = layer;
  f.experts = experts;
  f.hidden = hidden;
  f.intermediate = intermediate;
  f.gate = "gate_proj";
  f.up = "up_proj";
  f.down = "down_proj";
  return f;
}

static hm_status common_dims(const char *path, json_t *cfg, hm_ckpt_model *m) {
  HM_CHECK(get_int(path, cfg, "hidden_size", -1, 1, DIM_MAX, &m->hidden));
  int64_t layers;
  HM_CHECK(get_int(path, cfg, "num_hidden_layers", -1, 1, LAYERS_MAX, &layers));
  m->layers = layers;
  HM_CHECK(get_int(path, cfg, "num_experts_per_tok", 0, 0, EXPERTS_MAX, &m->top_k));
  return HM_OK;
}

static hm_status parse_deepseek(const char *path, json_t *cfg, hm_ckpt_model *m, struct ffn_list *list) {
  int64_t first_dense, freq, shared;
  HM_CHECK(get_int(path, cfg, "n_routed_experts", -1, 1, EXPERTS_MAX, &m->experts));
  HM_CHECK(get_int(path, cfg, "moe_intermediate_size", -1, 1, DIM_MAX, &m->moe_intermediate));
  HM_CHECK(get_int(path, cfg, "intermediate_size", -1, 1, DIM_MAX, &m->intermediate));
  HM_CHECK(get_int(path, cfg, "n_shared_experts", 0, 0, 64, &shared));
  HM_CHECK(get_int(path, cfg, "first_k_dense_replace", 0, 0, LAYERS_MAX, &first_dense));
  HM_CHECK(get_int(path, cfg, "moe_layer_freq", 1, 1, LAYERS_MAX, &freq));
  m->shared_intermediate = shared * m->moe_intermediate;
  for (int l = 0; l < m->layers; l++) {
    hm_ckpt_ffn f;
    if (l >= first_dense && l % freq == 0) {
      f = make_ffn(l, "mlp.experts", HM_FFN_ROUTED, m->experts, m->hidden, m->moe_intermediate);
      HM_CHECK(add_ffn(list, &f));
      if (shared == 0) continue;
      f = make_ffn(l, "mlp.shared_experts", HM_FFN_SHARED, 1, m->hidden, m->shared_intermediate);
    } else {
      f = make_ffn(l, "mlp", HM_FFN_DENSE, 1, m->hidden, m->intermediate);
    }
    HM_CHECK(add_ffn(list, &f));
  }
  return HM_OK;
}

static hm_status mlp_only(const char *path, json_t *cfg, int layer, bool *out) {
  json_t *list = json_object_get(cfg, "mlp_only_layers");
  *out = false;
  if (list == NULL || json_is_null(list)) return HM_OK;
  if (!json_is_array(list)) HM_FAIL(HM_CORRUPT, "%s: 'mlp_only_layers' is not an array", path);
  size_t i;
  json_t *v;
  json_array_foreach(list, i, v) {
    if (!json_is_integer(v)) HM_FAIL(HM_CORRUPT, "%s: 'mlp_only_layers'[%zu] is not an integer", path, i);
    if (json_integer_value(v) == layer) *out = true;
  }
  return HM_OK;
}

static hm_status parse_qwen(const char *path, json_t *cfg, hm_ckpt_model *m, struct ffn_list *list) {
  int64_t step;
  HM_CHECK(get_int(path, cfg, "num_experts", -1, 1, EXPERTS_MAX, &m->experts));
  HM_CHECK(get_int(path, cfg, "moe_intermediate_size", -1, 1, DIM_MAX, &m->moe_intermediate));
  HM_CHECK(get_int(path, cfg, "intermediate_size", m->moe_intermediate, 1, DIM_MAX, &m->intermediate));
  HM_CHECK(get_int(path, cfg, "shared_expert_intermediate_size", 0, 0, DIM_MAX, &m->shared_intermediate));
  HM_CHECK(get_int(path, cfg, "decoder_sparse_step", 1, 1, LAYERS_MAX, &step));
  for (int l = 0; l < m->layers; l++) {
    bool dense;
    HM_CHECK(mlp_only(path, cfg, l, &dense));
    hm_ckpt_ffn f;
    if (!dense && (l + 1) % step == 0) {
      f = make_ffn(l, "mlp.experts", HM_FFN_ROUTED, m->experts, m->hidden, m->moe_intermediate);
      HM_CHECK(add_ffn(list, &f));
      if (m->shared_intermediate == 0) continue;
      f = make_ffn(l, "mlp.shared_expert", HM_FFN_SHARED, 1, m->hidden, m->shared_intermediate);
    } else {
      f = make_ffn(l, "mlp", HM_FFN_DENSE, 1, m->hidden, m->intermediate);
    }
    HM_CHECK(add_ffn(list, &f));
  }
  return HM_OK;
}

static hm_status parse_mixtral(const char *path, json_t *cfg, hm_ckpt_model *m, struct ffn_list *list) {
  HM_CHECK(get_int(path, cfg, "num_local_experts", -1, 1, EXPERTS_MAX, &m->experts));
  HM_CHECK(get_int(path, cfg, "intermediate_size", -1, 1, DIM_MAX, &m->moe_intermediate));
  m->intermediate = m->moe_intermediate;
  for (int l = 0; l < m->layers; l++) {
    hm_ckpt_ffn f =
        make_ffn(l, "block_sparse_moe.experts", HM_FFN_ROUTED, m->experts, m->hidden, m->moe_intermediate);
    f.gate = "w1";
    f.up = "w3";
    f.down = "w2";
    HM_CHECK(add_ffn(list, &f));
  }
  return HM_OK;
}

static hm_status parse_gpt_oss(const char *path, json_t *cfg, hm_ckpt_model *m, struct ffn_list *list) {
  HM_CHECK(get_int(path, cfg, "num_local_experts", -1, 1, EXPERTS_MAX, &m->experts));
  HM_CHECK(get_int(path, cfg, "intermediate_size", -1, 1, DIM_MAX, &m->moe_intermediate));
  if (m->top_k == 0) HM_CHECK(get_int(path, cfg, "experts_per_token", 0, 0, EXPERTS_MAX, &m->top_k));
  m->intermediate = m->moe_intermediate;
  for (int l = 0; l < m->layers; l++) {
    hm_ckpt_ffn f = make_ffn(l, "mlp.experts", HM_FFN_ROUTED, m->experts, m->hidden, m->moe_intermediate);
    f.fused = true;
    HM_CHECK(add_ffn(list, &f));
  }
  return HM_OK;
}

static const struct {
  const char *model_type;
  hm_ckpt_family family;
  hm_status (*parse)(const char *, json_t *, hm_ckpt_model *, struct ffn_list *);
} families[] = {
    {"deepseek_v3", HM_CKPT_DEEPSEEK, parse_deepseek}, {"deepseek_v2", HM_CKPT_DEEPSEEK, parse_deepseek},
    {"qwen3_moe", HM_CKPT_QWEN_MOE, parse_qwen},       {"qwen2_moe", HM_CKPT_QWEN_MOE, parse_qwen},
    {"mixtral", HM_CKPT_MIXTRAL, parse_mixtral},       {"gpt_oss", HM_CKPT_GPT_OSS, parse_gpt_oss},
};

hm_status hm_ckpt_parse_model(const char *path, json_t *config, hm_ckpt_model *model, hm_ckpt_ffn **ffns,
                              size_t *count) {
  *ffns = NULL;
  *count = 0;
  memset(model, 0, sizeof(*model));
  if (!json_is_object(config)) HM_FAIL(HM_CORRUPT, "%s: not a JSON object", path);
  const char *type = json_string_value(json_object_get(config, "model_type"));
  if (type == NULL) HM_FAIL(HM_CORRUPT, "%s: no 'model_type' string", path);
  for (size_t i = 0; i < HM_ARRAY_SIZE(families); i++) {
    if (strcmp(families[i].model_type, type) != 0) continue;
    model->family = families[i].family;
    snprintf(model->model_type, sizeof(model->model_type), "%s", type);
    HM_CHECK(common_dims(path, config, model));
    struct ffn_list list = {0};
    hm_status ret = families[i].parse(path, config, model, &list);
    if (ret != HM_OK) {
      free(list.items);
      return ret;
    }
    *ffns = list.items;
    *count = list.count;
    return HM_OK;
  }
  HM_FAIL(
      HM_UNSUPPORTED,
      "%s: model_type '%s' is not a supported MoE family (deepseek_v3, deepseek_v2, qwen3_moe, qwen2_moe, "
      "mixtral, gpt_oss)",
      path, type);
}
