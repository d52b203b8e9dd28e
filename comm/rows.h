/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The row operations around the exchanges, one table per backend: pack rows by
 * destination (fp8 1x128 quantization on the way), scatter received rows into the
 * expert layout and gather returned ones out of it, the top-k weighted combine at the
 * token's home, and the identity expert. The host table is the reference.
 */
#ifndef HM_COMM_ROWS_H
#define HM_COMM_ROWS_H

#include "comm.h"

#define HM_ROWS_KERNELS 5

typedef struct hm_rows_ctx {
  hm_engine *engine;
  hm_comm_payload payload;
  hm_dtype out; /* combine dtype: BF16 or F32 */
  int64_t hidden;
  int top_k;
  void *kernels[HM_ROWS_KERNELS]; /* loaded on first use (CUDA) */
} hm_rows_ctx;

struct hm_rows_ops {
  /*
   * wire row i = x[src[i]] for i < n (hm_comm_wire_row_bytes each); FP8 payload: e4m3,
   * then the row's f32 scales amax/448 per 128 columns.
   */
  hm_status (*pack)(hm_rows_ctx *ctx, const void *x, const int32_t *src, int64_t n, void *wire,
                    hm_stream *stream);
  /* Wire row i into out[dst[i]] and (FP8) its scales into out_scale[dst[i]], for i < n. */
  hm_status (*scatter)(hm_rows_ctx *ctx, const void *wire, const int32_t *dst, int64_t n, void *out,
                       float *out_scale, hm_stream *stream);
  /* out[i] = in[src[i]] for i < n, rows of the combine dtype. */
  hm_status (*gather)(hm_rows_ctx *ctx, const void *in, const int32_t *src, int64_t n, void *out,
                      hm_stream *stream);
  /* y[t] = sum over slots s of w[t][s] * rows[pos[t][s]] in f32, slots in order; pos < 0 skipped. */
  hm_status (*combine)(hm_rows_ctx *ctx, const void *rows, const int32_t *pos, const float *w, int64_t tokens,
                       void *y, hm_stream *stream);
  /* y[r] = x[r] dequantized, for r < n. */
  hm_status (*loopback)(hm_rows_ctx *ctx, const void *x, const float *scale, int64_t n, void *y,
                        hm_stream *stream);
};

extern const struct hm_rows_ops hm_rows_host_ops;
extern const struct hm_rows_ops hm_rows_cuda_ops;

/* Element i of a BF16 or F32 host buffer, as f32; and the reverse, rounding to nearest even. */
float hm_rows_load(hm_dtype dtype, const void *base, int64_t i);
void hm_rows_store(hm_dtype dtype, void *base, int64_t i, float v);

#endif
