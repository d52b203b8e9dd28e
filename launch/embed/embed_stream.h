/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The serving stack's own CUDA stream, made through the driver as its runtime would
 * (libcuda.so.1, dlopened so that the example still starts without a driver), in the
 * primary context hm_engine_create made current. On the host backend there is none.
 */
#ifndef HM_EMBED_STREAM_H
#define HM_EMBED_STREAM_H

#include "humming.h"

typedef struct embed_stream {
  void *lib;    /* libcuda.so.1, NULL on the host backend */
  void *native; /* the CUstream, NULL on the host backend */
} embed_stream;

/* Prints the reason and returns HM_CUDA or HM_NO_DEVICE on failure. */
hm_status embed_stream_create(hm_engine *engine, embed_stream *out);
void embed_stream_destroy(embed_stream *s);

#endif
