/* SPDX-License-Identifier: Apache-2.0 */
/* Synthetic w4a16 weights by coordinates (see embed_weights.h). */
#include "embed_weights.h"

#include <math.h>
#include <string.h>

static uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

static uint64_t hash4(uint64_t seed, int tensor, int64_t a, int64_t b, int64_t c) {
  uint64_t h = mix(seed ^ ((uint64_t)tensor << 56));
  h = mix(h ^ (uint64_t)a);
  h = mix(h ^ (uint64_t)b);
  return mix(h ^ (uint64_t)c);
}

float embed_uniform(uint64_t seed, int tensor, int64_t index, float lo, float hi) {
  double u = (double)(hash4(seed, tensor, index, 0, 0) >> 11) / 9007199254740992.0;
  return lo + (float)u * (hi - lo);
}

uint16_t embed_bf16(float x) {
  uint32_t bits;
  memcpy(&bits, &x, sizeof(bits));
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return (uint16_t)(bits >> 16);
}

int64_t embed_qweight_words(const embed_slice *s) {
  return s->experts * s->rows * s->cols / 8;
}
int64_t embed_scale_count(const embed_slice *s) {
  return s->experts * s->rows * (s->cols / EMBED_GROUP);
}
int64_t embed_zero_words(const embed_slice *s) {
  return s->experts * (s->cols / EMBED_GROUP) * (s->rows / 8);
}

/* The three kinds of value of a tensor get separate hash streams. */
enum { CODE = 0, SCALE = 1, ZERO = 2 };

static uint32_t code(const embed_slice *s, int64_t e, int64_t n, int64_t k) {
  return (uint32_t)(hash4(s->seed, s->tensor * 3 + CODE, e, n, k) & 15u);
}

/* Zero points near the middle of the u4 range keep (q - z) centred. */
static uint32_t zero(const embed_slice *s, int64_t e, int64_t group, int64_t n) {
  return 7u + (uint32_t)(hash4(s->seed, s->tensor * 3 + ZERO, e, group, n) % 3u);
}

/* |q - z| is about 4.6 on average: scales near 0.25/sqrt(K) give outputs of order 1. */
static uint16_t scale(const embed_slice *s, int64_t e, int64_t n, int64_t group) {
  double u = (double)(hash4(s->seed, s->tensor * 3 + SCALE, e, n, group) >> 11) / 9007199254740992.0;
  return embed_bf16((float)((0.5 + u) * 0.25 / sqrt((double)s->full_k)));
}

void embed_pack(const embed_slice *s, uint32_t *qweight, uint16_t *scales, uint32_t *zeros) {
  const int64_t groups = s->cols / EMBED_GROUP, g0 = s->k0 / EMBED_GROUP;
  for (int64_t e = 0; e < s->experts; e++)
    for (int64_t j = 0; j < s->rows; j++) {
      const int64_t n = s->row_of[j];
      uint32_t *row = qweight + (e * s->rows + j) * (s->cols / 8);
      for (int64_t w = 0; w < s->cols / 8; w++) {
        uint32_t word = 0;
        for (int i = 0; i < 8; i++) word |= code(s, e, n, s->k0 + w * 8 + i) << (4 * i);
        row[w] = word;
      }
      for (int64_t g = 0; g < groups; g++) scales[(e * s->rows + j) * groups + g] = scale(s, e, n, g0 + g);
    }
  for (int64_t e = 0; e < s->experts; e++)
    for (int64_t g = 0; g < groups; g++)
      for (int64_t w = 0; w < s->rows / 8; w++) {
        uint32_t word = 0;
        for (int i = 0; i < 8; i++) word |= zero(s, e, g0 + g, s->row_of[w * 8 + i]) << (4 * i);
        zeros[(e * groups + g) * (s->rows / 8) + w] = word;
      }
}
