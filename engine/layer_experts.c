/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Weights of some experts of a layer: experts are consecutive in every canonical array,
 * so a range is one slice of each. A MoE layer that runs its shared expert as one more
 * expert of the routed GEMMs fills the routed experts and the shared one by separate calls.
 */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "layer_internal.h"
#include "numfmt.h"

static hm_status check_range(const hm_layer *l, int64_t first, int64_t count) {
  if (first < 0 || count < 1 || first > l->cfg.experts - count)
    HM_FAIL(HM_INVALID_ARGUMENT, "experts [%lld, %lld) are outside the layer's %lld", (long long)first,
            (long long)(first + count), (long long)l->cfg.experts);
  return HM_OK;
}

static size_t bias_row_bytes(const hm_layer *l) {
  return (size_t)l->cfg.n * (size_t)hm_dtype_bits(l->cfg.out) / 8;
}

/* The layer's arrays exist from the first load on; before it, every expert starts at zero. */
static hm_status ensure_host(hm_layer *l) {
  if (l->loaded) return HM_OK;
  hm_host_weights fresh;
  HM_CHECK(hm_host_weights_alloc(&fresh, &l->cfg.scheme.weight, l->cfg.experts, l->cfg.n, l->cfg.k));
  void *bias = NULL;
  if (l->cfg.bias && (bias = calloc((size_t)l->cfg.experts, bias_row_bytes(l))) == NULL) {
    hm_host_weights_free(&fresh);
    HM_FAIL(HM_OUT_OF_MEMORY, "layer bias of %lld experts", (long long)l->cfg.experts);
  }
  hm_layer_install(l, &fresh, bias);
  return HM_OK;
}

/* Experts [first, first + count) of the layer's arrays, as weights of count experts. */
static hm_host_weights slice(const hm_layer *l, int64_t first, int64_t count) {
  const hm_host_weights *w = &l->host;
  const hm_quant_format *f = &w->fmt;
  hm_host_weights s = *w;
  s.experts = count;
  s.qweight = w->qweight + first * hm_quant_qweight_words(f, w->n, w->k);
  if (w->scales)
    s.scales =
        (char *)w->scales + (size_t)(first * hm_quant_scale_count(f, w->n, w->k)) * hm_quant_scale_bytes(f);
  if (w->zeros) s.zeros = w->zeros + first * hm_quant_zero_words(f, w->n, w->k);
  if (w->global_scale) s.global_scale = w->global_scale + first;
  return s;
}

/* Copies one array of count experts into the layer: memcpy from the host, or from the engine's memory. */
typedef struct expert_copy {
  hm_layer *l;
  hm_stream *stream; /* device: the copies are ordered after its work */
  bool device;
} expert_copy;

static hm_status copy_in(const expert_copy *c, void *dst, const void *src, size_t bytes, const char *what) {
  if (bytes == 0) return HM_OK;
  if (src == NULL)
    HM_FAIL(HM_INVALID_ARGUMENT, "layer load of experts: weights->%s must not be NULL for this format", what);
  if (!c->device) {
    memcpy(dst, src, bytes);
    return HM_OK;
  }
  return hm_engine_copy(c->l->engine, dst, src, bytes, HM_COPY_D2H, c->stream);
}

static hm_status load_range(const expert_copy *c, int64_t first, int64_t count, const hm_weights_view *w) {
  hm_layer *l = c->l;
  HM_CHECK(check_range(l, first, count));
  HM_CHECK(hm_layer_check_bias(l, w->bias));
  HM_CHECK(ensure_host(l));
  const hm_quant_format *f = &l->cfg.scheme.weight;
  const int64_t n = l->cfg.n, k = l->cfg.k;
  hm_host_weights s = slice(l, first, count);
  HM_CHECK(
      copy_in(c, s.qweight, w->qweight, (size_t)(count * hm_quant_qweight_words(f, n, k)) * 4, "qweight"));
  HM_CHECK(copy_in(c, s.scales, w->scales,
                   (size_t)(count * hm_quant_scale_count(f, n, k)) * (size_t)hm_quant_scale_bytes(f),
                   "scales"));
  HM_CHECK(copy_in(c, s.zeros, w->zeros, (size_t)(count * hm_quant_zero_words(f, n, k)) * 4, "zeros"));
  HM_CHECK(copy_in(c, s.global_scale, w->global_scale, f->global_scale ? (size_t)count * sizeof(float) : 0,
                   "global_scale"));
  if (l->cfg.bias)
    HM_CHECK(copy_in(c, (char *)l->host_bias + (size_t)first * bias_row_bytes(l), w->bias,
                     (size_t)count * bias_row_bytes(l), "bias"));
  l->transformed = false;
  return HM_OK;
}

hm_status hm_layer_load_experts(hm_layer *l, int64_t first, int64_t count, const hm_weights_view *w) {
  HM_CHECK_NOT_NULL(l);
  HM_CHECK_NOT_NULL(w);
  expert_copy c = {.l = l};
  return load_range(&c, first, count, w);
}

hm_status hm_layer_load_experts_device(hm_layer *l, int64_t first, int64_t count, const hm_weights_view *w,
                                       hm_stream *stream) {
  HM_CHECK_NOT_NULL(l);
  HM_CHECK_NOT_NULL(w);
  if (stream != NULL && stream->engine != l->engine)
    HM_FAIL(HM_INVALID_ARGUMENT, "layer load of experts on a stream of another engine");
  expert_copy c = {.l = l, .stream = stream, .device = true};
  hm_status ret = load_range(&c, first, count, w);
  /* Queued copies write into the layer's arrays until the stream gets past them, failed or not. */
  hm_status done =
      stream != NULL ? hm_stream_synchronize(stream) : l->engine->ops->stream_sync(l->engine, NULL);
  return ret != HM_OK ? ret : done;
}

hm_status hm_layer_quantize_experts(hm_layer *l, int64_t first, int64_t count, const float *weights,
                                    const float *bias) {
  HM_CHECK_NOT_NULL(l);
  HM_CHECK_NOT_NULL(weights);
  HM_CHECK(check_range(l, first, count));
  HM_CHECK(hm_layer_check_bias(l, bias));
  HM_CHECK(ensure_host(l));
  hm_host_weights s = slice(l, first, count);
  l->transformed = false;
  HM_CHECK(hm_quantize_weights(weights, &s));
  if (bias == NULL) return HM_OK;
  return hm_convert_from_f32(l->cfg.out, bias, (char *)l->host_bias + (size_t)first * bias_row_bytes(l),
                             count * l->cfg.n);
}
