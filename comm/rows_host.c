/* SPDX-License-Identifier: Apache-2.0 */
/* Host row operations: the reference the CUDA kernels (kernels/comm_rows.cuh) match bit for bit. */
#include <math.h>
#include <string.h>

#include "numfmt.h"
#include "rows.h"

#define FP8_GROUP 128
#define FP8_MAX 448.0f

float hm_rows_load(hm_dtype dtype, const void *base, int64_t i) {
  return dtype == HM_F32 ? ((const float *)base)[i] : hm_bf16_to_f32(((const uint16_t *)base)[i]);
}

void hm_rows_store(hm_dtype dtype, void *base, int64_t i, float v) {
  if (dtype == HM_F32)
    ((float *)base)[i] = v;
  else
    ((uint16_t *)base)[i] = hm_bf16_from_f32(v);
}

static void quantize_row(const uint16_t *x, int64_t hidden, uint8_t *q, float *scale) {
  for (int64_t g = 0; g < hidden / FP8_GROUP; g++) {
    const uint16_t *xg = x + g * FP8_GROUP;
    float amax = 0;
    for (int i = 0; i < FP8_GROUP; i++) amax = fmaxf(amax, fabsf(hm_bf16_to_f32(xg[i])));
    float s = amax / FP8_MAX;
    scale[g] = s;
    for (int i = 0; i < FP8_GROUP; i++)
      q[g * FP8_GROUP + i] = s > 0 ? hm_e4m3_from_f32(hm_bf16_to_f32(xg[i]) / s) : 0;
  }
}

static hm_status host_pack(hm_rows_ctx *ctx, const void *x, const int32_t *src, int64_t n, void *wire,
                           hm_stream *stream) {
  (void)stream;
  int64_t h = ctx->hidden;
  size_t wire_bytes = hm_comm_wire_row_bytes(ctx->payload, h);
  for (int64_t i = 0; i < n; i++) {
    const uint16_t *row = (const uint16_t *)x + (size_t)src[i] * (size_t)h;
    uint8_t *to = (uint8_t *)wire + (size_t)i * wire_bytes;
    if (ctx->payload == HM_COMM_PAYLOAD_BF16) {
      memcpy(to, row, (size_t)h * 2);
      continue;
    }
    /* h is a multiple of 128 and wire rows of 4 bytes: the scales are aligned floats. */
    quantize_row(row, h, to, (float *)(to + h));
  }
  return HM_OK;
}

static size_t out_row_bytes(const hm_rows_ctx *ctx) {
  return (size_t)ctx->hidden * (ctx->out == HM_F32 ? 4 : 2);
}

static hm_status host_scatter(hm_rows_ctx *ctx, const void *wire, const int32_t *dst, int64_t n, void *out,
                              float *out_scale, hm_stream *stream) {
  (void)stream;
  size_t row = hm_comm_payload_row_bytes(ctx->payload, ctx->hidden);
  size_t scales = hm_comm_scale_row_bytes(ctx->payload, ctx->hidden), wire_bytes = row + scales;
  for (int64_t i = 0; i < n; i++) {
    const uint8_t *from = (const uint8_t *)wire + (size_t)i * wire_bytes;
    memcpy((uint8_t *)out + (size_t)dst[i] * row, from, row);
    if (scales) memcpy((uint8_t *)out_scale + (size_t)dst[i] * scales, from + row, scales);
  }
  return HM_OK;
}

static hm_status host_gather(hm_rows_ctx *ctx, const void *in, const int32_t *src, int64_t n, void *out,
                             hm_stream *stream) {
  (void)stream;
  size_t row = out_row_bytes(ctx);
  for (int64_t i = 0; i < n; i++)
    memcpy((char *)out + (size_t)i * row, (const char *)in + (size_t)src[i] * row, row);
  return HM_OK;
}

static hm_status host_combine(hm_rows_ctx *ctx, const void *rows, const int32_t *pos, const float *w,
                              int64_t tokens, void *y, hm_stream *stream) {
  (void)stream;
  int64_t h = ctx->hidden;
  int k = ctx->top_k;
  for (int64_t t = 0; t < tokens; t++) {
    for (int64_t c = 0; c < h; c++) {
      float acc = 0;
      for (int s = 0; s < k; s++) {
        int32_t p = pos[t * k + s];
        if (p >= 0) acc += w[t * k + s] * hm_rows_load(ctx->out, rows, (int64_t)p * h + c);
      }
      hm_rows_store(ctx->out, y, t * h + c, acc);
    }
  }
  return HM_OK;
}

static hm_status host_loopback(hm_rows_ctx *ctx, const void *x, const float *scale, int64_t n, void *y,
                               hm_stream *stream) {
  (void)stream;
  int64_t h = ctx->hidden, groups = h / FP8_GROUP;
  for (int64_t r = 0; r < n; r++) {
    for (int64_t c = 0; c < h; c++) {
      float v = ctx->payload == HM_COMM_PAYLOAD_BF16
                    ? hm_bf16_to_f32(((const uint16_t *)x)[r * h + c])
                    : hm_e4m3_to_f32(((const uint8_t *)x)[r * h + c]) * scale[r * groups + c / FP8_GROUP];
      hm_rows_store(ctx->out, y, r * h + c, v);
    }
  }
  return HM_OK;
}

const struct hm_rows_ops hm_rows_host_ops = {
    .pack = host_pack,
    .scatter = host_scatter,
    .gather = host_gather,
    .combine = host_combine,
    .loopback = host_loopback,
};
