/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Launching a loaded kernel with cuLaunchKernelEx: dynamic shared memory, clusters, and
 * programmatic dependent launch for kernels whose metadata says they wait for it.
 */
#include <pthread.h>
#include <string.h>

#include "check.h"
#include "cuda_driver.h"
#include "engine.h"
#include "kernels/jit_kernel.h"
#include "params.h"

static unsigned product(const unsigned d[3]) {
  return d[0] * d[1] * d[2];
}

static hm_status check_dims(const hm_kernel *k, const hm_launch_dims *d, const unsigned cluster[3]) {
  for (int i = 0; i < 3; i++) {
    if (d->grid[i] == 0 || d->block[i] == 0)
      HM_FAIL(HM_INVALID_ARGUMENT, "kernel %s: grid %ux%ux%u and block %ux%ux%u must have no zero", k->name,
              d->grid[0], d->grid[1], d->grid[2], d->block[0], d->block[1], d->block[2]);
    if (d->grid[i] % cluster[i] != 0)
      HM_FAIL(HM_INVALID_ARGUMENT, "kernel %s: grid %ux%ux%u is not a multiple of cluster %ux%ux%u", k->name,
              d->grid[0], d->grid[1], d->grid[2], cluster[0], cluster[1], cluster[2]);
  }
  unsigned threads = product(d->block);
  if ((int)threads > k->max_threads)
    HM_FAIL(HM_INVALID_ARGUMENT, "kernel %s: %u threads a block, at most %d with its %d registers", k->name,
            threads, k->max_threads, k->regs);
  if (k->meta.present && k->meta.threads && threads != k->meta.threads)
    HM_FAIL(HM_INVALID_ARGUMENT, "kernel %s was built for %u threads a block, launched with %u", k->name,
            k->meta.threads, threads);
  return HM_OK;
}

/* The launch's cluster, else the kernel's, with 0s read as 1s. */
static void pick_cluster(const hm_kernel *k, const hm_launch_dims *d, unsigned cluster[3]) {
  unsigned asked[3], built[3];
  for (int i = 0; i < 3; i++) {
    asked[i] = d->cluster[i] ? d->cluster[i] : 1;
    built[i] = k->meta.present && k->meta.cluster[i] ? k->meta.cluster[i] : 1;
  }
  const unsigned *pick = product(asked) > 1 ? asked : built;
  for (int i = 0; i < 3; i++) cluster[i] = pick[i];
}

static hm_status raise_shared_limit(hm_kernel *k, size_t bytes) {
  hm_status ret = HM_OK;
  pthread_mutex_lock(&k->limit_lock);
  if (bytes > k->shared_limit) ret = hm_kernel_set_shared_limit(k, bytes);
  pthread_mutex_unlock(&k->limit_lock);
  return ret;
}

hm_status hm_kernel_launch(hm_kernel *kernel, const hm_launch_dims *dims, void **args, hm_stream *stream) {
  HM_CHECK_NOT_NULL(kernel);
  HM_CHECK_NOT_NULL(dims);
  unsigned cluster[3];
  pick_cluster(kernel, dims, cluster);
  HM_CHECK(check_dims(kernel, dims, cluster));
  if (stream && stream->engine && stream->engine->backend_state != (void *)kernel->ctx)
    HM_FAIL(HM_INVALID_ARGUMENT, "kernel %s: the stream belongs to another device context", kernel->name);
  HM_CU_CHECK(cuCtxSetCurrent(kernel->ctx));
  HM_CHECK(raise_shared_limit(kernel, dims->shared_bytes));
  CUlaunchAttribute attrs[2];
  memset(attrs, 0, sizeof(attrs));
  CUlaunchConfig cfg = {dims->grid[0],
                        dims->grid[1],
                        dims->grid[2],
                        dims->block[0],
                        dims->block[1],
                        dims->block[2],
                        (unsigned)dims->shared_bytes,
                        (CUstream)hm_stream_native(stream),
                        attrs,
                        0};
  if (product(cluster) > 1) {
    CUlaunchAttribute *a = &attrs[cfg.numAttrs++];
    a->id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
    a->value.clusterDim.x = cluster[0];
    a->value.clusterDim.y = cluster[1];
    a->value.clusterDim.z = cluster[2];
  }
  if (kernel->meta.pdl && hm_param_pdl()) {
    CUlaunchAttribute *a = &attrs[cfg.numAttrs++];
    a->id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
    a->value.programmaticStreamSerializationAllowed = 1;
  }
  HM_CU_CHECK(cuLaunchKernelEx(&cfg, kernel->function, args, NULL));
  return HM_OK;
}

hm_status hm_kernel_read_global(const hm_kernel *kernel, const char *name, void *dst, size_t bytes) {
  HM_CHECK_NOT_NULL(kernel);
  HM_CHECK_NOT_NULL(name);
  HM_CHECK_NOT_NULL(dst);
  CUdeviceptr ptr;
  size_t size = 0;
  if (hm_cu.cuModuleGetGlobal(&ptr, &size, kernel->module, name) != CUDA_SUCCESS)
    HM_FAIL(HM_UNSUPPORTED, "kernel %s has no global %s", kernel->name, name);
  if (size != bytes)
    HM_FAIL(HM_INVALID_ARGUMENT, "global %s of %s is %zu bytes, not %zu", name, kernel->name, size, bytes);
  HM_CU_CHECK(cuMemcpyDtoH(dst, ptr, bytes));
  return HM_OK;
}

hm_status hm_kernel_attributes(const hm_kernel *kernel, int *regs, int *static_shared, int *max_threads) {
  HM_CHECK_NOT_NULL(kernel);
  if (regs) *regs = kernel->regs;
  if (static_shared) *static_shared = kernel->static_shared;
  if (max_threads) *max_threads = kernel->max_threads;
  return HM_OK;
}

hm_status hm_kernel_get_meta(const hm_kernel *kernel, hm_kernel_meta *out) {
  HM_CHECK_NOT_NULL(kernel);
  HM_CHECK_NOT_NULL(out);
  *out = kernel->meta;
  return HM_OK;
}
