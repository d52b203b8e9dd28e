/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What the heuristics know about a GPU: multiprocessors, memory bandwidth, tensor-core
 * rates per input type, shared memory and L2. Built in for the GPUs we tune for,
 * measured on the device when there is one, and selectable by name
 * (HUMMING_DEVICE_PROFILE) so choices for another GPU can be made and tested on a CPU.
 */
#ifndef HM_DEVICE_PROFILE_H
#define HM_DEVICE_PROFILE_H

#include "humming.h"

typedef struct hm_device_profile {
  char name[32];           /* "h200" */
  int arch;                /* 10*major+minor */
  int sm_count;
  double mem_bw_gbs;       /* achievable copy bandwidth, GB/s (bytes read + written) */
  double tflops_f16;       /* dense tensor-core rate, f16/bf16 inputs, f32 accumulate */
  double tflops_fp8;       /* 0 where the tensor cores have no fp8 */
  double tflops_int8;
  int smem_per_sm_bytes;
  int smem_per_block_bytes; /* opt-in maximum for one block */
  int l2_bytes;
  bool measured;           /* bandwidth and SMs read off the device */
} hm_device_profile;

/* The built-in profile of that name (h20, h200, h100, a100, l40s, rtx4090, b200). */
hm_status hm_device_profile_builtin(const char *name, hm_device_profile *out);
/* Number of built-in profiles and the name of the i-th, for listings and tests. */
int hm_device_profile_count(void);
const char *hm_device_profile_name(int index);
/*
 * The profile the heuristics use for an engine: HUMMING_DEVICE_PROFILE when set, else
 * the built-in profile matching the device name with SMs read off the device, else
 * (host backend) the h200 profile, so host runs make the same choices as the GPU we
 * measure on.
 */
hm_status hm_device_profile_for_engine(hm_engine *engine, hm_device_profile *out);
/* Replaces mem_bw_gbs with a device-to-device copy probe of bytes (CUDA engines only). */
hm_status hm_device_profile_probe_bandwidth(hm_engine *engine, size_t bytes, hm_device_profile *profile);

#endif
