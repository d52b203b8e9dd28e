/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The late-scale fold of the swapped decode tiles (kernels/gemm_swap.cuh), mirrored on
 * the CPU: where each C^T accumulator finds its scale, zero and activation sum
 * (kernels/hm_swap_map.cuh) against the PTX fragment layouts, and the fold's numbers,
 * acc += s (part - (magic + z) sa) over runs of k16 steps with every f32 add truncated
 * (the most pessimistic tensor-core accumulation), against the direct dequantized sum.
 */
#include <math.h>
#include <stdio.h>

#include "check.h"
#include "hm_test.h"
#include "kernels/hm_swap_map.cuh"

/* PTX, m16n8k16 C/D with f32: element i of lane is (row, column). */
static void ptx_c(int lane, int i, int *row, int *col) {
  const int g = lane >> 2, t = lane & 3;
  *row = i < 2 ? g : g + 8;
  *col = t * 2 + (i & 1);
}

/*
 * C^T element i of block J of lane (g, t) is unit column 16J + row (weights are A) and
 * token col; the fold takes scale and zero slot j of the lane, which hold column
 * 8j + g (hm_dequant.cuh), and element hm_swap_fold_token(i) of the all-ones MMA, whose
 * column must be the same token.
 */
static void fold_operands_match_the_accumulator(void **state) {
  (void)state;
  for (int lane = 0; lane < 32; lane++)
    for (int block = 0; block < 4; block++)
      for (int i = 0; i < 4; i++) {
        int row, col, ones_row, ones_col;
        ptx_c(lane, i, &row, &col);
        ptx_c(lane, hm_swap_fold_token(i), &ones_row, &ones_col);
        assert_int_equal(8 * hm_swap_fold_block(block, i) + (lane >> 2), 16 * block + row);
        assert_int_equal(ones_col, col);
      }
}

/* x rounded to nearest with `bits` significant bits (bf16 8, f16 11). */
static float round_to(double x, int bits) {
  if (x == 0.0) return 0.0f;
  int e;
  const double m = frexp(x, &e);
  return (float)ldexp(rint(ldexp(m, bits)), e - bits);
}

/*
 * acc + the 16 exact products p of one MMA as a truncating tensor core adds them (the
 * behaviour measured on V100..A100): every term aligned to the largest exponent with 3
 * extra bits and cut toward zero, the sum cut to f32. The most pessimistic model we know.
 */
static float mma_add(float acc, const double *p) {
  int e_max;
  double big = fabs((double)acc);
  for (int i = 0; i < 16; i++) big = fmax(big, fabs(p[i]));
  if (big == 0.0) return acc;
  frexp(big, &e_max);
  const double quantum = ldexp(1.0, e_max - 24 - 3);
  double sum = trunc((double)acc / quantum) * quantum;
  for (int i = 0; i < 16; i++) sum += trunc(p[i] / quantum) * quantum;
  float f = (float)sum;
  if (fabs((double)f) > fabs(sum)) f = nextafterf(f, 0.0f);
  return f;
}

typedef struct fold_case {
  const char *name;
  int bits, mantissa; /* weight bits; 8 for bf16, 11 for f16 */
  float magic;        /* 128 bf16, 1024 f16 */
  int group;          /* 0 = per channel */
  int run_steps;      /* k16 steps a warp sums before it folds */
  bool zero_point;
  bool positive; /* activations all > 0 (after an activation function): sums grow like k */
} fold_case;

enum { COLS = 16, TOKENS = 8, K = 8192 };

/*
 * ||fold - direct|| / ||direct|| over COLS x TOKENS sums of K, and the same for the old
 * path (each weight (q - z) s rounded to the activation type) into *old_err.
 */
static double fold_error(const fold_case *c, hm_rng *rng, double *old_err) {
  static float a[TOKENS][K];
  static int q[COLS][K];
  const int groups = c->group ? K / c->group : 1, span = c->group ? c->group : K;
  float s[COLS][K / 16], zf[COLS][K / 16];
  for (int n = 0; n < TOKENS; n++)
    for (int k = 0; k < K; k++)
      a[n][k] = round_to(c->positive ? fabsf(hm_rng_normal(rng)) : hm_rng_normal(rng), c->mantissa);
  for (int col = 0; col < COLS; col++) {
    for (int k = 0; k < K; k++) q[col][k] = (int)(hm_rng_next(rng) % (1u << c->bits));
    for (int g = 0; g < groups; g++) {
      s[col][g] = round_to(hm_rng_uniform(rng, 0.005f, 0.02f), c->mantissa);
      zf[col][g] = c->zero_point ? (float)(hm_rng_next(rng) % (1u << c->bits)) : (float)(1 << (c->bits - 1));
    }
  }
  double err = 0.0, err_old = 0.0, norm = 0.0;
  for (int col = 0; col < COLS; col++)
    for (int n = 0; n < TOKENS; n++) {
      float acc = 0.0f, acc_old = 0.0f;
      double ref = 0.0;
      for (int k0 = 0; k0 < K; k0 += 16 * c->run_steps) {
        const int g = k0 / span;
        float part = 0.0f, sa = 0.0f;
        for (int k16 = k0; k16 < k0 + 16 * c->run_steps; k16 += 16) {
          double biased[16], ones[16], old[16];
          for (int k = k16; k < k16 + 16; k++) {
            const double w = ((double)q[col][k] - zf[col][g]) * s[col][g];
            biased[k - k16] = ((double)c->magic + q[col][k]) * a[n][k];
            ones[k - k16] = a[n][k];
            old[k - k16] = (double)round_to(w, c->mantissa) * a[n][k];
            ref += w * a[n][k];
          }
          part = mma_add(part, biased);
          sa = mma_add(sa, ones);
          acc_old = mma_add(acc_old, old);
        }
        acc = hm_swap_fold_one(acc, part, s[col][g], c->magic + zf[col][g], sa);
      }
      err += ((double)acc - ref) * ((double)acc - ref);
      err_old += ((double)acc_old - ref) * ((double)acc_old - ref);
      norm += ref * ref;
    }
  *old_err = sqrt(err_old / norm);
  return sqrt(err / norm);
}

/*
 * Within a tenth of the formats' test bounds (1.2e-2 with bf16, 3e-3 with f16) for the
 * run lengths tilings give (bf16 2..16 steps, f16 capped at 4: hm_gemm_traits::late_run)
 * and per-channel scales. Activations all of one sign are the worst case: the biased
 * sums then grow like k while the result may not (f16 16-step runs reach ~1.1e-3 there).
 */
static void fold_matches_direct_dequant(void **state) {
  (void)state;
  static const fold_case cases[] = {
      {"bf16 u4 zero g128, 4-step runs", 4, 8, 128.0f, 128, 4, true, false},
      {"bf16 i4 channel, 16-step runs", 4, 8, 128.0f, 0, 16, false, false},
      {"bf16 u7 zero g32, 2-step runs", 7, 8, 128.0f, 32, 2, true, false},
      {"f16 u4 zero channel, 4-step runs", 4, 11, 1024.0f, 0, 4, true, false},
      {"f16 u4 g256, 4-step runs", 4, 11, 1024.0f, 256, 4, false, false},
      {"f16 u8 zero g64, 4-step runs", 8, 11, 1024.0f, 64, 4, true, false},
      {"f16 u4 g256 positive, 4-step runs", 4, 11, 1024.0f, 256, 4, false, true},
      {"f16 u4 zero channel positive, 4-step", 4, 11, 1024.0f, 0, 4, true, true},
      {"bf16 u4 channel positive, 16-step runs", 4, 8, 128.0f, 0, 16, false, true},
  };
  hm_rng rng;
  hm_rng_seed(&rng, hm_test_seed("fold_matches_direct_dequant"));
  for (size_t i = 0; i < HM_ARRAY_SIZE(cases); i++) {
    const fold_case *c = &cases[i];
    double old_err;
    const double err = fold_error(c, &rng, &old_err);
    const double bound = c->mantissa == 8 ? 1.2e-3 : 3e-4;
    printf("%-36s rel_err %.2e (bound %.1e; per-weight rounding of the old path %.2e)\n", c->name, err, bound,
           old_err);
    assert_true(err <= bound);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(fold_operands_match_the_accumulator),
      cmocka_unit_test(fold_matches_direct_dequant),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
