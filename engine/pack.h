/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Packing of b-bit codes (b = 1..8) into 32-bit words, LSB first: code j of a row sits
 * at bit (j*b) of the row's bit stream, and a code may straddle two words (b = 3, 5, 6, 7).
 * Rows start on a word boundary. "Along K" packs each row of (N, K) weight codes;
 * "along N" packs each row of (K, N) codes such as zero points (K/group, N): the bit
 * layout is the same, the names say which dimension a packed row runs along.
 */
#ifndef HM_PACK_H
#define HM_PACK_H

#include <stdint.h>

#include "humming.h"

/* Words per packed row of count codes of any width (16 for unquantized weights); 0 if empty. */
int64_t hm_pack_row_words(int bits, int64_t count);
/* codes (rows, count) uint8 -> words (rows, hm_pack_row_words); codes must fit in bits. */
hm_status hm_pack_rows(const uint8_t *codes, int64_t rows, int64_t count, int bits, uint32_t *words);
hm_status hm_unpack_rows(const uint32_t *words, int64_t rows, int64_t count, int bits, uint8_t *codes);
/* One code of a packed row; reads no word past the one holding the code's last bit. */
uint8_t hm_unpack_one(const uint32_t *row_words, int64_t index, int bits);
/* codes (k, n) row-major -> words (k, hm_pack_row_words(bits, n)) packed along N. */
hm_status hm_pack_along_n(const uint8_t *codes, int64_t k, int64_t n, int bits, uint32_t *words);
hm_status hm_unpack_along_n(const uint32_t *words, int64_t k, int64_t n, int bits, uint8_t *codes);

#endif
