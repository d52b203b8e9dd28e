/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Each MoE stage on the GPU against the host backend on the same random inputs: router
 * (ids equal up to near-ties, weights close), alignment (identical arrays, fused and
 * three-kernel paths), permutation and combine (identical bits), activation and its
 * 8-bit requantization (close). Skips (77) without a CUDA device.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hm_test.h"
#include "moe/moe_internal.h"
#include "numfmt.h"
#include "quant.h"

static hm_engine *gpu, *host;

static void *upload(const void *src, size_t bytes) {
  void *d = NULL;
  HM_ASSERT_OK(hm_mem_alloc(gpu, bytes ? bytes : 4, &d));
  if (bytes) HM_ASSERT_OK(hm_mem_upload(gpu, d, src, bytes));
  return d;
}

static void *dev_alloc(size_t bytes) {
  void *d = NULL;
  HM_ASSERT_OK(hm_mem_alloc(gpu, bytes ? bytes : 4, &d));
  return d;
}

static void *download(const void *d, size_t bytes) {
  void *h = malloc(bytes ? bytes : 4);
  if (bytes) HM_ASSERT_OK(hm_mem_download(gpu, h, d, bytes));
  return h;
}

static float choice_of(const hm_moe_router_config *c, const float *logits, const float *bias, int e) {
  if (c->scoring == HM_MOE_SCORING_SOFTMAX) return logits[e];
  float s = 1.0f / (1.0f + expf(-logits[e]));
  return c->correction_bias ? s + bias[e] : s;
}

/* With ties, logits and bias are rounded to whole numbers (the bias to +-0): many experts
 * share a choice, none is near another, and the lower index must win on both sides. */
static void route_case(const hm_moe_router_config *c, int64_t T, bool ties, hm_rng *rng) {
  size_t E = (size_t)c->experts, n = (size_t)T * (size_t)c->top_k;
  float *logits = malloc((size_t)T * E * sizeof(float)), *bias = malloc(E * sizeof(float));
  hm_rng_fill_normal(rng, logits, (size_t)T * E, 2.0f);
  hm_rng_fill_uniform(rng, bias, E, -0.1f, 0.1f);
  for (size_t i = 0; ties && i < (size_t)T * E; i++) logits[i] = rintf(logits[i]);
  for (size_t e = 0; ties && e < E; e++) bias[e] = rintf(bias[e]);
  const float *b = c->correction_bias ? bias : NULL;
  int32_t *ids = malloc(n * sizeof(int32_t));
  float *w = malloc(n * sizeof(float));
  HM_ASSERT_OK(hm_moe_route(host, c, T, logits, b, ids, w, NULL));
  float *d_logits = upload(logits, (size_t)T * E * 4), *d_bias = upload(bias, E * 4);
  int32_t *d_ids = dev_alloc(n * 4);
  float *d_w = dev_alloc(n * 4);
  HM_ASSERT_OK(hm_moe_route(gpu, c, T, d_logits, b ? d_bias : NULL, d_ids, d_w, NULL));
  int32_t *g_ids = download(d_ids, n * 4);
  float *g_w = download(d_w, n * 4);
  int64_t mismatched = 0;
  for (int64_t t = 0; t < T; t++) {
    const int64_t o = t * c->top_k;
    if (memcmp(ids + o, g_ids + o, (size_t)c->top_k * 4) != 0) {
      /* Only a near-tie (expf differs by an ulp between host and device) may swap experts. */
      mismatched++;
      for (int k = 0; k < c->top_k; k++) {
        float gap =
            choice_of(c, logits + t * E, bias, ids[o + k]) - choice_of(c, logits + t * E, bias, g_ids[o + k]);
        if (fabsf(gap) > 1e-5f)
          fail_msg("token %lld slot %d: GPU id %d, host %d", (long long)t, k, g_ids[o + k], ids[o + k]);
      }
      continue;
    }
    for (int k = 0; k < c->top_k; k++)
      assert_true(fabsf(g_w[o + k] - w[o + k]) <= 1e-5f * fabsf(w[o + k]) + 1e-6f);
  }
  printf("# router E=%lld k=%d groups=%d T=%lld%s: %lld near-tie tokens\n", (long long)c->experts, c->top_k,
         c->groups, (long long)T, ties ? " (exact ties)" : "", (long long)mismatched);
  assert_true(mismatched <= (ties ? 0 : T / 100));
  hm_mem_free(gpu, d_logits), hm_mem_free(gpu, d_bias), hm_mem_free(gpu, d_ids), hm_mem_free(gpu, d_w);
  free(logits), free(bias), free(ids), free(w), free(g_ids), free(g_w);
}

static void router_matches_host(void **state) {
  (void)state;
  hm_rng rng;
  hm_rng_seed(&rng, hm_test_seed("moe_gpu_router"));
  const hm_moe_router_config configs[] = {
      {HM_MOE_SCORING_SOFTMAX, 60, 6, 1, 1, false, true, 1.0f},
      {HM_MOE_SCORING_SIGMOID, 256, 8, 8, 4, true, true, 2.5f},
      {HM_MOE_SCORING_SOFTMAX, 64, 6, 8, 3, false, false, 16.0f},
      {HM_MOE_SCORING_SIGMOID, 1024, 8, 32, 4, true, true, 1.0f},
  };
  const int64_t tokens[] = {1, 3, 1000, 8192};
  for (size_t c = 0; c < sizeof(configs) / sizeof(configs[0]); c++) {
    for (size_t t = 0; t < 4; t++) route_case(&configs[c], tokens[t], false, &rng);
    route_case(&configs[c], 1000, true, &rng);
  }
}

static int32_t *random_ids(hm_rng *rng, int64_t T, int64_t E, int K, bool skewed) {
  int32_t *ids = malloc((size_t)(T * K) * sizeof(int32_t));
  for (int64_t t = 0; t < T; t++) {
    for (int k = 0; k < K; k++) {
      int32_t e;
      bool again;
      do {
        bool hot = skewed && hm_rng_uniform(rng, 0, 1) < 0.8f;
        e = (int32_t)(hm_rng_next(rng) % (uint64_t)(hot ? K + 2 : E));
        again = false;
        for (int j = 0; j < k; j++) again |= ids[t * K + j] == e;
      } while (again);
      ids[t * K + k] = hm_rng_uniform(rng, 0, 1) < 0.05f ? -1 : e;
    }
  }
  return ids;
}

static void compare_array(const char *what, const int32_t *want, const int32_t *d_got, int64_t n) {
  int32_t *got = download(d_got, (size_t)n * 4);
  for (int64_t i = 0; i < n; i++)
    if (got[i] != want[i]) fail_msg("%s[%lld]: GPU %d, host %d", what, (long long)i, got[i], want[i]);
  free(got);
}

static void align_case(hm_moe_layout layout, int64_t T, int64_t E, int K, int block_m, bool skewed,
                       hm_rng *rng) {
  hm_moe_align_config c = {layout, T, E, K, block_m, 0};
  hm_moe_align_sizes s;
  HM_ASSERT_OK(hm_moe_align_get_sizes(&c, &s));
  int64_t n = T * K;
  int32_t *ids = random_ids(rng, T, E, K, skewed);
  int64_t lens[6] = {n, E, E + 1, 1, s.max_padded, s.max_blocks};
  int32_t *h[6], *d[6];
  for (int i = 0; i < 6; i++) {
    h[i] = calloc((size_t)(lens[i] + 1), 4);
    d[i] = upload(h[i], (size_t)(lens[i] + 1) * 4);
  }
  hm_moe_alignment ho = {h[0], h[1], h[2], h[3], h[4], h[5]}, dout = {d[0], d[1], d[2], d[3], d[4], d[5]};
  HM_ASSERT_OK(hm_moe_align(host, &c, ids, &ho, NULL, NULL));
  int32_t *d_ids = upload(ids, (size_t)n * 4);
  void *ws = dev_alloc(s.workspace_bytes);
  HM_ASSERT_OK(hm_moe_align(gpu, &c, d_ids, &dout, ws, NULL));
  static const char *names[6] = {"row_of",     "expert_counts", "expert_offsets",
                                 "num_padded", "sorted_ids",    "expert_ids"};
  int arrays = layout == HM_MOE_LAYOUT_MASKED ? 2 : layout == HM_MOE_LAYOUT_CONTIGUOUS ? 4 : 6;
  for (int i = 0; i < arrays; i++) compare_array(names[i], h[i], d[i], lens[i]);
  for (int i = 0; i < 6; i++) hm_mem_free(gpu, d[i]), free(h[i]);
  hm_mem_free(gpu, d_ids), hm_mem_free(gpu, ws);
  free(ids);
}

static void alignment_matches_host(void **state) {
  (void)state;
  hm_rng rng;
  hm_rng_seed(&rng, hm_test_seed("moe_gpu_align"));
  const int64_t tokens[] = {1, 3, 64, 1000, 8192};
  for (int layout = HM_MOE_LAYOUT_INDEXED; layout <= HM_MOE_LAYOUT_MASKED; layout++)
    for (size_t t = 0; t < 5; t++)
      for (int skew = 0; skew < 2; skew++) {
        align_case((hm_moe_layout)layout, tokens[t], 16, 4, 16, skew, &rng);
        align_case((hm_moe_layout)layout, tokens[t], 256, 8, 64, skew, &rng);
      }
  align_case(HM_MOE_LAYOUT_INDEXED, 300, 1024, 8, 128, true, &rng);
  align_case(HM_MOE_LAYOUT_CONTIGUOUS, 0, 16, 4, 16, false, &rng);
}

static void act_case(int fn, int64_t rows, int64_t width, hm_dtype out, hm_act_scale_kind scale,
                     hm_rng *rng) {
  bool gated = fn == HM_ACT_FN_SILU_MUL || fn == HM_ACT_FN_GELU_MUL;
  int64_t stride = gated ? 2 * width : width, items = rows + 2;
  int64_t groups = scale == HM_ACT_SCALE_GROUP128 ? (width + 127) / 128 : 1;
  size_t elem = (size_t)hm_dtype_bits(out) / 8, n_out = (size_t)(rows * width);
  float *f = malloc((size_t)(rows * stride) * 4);
  uint16_t *in = malloc((size_t)(rows * stride) * 2);
  hm_rng_fill_normal(rng, f, (size_t)(rows * stride), 2.0f);
  HM_ASSERT_OK(hm_convert_from_f32(HM_BF16, f, in, rows * stride));
  int32_t *row_of = malloc((size_t)items * 4);
  for (int64_t i = 0; i < items; i++) row_of[i] = i < rows ? (int32_t)(rows - 1 - i) : -1;
  uint8_t *h_out = calloc(n_out, elem);
  float *h_scale = calloc((size_t)(rows * groups), 4);
  hm_moe_act_args a = {.fn = fn,
                       .items = items,
                       .row_of = row_of,
                       .in = in,
                       .in_stride = stride,
                       .width = width,
                       .out_type = out,
                       .scale = scale,
                       .out = h_out,
                       .out_scale = h_scale};
  hm_moe_exec hx = {.engine = host}, gx = {.engine = gpu};
  HM_ASSERT_OK(hm_moe_act_run(&hx, NULL, &a));
  a.row_of = upload(row_of, (size_t)items * 4);
  a.in = upload(in, (size_t)(rows * stride) * 2);
  a.out = dev_alloc(n_out * elem);
  a.out_scale = dev_alloc((size_t)(rows * groups) * 4);
  HM_ASSERT_OK(hm_moe_act_run(&gx, NULL, &a));
  uint8_t *g_out = download(a.out, n_out * elem);
  float *g_scale = download(a.out_scale, (size_t)(rows * groups) * 4);
  float *hv = malloc(n_out * 4), *gv = malloc(n_out * 4);
  HM_ASSERT_OK(hm_dequantize_activations(h_out, h_scale, rows, width, out, scale, hv));
  HM_ASSERT_OK(hm_dequantize_activations(g_out, g_scale, rows, width, out, scale, gv));
  double err = hm_rel_error(gv, hv, n_out), bound = elem == 2 ? 2e-3 : 2e-2;
  printf("# act fn=%d width=%lld %s: relative error %.3g\n", fn, (long long)width, hm_dtype_name(out), err);
  if (err > bound)
    fail_msg("activation fn %d width %lld %s: relative error %g", fn, (long long)width, hm_dtype_name(out),
             err);
  hm_mem_free(gpu, (void *)a.row_of), hm_mem_free(gpu, (void *)a.in), hm_mem_free(gpu, a.out);
  hm_mem_free(gpu, a.out_scale);
  free(f), free(in), free(row_of), free(h_out), free(h_scale), free(g_out), free(g_scale), free(hv), free(gv);
}

static void activation_matches_host(void **state) {
  (void)state;
  hm_rng rng;
  hm_rng_seed(&rng, hm_test_seed("moe_gpu_act"));
  act_case(HM_ACT_FN_SILU_MUL, 33, 2048, HM_BF16, HM_ACT_SCALE_NONE, &rng);
  act_case(HM_ACT_FN_SILU_MUL, 10, 100, HM_BF16, HM_ACT_SCALE_NONE, &rng);
  act_case(HM_ACT_FN_GELU_MUL, 17, 768, HM_F16, HM_ACT_SCALE_NONE, &rng);
  act_case(HM_ACT_FN_RELU2, 9, 4100, HM_BF16, HM_ACT_SCALE_NONE, &rng);
  act_case(HM_ACT_FN_SILU_MUL, 20, 2048, HM_I8, HM_ACT_SCALE_TOKEN, &rng);
  act_case(HM_ACT_FN_SILU_MUL, 20, 1000, HM_F8E4M3, HM_ACT_SCALE_GROUP128, &rng);
  act_case(HM_ACT_FN_IDENTITY, 15, 7168, HM_F8E4M3, HM_ACT_SCALE_GROUP128, &rng);
  act_case(HM_ACT_FN_IDENTITY, 15, 7168, HM_I8, HM_ACT_SCALE_TOKEN, &rng);
}

static void combine_and_permute_match_host(void **state) {
  (void)state;
  hm_rng rng;
  hm_rng_seed(&rng, hm_test_seed("moe_gpu_combine"));
  const int64_t T = 300, H = 7168 + 4; /* H % 8 != 0 takes the scalar path */
  const int K = 8;
  for (int pass = 0; pass < 2; pass++) {
    int64_t hidden = pass ? H : 7168, n = T * K;
    float *f = malloc((size_t)(n * hidden) * 4);
    uint16_t *rows = malloc((size_t)(n * hidden) * 2), *x = malloc((size_t)(T * hidden) * 2);
    hm_rng_fill_normal(&rng, f, (size_t)(n * hidden), 1.0f);
    HM_ASSERT_OK(hm_convert_from_f32(HM_BF16, f, rows, n * hidden));
    HM_ASSERT_OK(hm_convert_from_f32(HM_BF16, f, x, T * hidden));
    int32_t *row_of = malloc((size_t)n * 4);
    float *w = malloc((size_t)n * 4);
    for (int64_t i = 0; i < n; i++) {
      row_of[i] = i % 9 == 4 ? -1 : (int32_t)((i * 11 + 5) % n);
      w[i] = hm_rng_uniform(&rng, 0, 1);
    }
    uint16_t *hy = malloc((size_t)(T * hidden) * 2);
    hm_moe_combine_args a = {.tokens = T,
                             .hidden = hidden,
                             .top_k = K,
                             .expert_out = rows,
                             .row_of = row_of,
                             .topk_weights = w,
                             .shared = x,
                             .y = hy};
    HM_ASSERT_OK(hm_moe_combine(host, &a, NULL));
    a.expert_out = upload(rows, (size_t)(n * hidden) * 2);
    a.row_of = upload(row_of, (size_t)n * 4);
    a.topk_weights = upload(w, (size_t)n * 4);
    a.shared = upload(x, (size_t)(T * hidden) * 2);
    a.y = upload(hy, (size_t)(T * hidden) * 2);
    HM_ASSERT_OK(hm_moe_combine(gpu, &a, NULL));
    uint16_t *gy = download(a.y, (size_t)(T * hidden) * 2);
    assert_memory_equal(gy, hy, (size_t)(T * hidden) * 2);
    /* Permutation: x rows into the rows of row_of, on both backends. */
    hm_moe_permute_args p = {
        .items = n, .top_k = K, .row_of = row_of, .src = x, .dst = rows, .row_bytes = (size_t)hidden * 2};
    hm_moe_exec hx = {.engine = host}, gx = {.engine = gpu};
    HM_ASSERT_OK(hm_moe_permute_run(&hx, NULL, &p));
    p.row_of = a.row_of;
    p.src = a.shared;
    p.dst = (void *)a.expert_out;
    HM_ASSERT_OK(hm_moe_permute_run(&gx, NULL, &p));
    uint16_t *grows = download(a.expert_out, (size_t)(n * hidden) * 2);
    assert_memory_equal(grows, rows, (size_t)(n * hidden) * 2);
    hm_mem_free(gpu, (void *)a.expert_out), hm_mem_free(gpu, (void *)a.row_of);
    hm_mem_free(gpu, (void *)a.topk_weights), hm_mem_free(gpu, (void *)a.shared), hm_mem_free(gpu, a.y);
    free(f), free(rows), free(x), free(row_of), free(w), free(hy), free(gy), free(grows);
  }
}

int main(void) {
  gpu = hm_test_cuda_engine_or_skip();
  if (gpu == NULL) return HM_TEST_SKIP;
  host = hm_test_host_engine();
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(router_matches_host),
      cmocka_unit_test(alignment_matches_host),
      cmocka_unit_test(activation_matches_host),
      cmocka_unit_test(combine_and_permute_match_host),
  };
  int failed = cmocka_run_group_tests(tests, NULL, NULL);
  hm_engine_destroy(host);
  hm_engine_destroy(gpu);
  hm_shutdown();
  return failed;
}
