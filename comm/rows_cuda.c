/* SPDX-License-Identifier: Apache-2.0 */
/* CUDA row operations: specialization and launch of kernels/comm_rows.cuh and comm_move.cuh through the JIT.
 */
#include "kernels/jit.h"
#include "rows.h"

enum { KERNEL_PACK, KERNEL_COMBINE, KERNEL_LOOPBACK, KERNEL_SCATTER, KERNEL_GATHER };

#define ROW_THREADS 256

static const char *kernel_name(const hm_rows_ctx *ctx, int which) {
  bool fp8 = ctx->payload == HM_COMM_PAYLOAD_FP8, f32 = ctx->out == HM_F32;
  switch (which) {
    case KERNEL_PACK: return fp8 ? "hm_comm_pack_fp8" : "hm_comm_pack_bf16";
    case KERNEL_COMBINE: return f32 ? "hm_comm_combine_f32" : "hm_comm_combine_bf16";
    case KERNEL_SCATTER: return "hm_comm_scatter_rows";
    case KERNEL_GATHER: return "hm_comm_gather_rows";
    default:
      if (fp8) return f32 ? "hm_comm_loopback_fp8_f32" : "hm_comm_loopback_fp8_bf16";
      return f32 ? "hm_comm_loopback_bf16_f32" : "hm_comm_loopback_bf16_bf16";
  }
}

static hm_status kernel_of(hm_rows_ctx *ctx, int which, hm_kernel **out) {
  if (ctx->kernels[which] == NULL) {
    hm_kernel_source src = {
        .name = kernel_name(ctx, which),
        .source = which >= KERNEL_SCATTER ? "#include \"comm_move.cuh\"\n" : "#include \"comm_rows.cuh\"\n",
        .arch = hm_engine_arch(ctx->engine),
        .arch_specific = false,
        .options = NULL,
    };
    hm_kernel *k = NULL;
    HM_CHECK(hm_kernel_get(ctx->engine, &src, &k));
    ctx->kernels[which] = k;
  }
  *out = ctx->kernels[which];
  return HM_OK;
}

/* One block per row (or token); no launch for zero rows. */
static hm_status launch_rows(hm_rows_ctx *ctx, int which, int64_t blocks, void **args, hm_stream *stream) {
  if (blocks == 0) return HM_OK;
  hm_kernel *k = NULL;
  HM_CHECK(kernel_of(ctx, which, &k));
  hm_launch_dims dims = {{(unsigned)blocks, 1, 1}, {ROW_THREADS, 1, 1}, 0, {0, 0, 0}};
  return hm_kernel_launch(k, &dims, args, stream);
}

static hm_status cuda_pack(hm_rows_ctx *ctx, const void *x, const int32_t *src, int64_t n, void *wire,
                           hm_stream *stream) {
  long long rows = n;
  if (ctx->payload == HM_COMM_PAYLOAD_BF16) {
    long long row_vecs = ctx->hidden * 2 / 16;
    void *args[] = {&x, &src, &rows, &row_vecs, &wire};
    return launch_rows(ctx, KERNEL_PACK, n, args, stream);
  }
  int hidden = (int)ctx->hidden;
  void *args[] = {&x, &src, &rows, &hidden, &wire};
  return launch_rows(ctx, KERNEL_PACK, n, args, stream);
}

static hm_status cuda_scatter(hm_rows_ctx *ctx, const void *wire, const int32_t *dst, int64_t n, void *out,
                              float *out_scale, hm_stream *stream) {
  long long rows = n;
  int row_words = (int)(hm_comm_payload_row_bytes(ctx->payload, ctx->hidden) / 4);
  int scale_words = (int)(hm_comm_scale_row_bytes(ctx->payload, ctx->hidden) / 4);
  void *args[] = {&wire, &dst, &rows, &row_words, &out, &scale_words, &out_scale};
  return launch_rows(ctx, KERNEL_SCATTER, n, args, stream);
}

static hm_status cuda_gather(hm_rows_ctx *ctx, const void *in, const int32_t *src, int64_t n, void *out,
                             hm_stream *stream) {
  long long rows = n, row_vecs = ctx->hidden * (ctx->out == HM_F32 ? 4 : 2) / 16;
  void *args[] = {&in, &src, &rows, &row_vecs, &out};
  return launch_rows(ctx, KERNEL_GATHER, n, args, stream);
}

static hm_status cuda_combine(hm_rows_ctx *ctx, const void *rows, const int32_t *pos, const float *w,
                              int64_t tokens, void *y, hm_stream *stream) {
  long long t = tokens;
  int hidden = (int)ctx->hidden, top_k = ctx->top_k;
  void *args[] = {&rows, &pos, &w, &t, &hidden, &top_k, &y};
  return launch_rows(ctx, KERNEL_COMBINE, tokens, args, stream);
}

static hm_status cuda_loopback(hm_rows_ctx *ctx, const void *x, const float *scale, int64_t n, void *y,
                               hm_stream *stream) {
  long long rows = n;
  int hidden = (int)ctx->hidden;
  void *args[] = {&x, &scale, &rows, &hidden, &y};
  return launch_rows(ctx, KERNEL_LOOPBACK, n, args, stream);
}

const struct hm_rows_ops hm_rows_cuda_ops = {
    .pack = cuda_pack,
    .scatter = cuda_scatter,
    .gather = cuda_gather,
    .combine = cuda_combine,
    .loopback = cuda_loopback,
};
