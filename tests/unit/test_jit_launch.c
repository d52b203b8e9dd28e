/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Loading and launching without a GPU: a fake driver table records what hm_kernel_get
 * and hm_kernel_launch ask of it (module image, shared memory limit, launch config,
 * cluster and programmatic-launch attributes) so the whole path runs on the CPU with
 * real cubins.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "cuda_driver.h"
#include "engine.h"
#include "hm_fake_cuda.h"
#include "hm_test.h"
#include "kernels/jit.h"
#include "log.h"
#include "params.h"
#include "test_jit_util.h"

static const char kernel_text[] =
    "extern \"C\" __constant__ unsigned hm_fill_meta[8] = {0x686d6b6du, 128, 0, 1, 1, 1, 0, 0};\n"
    "extern \"C\" __global__ void __launch_bounds__(128) hm_fill(float *out, float v) {\n"
    "  out[blockIdx.x * blockDim.x + threadIdx.x] = v;\n"
    "}\n";

static const char big_text[] =
    "extern \"C\" __constant__ unsigned hm_big_meta[8] = {0x686d6b6du, 64, 100000, 2, 1, 1, 0, 0};\n"
    "extern \"C\" __global__ void hm_big(float *out) {\n"
    "  extern __shared__ float s[];\n"
    "  s[threadIdx.x] = threadIdx.x;\n"
    "  __syncthreads();\n"
    "  out[threadIdx.x] = s[63 - threadIdx.x];\n"
    "}\n";

/* Flagged for programmatic dependent launch (meta word 6), with a cluster of 2. */
static const char pdl_text[] =
    "extern \"C\" __constant__ unsigned hm_after_meta[8] = {0x686d6b6du, 64, 0, 2, 1, 1, 1, 0};\n"
    "extern \"C\" __global__ void hm_after(const float *in, float *out) {\n"
    "  asm volatile(\"griddepcontrol.wait;\" ::: \"memory\");\n"
    "  out[threadIdx.x] = in[threadIdx.x];\n"
    "}\n";

/* What the fake driver saw. */
static struct {
  int loads, unloads, retains, releases, set_attr_calls, launches;
  int last_set_attr_value;
  char last_function[256];
  unsigned char image_head[64];
  CUlaunchConfig last_cfg;
  CUlaunchAttribute last_attrs[4];
  bool fail_load;
  pthread_barrier_t *race; /* loads meet here, so that two threads load at once */
} seen;
/* Two threads may load at once (racing_loads_keep_the_first). */
static pthread_mutex_t seen_lock = PTHREAD_MUTEX_INITIALIZER;

static CUresult fake_retain(CUcontext *c, CUdevice d) {
  (void)d;
  *c = (CUcontext)0x1000;
  pthread_mutex_lock(&seen_lock);
  seen.retains++;
  pthread_mutex_unlock(&seen_lock);
  return CUDA_SUCCESS;
}
static CUresult fake_release(CUdevice d) {
  (void)d;
  seen.releases++;
  return CUDA_SUCCESS;
}
static CUresult fake_load(CUmodule *m, const void *image) {
  if (seen.fail_load) return CUDA_ERROR_INVALID_IMAGE;
  pthread_mutex_lock(&seen_lock);
  memcpy(seen.image_head, image, sizeof(seen.image_head));
  *m = (CUmodule)(uintptr_t)(0x2000 + ++seen.loads);
  pthread_mutex_unlock(&seen_lock);
  if (seen.race) pthread_barrier_wait(seen.race);
  return CUDA_SUCCESS;
}
static CUresult fake_unload(CUmodule m) {
  (void)m;
  seen.unloads++;
  return CUDA_SUCCESS;
}
static CUresult fake_get_function(CUfunction *f, CUmodule m, const char *name) {
  pthread_mutex_lock(&seen_lock);
  snprintf(seen.last_function, sizeof(seen.last_function), "%s", name);
  pthread_mutex_unlock(&seen_lock);
  *f = (CUfunction)(uintptr_t)((uintptr_t)m + 0x100);
  return CUDA_SUCCESS;
}
static CUresult fake_set_attr(CUfunction f, CUfunction_attribute a, int v) {
  (void)f;
  if (a != CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES) return CUDA_ERROR_INVALID_VALUE;
  seen.set_attr_calls++;
  seen.last_set_attr_value = v;
  return CUDA_SUCCESS;
}
static CUresult fake_launch(const CUlaunchConfig *cfg, CUfunction f, void **args, void **extra) {
  (void)f, (void)args, (void)extra;
  seen.launches++;
  seen.last_cfg = *cfg;
  memset(seen.last_attrs, 0, sizeof(seen.last_attrs));
  for (unsigned i = 0; i < cfg->numAttrs && i < 4; i++) seen.last_attrs[i] = cfg->attrs[i];
  return CUDA_SUCCESS;
}
static hm_engine fake_engine;
static char cache_dir[] = "/tmp/hm-test-launch-XXXXXX";

static int setup(void **state) {
  (void)state;
  hm_shutdown();
  memset(&seen, 0, sizeof(seen));
  hm_fake_cuda_install();
  hm_cu.cuDevicePrimaryCtxRetain = fake_retain;
  hm_cu.cuDevicePrimaryCtxRelease = fake_release;
  hm_cu.cuModuleLoadData = fake_load;
  hm_cu.cuModuleUnload = fake_unload;
  hm_cu.cuModuleGetFunction = fake_get_function;
  hm_cu.cuFuncSetAttribute = fake_set_attr;
  hm_cu.cuLaunchKernelEx = fake_launch;
  fake_engine = hm_fake_cuda_engine(80);
  return 0;
}

static int teardown(void **state) {
  (void)state;
  hm_shutdown(); /* unloads through the fake table, then clears it */
  return 0;
}

static void host_engine_is_unsupported(void **state) {
  (void)state;
  hm_engine *host = hm_test_host_engine();
  hm_kernel_source src = {.name = "hm_fill", .source = kernel_text, .arch = 80};
  hm_kernel *k = (hm_kernel *)&src;
  assert_int_equal(hm_kernel_get(host, &src, &k), HM_UNSUPPORTED);
  assert_null(k);
  assert_non_null(strstr(hm_last_error(), "hm_fill"));
  assert_non_null(strstr(hm_last_error(), "CUDA backend"));
  hm_engine_destroy(host);
}

static void loads_once_per_context(void **state) {
  (void)state;
  hm_kernel_source src = {.name = "hm_fill", .source = kernel_text, .arch = 0};
  hm_kernel *k = NULL, *again = NULL;
  HM_ASSERT_OK(hm_kernel_get(&fake_engine, &src, &k));
  HM_ASSERT_OK(hm_kernel_get(&fake_engine, &src, &again));
  assert_ptr_equal(k, again);
  assert_int_equal(seen.loads, 1);
  assert_int_equal(seen.retains, 1);
  assert_string_equal(seen.last_function, "hm_fill");

  /* arch 0 means the device's: the image loaded is the sm_80 cubin. */
  const hm_cubin *c = NULL;
  src.arch = 80;
  HM_ASSERT_OK(hm_jit_get_cubin(&src, &c));
  assert_memory_equal(seen.image_head, c->data, sizeof(seen.image_head));

  int regs = 0, static_shared = -1, max_threads = 0;
  HM_ASSERT_OK(hm_kernel_attributes(k, &regs, &static_shared, &max_threads));
  assert_int_equal(regs, 40);
  assert_int_equal(static_shared, 0);
  assert_int_equal(max_threads, 1024);
  hm_kernel_meta meta;
  HM_ASSERT_OK(hm_kernel_get_meta(k, &meta));
  assert_true(meta.present);
  assert_int_equal(meta.threads, 128);

  /* Another context (a second device) gets a module of its own. */
  hm_engine other = fake_engine;
  other.backend_state = (void *)0x1001;
  other.device = 1;
  HM_ASSERT_OK(hm_kernel_get(&other, &src, &again));
  assert_ptr_not_equal(k, again);
  assert_int_equal(seen.loads, 2);
  assert_int_equal(seen.retains, 2);

  hm_shutdown();
  assert_int_equal(seen.unloads, 2);
  assert_int_equal(seen.releases, 2);
}

static void launch_passes_dims_shared_memory_and_cluster(void **state) {
  (void)state;
  hm_kernel_source src = {.name = "hm_fill", .source = kernel_text, .arch = 80};
  hm_kernel *k = NULL;
  HM_ASSERT_OK(hm_kernel_get(&fake_engine, &src, &k));
  float v = 1;
  void *out = NULL;
  void *args[] = {&out, &v};
  hm_launch_dims dims = {{8, 2, 1}, {128, 1, 1}, 0, {0, 0, 0}};
  HM_ASSERT_OK(hm_kernel_launch(k, &dims, args, NULL));
  assert_int_equal(seen.launches, 1);
  assert_int_equal(seen.last_cfg.gridDimX, 8);
  assert_int_equal(seen.last_cfg.gridDimY, 2);
  assert_int_equal(seen.last_cfg.blockDimX, 128);
  assert_int_equal(seen.last_cfg.numAttrs, 0);
  assert_int_equal(seen.set_attr_calls, 0);

  dims.shared_bytes = 96 * 1024;
  dims.cluster[0] = 2;
  HM_ASSERT_OK(hm_kernel_launch(k, &dims, args, NULL));
  assert_int_equal(seen.set_attr_calls, 1);
  assert_int_equal(seen.last_set_attr_value, 96 * 1024);
  assert_int_equal(seen.last_cfg.sharedMemBytes, 96 * 1024);
  assert_int_equal(seen.last_cfg.numAttrs, 1);
  assert_int_equal(seen.last_attrs[0].id, CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION);
  assert_int_equal(seen.last_attrs[0].value.clusterDim.x, 2);
  assert_int_equal(seen.last_attrs[0].value.clusterDim.y, 1);

  /* A smaller request keeps the raised limit: no second attribute call. */
  dims.shared_bytes = 64 * 1024;
  HM_ASSERT_OK(hm_kernel_launch(k, &dims, args, NULL));
  assert_int_equal(seen.set_attr_calls, 1);
  assert_int_equal(seen.launches, 3);
}

static void launch_refuses_bad_dims(void **state) {
  (void)state;
  hm_kernel_source src = {.name = "hm_fill", .source = kernel_text, .arch = 80};
  hm_kernel *k = NULL;
  HM_ASSERT_OK(hm_kernel_get(&fake_engine, &src, &k));
  hm_launch_dims wrong_threads = {{1, 1, 1}, {256, 1, 1}, 0, {0, 0, 0}};
  assert_int_equal(hm_kernel_launch(k, &wrong_threads, NULL, NULL), HM_INVALID_ARGUMENT);
  assert_non_null(strstr(hm_last_error(), "built for 128 threads"));
  hm_launch_dims zero_grid = {{0, 1, 1}, {128, 1, 1}, 0, {0, 0, 0}};
  assert_int_equal(hm_kernel_launch(k, &zero_grid, NULL, NULL), HM_INVALID_ARGUMENT);
  hm_launch_dims odd_cluster = {{3, 1, 1}, {128, 1, 1}, 0, {2, 1, 1}};
  assert_int_equal(hm_kernel_launch(k, &odd_cluster, NULL, NULL), HM_INVALID_ARGUMENT);
  assert_non_null(strstr(hm_last_error(), "cluster"));
  assert_int_equal(seen.launches, 0);
}

static void metadata_sets_limit_and_cluster(void **state) {
  (void)state;
  hm_kernel_source src = {.name = "hm_big", .source = big_text, .arch = 90, .arch_specific = true};
  hm_kernel *k = NULL;
  HM_ASSERT_OK(hm_kernel_get(&fake_engine, &src, &k));
  assert_int_equal(seen.set_attr_calls, 1);
  assert_int_equal(seen.last_set_attr_value, 100000);
  hm_launch_dims dims = {{4, 1, 1}, {64, 1, 1}, 100000, {0, 0, 0}};
  HM_ASSERT_OK(hm_kernel_launch(k, &dims, NULL, NULL));
  assert_int_equal(seen.set_attr_calls, 1);
  assert_int_equal(seen.last_cfg.numAttrs, 1);
  assert_int_equal(seen.last_attrs[0].value.clusterDim.x, 2);
}

static void pdl_flag_adds_programmatic_serialization(void **state) {
  (void)state;
  hm_kernel_source src = {.name = "hm_after", .source = pdl_text, .arch = 90, .arch_specific = true};
  hm_kernel *k = NULL;
  HM_ASSERT_OK(hm_kernel_get(&fake_engine, &src, &k));
  hm_kernel_meta meta;
  HM_ASSERT_OK(hm_kernel_get_meta(k, &meta));
  assert_true(meta.pdl);
  hm_launch_dims dims = {{4, 1, 1}, {64, 1, 1}, 0, {0, 0, 0}};
  HM_ASSERT_OK(hm_kernel_launch(k, &dims, NULL, NULL));
  assert_int_equal(seen.last_cfg.numAttrs, 2);
  assert_int_equal(seen.last_attrs[0].id, CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION);
  assert_int_equal(seen.last_attrs[1].id, CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION);
  assert_int_equal(seen.last_attrs[1].value.programmaticStreamSerializationAllowed, 1);

  /* A kernel without the flag may read its predecessor's output at once: no attribute. */
  hm_kernel_source plain = {.name = "hm_fill", .source = kernel_text, .arch = 80};
  HM_ASSERT_OK(hm_kernel_get(&fake_engine, &plain, &k));
  HM_ASSERT_OK(hm_kernel_get_meta(k, &meta));
  assert_false(meta.pdl);
  dims.block[0] = 128;
  HM_ASSERT_OK(hm_kernel_launch(k, &dims, NULL, NULL));
  assert_int_equal(seen.last_cfg.numAttrs, 0);
}

static void failed_load_is_reported_and_retried(void **state) {
  (void)state;
  hm_kernel_source src = {.name = "hm_fill", .source = kernel_text, .arch = 80};
  hm_kernel *k = NULL;
  seen.fail_load = true;
  assert_int_equal(hm_kernel_get(&fake_engine, &src, &k), HM_CUDA);
  assert_null(k);
  assert_non_null(strstr(hm_last_error(), "cuModuleLoadData"));
  assert_non_null(strstr(hm_last_error(), "CUDA_ERROR_INVALID_IMAGE"));
  seen.fail_load = false;
  HM_ASSERT_OK(hm_kernel_get(&fake_engine, &src, &k));
  assert_int_equal(seen.loads, 1);
}

struct racer {
  hm_kernel_source src;
  hm_kernel *k;
  hm_status st;
};

static void *race_get(void *arg) {
  struct racer *r = arg;
  r->st = hm_kernel_get(&fake_engine, &r->src, &r->k);
  return NULL;
}

static void count_loaded(hm_log_level level, const char *line, void *user) {
  if (level == HM_LOG_DEBUG && strstr(line, "loaded hm_fill"))
    __atomic_add_fetch((int *)user, 1, __ATOMIC_SEQ_CST);
}

/* Two threads that miss at once both load the module; the one that publishes second
 * unloads its own and takes the first's. Its debug line named the kernel it had loaded,
 * already freed by then (clang-tidy's analyzer; ASan in the quickstart's unit run). */
static void racing_loads_keep_the_first(void **state) {
  (void)state;
  pthread_barrier_t both;
  pthread_barrier_init(&both, NULL, 2);
  seen.race = &both;
  int lines = 0;
  setenv("HUMMING_LOG", "debug", 1);
  hm_params_reload();
  hm_log_reset();
  hm_log_set(count_loaded, &lines);
  struct racer other = {.src = {.name = "hm_fill", .source = kernel_text, .arch = 80}};
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, race_get, &other), 0);
  hm_kernel *k = NULL;
  hm_status st = hm_kernel_get(&fake_engine, &other.src, &k);
  pthread_join(t, NULL);
  hm_log_set(NULL, NULL);
  unsetenv("HUMMING_LOG");
  hm_params_reload();
  hm_log_reset();
  seen.race = NULL;
  pthread_barrier_destroy(&both);
  HM_ASSERT_OK(st);
  HM_ASSERT_OK(other.st);
  assert_ptr_equal(k, other.k);
  assert_int_equal(seen.loads, 2);
  assert_int_equal(seen.unloads, 1);
  assert_int_equal(lines, 2);
  hm_shutdown(); /* both threads may have retained the context: each retain is released */
  assert_int_equal(seen.unloads, 2);
  assert_int_equal(seen.releases, seen.retains);
}

static void keep_warnings(hm_log_level level, const char *line, void *user) {
  if (level == HM_LOG_WARN) snprintf(user, 1024, "%s", line);
}

static void spilling_kernel_is_named_at_load(void **state) {
  (void)state;
  char warned[1024] = "";
  hm_log_set(keep_warnings, warned);
  hm_kernel *k = NULL;
  hm_kernel_source fits = {.name = "hm_fill", .source = kernel_text, .arch = 80};
  HM_ASSERT_OK(hm_kernel_get(&fake_engine, &fits, &k));
  assert_string_equal(warned, "");
  hm_kernel_source spills = {.name = "hm_spill", .source = tj_spill_source, .arch = 80};
  HM_ASSERT_OK(hm_kernel_get(&fake_engine, &spills, &k));
  hm_log_set(NULL, NULL);
  assert_non_null(strstr(warned, "hm_spill keeps"));
  assert_non_null(strstr(warned, "bytes a thread in local memory at 32 registers"));
}

int main(void) {
  char *dir = mkdtemp(cache_dir);
  if (dir == NULL) return 1;
  setenv("HUMMING_CACHE_DIR", dir, 1);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(host_engine_is_unsupported),
      cmocka_unit_test_setup_teardown(loads_once_per_context, setup, teardown),
      cmocka_unit_test_setup_teardown(launch_passes_dims_shared_memory_and_cluster, setup, teardown),
      cmocka_unit_test_setup_teardown(launch_refuses_bad_dims, setup, teardown),
      cmocka_unit_test_setup_teardown(metadata_sets_limit_and_cluster, setup, teardown),
      cmocka_unit_test_setup_teardown(pdl_flag_adds_programmatic_serialization, setup, teardown),
      cmocka_unit_test_setup_teardown(failed_load_is_reported_and_retried, setup, teardown),
      cmocka_unit_test_setup_teardown(spilling_kernel_is_named_at_load, setup, teardown),
      cmocka_unit_test_setup_teardown(racing_loads_keep_the_first, setup, teardown),
  };
  int failed = cmocka_run_group_tests(tests, NULL, NULL);
  char cmd[128];
  snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
  return failed;
}
