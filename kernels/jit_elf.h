/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The checked reads of a cubin's ELF64 structure that the symbol reader (jit_elf.c) and the
 * SASS hints (jit_sass.c) share. Structures are copied out, never cast in place: a corrupt
 * image may misalign them; every offset and size is checked against the image first.
 */
#ifndef HM_KERNELS_JIT_ELF_H
#define HM_KERNELS_JIT_ELF_H

#include <elf.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#ifndef EM_CUDA
#define EM_CUDA 190
#endif

static inline bool hm_elf_in_image(size_t image, uint64_t offset, uint64_t len) {
  return offset <= image && len <= image - offset;
}

static inline bool hm_elf_section(const unsigned char *img, size_t size, const Elf64_Ehdr *eh, unsigned index,
                                  Elf64_Shdr *out) {
  if (index >= eh->e_shnum) return false;
  uint64_t at = eh->e_shoff + (uint64_t)index * sizeof(Elf64_Shdr);
  if (!hm_elf_in_image(size, at, sizeof(Elf64_Shdr))) return false;
  memcpy(out, img + at, sizeof(*out));
  return true;
}

static inline bool hm_elf_read_header(const unsigned char *img, size_t size, Elf64_Ehdr *eh) {
  if (size < sizeof(Elf64_Ehdr) || memcmp(img, ELFMAG, SELFMAG) != 0 || img[EI_CLASS] != ELFCLASS64)
    return false;
  memcpy(eh, img, sizeof(*eh));
  return eh->e_machine == EM_CUDA && eh->e_shentsize == sizeof(Elf64_Shdr) &&
         hm_elf_in_image(size, eh->e_shoff, (uint64_t)eh->e_shnum * sizeof(Elf64_Shdr));
}

#endif
