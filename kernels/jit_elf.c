/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Reading constants out of a cubin on the host. A cubin is an ELF64 image whose
 * symbol table places each initialized __constant__/__device__ variable in a section
 * at an offset; every offset and size is checked against the image before use.
 */
#include <elf.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "kernels/jit.h"

#ifndef EM_CUDA
#define EM_CUDA 190
#endif

enum lookup { LOOKUP_BAD_IMAGE = -1, LOOKUP_MISSING = 0, LOOKUP_FOUND = 1 };

static bool in_image(size_t image, uint64_t offset, uint64_t len) {
  return offset <= image && len <= image - offset;
}

/* Structures are copied out, never cast in place: a corrupt image may misalign them. */
static bool section(const unsigned char *img, size_t size, const Elf64_Ehdr *eh, unsigned index,
                    Elf64_Shdr *out) {
  if (index >= eh->e_shnum) return false;
  uint64_t at = eh->e_shoff + (uint64_t)index * sizeof(Elf64_Shdr);
  if (!in_image(size, at, sizeof(Elf64_Shdr))) return false;
  memcpy(out, img + at, sizeof(*out));
  return true;
}

static bool read_header(const unsigned char *img, size_t size, Elf64_Ehdr *eh) {
  if (size < sizeof(Elf64_Ehdr) || memcmp(img, ELFMAG, SELFMAG) != 0 || img[EI_CLASS] != ELFCLASS64)
    return false;
  memcpy(eh, img, sizeof(*eh));
  return eh->e_machine == EM_CUDA && eh->e_shentsize == sizeof(Elf64_Shdr) &&
         in_image(size, eh->e_shoff, (uint64_t)eh->e_shnum * sizeof(Elf64_Shdr));
}

/* Copies the symbol's bytes (zeros for a NOBITS section) into buf. */
static enum lookup copy_symbol(const unsigned char *img, size_t size, const Elf64_Ehdr *eh,
                               const Elf64_Sym *sym, void *buf, size_t len, size_t *sym_size) {
  Elf64_Shdr home_copy;
  const Elf64_Shdr *home = &home_copy;
  if (!section(img, size, eh, sym->st_shndx, &home_copy) || sym->st_value < home->sh_addr)
    return LOOKUP_BAD_IMAGE;
  uint64_t offset_in_section = sym->st_value - home->sh_addr;
  if (!in_image(home->sh_size, offset_in_section, sym->st_size)) return LOOKUP_BAD_IMAGE;
  *sym_size = sym->st_size;
  if (len > sym->st_size) return LOOKUP_FOUND;
  if (home->sh_type == SHT_NOBITS) {
    memset(buf, 0, len);
    return LOOKUP_FOUND;
  }
  if (!in_image(size, home->sh_offset + offset_in_section, len)) return LOOKUP_BAD_IMAGE;
  memcpy(buf, img + home->sh_offset + offset_in_section, len);
  return LOOKUP_FOUND;
}

/* The symbol of that name and ELF type (STT_OBJECT, STT_FUNC), with its index in the table. */
static enum lookup lookup_symbol(const unsigned char *img, size_t size, const Elf64_Ehdr *eh,
                                 const char *name, int type, Elf64_Sym *out, uint64_t *index) {
  size_t name_len = strlen(name);
  for (unsigned s = 0; s < eh->e_shnum; s++) {
    Elf64_Shdr symtab, strtab;
    if (!section(img, size, eh, s, &symtab)) return LOOKUP_BAD_IMAGE;
    if (symtab.sh_type != SHT_SYMTAB) continue;
    if (!section(img, size, eh, symtab.sh_link, &strtab) ||
        !in_image(size, symtab.sh_offset, symtab.sh_size) ||
        !in_image(size, strtab.sh_offset, strtab.sh_size))
      return LOOKUP_BAD_IMAGE;
    const char *names = (const char *)(img + strtab.sh_offset);
    for (uint64_t i = 0; i < symtab.sh_size / sizeof(Elf64_Sym); i++) {
      memcpy(out, img + symtab.sh_offset + i * sizeof(Elf64_Sym), sizeof(*out));
      if ((uint64_t)out->st_name + name_len + 1 > strtab.sh_size) continue;
      if (memcmp(names + out->st_name, name, name_len + 1) != 0 || ELF64_ST_TYPE(out->st_info) != type)
        continue;
      *index = i;
      return LOOKUP_FOUND;
    }
  }
  return LOOKUP_MISSING;
}

static enum lookup find_symbol(const unsigned char *img, size_t size, const char *name, void *buf, size_t len,
                               size_t *sym_size) {
  Elf64_Ehdr eh;
  if (img == NULL || !read_header(img, size, &eh)) return LOOKUP_BAD_IMAGE;
  Elf64_Sym sym;
  uint64_t index;
  enum lookup r = lookup_symbol(img, size, &eh, name, STT_OBJECT, &sym, &index);
  return r == LOOKUP_FOUND ? copy_symbol(img, size, &eh, &sym, buf, len, sym_size) : r;
}

hm_status hm_cubin_read_symbol(const hm_cubin *cubin, const char *symbol, void *buf, size_t size) {
  HM_CHECK_NOT_NULL(cubin);
  HM_CHECK_NOT_NULL(symbol);
  HM_CHECK_NOT_NULL(buf);
  size_t sym_size = 0;
  enum lookup r = find_symbol(cubin->data, cubin->size, symbol, buf, size, &sym_size);
  if (r == LOOKUP_BAD_IMAGE) HM_FAIL(HM_CORRUPT, "cubin %.16s is not a valid CUDA ELF image", cubin->key);
  if (r == LOOKUP_MISSING)
    HM_FAIL(HM_INVALID_ARGUMENT, "cubin %.16s has no variable '%s'", cubin->key, symbol);
  if (size > sym_size)
    HM_FAIL(HM_INVALID_ARGUMENT, "'%s' in cubin %.16s holds %zu bytes, %zu asked", symbol, cubin->key,
            sym_size, size);
  return HM_OK;
}

hm_status hm_cubin_kernel_meta(const hm_cubin *cubin, const char *name, hm_kernel_meta *out) {
  HM_CHECK_NOT_NULL(cubin);
  HM_CHECK_NOT_NULL(name);
  HM_CHECK_NOT_NULL(out);
  memset(out, 0, sizeof(*out));
  char symbol[256];
  snprintf(symbol, sizeof(symbol), "%s_meta", name);
  uint32_t words[HM_KERNEL_META_WORDS] = {0};
  size_t sym_size = 0;
  enum lookup r = find_symbol(cubin->data, cubin->size, symbol, words, sizeof(words), &sym_size);
  if (r == LOOKUP_BAD_IMAGE) HM_FAIL(HM_CORRUPT, "cubin %.16s is not a valid CUDA ELF image", cubin->key);
  if (r == LOOKUP_MISSING) return HM_OK;
  if (sym_size < sizeof(words) || words[0] != HM_KERNEL_META_MAGIC)
    HM_FAIL(HM_CORRUPT, "%s in cubin %.16s is not launch metadata (%zu bytes, first word 0x%x)", symbol,
            cubin->key, sym_size, sym_size >= 4 ? words[0] : 0u);
  *out = (hm_kernel_meta){
      true, words[1], words[2], {words[3], words[4], words[5]}, (words[6] & HM_KERNEL_META_PDL) != 0};
  return HM_OK;
}

/*
 * ptxas records each entry function's resources in the cubin's .nv.info section as a run of
 * attributes: a format byte, an attribute byte, then either a 16-bit value or (format
 * EIFMT_SVAL) a 16-bit size and that many bytes. The two read here are sized values of two
 * 32-bit words, the function's symbol index and the count. NVIDIA does not document the
 * layout; it is the one cubins of CUDA 12 and 13 hold (`cuobjdump -elf` names the
 * attributes), and tests/unit/test_jit_resources.c pins it against a kernel that needs a
 * stack frame.
 */
enum { EIFMT_SVAL = 4, EIATTR_FRAME_SIZE = 0x11, EIATTR_REGCOUNT = 0x2f };

static bool section_named(const unsigned char *img, size_t size, const Elf64_Ehdr *eh, const char *name,
                          Elf64_Shdr *out) {
  Elf64_Shdr names;
  if (!section(img, size, eh, eh->e_shstrndx, &names) || !in_image(size, names.sh_offset, names.sh_size))
    return false;
  size_t len = strlen(name);
  for (unsigned s = 0; s < eh->e_shnum; s++) {
    if (!section(img, size, eh, s, out)) return false;
    if ((uint64_t)out->sh_name + len + 1 <= names.sh_size &&
        memcmp(img + names.sh_offset + out->sh_name, name, len + 1) == 0)
      return in_image(size, out->sh_offset, out->sh_size);
  }
  return false;
}

/* Walks .nv.info for the function's frame size and register count; false on a malformed run. */
static bool read_resources(const unsigned char *img, const Elf64_Shdr *info, uint64_t function,
                           hm_kernel_resources *out, bool *found_regs) {
  const unsigned char *p = img + info->sh_offset, *end = p + info->sh_size;
  while (end - p >= 4) {
    const unsigned format = p[0], attribute = p[1];
    uint16_t value;
    memcpy(&value, p + 2, sizeof(value));
    p += 4;
    if (format != EIFMT_SVAL) continue;
    if (value > end - p) return false;
    uint32_t words[2];
    if (value == sizeof(words) && (attribute == EIATTR_FRAME_SIZE || attribute == EIATTR_REGCOUNT)) {
      memcpy(words, p, sizeof(words));
      if (words[0] == function && attribute == EIATTR_FRAME_SIZE) out->local_bytes = words[1];
      if (words[0] == function && attribute == EIATTR_REGCOUNT) {
        out->registers = words[1];
        *found_regs = true;
      }
    }
    p += value;
  }
  return p == end;
}

hm_status hm_cubin_kernel_resources(const hm_cubin *cubin, const char *name, hm_kernel_resources *out) {
  HM_CHECK_NOT_NULL(cubin);
  HM_CHECK_NOT_NULL(name);
  HM_CHECK_NOT_NULL(out);
  memset(out, 0, sizeof(*out));
  const unsigned char *img = cubin->data;
  Elf64_Ehdr eh;
  Elf64_Sym sym;
  Elf64_Shdr info;
  uint64_t index = 0;
  bool found_regs = false;
  const enum lookup r = img == NULL || !read_header(img, cubin->size, &eh)
                            ? LOOKUP_BAD_IMAGE
                            : lookup_symbol(img, cubin->size, &eh, name, STT_FUNC, &sym, &index);
  if (r == LOOKUP_BAD_IMAGE) HM_FAIL(HM_CORRUPT, "cubin %.16s is not a valid CUDA ELF image", cubin->key);
  if (r == LOOKUP_MISSING) HM_FAIL(HM_INVALID_ARGUMENT, "cubin %.16s has no kernel '%s'", cubin->key, name);
  if (!section_named(img, cubin->size, &eh, ".nv.info", &info) ||
      !read_resources(img, &info, index, out, &found_regs) || !found_regs)
    HM_FAIL(HM_CORRUPT, "cubin %.16s: no register count for '%s' in its .nv.info section", cubin->key, name);
  return HM_OK;
}
