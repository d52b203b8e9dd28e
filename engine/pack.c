/* SPDX-License-Identifier: Apache-2.0 */
/* LSB-first packing of b-bit codes into 32-bit words (the canonical weight contract). */
#include <string.h>

#include "check.h"
#include "pack.h"

int64_t hm_pack_row_words(int bits, int64_t count) {
  if (bits <= 0 || count <= 0) return 0;
  return (count * bits + 31) / 32;
}

static hm_status check_pack_args(const void *codes, const void *words, int64_t rows, int64_t count,
                                 int bits) {
  if (bits < 1 || bits > 8) HM_FAIL(HM_INVALID_ARGUMENT, "code width %d bits is outside 1..8", bits);
  if (rows < 0 || count < 0)
    HM_FAIL(HM_INVALID_ARGUMENT, "packed shape (%lld, %lld) is negative", (long long)rows, (long long)count);
  if (rows > 0 && count > 0) {
    HM_CHECK_NOT_NULL(codes);
    HM_CHECK_NOT_NULL(words);
  }
  return HM_OK;
}

/* Ors one code into a zeroed row at bit j*bits; the high part spills into the next word. */
static void put_code(uint32_t *row, int64_t j, int bits, uint32_t code) {
  int64_t bit = j * bits;
  int64_t word = bit / 32;
  int off = (int)(bit % 32);
  row[word] |= code << off;
  if (off + bits > 32) row[word + 1] |= code >> (32 - off);
}

uint8_t hm_unpack_one(const uint32_t *row_words, int64_t index, int bits) {
  int64_t bit = index * bits;
  int64_t word = bit / 32;
  int off = (int)(bit % 32);
  uint32_t mask = (1u << bits) - 1u;
  uint32_t v = row_words[word] >> off;
  /* Read the next word only when the code straddles it, never past the row. */
  if (off + bits > 32) v |= row_words[word + 1] << (32 - off);
  return (uint8_t)(v & mask);
}

hm_status hm_pack_rows(const uint8_t *codes, int64_t rows, int64_t count, int bits, uint32_t *words) {
  HM_CHECK(check_pack_args(codes, words, rows, count, bits));
  int64_t row_words = hm_pack_row_words(bits, count);
  for (int64_t r = 0; r < rows; r++) {
    const uint8_t *src = codes + r * count;
    uint32_t *dst = words + r * row_words;
    memset(dst, 0, (size_t)row_words * sizeof(*dst));
    for (int64_t j = 0; j < count; j++) {
      if (src[j] >> bits)
        HM_FAIL(HM_INVALID_ARGUMENT, "code %u at (%lld, %lld) does not fit in %d bits", src[j], (long long)r,
                (long long)j, bits);
      put_code(dst, j, bits, src[j]);
    }
  }
  return HM_OK;
}

hm_status hm_unpack_rows(const uint32_t *words, int64_t rows, int64_t count, int bits, uint8_t *codes) {
  HM_CHECK(check_pack_args(codes, words, rows, count, bits));
  int64_t row_words = hm_pack_row_words(bits, count);
  for (int64_t r = 0; r < rows; r++) {
    const uint32_t *src = words + r * row_words;
    uint8_t *dst = codes + r * count;
    for (int64_t j = 0; j < count; j++) dst[j] = hm_unpack_one(src, j, bits);
  }
  return HM_OK;
}

/* Packing along N of (k, n) codes is packing each of the k rows; named for the zero-point layout. */
hm_status hm_pack_along_n(const uint8_t *codes, int64_t k, int64_t n, int bits, uint32_t *words) {
  return hm_pack_rows(codes, k, n, bits, words);
}

hm_status hm_unpack_along_n(const uint32_t *words, int64_t k, int64_t n, int bits, uint8_t *codes) {
  return hm_unpack_rows(words, k, n, bits, codes);
}
