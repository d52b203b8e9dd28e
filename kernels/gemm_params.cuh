// SPDX-License-Identifier: Apache-2.0
// The one argument of every GEMM kernel, passed by value. Mirrors struct
// hm_gemm_kernel_params in kernels/gemm_launch.h field by field; the generated source
// checks the size the host saw (HM_GEMM_PARAMS_BYTES).
#pragma once

// A CUtensorMap: opaque, 128-byte aligned as cuda.h declares it.
struct alignas(128) hm_tma_map {
  unsigned long long opaque[16];
};

struct hm_gemm_params {
  const void *a;                 // activations, row stride K
  void *c;                       // output, row stride N
  const void *b;                 // transformed weights (E, N/64, K/16, unit)
  const void *scales;            // (E, G, N/64, 64) in the activation type
  const unsigned char *zeros;    // (E, G, N/64, 64) 8-bit zero points
  const void *bias;              // (E, N) in the output type
  const float *global_scale;     // (E)
  const int *expert_offsets;     // contiguous: segment starts
  const int *expert_counts;      // contiguous and masked: valid rows
  const int *sorted_ids;         // indexed
  const int *expert_ids;         // indexed: per block_m rows
  const int *num_padded;         // indexed: rows of sorted_ids in use
  const float *topk_weights;     // indexed, optional
  float *partials;               // Stream-K: 2 slots of bm*bn floats per CTA
  int *counters;                 // Stream-K: one per CTA, zero between launches
  long long m;                   // dense/contiguous rows, indexed tokens, masked max_m
  int top_k;
  int a_rows_per_token;
  int block_m;                   // indexed metadata block
  int grid;                      // CTAs of the persistent grid
  int routing_ready;             // grouped: routing complete before launch (gemm_pdl.cuh)
  int max_padded;                // indexed: rows sorted_ids holds, the bound of *num_padded
  const float *a_scale;          // W8A8: activation scales per A row, or per A row and 128 columns
  const void *next_b;            // the stream's next GEMM's weights, to warm in L2 (gemm_mainloop.cuh)
  long long next_unit_bytes;     // its bytes a 64-column unit over all of K
  int next_units;                // its units (E x N/64); 0: nothing to warm
  hm_tma_map tma_a;              // where C::tma_a: the activations for TMA (gemm_launch.c)
  hm_tma_map tma_c, tma_c8;      // where C::tma_c: the output, boxes of tma_c_rows and of 8 rows
};
