/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The decode front on the GPU (router or given ids, alignment and permutation in one
 * kernel) against the same stages launched apart on the GPU and against the host front:
 * ids, weights, every metadata array and every permuted row bit for bit, for each
 * layout, one or two alignment sets, with and without an appended expert (a layer's
 * fused shared expert), T = 1..16. Also alignment and combine with an appended expert
 * against the host, on the one-block and the three-kernel alignment paths.
 * Skips (77) without a CUDA device.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hm_test.h"
#include "moe/moe_internal.h"
#include "numfmt.h"

static hm_engine *gpu, *host;

static void *dev_zeros(size_t bytes) {
  void *d = NULL;
  HM_ASSERT_OK(hm_mem_alloc(gpu, bytes ? bytes : 4, &d));
  HM_ASSERT_OK(hm_engine_memset(gpu, d, 0, bytes ? bytes : 4, NULL));
  return d;
}

static void *upload(const void *src, size_t bytes) {
  void *d = dev_zeros(bytes);
  if (bytes) HM_ASSERT_OK(hm_mem_upload(gpu, d, src, bytes));
  return d;
}

static void *download(const void *d, size_t bytes) {
  void *h = calloc(bytes ? bytes : 4, 1);
  if (bytes) HM_ASSERT_OK(hm_mem_download(gpu, h, d, bytes));
  return h;
}

static void *zeros(bool on_gpu, size_t bytes) {
  return on_gpu ? dev_zeros(bytes) : calloc(bytes ? bytes : 4, 1);
}

static void release(bool on_gpu, void *p) {
  if (on_gpu)
    hm_mem_free(gpu, p);
  else
    free(p);
}

/* Distinct experts per token from [0, E), 5% masked with -1. */
static int32_t *random_ids(hm_rng *rng, int64_t T, int64_t E, int K) {
  int32_t *ids = malloc((size_t)(T * K) * sizeof(int32_t));
  for (int64_t t = 0; t < T; t++)
    for (int k = 0; k < K; k++) {
      int32_t e;
      bool again;
      do {
        e = (int32_t)(hm_rng_next(rng) % (uint64_t)E);
        again = false;
        for (int j = 0; j < k; j++) again |= ids[t * K + j] == e;
      } while (again);
      ids[t * K + k] = hm_rng_uniform(rng, 0, 1) < 0.05f ? -1 : e;
    }
  return ids;
}

/* One front's outputs, in one engine's memory. */
typedef struct front_out {
  int32_t *ids;
  float *weights;
  hm_moe_alignment meta[2];
  void *rows, *rows2;
} front_out;

/* What a case runs: sizes of every array, the configs, the inputs in the engine's memory. */
typedef struct front_case {
  hm_moe_router_config router;
  hm_moe_layout layout;
  int64_t T, H;
  bool appended, route;
  int sets;
  hm_moe_align_config align[2];
  hm_moe_align_sizes sizes[2];
  size_t row_bytes2;
} front_case;

static front_case make_case(const hm_moe_router_config *r, hm_moe_layout layout, int64_t T, bool appended,
                            bool route, int sets) {
  front_case c = {.router = *r, .layout = layout, .T = T, .H = 520, .appended = appended, .route = route};
  c.sets = layout == HM_MOE_LAYOUT_INDEXED ? sets : 1;
  c.row_bytes2 = 24;
  for (int s = 0; s < c.sets; s++) {
    c.align[s] = (hm_moe_align_config){layout, T, r->experts + appended, r->top_k + appended, 16 << s, 0};
    HM_ASSERT_OK(hm_moe_align_get_sizes(&c.align[s], &c.sizes[s]));
  }
  return c;
}

static size_t slots_of(const front_case *c) {
  return (size_t)(c->T * (c->router.top_k + c->appended));
}

static void out_alloc(const front_case *c, bool on_gpu, front_out *o) {
  size_t ids = (size_t)(c->T * c->router.top_k) * 4, E = (size_t)c->align[0].experts;
  size_t rows = (size_t)c->sizes[0].rows;
  o->ids = zeros(on_gpu, ids);
  o->weights = zeros(on_gpu, ids);
  for (int s = 0; s < c->sets; s++)
    o->meta[s] = (hm_moe_alignment){.row_of = s == 0 ? zeros(on_gpu, slots_of(c) * 4) : NULL,
                                    .expert_counts = zeros(on_gpu, E * 4),
                                    .expert_offsets = zeros(on_gpu, (E + 1) * 4),
                                    .num_padded = zeros(on_gpu, 4),
                                    .sorted_ids = zeros(on_gpu, (size_t)c->sizes[s].max_padded * 4),
                                    .expert_ids = zeros(on_gpu, (size_t)c->sizes[s].max_blocks * 4)};
  o->rows = zeros(on_gpu, rows * (size_t)c->H * 2);
  o->rows2 = zeros(on_gpu, rows * c->row_bytes2);
}

static void out_free(const front_case *c, bool on_gpu, front_out *o) {
  void *all[] = {o->ids, o->weights, o->rows, o->rows2};
  for (size_t i = 0; i < 4; i++) release(on_gpu, all[i]);
  for (int s = 0; s < c->sets; s++) {
    void *m[] = {o->meta[s].row_of,     o->meta[s].expert_counts, o->meta[s].expert_offsets,
                 o->meta[s].num_padded, o->meta[s].sorted_ids,    o->meta[s].expert_ids};
    for (size_t i = 0; i < 6; i++) release(on_gpu, m[i]);
  }
}

/* Inputs in one engine's memory. */
typedef struct front_in {
  const float *logits, *bias;
  const int32_t *ids;
  const void *x, *x2;
} front_in;

static hm_moe_permute_args permutation(const front_case *c, const front_in *in, const front_out *o) {
  hm_moe_permute_args p = {.items = (int64_t)slots_of(c), .top_k = c->router.top_k + c->appended};
  if (c->layout == HM_MOE_LAYOUT_INDEXED) return p;
  p.row_of = o->meta[0].row_of;
  p.src = in->x;
  p.dst = o->rows;
  p.row_bytes = (size_t)c->H * 2;
  p.src2 = in->x2;
  p.dst2 = o->rows2;
  p.row_bytes2 = c->row_bytes2;
  return p;
}

static void run_front(hm_engine *eng, const front_case *c, const front_in *in, front_out *o) {
  hm_moe_front_args a = {.router = &c->router,
                         .tokens = c->T,
                         .logits = c->route ? in->logits : NULL,
                         .bias = c->route && c->router.correction_bias ? in->bias : NULL,
                         .given_ids = c->route ? NULL : in->ids,
                         .topk_ids = c->route ? o->ids : NULL,
                         .topk_weights = c->route ? o->weights : NULL,
                         .appended = c->appended,
                         .sets = c->sets,
                         .align = c->align,
                         .meta = o->meta,
                         .permute = permutation(c, in, o)};
  hm_moe_exec x = {.engine = eng};
  HM_ASSERT_OK(hm_moe_front_run(&x, NULL, &a));
  assert_int_equal(x.launches, 1);
}

/* The same stages as separate GPU kernels; ws[s] is set s's alignment workspace. */
static void run_apart(const front_case *c, const front_in *in, front_out *o, void *const *ws) {
  hm_moe_exec x = {.engine = gpu};
  const int32_t *ids = in->ids;
  if (c->route) {
    HM_ASSERT_OK(hm_moe_route_run(&x, NULL, &c->router, c->T, in->logits,
                                  c->router.correction_bias ? in->bias : NULL, o->ids, o->weights));
    ids = o->ids;
  }
  for (int s = 0; s < c->sets; s++)
    HM_ASSERT_OK(hm_moe_align_run(&x, NULL, &c->align[s], c->appended, ids, &o->meta[s], ws[s]));
  hm_moe_permute_args p = permutation(c, in, o);
  if (p.dst != NULL) HM_ASSERT_OK(hm_moe_permute_run(&x, NULL, &p));
}

static void same_bytes(const char *what, const void *a, const void *b, size_t bytes, bool a_gpu, bool b_gpu) {
  void *ha = a_gpu ? download(a, bytes) : (void *)a, *hb = b_gpu ? download(b, bytes) : (void *)b;
  if (memcmp(ha, hb, bytes) != 0) fail_msg("%s differs", what);
  if (a_gpu) free(ha);
  if (b_gpu) free(hb);
}

static void compare(const front_case *c, const front_out *a, bool a_gpu, const front_out *b, bool b_gpu,
                    bool metadata_only) {
  size_t ids = (size_t)(c->T * c->router.top_k) * 4, E = (size_t)c->align[0].experts;
  if (c->route) {
    same_bytes("topk_ids", a->ids, b->ids, ids, a_gpu, b_gpu);
    /* One router function in two kernels: only the compiler's contraction choices may differ. */
    float *wa = a_gpu ? download(a->weights, ids) : a->weights,
          *wb = b_gpu ? download(b->weights, ids) : b->weights;
    for (size_t i = 0; i < ids / 4; i++)
      if (fabsf(wa[i] - wb[i]) > 1e-6f * fabsf(wb[i]))
        fail_msg("topk_weights[%zu]: %g and %g", i, wa[i], wb[i]);
    if (a_gpu) free(wa);
    if (b_gpu) free(wb);
  }
  for (int s = 0; s < c->sets; s++) {
    if (s == 0) same_bytes("row_of", a->meta[0].row_of, b->meta[0].row_of, slots_of(c) * 4, a_gpu, b_gpu);
    same_bytes("expert_counts", a->meta[s].expert_counts, b->meta[s].expert_counts, E * 4, a_gpu, b_gpu);
    if (c->layout == HM_MOE_LAYOUT_MASKED) continue;
    same_bytes("expert_offsets", a->meta[s].expert_offsets, b->meta[s].expert_offsets, (E + 1) * 4, a_gpu,
               b_gpu);
    same_bytes("num_padded", a->meta[s].num_padded, b->meta[s].num_padded, 4, a_gpu, b_gpu);
    if (c->layout != HM_MOE_LAYOUT_INDEXED) continue;
    same_bytes("sorted_ids", a->meta[s].sorted_ids, b->meta[s].sorted_ids, (size_t)c->sizes[s].max_padded * 4,
               a_gpu, b_gpu);
    same_bytes("expert_ids", a->meta[s].expert_ids, b->meta[s].expert_ids, (size_t)c->sizes[s].max_blocks * 4,
               a_gpu, b_gpu);
  }
  if (metadata_only || c->layout == HM_MOE_LAYOUT_INDEXED) return;
  size_t rows = (size_t)c->sizes[0].rows;
  same_bytes("permuted rows", a->rows, b->rows, rows * (size_t)c->H * 2, a_gpu, b_gpu);
  same_bytes("permuted scales", a->rows2, b->rows2, rows * c->row_bytes2, a_gpu, b_gpu);
}

static void front_case_run(const front_case *c, hm_rng *rng) {
  size_t E = (size_t)c->router.experts, T = (size_t)c->T, K = (size_t)c->router.top_k;
  float *logits = malloc(T * E * 4), *bias = malloc(E * 4), *xf = malloc(T * (size_t)c->H * 4);
  hm_rng_fill_normal(rng, logits, T * E, 2.0f);
  hm_rng_fill_uniform(rng, bias, E, -0.1f, 0.1f);
  hm_rng_fill_normal(rng, xf, T * (size_t)c->H, 1.0f);
  uint16_t *x = malloc(T * (size_t)c->H * 2);
  HM_ASSERT_OK(hm_convert_from_f32(HM_BF16, xf, x, c->T * c->H));
  uint8_t *x2 = malloc(T * c->row_bytes2);
  for (size_t i = 0; i < T * c->row_bytes2; i++) x2[i] = (uint8_t)(hm_rng_next(rng) & 0xff);
  int32_t *ids = random_ids(rng, c->T, c->router.experts, c->router.top_k);
  front_in hin = {logits, bias, ids, x, x2};
  front_in din = {upload(logits, T * E * 4), upload(bias, E * 4), upload(ids, T * K * 4),
                  upload(x, T * (size_t)c->H * 2), upload(x2, T * c->row_bytes2)};
  front_out fused, apart, on_host;
  out_alloc(c, true, &fused);
  out_alloc(c, true, &apart);
  out_alloc(c, false, &on_host);
  void *ws[2] = {dev_zeros(c->sizes[0].workspace_bytes), dev_zeros(c->sizes[c->sets - 1].workspace_bytes)};
  run_front(gpu, c, &din, &fused);
  run_apart(c, &din, &apart, ws);
  compare(c, &fused, true, &apart, true, false);
  if (!c->route) {
    /* With the ids given there are no near-ties: the host front must agree too. */
    run_front(host, c, &hin, &on_host);
    compare(c, &on_host, false, &fused, true, true);
  }
  printf("# front E=%lld k=%d %s T=%lld %s%s sets=%d: identical\n", (long long)c->router.experts,
         c->router.top_k, hm_moe_layout_name(c->layout), (long long)c->T, c->route ? "routed" : "given ids",
         c->appended ? " +appended" : "", c->sets);
  out_free(c, true, &fused), out_free(c, true, &apart), out_free(c, false, &on_host);
  void *d[] = {
      (void *)din.logits, (void *)din.bias, (void *)din.ids, (void *)din.x, (void *)din.x2, ws[0], ws[1]};
  for (size_t i = 0; i < 7; i++) hm_mem_free(gpu, d[i]);
  free(logits), free(bias), free(xf), free(x), free(x2), free(ids);
}

static void front_matches_the_stages_apart(void **state) {
  (void)state;
  hm_rng rng;
  hm_rng_seed(&rng, hm_test_seed("moe_gpu_front"));
  const hm_moe_router_config routers[] = {
      {HM_MOE_SCORING_SIGMOID, 256, 8, 8, 4, true, true, 2.5f},
      {HM_MOE_SCORING_SOFTMAX, 16, 4, 1, 1, false, true, 1.0f},
  };
  const int64_t tokens[] = {1, 5, 16};
  for (size_t r = 0; r < 2; r++)
    for (int layout = HM_MOE_LAYOUT_INDEXED; layout <= HM_MOE_LAYOUT_MASKED; layout++)
      for (size_t t = 0; t < 3; t++)
        for (int variant = 0; variant < 4; variant++) {
          front_case c = make_case(&routers[r], (hm_moe_layout)layout, tokens[t], variant & 1, variant & 2,
                                   1 + (int)(t % 2));
          front_case_run(&c, &rng);
        }
}

/* Alignment with an appended expert, GPU against host, one-block and three-kernel paths. */
static void appended_alignment_matches_host(void **state) {
  (void)state;
  hm_rng rng;
  hm_rng_seed(&rng, hm_test_seed("moe_gpu_align_appended"));
  const int64_t tokens[] = {3, 64, 1000};
  for (int layout = HM_MOE_LAYOUT_INDEXED; layout <= HM_MOE_LAYOUT_MASKED; layout++)
    for (size_t t = 0; t < 3; t++) {
      hm_moe_router_config r = {HM_MOE_SCORING_SIGMOID, 256, 8, 8, 4, true, true, 2.5f};
      front_case c = make_case(&r, (hm_moe_layout)layout, tokens[t], true, false, 1);
      int32_t *ids = random_ids(&rng, c.T, 256, 8);
      front_out h, d;
      out_alloc(&c, false, &h);
      out_alloc(&c, true, &d);
      hm_moe_exec hx = {.engine = host}, gx = {.engine = gpu};
      HM_ASSERT_OK(hm_moe_align_run(&hx, NULL, &c.align[0], true, ids, &h.meta[0], NULL));
      int32_t *d_ids = upload(ids, (size_t)(c.T * 8) * 4);
      void *ws = dev_zeros(c.sizes[0].workspace_bytes);
      HM_ASSERT_OK(hm_moe_align_run(&gx, NULL, &c.align[0], true, d_ids, &d.meta[0], ws));
      compare(&c, &h, false, &d, true, true);
      printf("# appended alignment %s T=%lld: %d launches, identical\n",
             hm_moe_layout_name(c.align[0].layout), (long long)c.T, gx.launches);
      hm_mem_free(gpu, d_ids), hm_mem_free(gpu, ws);
      out_free(&c, false, &h), out_free(&c, true, &d);
      free(ids);
    }
}

/* The combine with the appended expert's row, GPU against host, bit for bit. */
static void appended_combine_matches_host(void **state) {
  (void)state;
  hm_rng rng;
  hm_rng_seed(&rng, hm_test_seed("moe_gpu_combine_appended"));
  const int64_t T = 40, H = 7168, rows = T * 9;
  const int K = 8;
  float *f = malloc((size_t)(rows * H) * 4), *w = malloc((size_t)(T * K) * 4);
  uint16_t *out = malloc((size_t)(rows * H) * 2), *hy = malloc((size_t)(T * H) * 2);
  hm_rng_fill_normal(&rng, f, (size_t)(rows * H), 1.0f);
  HM_ASSERT_OK(hm_convert_from_f32(HM_BF16, f, out, rows * H));
  hm_rng_fill_uniform(&rng, w, (size_t)(T * K), 0.0f, 1.0f);
  int32_t *row_of = malloc((size_t)rows * 4);
  for (int64_t i = 0; i < rows; i++) row_of[i] = i % 11 == 6 ? -1 : (int32_t)((i * 7 + 2) % rows);
  hm_moe_combine_args a = {
      .tokens = T, .hidden = H, .top_k = K, .expert_out = out, .row_of = row_of, .topk_weights = w, .y = hy};
  hm_moe_exec hx = {.engine = host}, gx = {.engine = gpu};
  HM_ASSERT_OK(hm_moe_combine_run(&hx, NULL, &a, true));
  a.expert_out = upload(out, (size_t)(rows * H) * 2);
  a.row_of = upload(row_of, (size_t)rows * 4);
  a.topk_weights = upload(w, (size_t)(T * K) * 4);
  a.y = dev_zeros((size_t)(T * H) * 2);
  HM_ASSERT_OK(hm_moe_combine_run(&gx, NULL, &a, true));
  same_bytes("combined y", hy, a.y, (size_t)(T * H) * 2, false, true);
  hm_mem_free(gpu, (void *)a.expert_out), hm_mem_free(gpu, (void *)a.row_of);
  hm_mem_free(gpu, (void *)a.topk_weights), hm_mem_free(gpu, a.y);
  free(f), free(w), free(out), free(hy), free(row_of);
}

int main(void) {
  gpu = hm_test_cuda_engine_or_skip();
  if (gpu == NULL) return HM_TEST_SKIP;
  host = hm_test_host_engine();
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(front_matches_the_stages_apart),
      cmocka_unit_test(appended_alignment_matches_host),
      cmocka_unit_test(appended_combine_matches_host),
  };
  int failed = cmocka_run_group_tests(tests, NULL, NULL);
  hm_engine_destroy(host);
  hm_engine_destroy(gpu);
  hm_shutdown();
  return failed;
}
