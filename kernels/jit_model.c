/* SPDX-License-Identifier: Apache-2.0 */
/* Enumerating a model's GEMM kernels for precompilation (see jit_model.h). */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "kernels/gemm_select.h"
#include "kernels/jit_model.h"
#include "model_layers.h"

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
  hm_quant_scheme scheme;
  hm_model_layer layers[HM_MODEL_MAX_LAYERS];
  int count = 0;
  HM_CHECK(hm_model_preset_get(req->model, &p));
  HM_CHECK(hm_quant_scheme_parse(req->quant, &scheme));
  HM_CHECK(hm_model_layers(&p, &scheme, req->tp, req->ep, layers, &count));
  static const hm_gemm_type moe_types[] = {HM_GEMM_INDEXED, HM_GEMM_GROUPED_CONTIGUOUS,
                                           HM_GEMM_GROUPED_MASKED};
  static const hm_gemm_type dense_types[] = {HM_GEMM_DENSE};
  hm_status ret = HM_OK;
  for (int l = 0; l < count; l++) {
    const bool moe = layers[l].config.experts > 1;
    const hm_gemm_type *types = moe ? moe_types : dense_types;
    for (int t = 0; t < (moe ? 3 : 1); t++)
      HM_CHECK_GOTO(add_plan(req, &layers[l].config, types[t], out), fail);
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
