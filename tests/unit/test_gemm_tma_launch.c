/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The host side of TMA token tiles and output stores, without a GPU: on a fake sm_90
 * driver, the kernels the selection picks for large M are launched through hm_gemm_launch,
 * and the fake records the tensor maps it is asked to encode (type, address, columns x
 * rows, row stride, box of one 128-byte swizzle row by some rows) and the kernel argument
 * that reaches the launch. Dense, contiguous and masked W8A8 and W4A16 launches encode the
 * tokens' (box bm rows) and C's (boxes of a store's rows and of 8 rows), but not C's for a
 * C off 16 bytes, which they say once. Indexed launches and plain kernels
 * encode none; a failed encode fails the launch before anything is launched. Indexed
 * launches also carry max_padded, the bound the kernels hold *num_padded to, and one past
 * int32 fails before anything is launched. And the next GEMM's weights (ops->next): only a
 * dense decode tile alone on its SM, one tile a CTA, carries them to warm in L2.
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

typedef struct {
  CUtensorMapDataType type;
  cuuint32_t rank;
  const void *address;
  cuuint64_t dims[2], strides[1];
  cuuint32_t box[2], steps[2];
  CUtensorMapSwizzle swizzle;
  CUtensorMapFloatOOBfill fill;
} encoded_map;

static struct {
  int encodes, launches, warnings;
  CUresult encode_result;
  encoded_map maps[3]; /* in the order encoded */
  hm_gemm_kernel_params params;
} seen;

static CUresult fake_encode(CUtensorMap *map, CUtensorMapDataType type, cuuint32_t rank, void *address,
                            const cuuint64_t *dims, const cuuint64_t *strides, const cuuint32_t *box,
                            const cuuint32_t *steps, CUtensorMapInterleave interleave,
                            CUtensorMapSwizzle swizzle, CUtensorMapL2promotion l2,
                            CUtensorMapFloatOOBfill fill) {
  (void)interleave, (void)l2;
  if (seen.encode_result != CUDA_SUCCESS) return seen.encodes++, seen.encode_result;
  assert_true(seen.encodes < (int)HM_ARRAY_SIZE(seen.maps));
  encoded_map *m = &seen.maps[seen.encodes++];
  m->type = type;
  m->rank = rank;
  m->address = address;
  memcpy(m->dims, dims, sizeof(m->dims));
  memcpy(m->strides, strides, sizeof(m->strides));
  memcpy(m->box, box, sizeof(m->box));
  memcpy(m->steps, steps, sizeof(m->steps));
  m->swizzle = swizzle;
  m->fill = fill;
  map->opaque[0] = MAP_MARK + (unsigned long long)seen.encodes;
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
static _Alignas(16) unsigned char c_rows[64];
static float a_scales[16];
static int32_t offsets[9], counts[8], ids[16], num_padded;
static unsigned char weights[16], workspace[16];

static hm_status launch_next(const hm_gemm_config *cfg, int64_t m, void *c, const hm_gemm_next *next) {
  const hm_gemm_type type = cfg->compute.type;
  hm_gemm_args args = {.type = type, .m = m, .a = a_rows, .c = c};
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
  const hm_gemm_operands ops = {.weight = weights, .scales = weights, .next = *next};
  return hm_gemm_launch(metadata_kernel(cfg), cfg, engine.sm_count, &ops, &args, workspace, NULL);
}

static hm_status launch_to(const hm_gemm_config *cfg, int64_t m, void *c) {
  const hm_gemm_next none = {NULL, 0, 0};
  return launch_next(cfg, m, c, &none);
}

static hm_status launch(const hm_gemm_config *cfg, int64_t m) {
  return launch_to(cfg, m, c_rows);
}

/* A row-major tensor of cols x rows elements for boxes of 128 bytes by box_rows rows. */
static void check_map(const encoded_map *m, CUtensorMapDataType type, const void *address, int64_t cols,
                      int64_t rows, int elem_bytes, int box_rows) {
  assert_int_equal(m->type, type);
  assert_int_equal(m->rank, 2);
  assert_ptr_equal(m->address, address);
  assert_int_equal(m->dims[0], cols);
  assert_int_equal(m->dims[1], rows);
  assert_int_equal(m->strides[0], cols * elem_bytes);
  assert_int_equal(m->box[0] * (cuuint32_t)elem_bytes, 128);
  assert_int_equal(m->box[1], box_rows);
  assert_int_equal(m->steps[0], 1);
  assert_int_equal(m->steps[1], 1);
  assert_int_equal(m->swizzle, CU_TENSOR_MAP_SWIZZLE_128B);
  assert_int_equal(m->fill, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE); /* zeros past the end, nothing written */
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
    assert_true(hm_gemm_tma_c(&cfg));
    memset(&seen, 0, sizeof(seen));
    HM_ASSERT_OK(launch(&cfg, cases[i].m));
    assert_int_equal(seen.encodes, 3);
    assert_int_equal(seen.launches, 1);
    check_map(&seen.maps[0], cases[i].dtype, a_rows, 7168, cases[i].rows, cases[i].elem_bytes, cfg.tuning.bm);
    assert_int_equal(seen.params.tma_a.opaque[0], MAP_MARK + 1);
    assert_ptr_equal(seen.params.a, a_rows);
    /* The output (N 4096, bf16), as many rows as A: a warpgroup's rows a store (wg_n 1). */
    const int store_rows = hm_gemm_tma_c_rows(&cfg);
    assert_int_equal(store_rows,
                     cfg.tuning.warps_n == 4 ? cfg.tuning.bm / cfg.tuning.warps_m : cfg.tuning.bm);
    check_map(&seen.maps[1], CU_TENSOR_MAP_DATA_TYPE_UINT16, c_rows, 4096, cases[i].rows, 2, store_rows);
    check_map(&seen.maps[2], CU_TENSOR_MAP_DATA_TYPE_UINT16, c_rows, 4096, cases[i].rows, 2, 8);
    assert_int_equal(seen.params.tma_c.opaque[0], MAP_MARK + 2);
    assert_int_equal(seen.params.tma_c8.opaque[0], MAP_MARK + 3);
  }
}

static void count_warnings(hm_log_level level, const char *line, void *user) {
  (void)user;
  if (level == HM_LOG_WARN && strstr(line, "not 16-byte aligned")) seen.warnings++;
}

/* A C off 16 bytes gets no output maps (the kernel copies its tiles out itself), and the
 * slower copy is said once a process. */
static void unaligned_output_encodes_no_store_maps(void **state) {
  (void)state;
  const hm_gemm_config cfg = large_m_config("w8a8-fp8", HM_GEMM_GROUPED_CONTIGUOUS);
  hm_log_set(count_warnings, NULL);
  for (int i = 0; i < 2; i++) HM_ASSERT_OK(launch_to(&cfg, 32768, c_rows + 4));
  hm_log_set(NULL, NULL);
  assert_int_equal(seen.encodes, 2); /* the tokens' map, twice */
  assert_int_equal(seen.launches, 2);
  assert_int_equal(seen.warnings, 1);
  const CUtensorMap zero = {{0}};
  assert_memory_equal(&seen.params.tma_c, &zero, sizeof(zero));
  assert_memory_equal(&seen.params.tma_c8, &zero, sizeof(zero));
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
  assert_memory_equal(&seen.params.tma_c, &zero, sizeof(zero));
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

/* W4A16 N = K = 8192 on tiling t, launched at M = m with the next GEMM's weights named. */
static void launch_dense_decode(const hm_gemm_tuning *t, int64_t m) {
  const hm_layer_config lc = hm_test_layer_config("w4a16", 8192, 8192, 1, 0);
  hm_gemm_config cfg;
  HM_ASSERT_OK(hm_gemm_config_from_layer(&lc, HM_GEMM_DENSE, 90, &cfg));
  cfg.tuning = *t;
  HM_ASSERT_OK(hm_gemm_config_check(&cfg));
  static unsigned char next_weights[16];
  const hm_gemm_next next = {next_weights, 8192 * 32, 128};
  HM_ASSERT_OK(launch_next(&cfg, m, c_rows, &next));
}

static void decode_launches_carry_the_next_weights(void **state) {
  (void)state;
  const hm_gemm_tuning unit = {8, 64, 512, 1, 1, 8, 6, false, 0, 1, HM_MMA_SYNC, false};
  launch_dense_decode(&unit, 8);
  assert_non_null(seen.params.next_b);
  assert_int_equal(seen.params.next_unit_bytes, 8192 * 32);
  assert_int_equal(seen.params.next_units, 128);
  /* Two m-tiles a unit: CTAs with two segments, whose first would warm too early. */
  launch_dense_decode(&unit, 9);
  assert_null(seen.params.next_b);
  assert_int_equal(seen.params.next_units, 0);
  /* Stream-K pieces, and a tile that shares its SM. */
  const hm_gemm_tuning stream_k = {8, 256, 128, 1, 4, 2, 4, true, 4, 1, HM_MMA_SYNC, false};
  launch_dense_decode(&stream_k, 1);
  assert_null(seen.params.next_b);
  const hm_gemm_tuning shared = {8, 64, 256, 1, 1, 4, 4, false, 0, 2, HM_MMA_SYNC, false};
  launch_dense_decode(&shared, 1);
  assert_null(seen.params.next_b);
  assert_int_equal(seen.launches, 4);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(large_m_launches_encode_the_token_tensor, setup, tj_teardown),
      cmocka_unit_test_setup_teardown(unaligned_output_encodes_no_store_maps, setup, tj_teardown),
      cmocka_unit_test_setup_teardown(other_launches_encode_nothing, setup, tj_teardown),
      cmocka_unit_test_setup_teardown(failed_encode_fails_the_launch, setup, tj_teardown),
      cmocka_unit_test_setup_teardown(indexed_launches_carry_their_row_bound, setup, tj_teardown),
      cmocka_unit_test_setup_teardown(decode_launches_carry_the_next_weights, setup, tj_teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
