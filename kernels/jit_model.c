/* SPDX-License-Identifier: Apache-2.0 */
/* Enumerating a model's GEMM kernels for precompilation (see jit_model.h). */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "kernels/gemm_select.h"
#include "kernels/jit_model.h"
#include "model_presets.h"

/* One GEMM layer of the model: output and input features, experts, and whether MoE. */
struct gemm_shape {
  int64_t n, k, experts;
};

/* The GEMM layers of one rank, as moe/layer.c and the dense MLP build them. */
static int model_shapes(const hm_model_preset *p, int tp, int ep, struct gemm_shape *out) {
  int count = 0;
  const int64_t experts = p->experts / ep, inter = p->moe_intermediate / tp;
  out[count++] = (struct gemm_shape){2 * inter, p->hidden, experts};
  out[count++] = (struct gemm_shape){p->hidden, inter, experts};
  if (p->shared_experts > 0) {
    const int64_t width = p->shared_experts * p->moe_intermediate / tp;
    out[count++] = (struct gemm_shape){2 * width, p->hidden, 1};
    out[count++] = (struct gemm_shape){p->hidden, width, 1};
  }
  if (p->dense_layers > 0 && p->dense_intermediate > 0) {
    out[count++] = (struct gemm_shape){2 * p->dense_intermediate / tp, p->hidden, 1};
    out[count++] = (struct gemm_shape){p->hidden, p->dense_intermediate / tp, 1};
  }
  return count;
}

static hm_status check_request(const hm_model_kernel_request *req, const hm_model_preset *p) {
  if (req->tp < 1 || req->ep < 1)
    HM_FAIL(HM_INVALID_ARGUMENT, "tp %d and ep %d must be at least 1", req->tp, req->ep);
  if (p->experts % req->ep != 0)
    HM_FAIL(HM_INVALID_ARGUMENT, "model %s: %lld experts do not split over ep %d", p->name,
            (long long)p->experts, req->ep);
  if (p->moe_intermediate % req->tp != 0 || (p->dense_layers > 0 && p->dense_intermediate % req->tp != 0))
    HM_FAIL(HM_INVALID_ARGUMENT, "model %s: intermediate widths %lld/%lld do not split over tp %d", p->name,
            (long long)p->moe_intermediate, (long long)p->dense_intermediate, req->tp);
  return HM_OK;
}

static bool known(const hm_model_kernels *k, const char *name) {
  for (int i = 0; i < k->count; i++)
    if (strcmp(k->items[i].name, name) == 0) return true;
  return false;
}

/* Generates the plan of one layer and GEMM type, keeping kernels not seen before. */
static hm_status add_plan(const hm_model_kernel_request *req, const hm_layer_config *lc, hm_gemm_type type,
                          hm_model_kernels *out) {
  hm_gemm_plan plan;
  if (req->plan != NULL) {
    HM_CHECK(req->plan(req->plan_ctx, lc, type, req->arch, &plan));
  } else {
    hm_gemm_config base;
    HM_CHECK(hm_gemm_config_from_layer(lc, type, req->arch, &base));
    HM_CHECK(hm_gemm_plan_make(&base, &plan));
  }
  hm_gemm_source *grown = realloc(out->items, (size_t)(out->count + plan.count) * sizeof(*grown));
  if (grown == NULL) HM_FAIL(HM_OUT_OF_MEMORY, "%d kernel sources", out->count + plan.count);
  out->items = grown;
  for (int i = 0; i < plan.count; i++) {
    hm_gemm_source *s = &out->items[out->count];
    HM_CHECK(hm_gemm_gen(&plan.cfg[i], s));
    if (known(out, s->name)) {
      hm_gemm_source_free(s);
      continue;
    }
    out->count++;
  }
  return HM_OK;
}

hm_status hm_model_kernels_make(const hm_model_kernel_request *req, hm_model_kernels *out) {
  HM_CHECK_NOT_NULL(req);
  HM_CHECK_NOT_NULL(out);
  memset(out, 0, sizeof(*out));
  hm_model_preset p;
  hm_layer_config lc = HM_LAYER_CONFIG_INIT;
  HM_CHECK(hm_model_preset_get(req->model, &p));
  HM_CHECK(hm_quant_scheme_parse(req->quant, &lc.scheme));
  HM_CHECK(check_request(req, &p));
  struct gemm_shape shapes[6];
  int shape_count = model_shapes(&p, req->tp, req->ep, shapes);
  static const hm_gemm_type moe_types[] = {HM_GEMM_INDEXED, HM_GEMM_GROUPED_CONTIGUOUS,
                                           HM_GEMM_GROUPED_MASKED};
  static const hm_gemm_type dense_types[] = {HM_GEMM_DENSE};
  hm_status ret = HM_OK;
  for (int s = 0; s < shape_count; s++) {
    lc.n = shapes[s].n;
    lc.k = shapes[s].k;
    lc.experts = shapes[s].experts;
    lc.bias = p.expert_bias && shapes[s].experts > 1;
    bool moe = shapes[s].experts > 1;
    lc.top_k = moe ? hm_model_preset_launch_top_k(&p, req->ep) : 1;
    const hm_gemm_type *types = moe ? moe_types : dense_types;
    for (int t = 0; t < (moe ? 3 : 1); t++) HM_CHECK_GOTO(add_plan(req, &lc, types[t], out), fail);
  }
  /* src.name points into each item, and the array moved as it grew. */
  for (int i = 0; i < out->count; i++) out->items[i].src.name = out->items[i].name;
  return HM_OK;
fail:
  hm_model_kernels_free(out);
  return ret;
}

void hm_model_kernels_free(hm_model_kernels *k) {
  if (k == NULL) return;
  for (int i = 0; i < k->count; i++) hm_gemm_source_free(&k->items[i]);
  free(k->items);
  memset(k, 0, sizeof(*k));
}
