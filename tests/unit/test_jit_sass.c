/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The FFMA hints of jit_sass.c. On a CUDA ELF image built here: the first half of a long
 * FFMA run gives up its reuse and lets warps switch, short runs, other instructions and
 * other sections stay byte for byte, a corrupt image is refused unchanged. Then on the fp8
 * block-scaled warp-specialized GEMM that NVRTC compiles for sm_90a, whose folds are runs of
 * 64 FFMAs: the hinted compile differs from the plain one in those bits of those FFMAs only,
 * and is what the hints make of the plain cubin.
 */
#include <elf.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "hm_test.h"
#include "kernels/gemm_gen.h"
#include "kernels/jit.h"
#include "kernels/jit_sass.h"

#define STAY (1ull << 45)
#define REUSE_A (1ull << 58)
#define HINT_BITS (STAY | (0xfull << 58))

/* An instruction: opcode bits, destination register, and the high word's control bits. */
static void put_insn(unsigned char *at, unsigned opcode, unsigned rd, uint64_t control) {
  const uint64_t lo = opcode | (uint64_t)rd << 16, hi = control;
  memcpy(at, &lo, 8);
  memcpy(at + 8, &hi, 8);
}

static uint64_t high_of(const unsigned char *insn) {
  uint64_t hi;
  memcpy(&hi, insn + 8, 8);
  return hi;
}

enum { RUN = 20, SHORT = 8, OTHER = 4 };
#define TEXT_INSNS (OTHER + RUN + OTHER + SHORT)

/* A CUDA ELF image: .shstrtab, .text.k (other, a 20-FFMA run as ptxas writes a fold, other,
 * an 8-FFMA run) and .nv.info holding the same bytes as .text.k. */
typedef struct image {
  unsigned char bytes[4096];
  size_t size, text_at, info_at;
} image;

static void image_make(image *im) {
  static const char names[] = "\0.shstrtab\0.text.k\0.nv.info";
  memset(im, 0, sizeof(*im));
  Elf64_Ehdr eh = {0};
  memcpy(eh.e_ident, ELFMAG, SELFMAG);
  eh.e_ident[EI_CLASS] = ELFCLASS64;
  eh.e_ident[EI_DATA] = ELFDATA2LSB;
  eh.e_machine = 190;
  eh.e_shentsize = sizeof(Elf64_Shdr);
  eh.e_shnum = 4;
  eh.e_shstrndx = 1;
  size_t at = sizeof(eh);
  const size_t names_at = at;
  memcpy(im->bytes + at, names, sizeof(names));
  at = (at + sizeof(names) + 15) / 16 * 16;
  im->text_at = at;
  unsigned char *t = im->bytes + at;
  int n = 0;
  for (int i = 0; i < OTHER; i++) put_insn(t + 16 * n++, 0x882, 1, STAY | REUSE_A);
  /* As ptxas 13.0 writes the fold: every other FFMA keeps the scale for the next one. */
  for (int i = 0; i < RUN; i++) put_insn(t + 16 * n++, 0x223, 100 + i, i % 2 ? STAY | REUSE_A : 0);
  for (int i = 0; i < OTHER; i++) put_insn(t + 16 * n++, 0x220, 2, STAY | REUSE_A);
  for (int i = 0; i < SHORT; i++) put_insn(t + 16 * n++, 0x223, 150 + i, i % 2 ? STAY | REUSE_A : 0);
  at += 16 * TEXT_INSNS;
  im->info_at = at;
  memcpy(im->bytes + at, t, 16 * TEXT_INSNS);
  at += 16 * TEXT_INSNS;
  eh.e_shoff = at;
  const Elf64_Shdr sh[4] = {
      {0},
      {.sh_name = 1, .sh_type = SHT_STRTAB, .sh_offset = names_at, .sh_size = sizeof(names)},
      {.sh_name = 11, .sh_type = SHT_PROGBITS, .sh_offset = im->text_at, .sh_size = 16 * TEXT_INSNS},
      {.sh_name = 19, .sh_type = SHT_PROGBITS, .sh_offset = im->info_at, .sh_size = 16 * TEXT_INSNS},
  };
  memcpy(im->bytes + at, sh, sizeof(sh));
  im->size = at + sizeof(sh);
  memcpy(im->bytes, &eh, sizeof(eh));
}

static void first_half_of_long_runs_yields(void **state) {
  (void)state;
  image im, before;
  image_make(&im);
  before = im;
  int hinted = -1;
  HM_ASSERT_OK(hm_sass_yield_ffma(im.bytes, im.size, &hinted));
  /* The run's first ten FFMAs hold five that kept the scale. */
  assert_int_equal(hinted, RUN / 4);
  for (int i = 0; i < TEXT_INSNS; i++) {
    const unsigned char *now = im.bytes + im.text_at + 16 * i, *was = before.bytes + before.text_at + 16 * i;
    const bool in_hinted_half = i >= OTHER && i < OTHER + RUN / 2;
    const uint64_t expected = in_hinted_half ? high_of(was) & ~HINT_BITS : high_of(was);
    assert_memory_equal(now, was, 8);
    assert_true(high_of(now) == expected);
  }
  assert_memory_equal(im.bytes + im.info_at, before.bytes + before.info_at, 16 * TEXT_INSNS);
  assert_memory_equal(im.bytes, before.bytes, im.text_at);

  /* Hinted again, nothing is left to change. */
  HM_ASSERT_OK(hm_sass_yield_ffma(im.bytes, im.size, &hinted));
  assert_int_equal(hinted, 0);
}

static void corrupt_images_are_refused_unchanged(void **state) {
  (void)state;
  image im, before;
  image_make(&im);
  int hinted = 0;
  assert_int_equal(hm_sass_yield_ffma(im.bytes, sizeof(Elf64_Ehdr) - 1, &hinted), HM_CORRUPT);
  assert_int_equal(hm_sass_yield_ffma(im.bytes, im.size - 1, &hinted), HM_CORRUPT);

  /* .nv.info (after .text.k) reaching past the image: .text.k must not change either. */
  Elf64_Ehdr eh;
  memcpy(&eh, im.bytes, sizeof(eh));
  Elf64_Shdr text;
  memcpy(&text, im.bytes + eh.e_shoff + 2 * sizeof(Elf64_Shdr), sizeof(text));
  text.sh_name = 11;
  text.sh_size = im.size;
  memcpy(im.bytes + eh.e_shoff + 3 * sizeof(Elf64_Shdr), &text, sizeof(text));
  before = im;
  assert_int_equal(hm_sass_yield_ffma(im.bytes, im.size, &hinted), HM_CORRUPT);
  assert_non_null(strstr(hm_last_error(), "section 3"));
  assert_memory_equal(im.bytes, before.bytes, im.size);
}

/* The heuristic's tile for fp8 block-scaled groups at thousands of rows an expert: each of
 * its folds is a run of 64 FFMAs. */
static hm_gemm_config fp8_groups_config(void) {
  hm_gemm_config c;
  memset(&c, 0, sizeof(c));
  c.layer = (hm_gemm_layer_part){HM_F8E4M3, HM_F8E4M3, HM_BF16, 128, false, false,
                                 false,     4096,      7168,    8,   128,   HM_ACT_SCALE_GROUP128,
                                 false};
  c.compute.type = HM_GEMM_GROUPED_CONTIGUOUS;
  c.arch = 90;
  c.tuning = (hm_gemm_tuning){256, 128, 128, 2, 4, 1, 3, true, 4, 1, HM_MMA_WGMMA, true};
  return c;
}

static void compiled_folds_differ_in_their_hints_only(void **state) {
  (void)state;
  const hm_gemm_config cfg = fp8_groups_config();
  hm_gemm_source gen;
  HM_ASSERT_OK(hm_gemm_gen(&cfg, &gen));
  assert_true(gen.src.yield_ffma);
  hm_kernel_source src = gen.src;
  hm_cubin plain, hinted;
  src.yield_ffma = false;
  HM_ASSERT_OK(hm_jit_compile_uncached(&src, &plain));
  src.yield_ffma = true;
  HM_ASSERT_OK(hm_jit_compile_uncached(&src, &hinted));
  assert_int_equal(plain.size, hinted.size);

  int changed = 0, ffma_changed = 0;
  for (size_t at = 0; at + 16 <= plain.size; at += 16) {
    const unsigned char *p = (const unsigned char *)plain.data + at,
                        *h = (const unsigned char *)hinted.data + at;
    if (memcmp(p, h, 16) == 0) continue;
    changed++;
    uint64_t lo;
    memcpy(&lo, p, 8);
    ffma_changed += (lo & 0xfff) == 0x223;
    assert_memory_equal(p, h, 8);
    assert_true((high_of(p) ^ high_of(h)) == (high_of(p) & HINT_BITS));
  }
  int expected = 0;
  HM_ASSERT_OK(hm_sass_yield_ffma(plain.data, plain.size, &expected));
  printf("# %s: %d FFMAs hinted\n", gen.name, expected);
  assert_true(expected > 0);
  assert_int_equal(changed, expected);
  assert_int_equal(ffma_changed, expected);
  assert_memory_equal(plain.data, hinted.data, plain.size);
  hm_jit_cubin_free(&plain);
  hm_jit_cubin_free(&hinted);

  /* Hints are Hopper's encoding: any other arch is refused. */
  src.arch = 80;
  src.arch_specific = false;
  assert_int_equal(hm_jit_compile_uncached(&src, &plain), HM_INVALID_ARGUMENT);
  assert_non_null(strstr(hm_last_error(), "sm_90 code only"));
  hm_gemm_source_free(&gen);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(first_half_of_long_runs_yields),
      cmocka_unit_test(corrupt_images_are_refused_unchanged),
      cmocka_unit_test(compiled_folds_differ_in_their_hints_only),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
