/* SPDX-License-Identifier: Apache-2.0 */
/* A CUDA stream owned by the embedding host (see embed_stream.h). */
#include "embed_stream.h"

#include <cuda.h>
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

typedef CUresult (*stream_create_fn)(CUstream *stream, unsigned int flags);
typedef CUresult (*stream_destroy_fn)(CUstream stream);

hm_status embed_stream_create(hm_engine *engine, embed_stream *out) {
  memset(out, 0, sizeof(*out));
  if (hm_engine_backend(engine) != HM_BACKEND_CUDA) return HM_OK;
  out->lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (out->lib == NULL) {
    fprintf(stderr, "embed: dlopen libcuda.so.1: %s\n", dlerror());
    return HM_NO_DEVICE;
  }
  stream_create_fn create = (stream_create_fn)dlsym(out->lib, "cuStreamCreate");
  if (create == NULL) {
    fprintf(stderr, "embed: libcuda.so.1 has no cuStreamCreate\n");
    embed_stream_destroy(out);
    return HM_CUDA;
  }
  CUstream s = NULL;
  CUresult r = create(&s, CU_STREAM_NON_BLOCKING);
  if (r != CUDA_SUCCESS) {
    fprintf(stderr, "embed: cuStreamCreate failed (CUresult %d)\n", (int)r);
    embed_stream_destroy(out);
    return HM_CUDA;
  }
  out->native = s;
  return HM_OK;
}

void embed_stream_destroy(embed_stream *s) {
  if (s->lib == NULL) return;
  stream_destroy_fn destroy = (stream_destroy_fn)dlsym(s->lib, "cuStreamDestroy_v2");
  if (s->native != NULL && destroy != NULL) destroy((CUstream)s->native);
  dlclose(s->lib);
  memset(s, 0, sizeof(*s));
}
