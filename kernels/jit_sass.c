/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Scheduling hints in the SASS of a Hopper (sm_90) cubin. An instruction is 16 bytes, little
 * endian; what is read and written here (Jia et al., "Dissecting the NVIDIA Volta GPU
 * Architecture via Microbenchmarking", 2018, for the layout; checked on sm_90 cubins of
 * ptxas 13.0 against cuobjdump's opcode counts, docs/PERF.md twenty-seventh session):
 *  - bits 0-11 of the low word select the instruction; 0x223 is FFMA on four registers;
 *  - bits 58-61 of the high word keep operands a, b, c and d in the reuse cache for the next
 *    instruction; bit 45 is the yield flag, which ptxas 13.0 sets on every FFMA that keeps an
 *    operand there and clears on the others of a fold: set, the warp stays on for the next
 *    instruction (a switch would lose the cached operand); clear, the scheduler may switch.
 *
 * Why: the W8A8 warp-specialized kernel folds each block of fp8 partial sums into its
 * accumulators with a run of 64 FFMAs, one scale per run in a register that ptxas keeps in
 * the reuse cache for every other FFMA, and which holds those warps on their schedulers
 * while the other warpgroup waits to issue its wgmmas. DeepGEMM reports 10 % and more on
 * its fp8 GEMMs from letting the fold's FFMAs give the scheduler up (its README, "FFMA SASS
 * interleaving"). Here the first half of a run yields and the second runs on with its reuse,
 * so that the warp's own next wgmmas are not held back behind the other warps.
 */
#include "kernels/jit_sass.h"

#include <stdint.h>

#include "check.h"
#include "kernels/jit_elf.h"

#define SASS_FFMA 0x223u
#define SASS_OPCODE_MASK 0xfffu
#define SASS_STAY (1ull << 45)
#define SASS_REUSE (0xfull << 58)

static bool is_ffma(const unsigned char *insn) {
  uint64_t lo;
  memcpy(&lo, insn, sizeof(lo));
  return (lo & SASS_OPCODE_MASK) == SASS_FFMA;
}

/* Lets the scheduler switch warps after the instruction; true if it changed. */
static bool yield_after(unsigned char *insn) {
  uint64_t hi;
  memcpy(&hi, insn + 8, sizeof(hi));
  if ((hi & SASS_REUSE) == 0 || (hi & SASS_STAY) == 0) return false;
  hi &= ~(SASS_REUSE | SASS_STAY);
  memcpy(insn + 8, &hi, sizeof(hi));
  return true;
}

/* The runs of one section's instructions. */
static int yield_runs(unsigned char *text, uint64_t count) {
  int hinted = 0;
  uint64_t i = 0;
  while (i < count) {
    if (!is_ffma(text + 16 * i)) {
      i++;
      continue;
    }
    uint64_t end = i;
    while (end < count && is_ffma(text + 16 * end)) end++;
    if (end - i >= HM_SASS_FFMA_RUN_MIN)
      for (uint64_t j = i; j < i + (end - i) / 2; j++) hinted += yield_after(text + 16 * j);
    i = end;
  }
  return hinted;
}

/* Whether section i is code (.text.<kernel>) in the image; *bad when its header or its bytes
 * lie outside the image, or its size is not whole instructions. */
static bool code_section(const unsigned char *img, size_t size, const Elf64_Ehdr *eh, const Elf64_Shdr *names,
                         unsigned i, Elf64_Shdr *s, bool *bad) {
  static const char prefix[] = ".text.";
  *bad = !hm_elf_section(img, size, eh, i, s);
  if (*bad || s->sh_type != SHT_PROGBITS || (uint64_t)s->sh_name + sizeof(prefix) > names->sh_size ||
      memcmp(img + names->sh_offset + s->sh_name, prefix, sizeof(prefix) - 1) != 0)
    return false;
  *bad = !hm_elf_in_image(size, s->sh_offset, s->sh_size) || s->sh_size % 16 != 0;
  return !*bad;
}

hm_status hm_sass_yield_ffma(void *cubin, size_t size, int *hinted) {
  HM_CHECK_NOT_NULL(cubin);
  HM_CHECK_NOT_NULL(hinted);
  unsigned char *img = cubin;
  Elf64_Ehdr eh;
  Elf64_Shdr names, s;
  bool bad = false;
  if (!hm_elf_read_header(img, size, &eh) || !hm_elf_section(img, size, &eh, eh.e_shstrndx, &names) ||
      !hm_elf_in_image(size, names.sh_offset, names.sh_size))
    HM_FAIL(HM_CORRUPT, "not a CUDA ELF image (%zu bytes): no FFMA hints written", size);
  /* Every section is checked before any changes, so that a corrupt image stays as it was. */
  for (unsigned i = 0; i < eh.e_shnum; i++) {
    code_section(img, size, &eh, &names, i, &s, &bad);
    if (bad) HM_FAIL(HM_CORRUPT, "CUDA ELF image (%zu bytes): section %u lies outside it", size, i);
  }
  *hinted = 0;
  for (unsigned i = 0; i < eh.e_shnum; i++)
    if (code_section(img, size, &eh, &names, i, &s, &bad))
      *hinted += yield_runs(img + s.sh_offset, s.sh_size / 16);
  return HM_OK;
}
