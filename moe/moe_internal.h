/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What the moe/ files share. Each stage (router, alignment, permutation, activation,
 * combine) has a host implementation and a CUDA one with the same semantics; its _run
 * entry point checks the arguments and picks one by the engine's backend.
 */
#ifndef HM_MOE_INTERNAL_H
#define HM_MOE_INTERNAL_H

#include "engine.h"
#include "kernels/jit.h"
#include "kernels/moe_act.cuh"
#include "kernels/moe_front.cuh"

/* Where a stage runs, and how many kernels the calls so far enqueued. */
typedef struct hm_moe_exec {
  hm_engine *engine;
  hm_stream *stream;
  int launches;
} hm_moe_exec;

static inline bool hm_moe_on_host(const hm_moe_exec *x) {
  return hm_engine_backend(x->engine) == HM_BACKEND_HOST;
}

/*
 * The kernel `name` of the source `defines` + #include "header", compiled for the engine's
 * device. A non-NULL slot caches it: a layer's specializations never change.
 */
hm_status hm_moe_kernel_get(hm_moe_exec *x, hm_kernel **slot, const char *name, const char *defines,
                            const char *header, hm_kernel **out);
/* Launches a kernel whose only parameter is the struct at params, on a grid_x x grid_y grid. */
hm_status hm_moe_kernel_launch(hm_moe_exec *x, hm_kernel *kernel, int64_t grid_x, unsigned grid_y,
                               unsigned block, void *params);
/* Runs one expert GEMM of the layer on the stage's stream. */
hm_status hm_moe_gemm(hm_moe_exec *x, hm_layer *layer, const hm_gemm_args *args);

/* ---- router.c ---- */
hm_status hm_moe_router_config_check(const hm_moe_router_config *c);
/* The #defines that specialize kernels/moe_router.cuh for a config. */
hm_status hm_moe_router_defines(const hm_moe_router_config *c, char *buf, size_t len);
/* The router kernel of a config (compiled once per slot); the _kernel getters of each
 * stage let a layer compile its kernels before the first forward. */
hm_status hm_moe_route_kernel(hm_moe_exec *x, hm_kernel **slot, const hm_moe_router_config *c,
                              hm_kernel **out);
hm_status hm_moe_route_run(hm_moe_exec *x, hm_kernel **slot, const hm_moe_router_config *c, int64_t tokens,
                           const float *logits, const float *bias, int32_t *topk_ids, float *topk_weights);

/* ---- align.c, align_host.c, align_cuda.c ---- */
typedef struct hm_moe_align_kernels {
  hm_kernel *fused, *count, *scan, *scatter;
} hm_moe_align_kernels;

/*
 * Inputs up to this many ids are aligned by one block (one launch, decode); the block
 * walks its 256-id tiles in turn, so larger inputs are faster with three launches.
 */
#define HM_MOE_ALIGN_FUSED_MAX_IDS 2048

/*
 * appended: expert c->experts - 1 is the last of every token's c->top_k slots (a layer's
 * shared expert run by the routed GEMMs); topk_ids then hold the other c->top_k - 1
 * columns, and their ids must name the other experts.
 */
hm_status hm_moe_align_kernels_get(hm_moe_exec *x, hm_moe_align_kernels *slots, int64_t experts);
hm_status hm_moe_align_run(hm_moe_exec *x, hm_moe_align_kernels *slots, const hm_moe_align_config *c,
                           bool appended, const int32_t *topk_ids, const hm_moe_alignment *out,
                           void *workspace);
hm_status hm_moe_align_host(const hm_moe_align_config *c, bool appended, const hm_moe_align_sizes *sizes,
                            const int32_t *topk_ids, const hm_moe_alignment *out);
hm_status hm_moe_align_cuda(hm_moe_exec *x, hm_moe_align_kernels *slots, const hm_moe_align_config *c,
                            bool appended, const hm_moe_align_sizes *sizes, const int32_t *topk_ids,
                            const hm_moe_alignment *out, void *workspace);
/* The kernel parameters of an alignment (workspace NULL: the one-block kernel only). */
void hm_moe_align_params_make(const hm_moe_align_config *c, bool appended, const hm_moe_align_sizes *sizes,
                              const int32_t *topk_ids, const hm_moe_alignment *out, void *workspace,
                              struct hm_moe_align_params *p);

/* ---- permute.c: dst[row_of[i]] = src[i / top_k], for each plane ---- */
typedef struct hm_moe_permute_args {
  int64_t items; /* tokens * top_k */
  int top_k;
  const int32_t *row_of;
  const void *src; /* rows of row_bytes, one per token */
  void *dst;
  size_t row_bytes;
  const void *src2; /* second plane (activation scales), or NULL */
  void *dst2;
  size_t row_bytes2;
} hm_moe_permute_args;

hm_status hm_moe_permute_kernel(hm_moe_exec *x, hm_kernel **slot, hm_kernel **out);
hm_status hm_moe_permute_check(const hm_moe_permute_args *a);
hm_status hm_moe_permute_run(hm_moe_exec *x, hm_kernel **slot, const hm_moe_permute_args *a);
void hm_moe_permute_params_make(const hm_moe_permute_args *a, struct hm_moe_permute_params *p);

/* ---- front.c: router (or given ids), alignment and permutation of a decode step, one kernel ---- */
typedef struct hm_moe_front_args {
  const hm_moe_router_config *router; /* specializes the kernel even when the ids are given */
  int64_t tokens;                     /* 1..HM_FRONT_MAX_TOKENS */
  const float *logits;                /* [T, E] to route, or NULL: given_ids */
  const float *bias;                  /* correction bias, with logits */
  const int32_t *given_ids;           /* [T, top_k] without logits */
  int32_t *topk_ids;                  /* [T, top_k] routed ids, with logits */
  float *topk_weights;                /* [T, top_k] routed weights, with logits */
  bool appended;                      /* as for hm_moe_align_run */
  int sets;                           /* 1 or 2 alignments of the same ids */
  const hm_moe_align_config *align;   /* [sets] */
  const hm_moe_alignment *meta;       /* [sets]; meta[0].row_of places the permutation's rows */
  hm_moe_permute_args permute;        /* dst NULL: no copy; row_of is meta[0].row_of */
} hm_moe_front_args;

/* Whether the front kernel's static shared memory holds an alignment over experts (appended included). */
bool hm_moe_front_fits(int64_t experts, int top_k);
hm_status hm_moe_front_kernel(hm_moe_exec *x, hm_kernel **slot, const hm_moe_router_config *router,
                              int64_t experts, hm_kernel **out);
hm_status hm_moe_front_run(hm_moe_exec *x, hm_kernel **slot, const hm_moe_front_args *a);

/* ---- act.c ---- */
typedef struct hm_moe_act_args {
  int fn; /* HM_ACT_FN_* of kernels/moe_act.cuh */
  int64_t items;
  const int32_t *row_of; /* item -> row, -1 skipped; NULL: the item is the row */
  const void *in;        /* bf16 rows: gate [0, width), up [width, 2 width) when gated */
  int64_t in_stride;     /* elements */
  int64_t width;
  hm_dtype out_type;       /* BF16, F16, F8E4M3, I8 */
  hm_act_scale_kind scale; /* for 8-bit outputs */
  void *out;               /* rows of width */
  float *out_scale;        /* rows of 1 or ceil(width / 128) */
} hm_moe_act_args;

/* The kernel function of a public activation. */
int hm_moe_act_fn_of(hm_moe_activation act);
hm_status hm_moe_act_kernel(hm_moe_exec *x, hm_kernel **slot, const hm_moe_act_args *a, hm_kernel **out);
hm_status hm_moe_act_run(hm_moe_exec *x, hm_kernel **slot, const hm_moe_act_args *a);

/* ---- combine.c ---- */
/*
 * appended: row_of has top_k + 1 columns, the last the row of an expert every token takes
 * with weight 1 (the shared expert run by the routed GEMMs), added after the routed rows
 * as a->shared would be; a->shared is then NULL.
 */
hm_status hm_moe_combine_kernel(hm_moe_exec *x, hm_kernel **slot, int64_t hidden, int top_k, bool shared,
                                bool appended, hm_kernel **out);
hm_status hm_moe_combine_run(hm_moe_exec *x, hm_kernel **slot, const hm_moe_combine_args *a, bool appended);

#endif
