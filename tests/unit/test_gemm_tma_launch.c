/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The host side of TMA token tiles, without a GPU: on a fake sm_90 driver, the kernels the
 * selection picks for large M are launched through hm_gemm_launch, and the fake records
 * the tensor map it is asked to encode (type, address, K x rows, row stride, box of one
 * 128-byte swizzle row by bm rows) and the kernel argument that reaches the launch.
 * Dense, contiguous and masked W8A8 and W4A16 launches encode one; indexed launches and
 * plain kernels do not; a failed encode fails the launch before anything is launched.
 * Indexed launches also carry max_padded, the bound the kernels hold *num_padded to, and
 * one past int32 fails before anything is launched.
 */
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "cuda_driver.h"
#include "hm_fake_cuda.h"
#include "hm_test.h"
#include "humming/formats.h"
#include "kernels/gemm_config_w8a8.h"
#include "kernels/gemm_launch.h"
#include "kernels/gemm_select.h"
#include "test_jit_util.h"

#define MAP_MARK 0x600dcafeull

static struct {
  int encodes, launches;
  CUresult encode_result;
  CUtensorMapDataType type;
  cuuint32_t rank;
  const void *address;
  cuuint64_t dims[2], strides[1];
  cuuint32_t box[2], steps[2];
  CUtensorMapSwizzle swizzle;
  CUtensorMapFloatOOBfill fill;
  hm_gemm_kernel_params params;
} seen;

static CUresult fake_encode(CUtensorMap *map, CUtensorMapDataType type, cuuint32_t rank, void *address,
                            const cuuint64_t *dims, const cuuint64_t *strides, const cuuint32_t *box,
                            const cuuint32_t *steps, CUtensorMapInterleave interleave,
                            CUtensorMapSwizzle swizzle, CUtensorMapL2promotion l2,
                            CUtensorMapFloatOOBfill fill) {
  (void)interleave, (void)l2;
  seen.encodes++;
  if (seen.encode_result != CUDA_SUCCESS) return seen.encode_result;
  seen.type = type;
  seen.rank = rank;
  seen.address = address;
  memcpy(seen.dims, dims, sizeof(seen.dims));
  memcpy(seen.strides, strides, sizeof(seen.strides));
  memcpy(seen.box, box, sizeof(seen.box));
  memcpy(seen.steps, steps, sizeof(seen.steps));
  seen.swizzle = swizzle;
  seen.fill = fill;
  map->opaque[0] = MAP_MARK;
  return CUDA_SUCCESS;
}

static CUresult fake_launch(const CUlaunchConfig *cfg, CUfunction f, void **args, void **extra) {
  (void)cfg, (void)f, (void)extra;
  seen.launches++;
  memcpy(&seen.params, args[0], sizeof(seen.params));
  return CUDA_SUCCESS;
}

static hm_engine engine;

static int setup(void **state) {
  tj_setup(state);
  memset(&seen, 0, sizeof(seen));
  hm_fake_cuda_install();
  hm_cu.cuTensorMapEncodeTiled = fake_encode;
  hm_cu.cuLaunchKernelEx = fake_launch;
  engine = hm_fake_cuda_engine(90);
  return 0;
}

/* DeepSeek-V3's gate_up experts (N 4096, K 7168, 8 of them; one for dense) in scheme. */
static hm_gemm_config large_m_config(const char *scheme, hm_gemm_type type) {
  const hm_layer_config lc = hm_test_layer_config(scheme, 4096, 7168, type == HM_GEMM_DENSE ? 1 : 8, 0);
  hm_gemm_config base, cfg;
  HM_ASSERT_OK(hm_gemm_config_from_layer(&lc, type, 90, &base));
  HM_ASSERT_OK(hm_gemm_select(&base, 4096 * lc.experts, &cfg));
  return cfg;
}

/* A kernel with cfg's launch metadata (threads, shared memory) and an empty body: the fake
 * driver runs nothing, and hm_kernel_launch checks a launch against the metadata. */
static hm_kernel *metadata_kernel(const hm_gemm_config *cfg) {
  static char name[64], text[512];
  const int threads = hm_gemm_config_threads(cfg);
  const size_t smem = hm_gemm_config_smem_bytes(cfg);
  snprintf(name, sizeof(name), "hm_gemm_meta_only_%d_%zu", threads, smem);
  snprintf(text, sizeof(text),
           "extern \"C\" __constant__ unsigned %s_meta[8] = {0x%xu, %d, %zu, 0, 0, 0, 0, 0};\n"
           "extern \"C\" __global__ void %s(const void *p) {}\n",
           name, HM_KERNEL_META_MAGIC, threads, smem, name);
  const hm_kernel_source src = {.name = name, .source = text, .arch = 90};
  hm_kernel *k = NULL;
  HM_ASSERT_OK(hm_kernel_get(&engine, &src, &k));
  return k;
}

static _Alignas(16) unsigned char a_rows[64];
static float c_rows[16], a_scales[16];
static int32_t offsets[9], counts[8], ids[16], num_padded;
static unsigned char weights[16], workspace[16];

static hm_status launch(const hm_gemm_config *cfg, int64_t m) {
  const hm_gemm_type type = cfg->compute.type;
  hm_gemm_args args = {.type = type, .m = m, .a = a_rows, .c = c_rows};
  if (hm_gemm_is_w8a8(&cfg->layer)) args.a_scale = a_scales;
  args.expert_offsets = offsets;
  args.expert_counts = counts;
  if (type == HM_GEMM_INDEXED) {
    args.sorted_ids = args.expert_ids = ids;
    args.num_padded = &num_padded;
    args.max_padded = m + (int64_t)cfg->tuning.bm * cfg->layer.experts;
    args.block_m = cfg->tuning.bm;
    args.top_k = args.a_rows_per_token = 1;
  }
  const hm_gemm_operands ops = {.weight = weights, .scales = weights};
  return hm_gemm_launch(metadata_kernel(cfg), cfg, engine.sm_count, &ops, &args, workspace, NULL);
}

static void large_m_launches_encode_the_token_tensor(void **state) {
  (void)state;
  const struct {
    const char *scheme;
    hm_gemm_type type;
    int64_t m, rows; /* rows of A: m, or max_m per expert for masked */
    CUtensorMapDataType dtype;
    int elem_bytes;
  } cases[] = {
      {"w8a8-fp8", HM_GEMM_DENSE, 4096, 4096, CU_TENSOR_MAP_DATA_TYPE_UINT8, 1},
      {"w8a8-fp8", HM_GEMM_GROUPED_CONTIGUOUS, 32768, 32768, CU_TENSOR_MAP_DATA_TYPE_UINT8, 1},
      {"w8a8-fp8", HM_GEMM_GROUPED_MASKED, 512, 8 * 512, CU_TENSOR_MAP_DATA_TYPE_UINT8, 1},
      {"w4a16", HM_GEMM_DENSE, 4096, 4096, CU_TENSOR_MAP_DATA_TYPE_UINT16, 2},
      {"w4a16", HM_GEMM_GROUPED_MASKED, 1000, 8 * 1000, CU_TENSOR_MAP_DATA_TYPE_UINT16, 2},
  };
  for (size_t i = 0; i < HM_ARRAY_SIZE(cases); i++) {
    const hm_gemm_config cfg = large_m_config(cases[i].scheme, cases[i].type);
    assert_true(cfg.tuning.ws && hm_gemm_tma_a(&cfg));
    memset(&seen, 0, sizeof(seen));
    HM_ASSERT_OK(launch(&cfg, cases[i].m));
    assert_int_equal(seen.encodes, 1);
    assert_int_equal(seen.launches, 1);
    assert_int_equal(seen.type, cases[i].dtype);
    assert_int_equal(seen.rank, 2);
    assert_ptr_equal(seen.address, a_rows);
    assert_int_equal(seen.dims[0], 7168);
    assert_int_equal(seen.dims[1], cases[i].rows);
    assert_int_equal(seen.strides[0], 7168 * cases[i].elem_bytes);
    assert_int_equal(seen.box[0] * (cuuint32_t)cases[i].elem_bytes, 128);
    assert_int_equal(seen.box[1], cfg.tuning.bm);
    assert_int_equal(seen.steps[0], 1);
    assert_int_equal(seen.steps[1], 1);
    assert_int_equal(seen.swizzle, CU_TENSOR_MAP_SWIZZLE_128B);
    assert_int_equal(seen.fill, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE); /* zeros past the end */
    assert_int_equal(seen.params.tma_a.opaque[0], MAP_MARK);
    assert_ptr_equal(seen.params.a, a_rows);
  }
}

/* Gathered rows (indexed) and the plain kernels copy their token rows: no tensor map. */
static void other_launches_encode_nothing(void **state) {
  (void)state;
  hm_gemm_config indexed = large_m_config("w8a8-fp8", HM_GEMM_INDEXED);
  assert_false(indexed.tuning.ws);
  HM_ASSERT_OK(launch(&indexed, 4096));
  indexed.tuning.ws = true; /* a pinned warp-specialized plan for an indexed layer */
  indexed.tuning.stages = 4;
  HM_ASSERT_OK(hm_gemm_config_check(&indexed));
  assert_false(hm_gemm_tma_a(&indexed));
  HM_ASSERT_OK(launch(&indexed, 4096));
  hm_gemm_config plain = large_m_config("w4a16", HM_GEMM_DENSE);
  plain.tuning.ws = false;
  plain.tuning.stages = 4;
  HM_ASSERT_OK(launch(&plain, 4096));
  assert_int_equal(seen.encodes, 0);
  assert_int_equal(seen.launches, 3);
  const CUtensorMap zero = {{0}};
  assert_memory_equal(&seen.params.tma_a, &zero, sizeof(zero));
}

static void failed_encode_fails_the_launch(void **state) {
  (void)state;
  const hm_gemm_config cfg = large_m_config("w8a8-fp8", HM_GEMM_GROUPED_CONTIGUOUS);
  seen.encode_result = CUDA_ERROR_INVALID_VALUE;
  assert_int_not_equal(launch(&cfg, 32768), HM_OK);
  assert_int_equal(seen.encodes, 1);
  assert_int_equal(seen.launches, 0);
  assert_non_null(strstr(hm_last_error(), "cuTensorMapEncodeTiled"));
}

static void indexed_launches_carry_their_row_bound(void **state) {
  (void)state;
  const hm_gemm_config cfg = large_m_config("w4a16", HM_GEMM_INDEXED);
  HM_ASSERT_OK(launch(&cfg, 4096));
  assert_int_equal(seen.launches, 1);
  assert_int_equal(seen.params.max_padded, 4096 + cfg.tuning.bm * cfg.layer.experts);
  /* launch() bounds the rows by m plus a block an expert: past int32 at m = INT32_MAX. */
  assert_int_equal(launch(&cfg, INT32_MAX), HM_INVALID_ARGUMENT);
  assert_non_null(strstr(hm_last_error(), "max_padded"));
  assert_int_equal(seen.launches, 1);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(large_m_launches_encode_the_token_tensor, setup, tj_teardown),
      cmocka_unit_test_setup_teardown(other_launches_encode_nothing, setup, tj_teardown),
      cmocka_unit_test_setup_teardown(failed_encode_fails_the_launch, setup, tj_teardown),
      cmocka_unit_test_setup_teardown(indexed_launches_carry_their_row_bound, setup, tj_teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
