/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Format adapters: each turns one source matrix of a checkpoint (one projection of one
 * expert, in its quantizer's own layout) into element accessors that speak the
 * canonical contract of engine/quant.h; the shared assembler then copies any rows and
 * columns of it, in any order, into hm_host_weights. One file per source format
 * (adapter_<format>.c) states the conventions it implements in its top comment.
 */
#ifndef HM_ADAPTER_H
#define HM_ADAPTER_H

#include <jansson.h>

#include "checkpoint.h"
#include "quant.h"

/* What the loader asks of an adapter: one source matrix and its shape per config.json. */
typedef struct hm_src_request {
  const char *module; /* "model.layers.3.mlp.experts.5.gate_proj", or a fused "...experts.gate_up_proj" */
  int64_t expert;     /* index along the leading expert dimension of fused tensors, -1 if none */
  int64_t experts;    /* that dimension's size */
  int64_t n, k;       /* source rows (output features) and columns (input features) */
} hm_src_request;

typedef struct hm_src_matrix hm_src_matrix;

/* One source matrix as an adapter exposes it. Accessors never fail: open validated all. */
struct hm_src_matrix {
  char module[192];
  hm_quant_format fmt; /* canonical format the accessors produce */
  int64_t n, k;
  int32_t *g_idx; /* (k) scale group of each source column; NULL: column / fmt.group_k */
  int64_t groups; /* scale groups along K in the source (1 for channel scales) */
  float global;   /* second-level scale when fmt.global_scale */
  /* Canonical codes of source row `row` at columns cols[0..count): one byte a code, two
   * (little-endian) for 16-bit weights. */
  void (*codes)(const hm_src_matrix *m, int64_t row, const int64_t *cols, int64_t count, uint8_t *out);
  /* Scale of (row, source group) as bytes of fmt.scale. */
  void (*scale)(const hm_src_matrix *m, int64_t row, int64_t group, uint8_t *out);
  /* Zero point code of (row, source group), fmt.zero_point only. */
  uint8_t (*zero)(const hm_src_matrix *m, int64_t row, int64_t group);
  /* Adapter state: tensor data and leading dimensions (elements); param[0] and param[1]
   * are the code and scale widths in bytes the shared accessors read, param[2..] free. */
  const uint8_t *data[4];
  int64_t ld[4];
  int64_t param[6];
};

typedef struct hm_adapter {
  const char *name;
  /* Opens req's tensors, checks dtypes and shapes against req, fills m. */
  hm_status (*open)(hm_ckpt *ck, const hm_src_request *req, hm_src_matrix *m);
} hm_adapter;

extern const hm_adapter hm_adapter_float;
extern const hm_adapter hm_adapter_gptq;
extern const hm_adapter hm_adapter_awq;
extern const hm_adapter hm_adapter_fp8;
extern const hm_adapter hm_adapter_mxfp4;
extern const hm_adapter hm_adapter_compressed;
extern const hm_adapter hm_adapter_modelopt;

/* The adapter of a checkpoint's quantization method (hm_ckpt_quant_method). */
hm_status hm_adapter_for(const hm_ckpt *ck, const hm_adapter **out);
/* Opens a source through the right adapter: unquantized modules of a quantized
 * checkpoint (ignore lists) go to the float adapter. */
hm_status hm_adapter_open(hm_ckpt *ck, const hm_src_request *req, hm_src_matrix *m);
/* Frees what open allocated; m may be half-open. */
void hm_src_release(hm_src_matrix *m);

/* One block of rows of the output taken from a source, in output order. */
typedef struct hm_asm_part {
  const hm_src_matrix *src;
  const int64_t *rows; /* source rows of output rows dst_row.. */
  int64_t n_rows;
  const int64_t *cols; /* source columns of output columns 0..out->k */
  int64_t dst_row;
} hm_asm_part;

/*
 * Writes expert e of out from its parts: codes, scales, global scale, and zero codes
 * into zero_codes (groups, out->n) for the caller to pack along N once all parts are in.
 */
hm_status hm_assemble_expert(const hm_asm_part *parts, int n_parts, int64_t e, hm_host_weights *out,
                             uint8_t *zero_codes);

/* Helpers for adapters. */
/* The quantization config's integer field, or def when absent; error if not an integer. */
hm_status hm_qcfg_int(const hm_ckpt *ck, json_t *obj, const char *key, int64_t def, int64_t *out);
hm_status hm_qcfg_bool(const hm_ckpt *ck, json_t *obj, const char *key, bool def, bool *out);
/* A string field or def. */
const char *hm_qcfg_str(json_t *obj, const char *key, const char *def);
/* Copies a g_idx tensor (k) into m->g_idx, checking every entry is below groups. */
hm_status hm_src_copy_g_idx(hm_src_matrix *m, const hm_ckpt_tensor *t, int64_t groups);
/* The unsigned integer weight type of that many bits (U1..U8). */
hm_dtype hm_src_uint_dtype(int bits);
/* Canonical hm_dtype of a 16/32-bit float scale tensor; HM_CORRUPT naming it otherwise. */
hm_status hm_src_scale_dtype(const hm_ckpt_tensor *t, hm_dtype *out);
/* Shared accessors: bytes of row-major (n, ld) matrices. */
void hm_src_codes_bytes(const hm_src_matrix *m, int64_t row, const int64_t *cols, int64_t count,
                        uint8_t *out);
void hm_src_codes_nibbles(const hm_src_matrix *m, int64_t row, const int64_t *cols, int64_t count,
                          uint8_t *out);
void hm_src_scale_rowmajor(const hm_src_matrix *m, int64_t row, int64_t group, uint8_t *out);

/* Code `index` of an LSB-first bit stream of 32-bit words placed `stride` words apart. */
static inline uint8_t hm_src_stream_code(const uint8_t *words, int64_t stride, int64_t index, int bits) {
  int64_t bit = index * bits, word = bit / 32;
  int shift = (int)(bit % 32);
  uint32_t v = hm_st_load_u32(words, word * stride) >> shift;
  if (shift + bits > 32) v |= hm_st_load_u32(words, (word + 1) * stride) << (32 - shift);
  return (uint8_t)(v & ((1u << bits) - 1u));
}

#endif
