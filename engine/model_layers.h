/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The GEMM layers of a model preset on one rank, as the MoE layers and the dense MLP make
 * them: the routed experts' gate_up and down (indexed and the grouped layouts), the shared
 * experts where they are not run as one more routed expert, and the dense MLP layers
 * (dense). What precompile compiles, and what the tuner and the CI checks of the heuristics
 * walk.
 */
#ifndef HM_MODEL_LAYERS_H
#define HM_MODEL_LAYERS_H

#include "model_presets.h"

#define HM_MODEL_MAX_LAYERS 6

typedef struct hm_model_layer {
  hm_layer_config config;
  const char *role; /* "experts.gate_up", "shared.down", ... */
  int shared;       /* the last experts, which every token takes: a shared expert run as a routed one */
  bool a_per_slot;  /* its activations hold a row per routed slot (the experts' down), not per token */
} hm_model_layer;

/* The layers of preset p quantized as scheme on one of tp x ep ranks. */
hm_status hm_model_layers(const hm_model_preset *p, const hm_quant_scheme *scheme, int tp, int ep,
                          hm_model_layer *out, int *count);

#endif
