/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The wgmma GEMM kernels (sm_90a) on the CPU: every weight format they take (u4 with and
 * without zero points, i4, u8, i8, f16, bf16; groups 32/64/128 and per channel; f16 and
 * bf16 activations and outputs, bias, global scale, also warp-specialized; W8A8 fp8 with block or
 * per-channel scales and int8 per channel, per-token or 1x128 activation scales, also warp-specialized) and
 * every GEMM type compile with NVRTC, with launch metadata that matches the host's accounting and no wgmma
 * serialization reported by ptxas; configs it cannot run are refused by name; and the
 * default selection uses it on sm_90 for >= 33 rows per expert only where it applies, and
 * its warp-specialized kernel (TMA token tiles) for 128-token tiles of non-indexed types.
 */
#include <elf.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "hm_few_copy_tunings.h"
#include "kernels/gemm_config_w8a8.h"
#include "kernels/gemm_config_wgmma.h"
#include "kernels/gemm_gen.h"
#include "kernels/gemm_launch.h"
#include "kernels/gemm_select.h"
#include "test_jit_util.h"
#include "test_sass_scan.h"

typedef struct format {
  hm_dtype weight;
  int group;
  bool zero_point;
  hm_dtype act, out;
  bool bias, global_scale;
} format;

static const format formats[] = {
    {HM_U4, 128, true, HM_BF16, HM_BF16, false, false},  {HM_U4, 64, true, HM_F16, HM_F16, true, false},
    {HM_U4, 32, false, HM_BF16, HM_F16, false, true},    {HM_U4, 0, true, HM_F16, HM_BF16, false, false},
    {HM_I4, 128, false, HM_BF16, HM_BF16, true, false},  {HM_I4, 64, false, HM_F16, HM_F16, false, false},
    {HM_U8, 128, false, HM_BF16, HM_BF16, false, false}, {HM_U8, 64, true, HM_F16, HM_F16, false, false},
    {HM_I8, 0, false, HM_BF16, HM_BF16, true, false},    {HM_I8, 32, false, HM_F16, HM_F16, false, false},
    {HM_BF16, 0, false, HM_BF16, HM_BF16, true, false},  {HM_F16, 0, false, HM_F16, HM_F16, false, false},
};

/* bm bn bk warps_m warps_n warps_k stages stream_k min_iters ctas_per_sm mma ws */
static const hm_gemm_tuning shapes[] = {
    {128, 256, 64, 1, 8, 1, 6, true, 4, 1, HM_MMA_WGMMA, false},  /* 2 warpgroups x 128 columns, N = 128 */
    {256, 128, 64, 1, 8, 1, 5, true, 4, 1, HM_MMA_WGMMA, false},  /* 2 warpgroups x 64 columns, N = 256 */
    {64, 256, 128, 1, 8, 1, 4, false, 0, 1, HM_MMA_WGMMA, false}, /* N = 64, data-parallel only */
    {192, 128, 64, 2, 4, 1, 4, true, 4, 1, HM_MMA_WGMMA, false},  /* 2 warpgroups along tokens, N = 96 */
    {192, 128, 64, 1, 8, 1, 4, true, 4, 1, HM_MMA_WGMMA, false},  /* 2 warpgroups x 64 columns, N = 192 */
    {64, 128, 128, 2, 4, 1, 4, true, 4, 2, HM_MMA_WGMMA, false},  /* N = 32, 2 CTAs an SM */
};

/* Warp-specialized (gemm_ws_wgmma.cuh): two consumer warpgroups, one CTA an SM, the output
 * tile staged in the output type beside the ring. */
static const hm_gemm_tuning ws_shapes[] = {
    {128, 256, 128, 1, 8, 1, 3, true, 4, 1, HM_MMA_WGMMA, true}, /* bk 128 over 3 stages */
    {128, 256, 64, 1, 8, 1, 6, true, 1, 1, HM_MMA_WGMMA, true},  /* bk 64 over 6, Stream-K down to 1 k-tile */
    {256, 128, 64, 1, 8, 1, 4, true, 4, 1, HM_MMA_WGMMA, true},  /* 256 tokens a warpgroup */
    {128, 128, 64, 2, 4, 1, 4, false, 0, 1, HM_MMA_WGMMA, true}, /* 2 token warpgroups, data-parallel */
};

/* Three 73 KiB stages: the output tile is staged in a ring slot (hm_gemm_ws_c_in_ring). */
static const hm_gemm_tuning ring_shape = {256, 128, 128, 1, 8, 1, 3, true, 4, 1, HM_MMA_WGMMA, true};

/* W8A8 (gemm_w8a8_wgmma.cuh): fp8 with 128x128 block or per-channel weight scales, int8
 * per channel; per-token or 1x128 activation scales. */
typedef struct w8a8_format {
  hm_dtype type; /* of weights and activations */
  bool block;
  hm_act_scale_kind act_scale;
  hm_dtype out;
  bool bias, global_scale;
} w8a8_format;

static const w8a8_format w8a8_formats[] = {
    {HM_F8E4M3, true, HM_ACT_SCALE_GROUP128, HM_BF16, false, false},
    {HM_F8E4M3, true, HM_ACT_SCALE_TOKEN, HM_F16, true, true},
    {HM_F8E4M3, false, HM_ACT_SCALE_TOKEN, HM_BF16, true, false},
    {HM_F8E4M3, false, HM_ACT_SCALE_GROUP128, HM_F16, false, false},
    {HM_I8, false, HM_ACT_SCALE_TOKEN, HM_BF16, false, true},
    {HM_I8, false, HM_ACT_SCALE_GROUP128, HM_F16, true, false},
};

/* bk is 128; at most 2 warpgroups of at most 64 accumulators, beside as many partial sums. */
static const hm_gemm_tuning w8a8_shapes[] = {
    {128, 128, 128, 1, 8, 1, 6, true, 4, 1, HM_MMA_WGMMA, false}, /* the large-M default */
    {64, 128, 128, 1, 8, 1, 6, true, 4, 1, HM_MMA_WGMMA, false},  /* the 33..64-row default */
    {128, 64, 128, 2, 4, 1, 4, false, 0, 1, HM_MMA_WGMMA, false}, /* 2 token warpgroups, data-parallel */
    {96, 128, 128, 1, 8, 1, 5, true, 4, 1, HM_MMA_WGMMA, false},  /* N = 96 */
    {64, 64, 128, 1, 4, 1, 4, true, 2, 2, HM_MMA_WGMMA, false},   /* one warpgroup, 2 CTAs an SM */
};

/* Warp-specialized (gemm_w8a8_ws.cuh): two consumer warpgroups, one CTA an SM. */
static const hm_gemm_tuning w8a8_ws_shapes[] = {
    {128, 128, 128, 2, 4, 1, 5, true, 4, 1, HM_MMA_WGMMA, true}, /* the default to 512 rows an expert */
    {256, 128, 128, 2, 4, 1, 3, true, 4, 1, HM_MMA_WGMMA, true}, /* past 512 rows an expert */
    {64, 256, 128, 1, 8, 1, 4, true, 4, 1, HM_MMA_WGMMA, true},  /* 64 tokens, N = 128 a warpgroup */
    {128, 128, 128, 1, 8, 1, 3, true, 2, 1, HM_MMA_WGMMA, true}, /* two m64 blocks, N = 64, 3 stages */
};

/* Three consumer warpgroups of one m64 block each, 152 registers a thread (gemm_ws_pipe.cuh). */
static const hm_gemm_tuning w8a8_ws3_shape = {192, 128, 128, 3, 4, 1, 4, true, 4, 1, HM_MMA_WGMMA, true};

static hm_gemm_config w8a8_config_of(const w8a8_format *f, hm_gemm_type type, const hm_gemm_tuning *t) {
  hm_gemm_config c;
  memset(&c, 0, sizeof(c));
  const int block = f->block ? 128 : 0;
  c.layer = (hm_gemm_layer_part){f->type, f->type,         f->out,     block, false,
                                 f->bias, f->global_scale, 4096 + 512, 7168,  type == HM_GEMM_DENSE ? 1 : 64,
                                 block,   f->act_scale,    false};
  c.compute.type = type;
  c.arch = 90;
  c.tuning = *t;
  return c;
}

static hm_gemm_config config_of(const format *f, hm_gemm_type type, const hm_gemm_tuning *t) {
  hm_gemm_config c;
  memset(&c, 0, sizeof(c));
  const bool quant = hm_gemm_weight_bits(f->weight) < 16;
  c.layer = (hm_gemm_layer_part){
      f->weight,       f->act,     f->out, quant ? f->group : 0,          f->zero_point, f->bias,
      f->global_scale, 4096 + 576, 7168,   type == HM_GEMM_DENSE ? 1 : 64, 0, HM_ACT_SCALE_NONE, false};
  c.compute.type = type;
  c.arch = 90;
  c.tuning = *t;
  if (!quant) { /* 16-bit units are four times as large: as the selection does, shallower stages */
    c.tuning.bk = 64;
    if (c.tuning.stages > 4) c.tuning.stages = 4;
  }
  /* Wider units beside a warp-specialized kernel's own output tile: fewer stages, then a
   * smaller bk, until shared memory fits (as the selection does). */
  while (hm_gemm_config_smem_bytes(&c) > hm_gemm_arch_smem_limit(90) &&
         (c.tuning.stages > 3 || c.tuning.bk > 64)) {
    if (c.tuning.stages > 3)
      c.tuning.stages--;
    else
      c.tuning.bk /= 2;
  }
  return c;
}

typedef struct batch {
  hm_gemm_config cfg[96];
  hm_gemm_source src[96];
  int count;
} batch;

static void add(batch *b, const hm_gemm_config *c) {
  assert_true(b->count < (int)HM_ARRAY_SIZE(b->cfg));
  HM_ASSERT_OK(hm_gemm_config_check(c));
  b->cfg[b->count] = *c;
  HM_ASSERT_OK(hm_gemm_gen(c, &b->src[b->count]));
  assert_true(b->src[b->count].src.arch_specific);
  assert_non_null(strstr(b->src[b->count].name, "_wgmma"));
  b->count++;
}

/* ptxas reports a wgmma pipeline it had to serialize as C7515 (or C7510, C7520). */
static void assert_no_serialization(const hm_cubin *c, const char *name) {
  char path[512];
  tj_entry_file(tj_cache_dir, c->key, "log.txt", path, sizeof(path));
  FILE *f = fopen(path, "r");
  if (f == NULL) return; /* a log is optional in an entry; an empty one is not written */
  char line[1024];
  while (fgets(line, sizeof(line), f))
    if (strstr(line, "wgmma") && strstr(line, "serialized")) fail_msg("%s: %s", name, line);
  fclose(f);
}

static void every_format_and_type_compiles_for_sm90a(void **state) {
  (void)state;
  static batch b;
  b.count = 0;
  /* Formats rotate over the GEMM types and shapes; the first format takes every type. */
  for (size_t i = 0; i < HM_ARRAY_SIZE(formats); i++) {
    const hm_gemm_config c =
        config_of(&formats[i], (hm_gemm_type)(i % 4), &shapes[i % HM_ARRAY_SIZE(shapes)]);
    add(&b, &c);
  }
  for (int t = 1; t < 4; t++) {
    const hm_gemm_config c = config_of(&formats[0], (hm_gemm_type)t, &shapes[t]);
    add(&b, &c);
  }
  /* bn64 bk64 of 4-bit codes on two warpgroups (hm_few_copy_tunings.h). */
  for (size_t i = 0; i < HM_ARRAY_SIZE(hm_few_copy_tunings); i++)
    for (int t = 0; t < 2; t++) {
      const hm_gemm_config c =
          config_of(&formats[0], t == 0 ? HM_GEMM_DENSE : HM_GEMM_INDEXED, &hm_few_copy_tunings[i]);
      add(&b, &c);
    }
  /* Warp-specialized weight-only: every format, GEMM types and shapes rotate; the first
   * format takes every type. */
  for (size_t i = 0; i < HM_ARRAY_SIZE(formats) + 3; i++) {
    const format *f = &formats[i < HM_ARRAY_SIZE(formats) ? i : 0];
    const int type = i < HM_ARRAY_SIZE(formats) ? (int)(i % 4) : (int)(i - HM_ARRAY_SIZE(formats) + 1);
    const hm_gemm_config c = config_of(f, (hm_gemm_type)type, &ws_shapes[i % HM_ARRAY_SIZE(ws_shapes)]);
    add(&b, &c);
    assert_non_null(strstr(b.src[b.count - 1].name, "_wgmma_ws"));
  }
  /* The tile staged in a ring slot, on every GEMM type. */
  for (int t = 0; t < 4; t++) {
    const hm_gemm_config c = config_of(&formats[0], (hm_gemm_type)t, &ring_shape);
    assert_true(hm_gemm_ws_c_in_ring(&c));
    add(&b, &c);
  }
  /* W8A8: fp8 block, fp8 channel and int8 channel take every GEMM type; shapes rotate. */
  for (size_t i = 0; i < HM_ARRAY_SIZE(w8a8_formats); i++)
    for (int t = 0; t < 4; t++) {
      if (i % 2 == 1 && t % 2 == 1) continue; /* the other scale kind of the family covers it */
      const hm_gemm_config c = w8a8_config_of(&w8a8_formats[i], (hm_gemm_type)t,
                                              &w8a8_shapes[(i + t) % HM_ARRAY_SIZE(w8a8_shapes)]);
      add(&b, &c);
    }
  /* Warp-specialized W8A8: every format and GEMM type, shapes rotate. */
  for (size_t i = 0; i < HM_ARRAY_SIZE(w8a8_formats); i++)
    for (int t = 0; t < 4; t++) {
      const hm_gemm_config c = w8a8_config_of(&w8a8_formats[i], (hm_gemm_type)t,
                                              &w8a8_ws_shapes[(i + t) % HM_ARRAY_SIZE(w8a8_ws_shapes)]);
      add(&b, &c);
      assert_non_null(strstr(b.src[b.count - 1].name, "_wgmma_ws"));
    }
  /* Three consumer warpgroups: fp8 groups' format contiguous, fp8 per-token indexed, int8
   * (sums kept to the segment's end, no fold) masked. */
  const int ws3_first = b.count;
  const struct {
    size_t format;
    hm_gemm_type type;
  } ws3[] = {{0, HM_GEMM_GROUPED_CONTIGUOUS}, {1, HM_GEMM_INDEXED}, {4, HM_GEMM_GROUPED_MASKED}};
  for (size_t i = 0; i < HM_ARRAY_SIZE(ws3); i++) {
    const hm_gemm_config c = w8a8_config_of(&w8a8_formats[ws3[i].format], ws3[i].type, &w8a8_ws3_shape);
    add(&b, &c);
  }
  hm_kernel_source srcs[HM_ARRAY_SIZE(b.cfg)];
  const hm_cubin *outs[HM_ARRAY_SIZE(b.cfg)];
  for (int i = 0; i < b.count; i++) srcs[i] = b.src[i].src;
  const hm_status st = hm_jit_get_cubins(srcs, b.count, outs);
  for (int i = 0; i < b.count; i++)
    if (outs[i] == NULL) printf("FAILED: %s\n", srcs[i].name);
  if (st != HM_OK) fail_msg("compile failed: %s", hm_last_error());
  int moved = 0;
  for (int i = 0; i < b.count; i++) {
    Elf64_Ehdr eh;
    memcpy(&eh, outs[i]->data, sizeof(eh));
    assert_int_equal((eh.e_flags >> 8) & 0xff, 90);
    hm_kernel_meta meta;
    HM_ASSERT_OK(hm_cubin_kernel_meta(outs[i], b.src[i].name, &meta));
    assert_true(meta.present);
    assert_int_equal(meta.threads, hm_gemm_config_threads(&b.cfg[i]));
    assert_int_equal(meta.shared_bytes, hm_gemm_config_smem_bytes(&b.cfg[i]));
    assert_no_serialization(outs[i], b.src[i].name);
    const int r2ur = sass_r2ur_in_wgmma_loops(outs[i]->data, outs[i]->size);
    if (r2ur != 0) printf("R2UR in the mainloop: %s: %d\n", b.src[i].name, r2ur);
    moved += r2ur;
    /* 128 sums in 152 registers: a spill would cost more than the third warpgroup gains. */
    if (i >= ws3_first) {
      hm_kernel_resources r;
      HM_ASSERT_OK(hm_cubin_kernel_resources(outs[i], b.src[i].name, &r));
      printf("%s: %u registers, %u bytes of local memory\n", b.src[i].name, r.registers, r.local_bytes);
      assert_int_equal(r.local_bytes, 0);
    }
    hm_gemm_source_free(&b.src[i]);
  }
  /* The warp index comes through a shuffle (hm_wg_place_of), so that the descriptors stay
   * uniform: without it, 4 R2UR a k16 step ran in front of the W4A16 HGMMAs (4-7 % of dense
   * M = 4096, docs/PERF.md twenty-seventh session). */
  assert_int_equal(moved, 0);
  printf("%d wgmma kernels compiled for sm_90a\n", b.count);
}

static void expect_refused(const hm_gemm_config *c, hm_status want, const char *words) {
  const hm_status got = hm_gemm_config_check(c);
  if (got != want) fail_msg("a config refused for '%s' got status %d, not %d", words, (int)got, (int)want);
  if (strstr(hm_last_error(), words) == NULL)
    fail_msg("error '%s' does not name '%s'", hm_last_error(), words);
}

static void configs_it_cannot_run_are_refused(void **state) {
  (void)state;
  const hm_gemm_config good = config_of(&formats[0], HM_GEMM_DENSE, &shapes[0]);
  HM_ASSERT_OK(hm_gemm_config_check(&good));
  hm_gemm_config c = good;
  c.arch = 89;
  expect_refused(&c, HM_UNSUPPORTED, "sm_89");
  c = good;
  c.arch = 100;
  expect_refused(&c, HM_UNSUPPORTED, "sm_100");
  c = good;
  c.layer.weight = HM_U3;
  expect_refused(&c, HM_UNSUPPORTED, hm_dtype_name(HM_U3));
  c = good;
  c.tuning.warps_n = 6;
  c.tuning.bn = 192;
  expect_refused(&c, HM_INVALID_ARGUMENT, "warps_n");
  c = good;
  c.tuning.warps_k = 2;
  expect_refused(&c, HM_INVALID_ARGUMENT, "warps_k");
  c = good;
  c.tuning.bm = 80; /* 80 tokens for one warpgroup: not a multiple of 32 */
  expect_refused(&c, HM_INVALID_ARGUMENT, "bm=80");
  c = good;
  c.tuning.bm = 256; /* 2 x 64 columns x 256 tokens: 256 accumulators */
  expect_refused(&c, HM_INVALID_ARGUMENT, "accumulators");
  c = good;
  c.tuning.stages = 2;
  expect_refused(&c, HM_INVALID_ARGUMENT, "stages");
  c = good;
  c.tuning.mma = (hm_gemm_mma)7;
  expect_refused(&c, HM_INVALID_ARGUMENT, "mma=7");
  c = good;
  c.tuning.stages = 8;
  c.tuning.bk = 256;
  expect_refused(&c, HM_UNSUPPORTED, "shared memory");
  /* Warp specialization: wgmma only, two consumer warpgroups, one CTA an SM. */
  c = good;
  c.tuning = (hm_gemm_tuning){128, 256, 64, 2, 4, 1, 4, true, 4, 1, HM_MMA_SYNC, true};
  expect_refused(&c, HM_UNSUPPORTED, "wgmma kernels only");
  const hm_gemm_config ws = w8a8_config_of(&w8a8_formats[0], HM_GEMM_DENSE, &w8a8_ws_shapes[0]);
  HM_ASSERT_OK(hm_gemm_config_check(&ws));
  c = ws;
  c.tuning.bm = 64;
  c.tuning.warps_m = 1; /* one consumer warpgroup */
  expect_refused(&c, HM_INVALID_ARGUMENT, "two consumer warpgroups");
  c = ws;
  c.tuning.ctas_per_sm = 2;
  expect_refused(&c, HM_INVALID_ARGUMENT, "one CTA an SM");
  c = ws;
  c.tuning.stages = 6; /* the staged C tile has its own bytes: 6 stages of 33 KiB do not fit */
  expect_refused(&c, HM_UNSUPPORTED, "shared memory");
  c = ws;
  c.tuning.bm = 192; /* 96 tokens a warpgroup */
  c.tuning.stages = 3;
  expect_refused(&c, HM_INVALID_ARGUMENT, "m64 blocks");
  /* Three consumer warpgroups (152 registers a thread) hold one m64 block each, W8A8 only. */
  c = w8a8_config_of(&w8a8_formats[0], HM_GEMM_DENSE, &w8a8_ws3_shape);
  HM_ASSERT_OK(hm_gemm_config_check(&c));
  c.tuning.bn = 256; /* 64 + 128 sums */
  c.tuning.stages = 3;
  expect_refused(&c, HM_INVALID_ARGUMENT, "accumulators");
  c = w8a8_config_of(&w8a8_formats[0], HM_GEMM_DENSE, &w8a8_ws3_shape);
  c.tuning.ws = false;
  expect_refused(&c, HM_INVALID_ARGUMENT, "at most 2");
  c.tuning.ws = true;
  c.tuning.bm = 256;
  c.tuning.warps_m = 4;
  c.tuning.stages = 3;
  expect_refused(&c, HM_INVALID_ARGUMENT, "4x4 warps");
  c = ws;
  c.tuning.bn = 192; /* N = 192 a warpgroup straddles two 128-column scale blocks */
  c.tuning.stages = 3;
  expect_refused(&c, HM_INVALID_ARGUMENT, "scale blocks");
  const hm_gemm_config wo = config_of(&formats[0], HM_GEMM_DENSE, &ws_shapes[0]);
  HM_ASSERT_OK(hm_gemm_config_check(&wo));
  c = wo;
  c.tuning.warps_n = 4; /* one consumer warpgroup */
  c.tuning.bn = 128;
  expect_refused(&c, HM_INVALID_ARGUMENT, "two consumer warpgroups");
  c = wo;
  c.tuning.bm = 192; /* three: too few registers for the dequant */
  c.tuning.warps_m = 3;
  c.tuning.warps_n = 4;
  c.tuning.bn = 64;
  expect_refused(&c, HM_INVALID_ARGUMENT, "or three for W8A8");
  c = wo;
  c.tuning.stages = 4; /* 4 stages of 49 KiB beside the 65 KiB output tile */
  expect_refused(&c, HM_UNSUPPORTED, "shared memory");
  /* The same tile on mma.sync is another kernel. */
  char a[256], m[256];
  hm_gemm_config_name(&good, a, sizeof(a));
  c = good;
  c.tuning = (hm_gemm_tuning){128, 256, 64, 2, 4, 1, 4, true, 4, 1, HM_MMA_SYNC, false};
  HM_ASSERT_OK(hm_gemm_config_check(&c));
  hm_gemm_config_name(&c, m, sizeof(m));
  assert_string_not_equal(a, m);
}

/* Shared memory: the pipeline or the staged f32 output tile, whichever is larger, plus maps. */
static void shared_memory_accounting(void **state) {
  (void)state;
  const hm_gemm_config c = config_of(&formats[0], HM_GEMM_GROUPED_MASKED, &shapes[0]);
  /* u4 g128, bm 128, bn 256, bk 64: A 16384 + units 8192 + scales 512 + zeros 256 -> 25600 a stage. */
  const size_t pipe = 25600 * 6, staged = 128 * (256 * 4 + 8);
  assert_int_equal(hm_gemm_wgmma_smem_bytes(&c),
                   1024 + (pipe > staged ? pipe : staged) + 3 * 128 * 4 + 4 + 64 * 4);
  assert_int_equal(hm_gemm_config_smem_bytes(&c), hm_gemm_wgmma_smem_bytes(&c));
  assert_int_equal(hm_gemm_wgmma_acc_regs(&c.tuning), 128);
  /* Stream-K: counters for 4 CTAs per SM (rounded to 256 bytes), then 2 partial tiles a CTA. */
  assert_int_equal(hm_gemm_workspace_bytes(&c, 132), 2304 + (size_t)2 * 132 * 128 * 256 * 4);
  /* Warp-specialized W8A8, fp8 blocks, 1x128 activation scales, masked: 5 stages of A 16384 +
   * units 16384 + scales 512 (rounded to 33792), the tile staged in bf16 beside them as the
   * tensor stores read it (128 rows of 256 bytes, no padding), 14 barriers, two map sets,
   * flag, prefix; and a producer warpgroup. Indexed, whose rows go out by bulk stores, with
   * a pitch of 272 bytes (rows 4 banks apart), and no prefix. */
  const hm_gemm_config ws = w8a8_config_of(&w8a8_formats[0], HM_GEMM_GROUPED_MASKED, &w8a8_ws_shapes[0]);
  assert_int_equal(hm_gemm_config_smem_bytes(&ws),
                   1024 + 5 * 33792 + 128 * 128 * 2 + 14 * 8 + 2 * 3 * 128 * 4 + 4 + 64 * 4);
  const hm_gemm_config ws_idx = w8a8_config_of(&w8a8_formats[0], HM_GEMM_INDEXED, &w8a8_ws_shapes[0]);
  assert_int_equal(hm_gemm_config_smem_bytes(&ws_idx),
                   1024 + 5 * 33792 + 128 * (128 * 2 + 16) + 14 * 8 + 2 * 3 * 128 * 4 + 4);
  assert_int_equal(hm_gemm_config_threads(&ws), 384);
  /* Three consumer warpgroups, bm 192: 4 stages of A 24576 + units 16384 + scales 768
   * (rounded to 41984), the tile staged beside them, 12 barriers; 512 threads. */
  const hm_gemm_config ws3 = w8a8_config_of(&w8a8_formats[0], HM_GEMM_GROUPED_MASKED, &w8a8_ws3_shape);
  assert_int_equal(hm_gemm_config_smem_bytes(&ws3),
                   1024 + 4 * 41984 + 192 * 128 * 2 + 12 * 8 + 2 * 3 * 192 * 4 + 4 + 64 * 4);
  assert_int_equal(hm_gemm_config_threads(&ws3), 512);
  /* Warp-specialized u4 g128 with zero points, bm 128, bn 256, bk 128: 3 stages of A 32768 +
   * units 16384 + scales 512 + zeros 256 (rounded to 50176), the tile staged in bf16 for the
   * tensor stores (rows of 512 bytes), 10 barriers, two map sets, flag, prefix; indexed with
   * a pitch of 516 bytes and no prefix. */
  const hm_gemm_config wo = config_of(&formats[0], HM_GEMM_GROUPED_MASKED, &ws_shapes[0]);
  assert_int_equal(hm_gemm_config_smem_bytes(&wo),
                   1024 + 3 * 50176 + 128 * 256 * 2 + 10 * 8 + 2 * 3 * 128 * 4 + 4 + 64 * 4);
  assert_int_equal(hm_gemm_config_threads(&wo), 384);
  assert_false(hm_gemm_ws_c_in_ring(&wo));
  const hm_gemm_config wo_idx = config_of(&formats[0], HM_GEMM_INDEXED, &ws_shapes[0]);
  assert_int_equal(hm_gemm_config_smem_bytes(&wo_idx),
                   1024 + 3 * 50176 + 128 * (256 * 2 + 4) + 10 * 8 + 2 * 3 * 128 * 4 + 4);
  /* bm 256, bn 128, bk 128: 3 stages of A 65536 + units 8192 + scales 256 + zeros 128
   * (rounded to 74752), and no room beside them for the tile (256 x 256 bytes): it is staged
   * in a ring slot, so only the barriers and map sets follow the stages. */
  const hm_gemm_config ring = config_of(&formats[0], HM_GEMM_GROUPED_MASKED, &ring_shape);
  assert_true(hm_gemm_ws_c_in_ring(&ring));
  assert_int_equal(hm_gemm_config_smem_bytes(&ring),
                   1024 + 3 * 74752 + 10 * 8 + 2 * 3 * 256 * 4 + 4 + 64 * 4);
  /* With a K tail it is not: the slot's bytes past K are read (as weights times zero
   * tokens). Groups of 64, so that K = 7232 is a whole number of them. */
  hm_gemm_config tail = config_of(&formats[1], HM_GEMM_GROUPED_MASKED, &ring_shape);
  assert_true(hm_gemm_ws_c_in_ring(&tail));
  tail.layer.k = 7168 + 64;
  assert_false(hm_gemm_ws_c_in_ring(&tail));
}

static hm_gemm_config base_of(const format *f, hm_gemm_type type, int arch, bool invariant) {
  hm_gemm_config c = config_of(f, type, &shapes[0]);
  memset(&c.tuning, 0, sizeof(c.tuning));
  c.arch = arch;
  c.compute.batch_invariant = invariant;
  return c;
}

/* The fixed table at 32, 64 and 4096 rows per expert: mma.sync, then wgmma twice. W8A8
 * launches take the warp-specialized 64-token tile from 17 rows an expert on. */
static void expect_wgmma_from_64_rows(const hm_gemm_config *base, hm_gemm_type type, hm_gemm_config *mid,
                                      hm_gemm_config *large) {
  const bool w8a8 = hm_gemm_is_w8a8(&base->layer);
  const int64_t experts = type == HM_GEMM_DENSE ? 1 : base->layer.experts;
  hm_gemm_config small;
  hm_error_clear();
  HM_ASSERT_OK(hm_gemm_select(base, 32 * experts, &small));
  HM_ASSERT_OK(hm_gemm_select(base, 64 * experts, mid));
  HM_ASSERT_OK(hm_gemm_select(base, 4096 * experts, large));
  /* A warp-specialized variant the selection probes and turns down is an answer, not an error. */
  assert_string_equal(hm_last_error(), "");
  assert_int_equal(small.tuning.mma, w8a8 ? HM_MMA_WGMMA : HM_MMA_SYNC);
  assert_int_equal(small.tuning.ws, w8a8);
  assert_int_equal(mid->tuning.mma, HM_MMA_WGMMA);
  assert_int_equal(large->tuning.mma, HM_MMA_WGMMA);
}

static void selection_uses_wgmma_where_it_applies(void **state) {
  (void)state;
  hm_gemm_config mid, large;
  for (size_t i = 0; i < HM_ARRAY_SIZE(formats); i++)
    for (int type = 0; type < 4; type++) {
      const hm_gemm_config base = base_of(&formats[i], (hm_gemm_type)type, 90, false);
      expect_wgmma_from_64_rows(&base, (hm_gemm_type)type, &mid, &large);
      assert_true(large.tuning.bm >= mid.tuning.bm);
      /* Warp-specialized with TMA token tiles (hm_gemm_prefer_ws): quantized weights, 128
       * tokens, not indexed; 4-bit weights always, wider ones where the ring still fits. */
      const int bits = hm_gemm_weight_bits(formats[i].weight);
      const bool may = bits < 16 && large.tuning.bm >= 128 && type != HM_GEMM_INDEXED;
      assert_false(mid.tuning.ws);
      assert_true(may || !large.tuning.ws);
      if (may && bits == 4) assert_true(large.tuning.ws);
    }
  /* W8A8 likewise, with bk 128 and 64 columns a warpgroup; sm_89 stays on mma.sync. */
  for (size_t i = 0; i < HM_ARRAY_SIZE(w8a8_formats); i++)
    for (int type = 0; type < 4; type++) {
      hm_gemm_config base = w8a8_config_of(&w8a8_formats[i], (hm_gemm_type)type, &w8a8_shapes[0]);
      memset(&base.tuning, 0, sizeof(base.tuning));
      const int64_t experts = type == HM_GEMM_DENSE ? 1 : base.layer.experts;
      expect_wgmma_from_64_rows(&base, (hm_gemm_type)type, &mid, &large);
      assert_int_equal(large.tuning.bk, 128);
      /* 4096 rows an expert: the warp-specialized 256-token tile where tokens come by TMA. */
      assert_int_equal(large.tuning.bm, type != HM_GEMM_INDEXED ? 256 : 128);
      assert_true(mid.tuning.ws);
      assert_int_equal(large.tuning.ws, type != HM_GEMM_INDEXED);
      base.arch = 89;
      HM_ASSERT_OK(hm_gemm_select(&base, 4096 * experts, &large));
      assert_int_equal(large.tuning.mma, HM_MMA_SYNC);
    }
  /* Formats it does not take, other archs and batch-invariant layers stay on mma.sync. */
  const format u3 = {HM_U3, 128, true, HM_BF16, HM_BF16, false, false};
  const struct {
    const format *f;
    int arch;
    bool invariant;
  } stay[] = {{&u3, 90, false}, {&formats[0], 89, false}, {&formats[0], 80, false}, {&formats[0], 90, true}};
  for (size_t i = 0; i < HM_ARRAY_SIZE(stay); i++) {
    const hm_gemm_config base = base_of(stay[i].f, HM_GEMM_INDEXED, stay[i].arch, stay[i].invariant);
    hm_gemm_plan plan;
    HM_ASSERT_OK(hm_gemm_plan_make(&base, &plan));
    for (int j = 0; j < plan.count; j++) assert_int_equal(plan.cfg[j].tuning.mma, HM_MMA_SYNC);
  }
  /* Few columns: the tile narrows, a warpgroup keeps its four warps. */
  hm_gemm_config narrow = base_of(&formats[0], HM_GEMM_DENSE, 90, false), pick;
  narrow.layer.n = 100;
  HM_ASSERT_OK(hm_gemm_select(&narrow, 4096, &pick));
  assert_int_equal(pick.tuning.mma, HM_MMA_WGMMA);
  assert_int_equal(pick.tuning.bn, 128);
  assert_int_equal(pick.tuning.warps_n, 4);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(configs_it_cannot_run_are_refused),
      cmocka_unit_test(shared_memory_accounting),
      cmocka_unit_test(selection_uses_wgmma_where_it_applies),
      cmocka_unit_test_setup_teardown(every_format_and_type_compiles_for_sm90a, tj_setup, tj_teardown),
  };
  int rc = cmocka_run_group_tests(tests, NULL, NULL);
  hm_shutdown();
  return rc;
}
