/* SPDX-License-Identifier: Apache-2.0 */
/* Sizes of the public structs by name, for bindings (ctypes, cffi) that mirror them. */
#include <string.h>

#include "humming.h"

typedef struct hm_abi_entry {
  const char *name;
  size_t size;
} hm_abi_entry;

#define HM_ABI_(type) \
  { #type, sizeof(type) }

static const hm_abi_entry abi_table[] = {
    HM_ABI_(hm_engine_config),   HM_ABI_(hm_quant_format),      HM_ABI_(hm_quant_scheme),
    HM_ABI_(hm_layer_config),    HM_ABI_(hm_weights_view),      HM_ABI_(hm_weights_bytes),
    HM_ABI_(hm_gemm_args),       HM_ABI_(hm_moe_router_config), HM_ABI_(hm_moe_config),
    HM_ABI_(hm_moe_stats),       HM_ABI_(hm_moe_forward_args),  HM_ABI_(hm_moe_align_config),
    HM_ABI_(hm_moe_align_sizes), HM_ABI_(hm_moe_alignment),     HM_ABI_(hm_moe_combine_args),
    HM_ABI_(hm_comm_world),      HM_ABI_(hm_comm_config),       HM_ABI_(hm_comm_nccl_id),
    HM_ABI_(hm_comm_plan),       HM_ABI_(hm_comm_tokens),       HM_ABI_(hm_comm_expert_batch),
    HM_ABI_(hm_comm_bench_row),
};

size_t hm_abi_sizeof(const char *type_name) {
  if (type_name == NULL) return 0;
  for (size_t i = 0; i < sizeof(abi_table) / sizeof(abi_table[0]); i++)
    if (strcmp(abi_table[i].name, type_name) == 0) return abi_table[i].size;
  return 0;
}
