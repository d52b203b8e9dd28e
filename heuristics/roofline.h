/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Roofline estimate of one quantized GEMM: the bytes it must move (weights of the
 * experts it touches, their scales and zero points, activations, outputs), the flops it
 * must do, and the larger of the two times on a device profile.
 */
#ifndef HM_ROOFLINE_H
#define HM_ROOFLINE_H

#include "heuristics/device_profile.h"
#include "humming.h"

typedef struct hm_roofline {
  double weight_bytes;   /* quantized weights + scales + zeros of the active experts */
  double act_bytes;      /* A read once */
  double out_bytes;      /* C written once */
  double flops;          /* 2 * rows * N * K */
  double active_experts; /* expected experts touched */
  double mem_us, compute_us, predicted_us;
  bool memory_bound;
} hm_roofline;

/*
 * rows: valid rows of A (tokens * top_k for indexed MoE); experts: E of the layer;
 * top_k: slots per token (1 for dense) used to estimate how many experts are touched
 * by rows/top_k tokens under uniform routing.
 */
hm_status hm_roofline_estimate(const hm_layer_config *config, int64_t rows, int top_k,
                               const hm_device_profile *profile, hm_roofline *out);
/* Expected distinct experts among draws uniform choices out of experts. */
double hm_expected_active_experts(int64_t experts, double draws);

#endif
