/* SPDX-License-Identifier: Apache-2.0 */
/*
 * hm_layer weights from the engine's memory: an embedding host's tensors already on the
 * GPU are copied into the layer's own canonical arrays, so that load, transform and the
 * host reference see the same weights whichever way they came in.
 */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "layer_internal.h"

static size_t bias_bytes(const hm_layer *l) {
  return l->cfg.bias ? (size_t)(l->cfg.experts * l->cfg.n) * hm_dtype_bits(l->cfg.out) / 8 : 0;
}

hm_status hm_layer_weights_bytes(const hm_layer *l, hm_weights_bytes *out) {
  HM_CHECK_NOT_NULL(l);
  HM_CHECK_NOT_NULL(out);
  const hm_quant_format *f = &l->cfg.scheme.weight;
  const int64_t e = l->cfg.experts, n = l->cfg.n, k = l->cfg.k;
  out->qweight = (size_t)(e * hm_quant_qweight_words(f, n, k)) * 4;
  out->scales = (size_t)(e * hm_quant_scale_count(f, n, k)) * (size_t)hm_quant_scale_bytes(f);
  out->zeros = (size_t)(e * hm_quant_zero_words(f, n, k)) * 4;
  out->global_scale = f->global_scale ? (size_t)e * sizeof(float) : 0;
  out->bias = bias_bytes(l);
  return HM_OK;
}

/* Queues one array's copy to the host; stream order makes it see the caller's writes. */
static hm_status download(hm_layer *l, void *dst, const void *src, size_t bytes, const char *what,
                          hm_stream *stream) {
  if (bytes == 0) return HM_OK;
  if (src == NULL)
    HM_FAIL(HM_INVALID_ARGUMENT, "layer load_device: weights->%s must not be NULL for this format", what);
  return hm_engine_copy(l->engine, dst, src, bytes, HM_COPY_D2H, stream);
}

static hm_status finish(hm_engine *e, hm_stream *stream) {
  if (stream != NULL) return hm_stream_synchronize(stream);
  return e->ops->stream_sync(e, NULL);
}

hm_status hm_layer_load_device(hm_layer *l, const hm_weights_view *w, hm_stream *stream) {
  HM_CHECK_NOT_NULL(l);
  HM_CHECK_NOT_NULL(w);
  if (stream != NULL && stream->engine != l->engine)
    HM_FAIL(HM_INVALID_ARGUMENT, "layer load_device on a stream of another engine");
  HM_CHECK(hm_layer_check_bias(l, w->bias));
  hm_weights_bytes sz;
  HM_CHECK(hm_layer_weights_bytes(l, &sz));
  hm_status ret = HM_OK;
  hm_host_weights fresh;
  memset(&fresh, 0, sizeof(fresh));
  void *bias = NULL;
  HM_CHECK(hm_host_weights_alloc(&fresh, &l->cfg.scheme.weight, l->cfg.experts, l->cfg.n, l->cfg.k));
  if (sz.bias > 0 && (bias = malloc(sz.bias)) == NULL)
    HM_FAIL_GOTO(HM_OUT_OF_MEMORY, fail, "layer bias of %zu bytes", sz.bias);
  HM_CHECK_GOTO(download(l, fresh.qweight, w->qweight, sz.qweight, "qweight", stream), fail);
  HM_CHECK_GOTO(download(l, fresh.scales, w->scales, sz.scales, "scales", stream), fail);
  HM_CHECK_GOTO(download(l, fresh.zeros, w->zeros, sz.zeros, "zeros", stream), fail);
  HM_CHECK_GOTO(download(l, fresh.global_scale, w->global_scale, sz.global_scale, "global_scale", stream),
                fail);
  HM_CHECK_GOTO(download(l, bias, w->bias, sz.bias, "bias", stream), fail);
  HM_CHECK_GOTO(finish(l->engine, stream), fail);
  hm_layer_install(l, &fresh, bias);
  return HM_OK;
fail:
  /* Copies queued before a failure may still be writing into these buffers. */
  if (stream != NULL) (void)hm_stream_synchronize(stream);
  hm_host_weights_free(&fresh);
  free(bias);
  return ret;
}
