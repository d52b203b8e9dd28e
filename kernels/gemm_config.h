/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The configuration of one weight-only GEMM kernel: every field is a compile-time
 * constant of the generated source. Three parts: the layer (types, group, shape,
 * experts), the compute (GEMM type, batch invariance, f16 accumulation) and the tuning
 * (tiles, warps, stages, Stream-K). M, pointers, top_k and MoE metadata are run-time
 * arguments.
 */
#ifndef HM_GEMM_CONFIG_H
#define HM_GEMM_CONFIG_H

#include "humming.h"

typedef struct hm_gemm_layer_part {
  hm_dtype weight;   /* U1..U8, I4, I8 (quantized) or F16/BF16 (same as act); scales are
                        transformed to the act type, so their stored type is not part of it */
  hm_dtype act;      /* F16 or BF16; F8E4M3 or I8 for the W8A8 kernel (gemm_config_w8a8.h) */
  hm_dtype out;      /* F16 or BF16 */
  int group;         /* group size along K; 0 = per channel (and unquantized) */
  bool zero_point;   /* per-group zero points; else 2^(bits-1) (unsigned) or 0 (signed) */
  bool bias;
  bool global_scale; /* f32 per expert */
  int64_t n, k, experts;
  int group_n;       /* W8A8 block scales: rows of a block (group its columns); 0 otherwise */
  hm_act_scale_kind act_scale; /* W8A8: per token or 1x128; NONE for f16/bf16 activations */
  bool w4_f16; /* W4A8 e2m1: codes placed for f16 MMAs (hm_w4a8_codes.cuh, hm_w4a8_f16_codes) */
} hm_gemm_layer_part;

typedef struct hm_gemm_compute_part {
  hm_gemm_type type;
  bool batch_invariant; /* no Stream-K: a row's result does not depend on M */
  bool f16_acc;         /* fp8 W8A8: each k32 MMA sums in f16 (hm_layer_config.fp16_accumulate) */
} hm_gemm_compute_part;

#define HM_GEMM_MAX_CTAS_PER_SM 4
/* A ring as deep as shared memory allows a one-unit decode tile (12.5 KiB a bk 256 stage):
 * the bytes a CTA keeps in flight bound what it streams (Little's law). */
#define HM_GEMM_MAX_STAGES 16
/* The producer warpgroup a warp-specialized kernel adds to its computing warps. */
#define HM_GEMM_PRODUCER_THREADS 128

/* The tensor-core instruction of the mainloop. */
typedef enum hm_gemm_mma {
  HM_MMA_SYNC = 0, /* mma.sync m16n8k16, sm_80+ (gemm_kernel.cuh) */
  HM_MMA_WGMMA = 1 /* wgmma m64nNk16, sm_90a only, weights as A from registers (gemm_wgmma_kernel.cuh) */
} hm_gemm_mma;

typedef struct hm_gemm_tuning {
  int bm, bn, bk;                 /* CTA tile; bn a multiple of 64, bk 64..256 (512: weight-only
                                     mma.sync); bm = 8 swaps the MMA operands (weights as A,
                                     tokens as n8) */
  int warps_m, warps_n, warps_k;  /* warp grid; warps_k splits each stage's k16 steps */
  int stages;                     /* cp.async ring depth */
  bool stream_k;                  /* split the last waves' k-iterations over all CTAs */
  int sk_min_iters;               /* fewest k-iterations a Stream-K CTA takes */
  int ctas_per_sm;                /* persistent CTAs per SM */
  hm_gemm_mma mma;                /* wgmma: warps_n a multiple of 4 (a warpgroup), warps_k 1 */
  bool ws;                        /* warp-specialized (wgmma): one more warpgroup loads the stages
                                     that the warps_m x warps_n warps compute; W8A8's takes the
                                     tokens as A and the weights as B, both from shared memory
                                     (gemm_w8a8_ws.cuh) */
} hm_gemm_tuning;

typedef struct hm_gemm_config {
  hm_gemm_layer_part layer;
  hm_gemm_compute_part compute;
  hm_gemm_tuning tuning;
  int arch; /* 80, 86, 89, 90, ... */
} hm_gemm_config;

/* Fills the layer and compute parts from a public layer config; tuning is left zero. */
hm_status hm_gemm_config_from_layer(const hm_layer_config *lc, hm_gemm_type type, int arch, hm_gemm_config *out);
/* Checks that the kernel can be built and run: formats, shapes, tile shape, shared memory. */
hm_status hm_gemm_config_check(const hm_gemm_config *cfg);
/* The part of hm_gemm_config_check that no tuning changes: the layer's types, shape and
 * scales. A layer it refuses has no legal tuning, and this error says why. */
hm_status hm_gemm_config_check_layer(const hm_gemm_config *cfg);
/* A short tag of a GEMM type for names and keys ("dense", "idx", "gcont", "gmask"). */
const char *hm_gemm_type_tag(hm_gemm_type type);
/* The kernel's entry name, unique per config ("hm_gemm_dense_u4z_g128_..."). */
/* The layer and compute part of a kernel's name ("idx_u4z_g128_abf16_obf16_n4096_k7168_e256"):
 * what a tuning-table entry is keyed by, with the arch. */
void hm_gemm_layer_key(const hm_gemm_config *cfg, char *buf, size_t len);
void hm_gemm_config_name(const hm_gemm_config *cfg, char *buf, size_t len);
/* The tuning as one token, bm128_bn256_bk128_w1x8x1_s4_sk4_c1_wgmma_ws (dp for data-parallel
 * only); hm_gemm_tuning_parse reads it back, HM_INVALID_ARGUMENT naming what does not fit.
 * Legality is hm_gemm_config_check's. */
void hm_gemm_tuning_name(const hm_gemm_tuning *t, char *buf, size_t len);
hm_status hm_gemm_tuning_parse(const char *name, hm_gemm_tuning *out);

/* Derived sizes (mirrors kernels/gemm_traits.cuh). */
int hm_gemm_config_threads(const hm_gemm_config *cfg);
/* Rows of a tile's row maps and accumulators: 16 for the swapped 8-row tile, else bm. */
int hm_gemm_acc_rows(const hm_gemm_tuning *t);
size_t hm_gemm_config_smem_bytes(const hm_gemm_config *cfg);
/* A weight-only pipeline stage before its alignment (hm_wo_stage, which the mma.sync and
 * wgmma kernels align to 128 and 1024 bytes): the activation tile, weight units, scales
 * and zero points. */
size_t hm_gemm_wo_stage_bytes(const hm_gemm_config *cfg);
/* The bytes the mma.sync kernels (weight-only and W8A8) reduce across warps_k through shared
 * memory, and those of the row maps behind a kernel's shared region (hm_maps_bytes): a_row,
 * c_row and row_scale of `rows` rows, a flag, and a tile prefix per expert for contiguous
 * and masked launches. */
size_t hm_gemm_red_bytes(const hm_gemm_tuning *t);
size_t hm_gemm_maps_bytes(const hm_gemm_config *cfg, size_t rows);
/* Shared memory of an mma.sync kernel (weight-only or W8A8) with a ring of `pipe` bytes, as
 * hm_sync_smem: a tile that overlaps fills (hm_gemm_sync_overlaps_fill) keeps its reduction
 * and two sets of row maps beside the ring, other tiles reduce in it. */
size_t hm_gemm_sync_smem_bytes(const hm_gemm_config *cfg, size_t pipe);
/* Whether an mma.sync tile issues a segment's first stages under the previous segment's
 * tail (hm_sync_smem::overlap: the 8-row decode tile). */
bool hm_gemm_sync_overlaps_fill(const hm_gemm_tuning *t);
/* Whether the launch gives a CTA its SM to itself (hm_gemm_launch_smem_bytes): a dense decode
 * tile of the mma.sync kernels run one CTA an SM under programmatic launch (sm_90), which
 * then fills its first stages before the grid dependency (kernels/gemm_pdl.cuh). */
bool hm_gemm_exclusive_sm(const hm_gemm_config *cfg);
/* Dynamic shared memory of a launch: the config's, or over half an SM's where the CTA has
 * its SM to itself, so that no CTA of the next grid enters beside it. */
size_t hm_gemm_launch_smem_bytes(const hm_gemm_config *cfg);
/* Bits per weight code: 1..8, or 16 for unquantized weights. */
int hm_gemm_weight_bits(hm_dtype weight);
/* Largest dynamic shared memory per block of an arch, 0 if unknown. */
size_t hm_gemm_arch_smem_limit(int arch);
int64_t hm_gemm_n_tiles(const hm_gemm_config *cfg);
int64_t hm_gemm_k_iters(const hm_gemm_config *cfg);

#endif
