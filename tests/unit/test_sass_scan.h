/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What the NVRTC tests read of an sm_90 cubin's SASS without cuobjdump: an instruction is
 * 16 bytes and bits 0-11 of its low word select it. The values below are those whose counts
 * matched cuobjdump on the device for the same kernels (docs/PERF.md, twenty-seventh
 * session; scripts/sass-opcodes.py reads the same).
 */
#ifndef TEST_SASS_SCAN_H
#define TEST_SASS_SCAN_H

#include <elf.h>
#include <stdint.h>
#include <string.h>

#include "hm_test.h"

enum { SASS_R2UR = 0x2ca, SASS_HGMMA = 0xdf0, SASS_QGMMA = 0x9f3 };

/* Two wgmmas this close (in instructions) belong to one mainloop: a W4A16 k16 step is 37. */
#define SASS_LOOP_GAP 64

static inline unsigned sass_opcode(const unsigned char *insn) {
  uint64_t lo;
  memcpy(&lo, insn, sizeof(lo));
  return (unsigned)(lo & 0xfff);
}

static inline bool sass_is_wgmma(unsigned op) {
  return op == SASS_HGMMA || op == SASS_QGMMA;
}

/* R2URs between two wgmmas of one mainloop in a code section: each moves a descriptor
 * built in per-thread registers to the uniform ones, in front of every step. */
static inline int sass_r2ur_between_wgmmas(const unsigned char *text, uint64_t count) {
  int found = 0, pending = 0;
  int64_t last = -SASS_LOOP_GAP - 1;
  for (uint64_t i = 0; i < count; i++) {
    const unsigned op = sass_opcode(text + 16 * i);
    if (sass_is_wgmma(op)) {
      if ((int64_t)i - last <= SASS_LOOP_GAP) found += pending;
      pending = 0;
      last = (int64_t)i;
    } else if (op == SASS_R2UR) {
      pending++;
    }
  }
  return found;
}

/* The sum of sass_r2ur_between_wgmmas over the image's .text.* sections. */
static inline int sass_r2ur_in_wgmma_loops(const unsigned char *img, size_t size) {
  Elf64_Ehdr eh;
  assert_true(size >= sizeof(eh));
  memcpy(&eh, img, sizeof(eh));
  assert_true(eh.e_shoff + (uint64_t)eh.e_shnum * sizeof(Elf64_Shdr) <= size);
  Elf64_Shdr names;
  memcpy(&names, img + eh.e_shoff + (uint64_t)eh.e_shstrndx * sizeof(Elf64_Shdr), sizeof(names));
  int found = 0;
  for (unsigned s = 0; s < eh.e_shnum; s++) {
    Elf64_Shdr sh;
    memcpy(&sh, img + eh.e_shoff + (uint64_t)s * sizeof(Elf64_Shdr), sizeof(sh));
    if (sh.sh_type != SHT_PROGBITS || sh.sh_name + 6 > names.sh_size ||
        memcmp(img + names.sh_offset + sh.sh_name, ".text.", 6) != 0)
      continue;
    assert_true(sh.sh_offset + sh.sh_size <= size);
    found += sass_r2ur_between_wgmmas(img + sh.sh_offset, sh.sh_size / 16);
  }
  return found;
}

#endif
