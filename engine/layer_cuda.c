/* SPDX-License-Identifier: Apache-2.0 */
/*
 * hm_layer on the CUDA backend: the support matrix, the weight upload and transform,
 * the kernel tables (one per GEMM type, every M interval compiled in one parallel
 * batch), and forward, which picks the kernel by valid M and launches it.
 */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "cuda_driver.h"
#include "kernels/gemm_gen.h"
#include "kernels/transform.h"
#include "layer_internal.h"
#include "log.h"

/* The engine-wide support matrix: fp16/int8 from sm_75, bf16/int4 from sm_80, fp8 from sm_89. */
static int min_arch(hm_dtype t) {
  switch (t) {
  case HM_F8E4M3:
  case HM_F8E5M2:
  case HM_F4E2M1: return 89;
  case HM_BF16:
  case HM_I4:
  case HM_U1:
  case HM_U2:
  case HM_U3:
  case HM_U4:
  case HM_U5:
  case HM_U6:
  case HM_U7: return 80;
  default: return 75;
  }
}

static hm_status check_support_matrix(const hm_layer *l) {
  const hm_quant_scheme *s = &l->cfg.scheme;
  const hm_dtype types[] = {s->act, s->weight.weight, l->cfg.out};
  const int arch = l->engine->arch;
  for (size_t i = 0; i < HM_ARRAY_SIZE(types); i++)
    if (arch < min_arch(types[i]))
      HM_FAIL(HM_UNSUPPORTED, "%s needs sm_%d or later; %s is sm_%d", hm_dtype_name(types[i]), min_arch(types[i]),
              l->engine->device_name, arch);
  return HM_OK;
}

/* The W8A8 kernel: i8 (or W4A8 i4) x i8 per channel, f8e4m3 x f8e4m3 per channel or 128x128
 * blocks, W4A8 mxfp4 (f4e2m1 with e8m0 scales per 32) or nvfp4 (f8e4m3 scales per 16, with
 * or without a global scale) x f8e4m3. */
static bool w8a8_covered(const hm_quant_scheme *s) {
  const hm_quant_format *w = &s->weight;
  const bool channel = w->scale_kind == HM_SCALE_CHANNEL &&
                       (w->scale == HM_F16 || w->scale == HM_BF16 || w->scale == HM_F32);
  const bool block = w->scale_kind == HM_SCALE_BLOCK && w->scale == HM_F32 && w->group_n == 128 &&
                     w->group_k == 128;
  const bool e2m1 = w->weight == HM_F4E2M1 && w->scale_kind == HM_SCALE_GROUP;
  const bool mxfp4 = e2m1 && w->scale == HM_E8M0 && w->group_k == 32 && !w->global_scale;
  const bool nvfp4 = e2m1 && w->scale == HM_F8E4M3 && w->group_k == 16;
  const bool types = (s->act == HM_I8 && (w->weight == HM_I8 || w->weight == HM_I4) && channel) ||
                     (s->act == HM_F8E4M3 && w->weight == HM_F8E4M3 && (channel || block)) ||
                     (s->act == HM_F8E4M3 && (mxfp4 || nvfp4));
  return types && !w->zero_point && (s->act_scale == HM_ACT_SCALE_TOKEN || s->act_scale == HM_ACT_SCALE_GROUP128);
}

static hm_status check_kernel_coverage(const hm_layer *l) {
  const hm_quant_scheme *s = &l->cfg.scheme;
  char name[96];
  hm_quant_scheme_describe(s, name, sizeof(name));
  if (s->act == HM_I8 || s->act == HM_F8E4M3) {
    if (w8a8_covered(s)) return HM_OK;
    HM_FAIL(HM_UNSUPPORTED,
            "no CUDA kernel for scheme '%s' yet: the W8A8 GEMM takes i8 or i4 weights with i8 "
            "activations and per-channel scales, f8e4m3 weights with f8e4m3 activations and per-channel or "
            "128x128 f32 block scales, or mxfp4 (e8m0 per 32) or nvfp4 (f8e4m3 per 16) weights with f8e4m3 "
            "activations, each with per-token or 1x128 activation scales",
            name);
  }
  const bool act16 = s->act == HM_F16 || s->act == HM_BF16;
  const bool int_or_16 = hm_gemm_weight_bits(s->weight.weight) != 0;
  const hm_scale_kind sk = s->weight.scale_kind;
  const bool scale_ok = sk == HM_SCALE_GROUP || sk == HM_SCALE_CHANNEL || sk == HM_SCALE_NONE;
  const bool scale_type_ok = sk == HM_SCALE_NONE || s->weight.scale == HM_F16 || s->weight.scale == HM_BF16 ||
                             s->weight.scale == HM_F32;
  if (!act16 || !int_or_16 || !scale_ok || !scale_type_ok)
    HM_FAIL(HM_UNSUPPORTED, "no CUDA kernel for scheme '%s' yet: the weight-only GEMM takes f16/bf16 activations "
            "and u1..u8/i4/i8 weights with per-group or per-channel f16/bf16/f32 scales, or f16/bf16 weights", name);
  return HM_OK;
}

hm_status hm_layer_cuda_check(const hm_layer *l) {
  HM_CHECK(check_support_matrix(l));
  HM_CHECK(check_kernel_coverage(l));
  hm_gemm_config base, pick;
  const hm_gemm_type type = l->cfg.experts == 1 ? HM_GEMM_DENSE : HM_GEMM_INDEXED;
  HM_CHECK(hm_layer_gemm_base(l, type, &base));
  return hm_gemm_select(&base, 1, &pick);
}

static void free_ptr(hm_engine *e, void **p) {
  hm_mem_free(e, *p);
  *p = NULL;
}

void hm_layer_cuda_release(hm_layer *l) {
  hm_layer_device *d = &l->dev;
  free_ptr(l->engine, &d->weight);
  free_ptr(l->engine, &d->scales);
  free_ptr(l->engine, &d->zeros);
  free_ptr(l->engine, &d->bias);
  free_ptr(l->engine, &d->global_scale);
  free_ptr(l->engine, &d->workspace);
  d->workspace_bytes = 0;
}

static hm_status alloc_upload(hm_engine *e, const void *src, size_t bytes, void **dst) {
  *dst = NULL;
  if (bytes == 0) return HM_OK;
  HM_CHECK(hm_mem_alloc(e, bytes, dst));
  if (src == NULL) return HM_OK;
  hm_status st = hm_mem_upload(e, *dst, src, bytes);
  if (st != HM_OK) free_ptr(e, dst);
  return st;
}

static hm_status sync_stream(hm_engine *e, hm_stream *s) {
  if (s != NULL) return hm_stream_synchronize(s);
  HM_CU_CHECK(cuCtxSetCurrent((CUcontext)e->backend_state));
  HM_CU_CHECK(cuStreamSynchronize(NULL));
  return HM_OK;
}

/* Uploads the canonical arrays, transforms them, and waits before freeing the inputs. */
static hm_status upload_transformed(hm_layer *l, hm_stream *stream) {
  hm_engine *e = l->engine;
  hm_layer_device *d = &l->dev;
  const hm_transform_desc desc = hm_transform_desc_of(&l->cfg, l->engine->arch);
  hm_transform_sizes sz;
  HM_CHECK(hm_transform_sizes_of(&desc, &sz));
  hm_status ret = HM_OK;
  void *in_w = NULL, *in_s = NULL, *in_z = NULL;
  HM_CHECK_GOTO(alloc_upload(e, l->host.qweight, sz.in_weight_bytes, &in_w), done);
  HM_CHECK_GOTO(alloc_upload(e, l->host.scales, sz.in_scale_bytes, &in_s), done);
  HM_CHECK_GOTO(alloc_upload(e, l->host.zeros, sz.in_zero_bytes, &in_z), done);
  HM_CHECK_GOTO(alloc_upload(e, NULL, sz.weight_bytes, &d->weight), done);
  d->weight_bytes = sz.weight_bytes;
  HM_CHECK_GOTO(alloc_upload(e, NULL, sz.scale_bytes, &d->scales), done);
  HM_CHECK_GOTO(alloc_upload(e, NULL, sz.zero_bytes, &d->zeros), done);
  hm_transform_buffers b = {in_w, in_s, in_z, d->weight, d->scales, d->zeros};
  HM_CHECK_GOTO(hm_transform_run(e, &desc, &b, stream), done);
  ret = sync_stream(e, stream);
done:
  hm_mem_free(e, in_w);
  hm_mem_free(e, in_s);
  hm_mem_free(e, in_z);
  return ret;
}

static hm_status upload_epilogue_data(hm_layer *l) {
  const hm_quant_format *f = &l->cfg.scheme.weight;
  if (l->cfg.bias)
    HM_CHECK(alloc_upload(l->engine, l->host_bias, (size_t)(l->cfg.experts * l->cfg.n) * 2, &l->dev.bias));
  if (f->global_scale)
    HM_CHECK(alloc_upload(l->engine, l->host.global_scale, (size_t)l->cfg.experts * 4, &l->dev.global_scale));
  return HM_OK;
}

/* Grows the Stream-K workspace to bytes; counters start at zero. */
static hm_status ensure_workspace(hm_layer *l, size_t bytes) {
  if (bytes <= l->dev.workspace_bytes) return HM_OK;
  free_ptr(l->engine, &l->dev.workspace);
  l->dev.workspace_bytes = 0;
  HM_CHECK(hm_mem_alloc(l->engine, bytes, &l->dev.workspace));
  HM_CHECK(hm_engine_memset(l->engine, l->dev.workspace, 0, bytes, NULL));
  l->dev.workspace_bytes = bytes;
  return HM_OK;
}

/*
 * Builds the tables of several GEMM types from the layer's plans (heuristics, tuning
 * table or defaults: hm_layer_plan_get), compiling all their kernels in one batch.
 */
static hm_status build_tables(hm_layer *l, const hm_gemm_type *types, int type_count) {
  hm_status ret = HM_OK;
  hm_gemm_source srcs[HM_LAYER_TYPES * HM_GEMM_PLAN_MAX];
  hm_kernel_source ksrc[HM_LAYER_TYPES * HM_GEMM_PLAN_MAX];
  const hm_cubin *cubins[HM_LAYER_TYPES * HM_GEMM_PLAN_MAX];
  const hm_layer_plan *plans[HM_LAYER_TYPES];
  int count = 0;
  memset(srcs, 0, sizeof(srcs));
  size_t ws = 0;
  for (int i = 0; i < type_count; i++) {
    HM_CHECK_GOTO(hm_layer_plan_get(l, types[i], &plans[i]), done);
    const hm_gemm_plan *plan = &plans[i]->plan;
    for (int j = 0; j < plan->count; j++, count++) {
      HM_CHECK_GOTO(hm_gemm_gen(&plan->cfg[j], &srcs[count]), done);
      ksrc[count] = srcs[count].src;
      size_t b = hm_gemm_workspace_bytes(&plan->cfg[j], l->engine->sm_count);
      if (b > ws) ws = b;
    }
  }
  HM_CHECK_GOTO(hm_jit_get_cubins(ksrc, count, cubins), done);
  for (int i = 0, c = 0; i < type_count; i++) {
    hm_layer_table *t = &l->dev.tables[types[i]];
    for (int j = 0; j < plans[i]->plan.count; j++, c++)
      HM_CHECK_GOTO(hm_kernel_get(l->engine, &ksrc[c], &t->kernels[j]), done);
    t->built = true;
  }
  ret = ensure_workspace(l, ws);
done:
  for (int i = 0; i < count; i++) hm_gemm_source_free(&srcs[i]);
  return ret;
}

hm_status hm_layer_cuda_transform(hm_layer *l, hm_stream *stream) {
  hm_layer_cuda_release(l);
  hm_status ret = HM_OK;
  HM_CHECK_GOTO(upload_transformed(l, stream), fail);
  HM_CHECK_GOTO(upload_epilogue_data(l), fail);
  static const hm_gemm_type dense[] = {HM_GEMM_DENSE};
  static const hm_gemm_type moe[] = {HM_GEMM_INDEXED, HM_GEMM_GROUPED_CONTIGUOUS, HM_GEMM_GROUPED_MASKED};
  if (l->cfg.experts == 1)
    HM_CHECK_GOTO(build_tables(l, dense, 1), fail);
  else
    HM_CHECK_GOTO(build_tables(l, moe, 3), fail);
  return HM_OK;
fail:
  hm_layer_cuda_release(l);
  return ret;
}

hm_gemm_operands hm_layer_operands(const hm_layer *l) {
  const hm_gemm_operands ops = {
      l->dev.weight, l->dev.scales, l->dev.zeros, l->dev.bias, l->dev.global_scale, {NULL, 0, 0}};
  return ops;
}

/* The transformed weights of the layer after this one, as whole 64-column units over K; none
 * for a MoE layer, whose first weights its routing picks. */
static hm_gemm_next next_weights(const hm_layer *next) {
  hm_gemm_next n = {0};
  if (next == NULL || next->dev.weight == NULL || next->cfg.experts != 1) return n;
  n.units = (next->cfg.n + 63) / 64;
  n.unit_bytes = (int64_t)(next->dev.weight_bytes / (size_t)n.units);
  n.weight = next->dev.weight;
  return n;
}

hm_status hm_layer_cuda_forward(hm_layer *l, const hm_gemm_args *args, hm_stream *stream) {
  if ((unsigned)args->type >= HM_LAYER_TYPES) HM_FAIL(HM_INVALID_ARGUMENT, "GEMM type %d unknown", (int)args->type);
  if (!l->dev.tables[args->type].built) {
    HM_INFO(GEMM, "layer: compiling %s kernels on first use", hm_gemm_type_name(args->type));
    HM_CHECK(build_tables(l, &args->type, 1));
  }
  int i = 0;
  HM_CHECK(hm_layer_entry_of(l, args, &i));
  const hm_layer_table *t = &l->dev.tables[args->type];
  hm_gemm_operands ops = hm_layer_operands(l);
  ops.next = next_weights(args->next_layer);
  return hm_gemm_launch(t->kernels[i], &l->plans[args->type].plan.cfg[i], l->engine->sm_count, &ops, args,
                        l->dev.workspace, stream);
}
