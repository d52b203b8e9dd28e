/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Public part of humming.h for the comm module: one worker per GPU, experts sharded
 * over EP groups and split by TP inside a group, token rows moved between ranks by
 * dispatch (to the experts' owners) and combine (back home, top-k weighted).
 * CUDA engines talk through NCCL (dlopened, HUMMING_LIBNCCL); host engines through MPI.
 * Every call that waits on peers gives up after the timeout (HUMMING_COMM_TIMEOUT),
 * names the rank it waited for and leaves the communicator failed; no call hangs.
 */
#ifndef HUMMING_COMM_H
#define HUMMING_COMM_H

#include "core.h"
#include "formats.h"
#include "layer.h"
#include "moe.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct hm_comm hm_comm;
typedef struct hm_comm_batch hm_comm_batch;

/* Where this process sits in an MPI job. */
typedef struct hm_comm_world {
  int rank, size;             /* in MPI_COMM_WORLD */
  int local_rank, local_size; /* on this node: pass local_rank to hm_engine_config */
} hm_comm_world;

/*
 * [IN] argc, argv (may be NULL) [OUT] out. Initializes MPI unless the host already did,
 * and finds the node-local rank. hm_shutdown finalizes MPI if this call initialized it
 * and no communicator failed (a failed job must not wait in MPI_Finalize for a dead peer).
 */
HM_API hm_status hm_comm_mpi_init(int *argc, char ***argv, hm_comm_world *out);

/* Payload of dispatched rows: bf16, or fp8 e4m3 with one f32 scale per 1x128 (half the bytes). */
typedef enum hm_comm_payload { HM_COMM_PAYLOAD_BF16 = 0, HM_COMM_PAYLOAD_FP8 } hm_comm_payload;

/* Where dispatched rows land on the expert side. */
typedef enum hm_comm_layout {
  HM_COMM_LAYOUT_CONTIGUOUS = 0, /* grouped-contiguous: expert segments padded to block_m */
  HM_COMM_LAYOUT_MASKED          /* grouped-masked: [local_experts, max_m, H] + counts */
} hm_comm_layout;

#define HM_COMM_CONFIG_MAGIC 0x686d6363u /* "hmcc" */

/*
 * A communicator's configuration; every rank must pass the same values (checked at
 * create: a rank that differs makes every rank fail naming it and the field).
 */
typedef struct hm_comm_config {
  uint32_t size;
  uint32_t magic;
  int ep;                  /* expert-parallel size; 0: world / tp */
  int tp;                  /* tensor-parallel size; 0: world / ep, or 1 when ep is 0 too */
  int64_t experts;         /* routed experts of the layer; divisible by ep */
  int64_t hidden;          /* H: elements of a token row; a multiple of 128 */
  int64_t intermediate;    /* I of one expert; divisible by tp */
  int top_k;               /* experts per token */
  int64_t max_tokens;      /* tokens per rank in one dispatch */
  hm_comm_payload payload; /* dispatched rows */
  hm_dtype combine_dtype;  /* BF16 or F32: expert outputs and the combined result */
  hm_comm_layout layout;   /* expert-side layout */
  int block_m;             /* contiguous: segment alignment in rows; 0 means 1 */
  int64_t max_m;           /* masked: rows per expert; 0 means world * max_tokens */
  int timeout_s;           /* 0: HUMMING_COMM_TIMEOUT */
  bool bind;               /* bind threads and memory near the GPU (hwloc) */
  const char *topology;    /* NULL: this machine; "xml:<path>" or "synthetic:<description>" */
} hm_comm_config;

#define HM_COMM_CONFIG_INIT                                                                           \
  {                                                                                                   \
    sizeof(hm_comm_config), HM_COMM_CONFIG_MAGIC, 0, 0, 0, 0, 0, 0, 0, HM_COMM_PAYLOAD_BF16, HM_BF16, \
        HM_COMM_LAYOUT_CONTIGUOUS, 0, 0, 0, true, NULL                                                \
  }

/*
 * [IN] engine, config [OUT] out. Collective over MPI_COMM_WORLD (MPI initialized by
 * hm_comm_mpi_init or the host). CUDA engine: NCCL, its unique id broadcast by MPI;
 * host engine: MPI itself. The engine must outlive the communicator.
 */
HM_API hm_status hm_comm_create_mpi(hm_engine *engine, const hm_comm_config *config, hm_comm **out);

/* An NCCL unique id, made on one rank and handed to the others by the embedding host. */
typedef struct hm_comm_nccl_id {
  char internal[128];
} hm_comm_nccl_id;

/* [OUT] out: a fresh id (loads NCCL). */
HM_API hm_status hm_comm_nccl_id_create(hm_comm_nccl_id *out);
/* [IN] engine (CUDA), config, id, rank, size [OUT] out. Collective over size ranks; no MPI. */
HM_API hm_status hm_comm_create_nccl(hm_engine *engine, const hm_comm_config *config,
                                     const hm_comm_nccl_id *id, int rank, int size, hm_comm **out);
/* Destroys a communicator (aborting its NCCL communicators if it failed); NULL is a no-op. */
HM_API void hm_comm_destroy(hm_comm *comm);

/* This rank's share of the layer: which experts, which slice of the intermediate dimension. */
typedef struct hm_comm_plan {
  int rank, world;
  int ep, tp; /* rank = ep_rank * tp + tp_rank */
  int ep_rank, tp_rank;
  int64_t experts, local_experts, first_expert; /* experts [first, first + local) */
  int64_t intermediate, local_intermediate, first_intermediate;
} hm_comm_plan;

/* [OUT] out: the sharding plan of comm. */
HM_API hm_status hm_comm_get_plan(const hm_comm *comm, hm_comm_plan *out);
/*
 * Copies this rank's shard of f32 gate_up weights (experts, 2I, H) (gate rows, then up
 * rows) into local (local_experts, 2*local_I, H): the columns of its TP slice.
 */
HM_API hm_status hm_comm_shard_gate_up(const hm_comm_plan *plan, int64_t hidden, const float *full,
                                       float *local);
/* Copies this rank's shard of f32 down weights (experts, H, I) into local (local_experts, H, local_I). */
HM_API hm_status hm_comm_shard_down(const hm_comm_plan *plan, int64_t hidden, const float *full,
                                    float *local);

/* "rank 0 GPU 0 0000:17:00.0 NUMA 0 cores 0-15" or "rank 0 no GPU, not bound". */
HM_API const char *hm_comm_binding(const hm_comm *comm);

/* Tokens of one micro-batch on this rank, in the engine's memory. */
typedef struct hm_comm_tokens {
  int64_t count;             /* 0..max_tokens */
  const void *x;             /* [count, H] bf16 */
  const int32_t *topk_ids;   /* [count, top_k] global expert ids; -1 is skipped */
  const float *topk_weights; /* [count, top_k]; read by combine, keep it until then */
} hm_comm_tokens;

/* What dispatch delivers to this rank's experts. Pointers stay valid until the next dispatch. */
typedef struct hm_comm_expert_batch {
  hm_comm_layout layout;
  int64_t local_experts;
  int64_t rows;                       /* rows of x and y: padded segments, or local_experts*max_m */
  int64_t max_m;                      /* masked layout */
  hm_dtype x_dtype;                   /* BF16 or F8E4M3 */
  const void *x;                      /* [rows, H] */
  const float *x_scale;               /* F8E4M3: [rows, H/128] */
  const int32_t *expert_offsets;      /* [local_experts + 1] segment starts (contiguous) */
  const int32_t *expert_counts;       /* [local_experts] valid rows */
  const int32_t *host_expert_offsets; /* the same on the host */
  const int32_t *host_expert_counts;
  void *y;                 /* [rows, H] combine_dtype: write the expert outputs here */
  int64_t valid_rows;      /* rows that hold a dispatched (token, expert) */
  const int32_t *row_list; /* [valid_rows] their rows, in the engine's memory */
} hm_comm_expert_batch;

/* Buffers for one micro-batch in flight; two of them overlap dispatch with compute. */
HM_API hm_status hm_comm_batch_create(hm_comm *comm, hm_comm_batch **out);
/* Destroys a batch; NULL is a no-op. */
HM_API void hm_comm_batch_destroy(hm_comm_batch *batch);

/*
 * [IN] tokens [OUT] out. Exchanges token counts, then sends each (token, expert) row to
 * every TP rank of the expert's EP group, landing in out->x in the configured layout.
 * Each pair of ranks exchanges one message a direction, rows packed by destination.
 * Waits (bounded) for the counts; the rows follow on stream.
 */
HM_API hm_status hm_comm_dispatch(hm_comm_batch *batch, const hm_comm_tokens *tokens, hm_stream *stream,
                                  hm_comm_expert_batch *out);
/*
 * [OUT] y [count, H] combine_dtype. Sums the TP partials in out->y (reduce-scatter),
 * returns the rows to their home ranks and writes y[t] = sum_k w[t,k] * row(t,k).
 */
HM_API hm_status hm_comm_combine(hm_comm_batch *batch, void *y, hm_stream *stream);
/*
 * The identity expert, for benchmarks and tests: y = x (dequantized) for every dispatched
 * row on TP rank 0, zero on the other TP ranks, so that combine returns x * sum(w).
 */
HM_API hm_status hm_comm_loopback(hm_comm_batch *batch, hm_stream *stream);
/* Waits for stream like hm_stream_synchronize, but gives up after the timeout and fails comm. */
HM_API hm_status hm_comm_synchronize(hm_comm *comm, hm_stream *stream);

/* Sums buf (count elements, BF16 or F32) over this rank's TP group, in place. */
HM_API hm_status hm_comm_tp_all_reduce(hm_comm *comm, void *buf, int64_t count, hm_dtype dtype,
                                       hm_stream *stream);
/*
 * Sums buf over the TP group; TP rank t receives chunk t (count/tp elements) in place at
 * buf + t*count/tp. count must be divisible by tp.
 */
HM_API hm_status hm_comm_tp_reduce_scatter(hm_comm *comm, void *buf, int64_t count, hm_dtype dtype,
                                           hm_stream *stream);

/* Expert compute of micro-batch index on stream; fill batch->y. */
typedef hm_status (*hm_comm_expert_fn)(void *user, int index, const hm_comm_expert_batch *batch,
                                       hm_stream *stream);
/*
 * Runs count micro-batches: dispatch of micro-batch i+1 (on a second stream) overlaps the
 * expert compute of i (on stream); y[i] receives the combined rows of tokens[i].
 */
HM_API hm_status hm_comm_run_overlapped(hm_comm *comm, const hm_comm_tokens *tokens, void *const *y,
                                        int count, hm_comm_expert_fn fn, void *user, hm_stream *stream);

/* Benchmark of dispatch and combine (loopback experts) next to a plain all-to-all. */
typedef struct hm_comm_bench_row {
  int64_t tokens; /* per rank */
  hm_comm_payload payload;
  double dispatch_us, combine_us, alltoall_us; /* medians, this rank */
  double dispatch_bytes, combine_bytes;        /* sent by this rank */
  double dispatch_gbps, combine_gbps, alltoall_gbps;
  int64_t wrong; /* combined elements off the expected x * sum(w) */
} hm_comm_bench_row;

/*
 * [IN] tokens_lo..tokens_hi (doubling), iters, warmup [OUT] rows (room for max_rows), n_rows.
 * Uses comm's config (H, top_k, payload ignored: both payloads run); routing is uniform random.
 */
HM_API hm_status hm_comm_bench(hm_comm *comm, int64_t tokens_lo, int64_t tokens_hi, int iters, int warmup,
                               hm_comm_bench_row *rows, int max_rows, int *n_rows);

/* ---- The MoE layer sharded over the communicator's ranks ---- */

typedef struct hm_moe_dist hm_moe_dist;

/*
 * [IN] engine (the communicator's), comm, config: the whole layer (every expert, the full
 * intermediate), agreeing with comm on experts, hidden, intermediate and top_k; comm's
 * combine_dtype bf16; an fp8 payload needs f8e4m3 activations with 1x128 scales.
 * [OUT] out. Collective: this rank's shard is an hm_moe_layer of its local experts and
 * its TP slice of I; shared experts stay whole, as they run on each token's own rank.
 * A rank whose config differs or whose shard cannot be made fails every rank, named.
 */
HM_API hm_status hm_moe_dist_create(hm_engine *engine, hm_comm *comm, const hm_moe_config *config,
                                    hm_moe_dist **out);
/* Destroys the layer (not its communicator); NULL is a no-op. */
HM_API void hm_moe_dist_destroy(hm_moe_dist *layer);
/* f32 weights of the whole layer from the host, as for hm_moe_layer_quantize; each rank quantizes its shard.
 */
HM_API hm_status hm_moe_dist_quantize(hm_moe_dist *layer, const float *gate_up, const float *down);
/*
 * This rank's shard in the canonical contract from the host: gate_up (local_experts,
 * 2 * local_I, H), its slice's gate rows then up rows ((local_experts, local_I, H) for
 * RELU2); down (local_experts, H, local_I). hm_comm_plan says which experts and slice.
 */
HM_API hm_status hm_moe_dist_load_shard(hm_moe_dist *layer, const hm_weights_view *gate_up,
                                        const hm_weights_view *down);
/* The shared experts, whole, as for hm_moe_layer_quantize_shared and hm_moe_layer_load_shared. */
HM_API hm_status hm_moe_dist_quantize_shared(hm_moe_dist *layer, const float *gate_up, const float *down);
HM_API hm_status hm_moe_dist_load_shared(hm_moe_dist *layer, const hm_weights_view *gate_up,
                                         const hm_weights_view *down);
/* The router's correction bias f32 [E] from the host (router.correction_bias only). */
HM_API hm_status hm_moe_dist_set_router_bias(hm_moe_dist *layer, const float *bias);
/* Repacks the loaded weights and compiles the kernels, as hm_moe_layer_transform. */
HM_API hm_status hm_moe_dist_transform(hm_moe_dist *layer, hm_stream *stream);
/*
 * Collective: every rank passes its own tokens (0..max_tokens). y = sum_k w[t,k] *
 * expert(x[t]) (+ shared(x[t])), routed on this rank from router_logits unless topk_ids
 * are given. Waits on the host for the routing (the counts exchange), bounded by the
 * communicator's timeout; the rest is queued on stream.
 */
HM_API hm_status hm_moe_dist_forward(hm_moe_dist *layer, const hm_moe_forward_args *args, hm_stream *stream);

#ifdef __cplusplus
}
#endif

#endif
