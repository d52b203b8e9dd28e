/* SPDX-License-Identifier: Apache-2.0 */
/* Random weights (valid codes of every format), activations and logits for the bench. */
#include <math.h>
#include <string.h>

#include "bench/bench_data.h"
#include "check.h"
#include "numfmt.h"
#include "parallel.h"

/* Items per parallel chunk; each chunk has its own generator, so results do not depend on threads. */
#define CHUNK ((int64_t)1 << 16)
/* Magnitude of a dequantized weight: keeps K = 18432 dot products of N(0,1) rows near 3. */
#define WEIGHT_MAGNITUDE 0.02f

uint64_t hm_bench_rng(uint64_t *state) {
  uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static float uniform01(uint64_t *state) {
  return (float)(hm_bench_rng(state) >> 40) * (1.0f / 16777216.0f);
}

static uint64_t chunk_seed(uint64_t seed, int64_t chunk) {
  return seed * 0x2545f4914f6cdd1dull + (uint64_t)chunk;
}

/*
 * Forces a 16-bit or 8-bit float code into a narrow range: no Inf, no NaN, no huge
 * values. bf16 and f16 get |w| in [2^-7, 2^-5); e4m3 and e5m2 lose their top exponent bit.
 */
static uint32_t fix_word(hm_dtype weight, uint32_t w) {
  switch (weight) {
    case HM_BF16: /* sign and 7 mantissa bits kept; exponent 120 + (0..1) */
      return (w & 0x807f807fu) | ((120u + ((w >> 7) & 1u)) << 7) | ((120u + ((w >> 23) & 1u)) << 23);
    case HM_F16: /* exponent 8 + (0..1) of bias 15 */
      return (w & 0x83ff83ffu) | ((8u + ((w >> 10) & 1u)) << 10) | ((8u + ((w >> 26) & 1u)) << 26);
    case HM_F8E4M3:
    case HM_F8E5M2: return w & 0xbfbfbfbfu;
    default: return w;
  }
}

struct words_fill {
  uint32_t *words;
  int64_t count;
  hm_dtype weight;
  uint64_t seed;
};

static hm_status fill_words_chunk(void *ctx, int64_t begin, int64_t end, int worker) {
  (void)worker;
  struct words_fill *f = ctx;
  for (int64_t c = begin; c < end; c++) {
    uint64_t state = chunk_seed(f->seed, c);
    int64_t lo = c * CHUNK, hi = lo + CHUNK < f->count ? lo + CHUNK : f->count;
    for (int64_t i = lo; i < hi; i++) f->words[i] = fix_word(f->weight, (uint32_t)hm_bench_rng(&state));
  }
  return HM_OK;
}

static hm_status fill_words(uint32_t *words, int64_t count, hm_dtype weight, uint64_t seed) {
  if (words == NULL || count == 0) return HM_OK;
  struct words_fill f = {words, count, weight, seed};
  return hm_parallel_for((count + CHUNK - 1) / CHUNK, 1, 0, fill_words_chunk, &f);
}

/* Typical |code| of a weight type, so that scale * code lands near WEIGHT_MAGNITUDE. */
static float typical_code(const hm_quant_format *f) {
  switch (f->weight) {
    case HM_I8: return 64.0f;
    case HM_I4: return 4.0f;
    case HM_F8E4M3:
    case HM_F8E5M2: return 0.5f;
    case HM_F4E2M1: return 2.0f;
    default: return (float)(1 << (hm_dtype_bits(f->weight) - 2 > 0 ? hm_dtype_bits(f->weight) - 2 : 0));
  }
}

static hm_status fill_scales(hm_host_weights *w, int64_t count, uint64_t seed) {
  if (w->scales == NULL || count == 0) return HM_OK;
  float base = WEIGHT_MAGNITUDE / typical_code(&w->fmt);
  if (w->fmt.global_scale) base *= 2.0f; /* the global scale below is 0.5 */
  float buf[1024];
  uint64_t state = seed;
  for (int64_t done = 0; done < count; done += 1024) {
    int64_t n = count - done < 1024 ? count - done : 1024;
    for (int64_t i = 0; i < n; i++) buf[i] = base * (0.75f + 0.5f * uniform01(&state));
    int bytes = hm_quant_scale_bytes(&w->fmt);
    HM_CHECK(hm_convert_from_f32(w->fmt.scale, buf, (char *)w->scales + done * bytes, n));
  }
  return HM_OK;
}

hm_status hm_bench_random_weights(hm_host_weights *w, const hm_quant_format *fmt, int64_t experts, int64_t n,
                                  int64_t k, uint64_t seed) {
  HM_CHECK(hm_host_weights_alloc(w, fmt, experts, n, k));
  hm_status ret = HM_OK;
  HM_CHECK_GOTO(fill_words(w->qweight, experts * hm_quant_qweight_words(fmt, n, k), fmt->weight, seed), fail);
  HM_CHECK_GOTO(fill_words(w->zeros, experts * hm_quant_zero_words(fmt, n, k), HM_U8, seed + 1), fail);
  HM_CHECK_GOTO(fill_scales(w, experts * hm_quant_scale_count(fmt, n, k), seed + 2), fail);
  for (int64_t e = 0; w->global_scale != NULL && e < experts; e++) w->global_scale[e] = 0.5f;
  return HM_OK;
fail:
  hm_host_weights_free(w);
  return ret;
}

struct normal_fill {
  uint16_t *bf16; /* one of the two destinations */
  float *f32;
  int64_t count;
  float scale;
  uint64_t seed;
};

/* Sum of four uniforms, centred and scaled: close enough to normal for test data, and fast. */
static hm_status fill_normal_chunk(void *ctx, int64_t begin, int64_t end, int worker) {
  (void)worker;
  struct normal_fill *f = ctx;
  for (int64_t c = begin; c < end; c++) {
    uint64_t state = chunk_seed(f->seed, c);
    int64_t lo = c * CHUNK, hi = lo + CHUNK < f->count ? lo + CHUNK : f->count;
    for (int64_t i = lo; i < hi; i++) {
      uint64_t r = hm_bench_rng(&state);
      float s =
          (float)(r & 0xffff) + (float)((r >> 16) & 0xffff) + (float)((r >> 32) & 0xffff) + (float)(r >> 48);
      float v = f->scale * (s / 65536.0f - 2.0f) * 1.7320508f;
      if (f->bf16)
        f->bf16[i] = hm_bf16_from_f32(v);
      else
        f->f32[i] = v;
    }
  }
  return HM_OK;
}

static hm_status fill_normal(struct normal_fill *f) {
  if (f->count == 0) return HM_OK;
  return hm_parallel_for((f->count + CHUNK - 1) / CHUNK, 1, 0, fill_normal_chunk, f);
}

hm_status hm_bench_random_bf16(uint16_t *dst, int64_t count, float scale, uint64_t seed) {
  HM_CHECK_NOT_NULL(dst);
  struct normal_fill f = {dst, NULL, count, scale, seed};
  return fill_normal(&f);
}

hm_status hm_bench_random_normal(float *dst, int64_t count, float scale, uint64_t seed) {
  HM_CHECK_NOT_NULL(dst);
  struct normal_fill f = {NULL, dst, count, scale, seed};
  return fill_normal(&f);
}

void hm_bench_random_f32(float *dst, int64_t count, float lo, float hi, uint64_t seed) {
  uint64_t state = seed;
  for (int64_t i = 0; i < count; i++) dst[i] = lo + (hi - lo) * uniform01(&state);
}
