/* SPDX-License-Identifier: Apache-2.0 */
/* Grid, workspace and arguments of a weight-only GEMM launch. */
#include "kernels/gemm_launch.h"

#include <stdatomic.h>
#include <string.h>

#include "check.h"
#include "cuda_driver.h"
#include "kernels/gemm_config_w8a8.h"
#include "log.h"

/*
 * Counters first, sized for the most CTAs any config may launch, so that kernels of
 * one layer sharing a workspace agree on where counters end and partials begin.
 */
static size_t counters_bytes(int sm_count) {
  return ((size_t)sm_count * HM_GEMM_MAX_CTAS_PER_SM * 4 + 255) / 256 * 256;
}

size_t hm_gemm_workspace_bytes(const hm_gemm_config *cfg, int sm_count) {
  const int ctas = sm_count * cfg->tuning.ctas_per_sm;
  if (!cfg->tuning.stream_k) return 0;
  return counters_bytes(sm_count) + (size_t)2 * ctas * hm_gemm_acc_rows(&cfg->tuning) * cfg->tuning.bn * sizeof(float);
}

/* An upper bound of the launch's m-tiles known on the host. */
static int64_t max_m_tiles(const hm_gemm_config *cfg, const hm_gemm_args *a) {
  const int64_t bm = cfg->tuning.bm, experts = cfg->layer.experts;
  switch (cfg->compute.type) {
  case HM_GEMM_DENSE: return (a->m + bm - 1) / bm;
  case HM_GEMM_INDEXED: return (a->max_padded + bm - 1) / bm;
  case HM_GEMM_GROUPED_CONTIGUOUS: return a->m == 0 ? 0 : (a->m + bm - 1) / bm + experts;
  case HM_GEMM_GROUPED_MASKED: return experts * ((a->m + bm - 1) / bm);
  }
  return 0;
}

int hm_gemm_grid(const hm_gemm_config *cfg, int sm_count, const hm_gemm_args *args) {
  const int64_t tiles = max_m_tiles(cfg, args) * hm_gemm_n_tiles(cfg);
  if (tiles <= 0) return 0;
  int64_t work = tiles;
  if (cfg->tuning.stream_k) work = tiles * hm_gemm_k_iters(cfg) / cfg->tuning.sk_min_iters;
  const int64_t ctas = (int64_t)sm_count * cfg->tuning.ctas_per_sm;
  return (int)(work < 1 ? 1 : (work < ctas ? work : ctas));
}

/* Bytes of an activation element: 8-bit for the W8A8 kernels, 16-bit for weight-only ones. */
static int act_bytes(const hm_gemm_config *cfg) {
  return hm_dtype_bits(cfg->layer.act) / 8;
}

bool hm_gemm_tma_a(const hm_gemm_config *cfg) {
  const int eb = act_bytes(cfg);
  return cfg->tuning.ws && cfg->compute.type != HM_GEMM_INDEXED && cfg->layer.k * eb % 16 == 0 &&
         cfg->tuning.bk * eb % 128 == 0;
}

bool hm_gemm_tma_c(const hm_gemm_config *cfg) {
  return cfg->tuning.ws && cfg->compute.type != HM_GEMM_INDEXED && cfg->layer.n % 8 == 0;
}

int hm_gemm_tma_c_rows(const hm_gemm_config *cfg) {
  const hm_gemm_tuning *t = &cfg->tuning;
  return t->warps_n / 4 == 1 ? t->bm / t->warps_m : t->bm;
}

/*
 * A row-major tensor of 2-byte (or 1-byte) elements, rows x cols, for boxes of box_rows
 * rows by one 128-byte swizzle row; elements past its ends read as zeros and are not
 * written.
 */
static hm_status encode_tiled(CUtensorMap *map, int eb, const void *base, int64_t cols, int64_t rows,
                              int box_rows) {
  const cuuint64_t dims[2] = {(cuuint64_t)cols, (cuuint64_t)rows};
  const cuuint64_t strides[1] = {(cuuint64_t)cols * (cuuint64_t)eb};
  const cuuint32_t box[2] = {128u / (cuuint32_t)eb, (cuuint32_t)box_rows};
  const cuuint32_t steps[2] = {1, 1};
  HM_CU_CHECK(cuTensorMapEncodeTiled(
      map, eb == 1 ? CU_TENSOR_MAP_DATA_TYPE_UINT8 : CU_TENSOR_MAP_DATA_TYPE_UINT16, 2, (void *)base, dims,
      strides, box, steps, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
      CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE));
  return HM_OK;
}

/* Rows of A and C: masked launches hold max_m rows an expert. */
static int64_t launch_rows(const hm_gemm_config *cfg, const hm_gemm_args *args) {
  return args->type == HM_GEMM_GROUPED_MASKED ? args->m * cfg->layer.experts : args->m;
}

static hm_status need_tensor_maps(void) {
  if (hm_cu.cuTensorMapEncodeTiled == NULL)
    HM_FAIL(HM_NO_DEVICE, "GEMM with TMA copies: no CUDA driver loaded");
  return HM_OK;
}

/*
 * The activations as a tensor of K x rows elements for hm_gemm_tma_a kernels: boxes of one
 * 128-byte swizzle row by bm rows, as their wgmmas read a token tile; rows and K past the
 * end read as zeros.
 */
static hm_status encode_tma_a(const hm_gemm_config *cfg, const hm_gemm_args *args, CUtensorMap *map) {
  HM_CHECK(need_tensor_maps());
  return encode_tiled(map, act_bytes(cfg), args->a, cfg->layer.k, launch_rows(cfg, args), cfg->tuning.bm);
}

/*
 * C as N x rows elements for hm_gemm_tma_c kernels, boxes of 64 columns by a store's rows
 * and by 8. A C that is not 16-byte aligned gets no maps: the kernel copies its tiles out
 * with the threads' own stores instead, which is slower, so it says so.
 */
static hm_status encode_tma_c(const hm_gemm_config *cfg, const hm_gemm_args *args, hm_gemm_kernel_params *p) {
  static atomic_bool warned;
  if ((uintptr_t)args->c % 16 != 0) {
    if (!atomic_exchange(&warned, true))
      HM_WARN(GEMM,
              "GEMM output %p is not 16-byte aligned: no TMA stores, the slower copy-out loop instead "
              "(said once)",
              args->c);
    return HM_OK;
  }
  HM_CHECK(need_tensor_maps());
  const int64_t rows = launch_rows(cfg, args);
  HM_CHECK(encode_tiled(&p->tma_c, 2, args->c, cfg->layer.n, rows, hm_gemm_tma_c_rows(cfg)));
  return encode_tiled(&p->tma_c8, 2, args->c, cfg->layer.n, rows, 8);
}

static hm_status check_indexed(const hm_gemm_config *cfg, const hm_gemm_args *a) {
  HM_CHECK_NOT_NULL(a->sorted_ids);
  HM_CHECK_NOT_NULL(a->expert_ids);
  HM_CHECK_NOT_NULL(a->num_padded);
  if (a->top_k < 1 || a->a_rows_per_token < 1 || a->max_padded < 0)
    HM_FAIL(HM_INVALID_ARGUMENT, "indexed GEMM: top_k=%d, a_rows_per_token=%d, max_padded=%lld", a->top_k,
            a->a_rows_per_token, (long long)a->max_padded);
  if (a->block_m < 1 || a->block_m % cfg->tuning.bm != 0)
    HM_FAIL(HM_INVALID_ARGUMENT, "indexed GEMM: block_m=%d is not a multiple of the kernel's bm=%d", a->block_m,
            cfg->tuning.bm);
  if (a->m * a->top_k > INT32_MAX) HM_FAIL(HM_INVALID_ARGUMENT, "indexed GEMM: m*top_k too large");
  if (a->max_padded > INT32_MAX)
    HM_FAIL(HM_INVALID_ARGUMENT, "indexed GEMM: max_padded=%lld too large", (long long)a->max_padded);
  return HM_OK;
}

hm_status hm_gemm_check_args(const hm_gemm_config *cfg, const hm_gemm_args *a) {
  HM_CHECK_NOT_NULL(cfg);
  HM_CHECK_NOT_NULL(a);
  if (a->type != cfg->compute.type)
    HM_FAIL(HM_INVALID_ARGUMENT, "GEMM args of type %s for a %s kernel", hm_gemm_type_name(a->type),
            hm_gemm_type_name(cfg->compute.type));
  if (a->m < 0 || a->m > INT32_MAX) HM_FAIL(HM_INVALID_ARGUMENT, "GEMM m=%lld out of range", (long long)a->m);
  if (a->m == 0) return HM_OK;
  HM_CHECK_NOT_NULL(a->a);
  HM_CHECK_NOT_NULL(a->c);
  if (hm_gemm_is_w8a8(&cfg->layer) && a->a_scale == NULL)
    HM_FAIL(HM_INVALID_ARGUMENT, "W8A8 GEMM: %s activations need a_scale", hm_dtype_name(cfg->layer.act));
  if ((uintptr_t)a->a % 16 != 0 || (uintptr_t)a->c % 4 != 0)
    HM_FAIL(HM_INVALID_ARGUMENT, "GEMM A must be 16-byte and C 4-byte aligned (a=%p c=%p)", a->a, a->c);
  switch (a->type) {
  case HM_GEMM_DENSE: return HM_OK;
  case HM_GEMM_INDEXED: return check_indexed(cfg, a);
  case HM_GEMM_GROUPED_CONTIGUOUS: HM_CHECK_NOT_NULL(a->expert_offsets); /* fall through */
  case HM_GEMM_GROUPED_MASKED: HM_CHECK_NOT_NULL(a->expert_counts); return HM_OK;
  }
  HM_FAIL(HM_INVALID_ARGUMENT, "GEMM type %d unknown", (int)a->type);
}

bool hm_gemm_warms_next(const hm_gemm_config *cfg, const hm_gemm_args *args, int grid) {
  if (!hm_gemm_exclusive_sm(cfg) || hm_gemm_is_w8a8(&cfg->layer) || cfg->tuning.stream_k) return false;
  return max_m_tiles(cfg, args) * hm_gemm_n_tiles(cfg) <= grid;
}

hm_status hm_gemm_launch(hm_kernel *kernel, const hm_gemm_config *cfg, int sm_count, const hm_gemm_operands *ops,
                         const hm_gemm_args *args, void *workspace, hm_stream *stream) {
  HM_CHECK_NOT_NULL(kernel);
  HM_CHECK_NOT_NULL(ops);
  HM_CHECK(hm_gemm_check_args(cfg, args));
  if (args->m == 0) return HM_OK;
  const int grid = hm_gemm_grid(cfg, sm_count, args);
  if (grid == 0) return HM_OK;
  if (cfg->tuning.stream_k && workspace == NULL) HM_FAIL(HM_INVALID_ARGUMENT, "Stream-K kernel without workspace");
  hm_gemm_kernel_params p;
  memset(&p, 0, sizeof(p));
  p.a = args->a;
  p.a_scale = args->a_scale;
  p.c = args->c;
  p.b = ops->weight;
  p.scales = ops->scales;
  p.zeros = ops->zeros;
  p.bias = ops->bias;
  p.global_scale = ops->global_scale;
  p.expert_offsets = args->expert_offsets;
  p.expert_counts = args->expert_counts;
  p.sorted_ids = args->sorted_ids;
  p.expert_ids = args->expert_ids;
  p.num_padded = args->num_padded;
  p.topk_weights = args->topk_weights;
  p.counters = workspace;
  p.partials = workspace ? (float *)((char *)workspace + counters_bytes(sm_count)) : NULL;
  p.m = args->m;
  p.top_k = args->type == HM_GEMM_INDEXED ? args->top_k : 1;
  p.a_rows_per_token = args->type == HM_GEMM_INDEXED ? args->a_rows_per_token : 1;
  p.block_m = args->type == HM_GEMM_INDEXED ? args->block_m : cfg->tuning.bm;
  p.grid = grid;
  p.routing_ready = args->type != HM_GEMM_DENSE && args->routing_ready;
  p.max_padded = args->type == HM_GEMM_INDEXED ? (int32_t)args->max_padded : 0;
  if (ops->next.weight != NULL && hm_gemm_warms_next(cfg, args, grid)) {
    p.next_b = ops->next.weight;
    p.next_unit_bytes = ops->next.unit_bytes;
    p.next_units = (int32_t)ops->next.units;
  }
  if (hm_gemm_tma_a(cfg)) HM_CHECK(encode_tma_a(cfg, args, &p.tma_a));
  if (hm_gemm_tma_c(cfg)) HM_CHECK(encode_tma_c(cfg, args, &p));
  hm_launch_dims dims;
  memset(&dims, 0, sizeof(dims));
  dims.grid[0] = (unsigned)grid;
  dims.grid[1] = dims.grid[2] = 1;
  dims.block[0] = (unsigned)hm_gemm_config_threads(cfg);
  dims.block[1] = dims.block[2] = 1;
  dims.shared_bytes = hm_gemm_launch_smem_bytes(cfg);
  void *kargs[] = {&p};
  return hm_kernel_launch(kernel, &dims, kargs, stream);
}
