/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Synthetic weights and inputs for the embedding example, in the canonical w4a16
 * contract (u4 codes packed 8 a word along K, bf16 scales and u4 zero points per 128
 * columns, zero points packed along N). Every value is a hash of its coordinates in the
 * full tensor, so a rank can produce its TP slice without the whole tensor, and the
 * host reference the whole tensor, with the same numbers.
 */
#ifndef HM_EMBED_WEIGHTS_H
#define HM_EMBED_WEIGHTS_H

#include <stdint.h>

#define EMBED_GROUP 128

/* A slice of a full (experts, N, K) tensor: local row j is full row row_of[j]. */
typedef struct embed_slice {
  uint64_t seed;
  int tensor; /* which tensor of the layer: a different hash stream each */
  int64_t experts;
  int64_t full_k;        /* K of the full tensor: sets the scale of the weights */
  int64_t rows;          /* N of the slice */
  const int64_t *row_of; /* [rows] */
  int64_t k0, cols;      /* full columns [k0, k0 + cols); both multiples of EMBED_GROUP */
} embed_slice;

/* Array lengths of a slice in elements: words of qweight and zeros, bf16 scales. */
int64_t embed_qweight_words(const embed_slice *s);
int64_t embed_scale_count(const embed_slice *s);
int64_t embed_zero_words(const embed_slice *s);
/* Fills the three canonical arrays of the slice. */
void embed_pack(const embed_slice *s, uint32_t *qweight, uint16_t *scales, uint32_t *zeros);

/* bf16 bits of x, round to nearest even. */
uint16_t embed_bf16(float x);
/* A value in [lo, hi) from a seed and a position, the same in every process. */
float embed_uniform(uint64_t seed, int tensor, int64_t index, float lo, float hi);

#endif
