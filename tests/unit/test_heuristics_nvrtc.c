/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The heuristics' choices compile: for every model preset, format (weight-only w4a16,
 * w4a16-sym, w8a16, bf16; W8A8 fp8 with 128x128 blocks, int8 per channel; W4A8 mxfp4),
 * profile (h20, h200, a100, l40s: sm_90 or sm_90a where a variant needs it, sm_80, sm_89) and GEMM
 * (experts' gate_up and down in the three MoE layouts, shared and dense MLP layers as dense), the kernel
 * table is generated and compiled with NVRTC.
 *
 * The tables hold some 2400 distinct kernels; most differ only in N, K and E, which
 * are loop bounds of the same template code. What can break a compile is the tiling on
 * an arch (with its kernel, plain or warp-specialized, and its CTAs an SM, which bound its
 * registers), the weight format in a GEMM type, and the group size against bk; a kernel is
 * compiled when it is the first to show one of those (a few hundred seconds of NVRTC
 * cold, once: the build dir's compile cache keeps them), all in one thread-pool batch.
 * Each cubin's register spills are read back and held under MAX_LOCAL_BYTES.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "heuristics/choose.h"
#include "hm_test.h"
#include "kernels/gemm_gen.h"
#include "model_layers.h"

#define MAX_KERNELS 1024
/* Most bytes a thread a chosen kernel may keep in local memory. Under ptxas 13.0 the plain
 * wgmma tiles of 128 sums a thread spill 8-48 on sm_90a (bf16 and W4A16, indexed launches,
 * which have no warp-specialized tile of that height). A change past it adds a spill to
 * look at first. */
#define MAX_LOCAL_BYTES 48
#define MAX_FACETS 4096

static const char *const quants[] = {"w4a16",    "w4a16-sym", "w8a16",     "bf16",
                                     "w8a8-fp8", "w8a8-int8", "w4a8-mxfp4"};
static const char *const profiles[] = {"h20", "h200", "a100", "l40s"};

typedef struct batch {
  hm_gemm_source gen[MAX_KERNELS];
  int count;
  char facets[MAX_FACETS][96];
  int facet_count;
  int plans, entries;
} batch;

static bool new_facet(batch *b, const char *facet) {
  for (int i = 0; i < b->facet_count; i++)
    if (strcmp(b->facets[i], facet) == 0) return false;
  assert_true(b->facet_count < MAX_FACETS);
  snprintf(b->facets[b->facet_count++], sizeof(b->facets[0]), "%s", facet);
  return true;
}

/* Whether cfg is the first with its tiling on its arch, its format in its GEMM type, or its group against bk.
 */
static bool shows_something_new(batch *b, const hm_gemm_config *cfg) {
  const hm_gemm_tuning *t = &cfg->tuning;
  const hm_gemm_layer_part *l = &cfg->layer;
  char tiling[96], format[96], group[96];
  snprintf(tiling, sizeof(tiling), "t %d %d %d %d %d %d %d %d %d %d %d sm%d", t->bm, t->bn, t->bk, t->warps_m,
           t->warps_n, t->warps_k, t->stages, t->stream_k, (int)t->mma, t->ws, t->ctas_per_sm, cfg->arch);
  snprintf(format, sizeof(format), "f %d %d %d %d %d %d %d %d sm%d", l->weight, l->zero_point, l->group,
           l->act, l->out, l->bias, l->global_scale, (int)cfg->compute.type, cfg->arch);
  snprintf(group, sizeof(group), "g %d %d %d %d sm%d", t->bk, l->group, l->weight, l->zero_point, cfg->arch);
  const bool a = new_facet(b, tiling), f = new_facet(b, format), g = new_facet(b, group);
  return a || f || g;
}

/* Whether the kernels take the layer at all (the GEMM module's own choice succeeds). */
static bool kernel_supports(const hm_layer_config *lc, hm_gemm_type type, int arch) {
  hm_gemm_config base, pick;
  return hm_gemm_config_from_layer(lc, type, arch, &base) == HM_OK &&
         hm_gemm_select(&base, 1, &pick) == HM_OK;
}

static void add_layer(batch *b, const hm_model_layer *layer, const hm_device_profile *p) {
  const hm_gemm_type moe[] = {HM_GEMM_INDEXED, HM_GEMM_GROUPED_CONTIGUOUS, HM_GEMM_GROUPED_MASKED};
  const hm_gemm_type dense[] = {HM_GEMM_DENSE};
  const bool is_dense = layer->config.experts == 1;
  const hm_gemm_type *types = is_dense ? dense : moe;
  for (int t = 0; t < (is_dense ? 1 : 3); t++) {
    if (!kernel_supports(&layer->config, types[t], p->arch)) continue;
    hm_gemm_plan plan;
    HM_ASSERT_OK(hm_choose_plan(&layer->config, types[t], p, &plan));
    b->plans++;
    for (int i = 0; i < plan.count; i++, b->entries++) {
      if (!shows_something_new(b, &plan.cfg[i])) continue;
      assert_true(b->count < MAX_KERNELS);
      HM_ASSERT_OK(hm_gemm_gen(&plan.cfg[i], &b->gen[b->count++]));
    }
  }
}

static void every_chosen_tiling_and_format_compiles(void **state) {
  (void)state;
  batch *b = calloc(1, sizeof(*b));
  assert_non_null(b);
  for (size_t pi = 0; pi < HM_ARRAY_SIZE(profiles); pi++) {
    hm_device_profile p;
    HM_ASSERT_OK(hm_device_profile_builtin(profiles[pi], &p));
    for (int m = 0; m < hm_model_preset_count(); m++)
      for (size_t q = 0; q < HM_ARRAY_SIZE(quants); q++) {
        hm_quant_scheme scheme;
        hm_model_layer layers[HM_MODEL_MAX_LAYERS];
        int count = 0;
        HM_ASSERT_OK(hm_quant_scheme_parse(quants[q], &scheme));
        HM_ASSERT_OK(hm_model_layers(hm_model_preset_at(m), &scheme, 1, 1, layers, &count));
        for (int l = 0; l < count; l++) add_layer(b, &layers[l], &p);
      }
  }
  hm_kernel_source *src = calloc(MAX_KERNELS, sizeof(*src));
  const hm_cubin **cubins = calloc(MAX_KERNELS, sizeof(*cubins));
  assert_true(src && cubins);
  int arch_specific = 0;
  for (int i = 0; i < b->count; i++) {
    src[i] = b->gen[i].src;
    arch_specific += src[i].arch_specific;
  }
  printf(
      "# %d plans, %d entries; compiling %d kernels (%d arch-specific) that cover every tiling x arch, "
      "format x GEMM type x arch and group x bk\n",
      b->plans, b->entries, b->count, arch_specific);
  assert_true(b->plans > 500);
  HM_ASSERT_OK(hm_jit_get_cubins(src, b->count, cubins));
  for (int i = 0; i < b->count; i++) {
    assert_non_null(cubins[i]);
    assert_true(cubins[i]->size > 0);
    hm_kernel_resources r;
    HM_ASSERT_OK(hm_cubin_kernel_resources(cubins[i], src[i].name, &r));
    if (r.local_bytes > 0)
      printf("# sm_%d %s spills: %u registers, %u bytes a thread in local memory\n", src[i].arch, src[i].name,
             r.registers, r.local_bytes);
    assert_in_range(r.local_bytes, 0, MAX_LOCAL_BYTES);
    hm_gemm_source_free(&b->gen[i]);
  }
  free(src);
  free(cubins);
  free(b);
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(every_chosen_tiling_and_format_compiles)};
  int rc = cmocka_run_group_tests(tests, NULL, NULL);
  hm_shutdown();
  return rc;
}
