/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The JIT on the CPU: real kernels compile with NVRTC for sm_80, sm_89 and sm_90a, the
 * key covers every input, repeats are answered by the process table and then by the
 * disk, and bad input fails with a message that names the kernel.
 */
#include <elf.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "hm_test.h"
#include "kernels/cache_key.h"
#include "kernels/jit.h"
#include "kernels/nvrtc.h"
#include "params.h"
#include "test_jit_util.h"

static char cache_dir[256];

static int fresh_cache(void **state) {
  (void)state;
  unsetenv("HUMMING_COMPILER");
  tj_fresh_cache(cache_dir, sizeof(cache_dir));
  return 0;
}

static int drop_cache(void **state) {
  (void)state;
  hm_shutdown();
  tj_remove_tree(cache_dir);
  cache_dir[0] = '\0';
  return 0;
}

static void assert_cuda_elf(const hm_cubin *c, int arch) {
  assert_true(c->size > sizeof(Elf64_Ehdr));
  Elf64_Ehdr eh;
  memcpy(&eh, c->data, sizeof(eh));
  assert_memory_equal(eh.e_ident, ELFMAG, SELFMAG);
  assert_int_equal(eh.e_machine, 190); /* EM_CUDA */
  /* The SM number sits in bits 8..15 of e_flags in CUDA 12+ cubins. */
  assert_int_equal((eh.e_flags >> 8) & 0xff, arch);
}

static void axpy_compiles_for_sm80_sm89_sm90a(void **state) {
  (void)state;
  const struct {
    int arch;
    bool specific;
  } targets[] = {{80, false}, {89, false}, {90, true}};
  for (size_t t = 0; t < HM_ARRAY_SIZE(targets); t++) {
    tj_axpy k;
    tj_axpy_make(&k, 3, targets[t].arch, targets[t].specific);
    const hm_cubin *c = NULL;
    HM_ASSERT_OK(hm_jit_get_cubin(&k.src, &c));
    assert_false(c->from_cache);
    assert_cuda_elf(c, targets[t].arch);
    hm_kernel_meta meta;
    HM_ASSERT_OK(hm_cubin_kernel_meta(c, k.name, &meta));
    assert_true(meta.present);
    assert_int_equal(meta.threads, 256);
    assert_int_equal(meta.cluster[0], 1);
    int vec = 0;
    HM_ASSERT_OK(hm_cubin_read_symbol(c, "hm_axpy_vec", &vec, sizeof(vec)));
    assert_int_equal(vec, 8);
    printf("# %s sm_%d%s: %zu bytes in %.3f s\n", k.name, targets[t].arch, targets[t].specific ? "a" : "",
           c->size, c->seconds);
  }
  hm_jit_stats st;
  hm_jit_get_stats(&st);
  assert_int_equal(st.compiled, 3);
  assert_int_equal(st.disk_hits, 0);
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void repeats_hit_the_table_then_the_disk(void **state) {
  (void)state;
  tj_axpy k;
  tj_axpy_make(&k, 2, 80, false);
  const hm_cubin *first = NULL, *again = NULL;
  HM_ASSERT_OK(hm_jit_get_cubin(&k.src, &first));
  void *bytes = malloc(first->size);
  size_t size = first->size;
  memcpy(bytes, first->data, size);
  const int reps = 1000;
  double start = now_s();
  for (int i = 0; i < reps; i++) HM_ASSERT_OK(hm_jit_get_cubin(&k.src, &again));
  printf("# in-process hit: %.2f us\n", (now_s() - start) / reps * 1e6);
  assert_ptr_equal(first, again);
  hm_jit_stats st;
  hm_jit_get_stats(&st);
  assert_int_equal(st.compiled, 1);
  assert_int_equal(st.memory_hits, reps);

  hm_shutdown(); /* a new process, as far as the JIT can tell */
  const hm_cubin *loaded = NULL;
  HM_ASSERT_OK(hm_jit_get_cubin(&k.src, &loaded));
  assert_true(loaded->from_cache);
  assert_int_equal(loaded->size, size);
  assert_memory_equal(loaded->data, bytes, size);
  printf("# disk hit: %.3f ms\n", loaded->seconds * 1e3);
  hm_jit_get_stats(&st);
  assert_int_equal(st.compiled, 0);
  assert_int_equal(st.disk_hits, 1);
  free(bytes);

  char path[512];
  snprintf(path, sizeof(path), "%s/kernels/%.2s/%s/options.txt", cache_dir, loaded->key, loaded->key);
  FILE *f = fopen(path, "r");
  assert_non_null(f);
  char line[512] = "";
  assert_non_null(fgets(line, sizeof(line), f));
  fclose(f);
  assert_non_null(strstr(line, "-arch=sm_80"));
  assert_non_null(strstr(line, "-default-device"));
}

static void key_of(const hm_kernel_source *src, char key[65]) {
  const hm_cubin *c = NULL;
  HM_ASSERT_OK(hm_jit_get_cubin(src, &c));
  memcpy(key, c->key, 65);
}

static void key_covers_every_input(void **state) {
  (void)state;
  tj_axpy k;
  tj_axpy_make(&k, 1, 80, false);
  char base[65], other[65];
  key_of(&k.src, base);

  hm_kernel_source changed = k.src;
  changed.options = "-DHM_UNUSED_FLAG=1";
  key_of(&changed, other);
  assert_string_not_equal(base, other);

  changed = k.src;
  changed.arch = 86;
  key_of(&changed, other);
  assert_string_not_equal(base, other);

  char edited[sizeof(tj_axpy_header) + 32];
  snprintf(edited, sizeof(edited), "%s// edited\n", tj_axpy_header);
  hm_kernel_header edited_headers[] = {{"hm_test_axpy.cuh", edited}};
  changed = k.src;
  changed.headers = edited_headers;
  key_of(&changed, other);
  assert_string_not_equal(base, other);

  /* A header the source does not include is not part of its key. */
  hm_kernel_header more[] = {{"hm_test_axpy.cuh", tj_axpy_header},
                             {"hm_unused.cuh", "#error never included\n"}};
  changed = k.src;
  changed.headers = more;
  changed.header_count = 2;
  key_of(&changed, other);
  assert_string_equal(base, other);

  /* Two library builds hash differently from the same inputs. */
  const char *opts[] = {"-arch=sm_80"};
  hm_cache_key_input in = {"humming 0.1.0 build a cache 1", "nvrtc 13.0", opts, 1, "sm_80", "k", "src", NULL};
  char key_a[HM_SHA256_HEX], key_b[HM_SHA256_HEX];
  HM_ASSERT_OK(hm_cache_key(&in, key_a));
  in.library = "humming 0.1.1 build a cache 1";
  HM_ASSERT_OK(hm_cache_key(&in, key_b));
  assert_string_not_equal(key_a, key_b);
}

static void embedded_components_resolve(void **state) {
  (void)state;
  /* A source that only includes an embedded component compiles: NVRTC found it in memory. */
  hm_kernel_source src = {.name = "hm_uses_half2",
                          .source =
                              "#include \"hm_half2.cuh\"\n"
                              "extern \"C\" __global__ void hm_uses_half2(float *out) { out[0] = 1.0f; }\n",
                          .arch = 80};
  const hm_cubin *c = NULL;
  HM_ASSERT_OK(hm_jit_get_cubin(&src, &c));
  assert_cuda_elf(c, 80);
  char with[65];
  memcpy(with, c->key, 65);
  src.source = "extern \"C\" __global__ void hm_uses_half2(float *out) { out[0] = 1.0f; }\n";
  HM_ASSERT_OK(hm_jit_get_cubin(&src, &c));
  assert_string_not_equal(with, c->key);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(axpy_compiles_for_sm80_sm89_sm90a, fresh_cache, drop_cache),
      cmocka_unit_test_setup_teardown(repeats_hit_the_table_then_the_disk, fresh_cache, drop_cache),
      cmocka_unit_test_setup_teardown(key_covers_every_input, fresh_cache, drop_cache),
      cmocka_unit_test_setup_teardown(embedded_components_resolve, fresh_cache, drop_cache),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
