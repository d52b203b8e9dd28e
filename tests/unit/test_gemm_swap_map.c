/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The lane maps of the swapped-operand MMA (kernels/hm_swap_map.cuh) against the PTX ISA
 * fragment layouts of mma.m16n8k16 with f16/bf16 inputs and f32 accumulators, on a
 * simulated warp: the codes a lane holds for the standard B fragments are its A
 * fragments of the swapped MMA, ldmatrix of the 8 token rows gives the n8 fragment, and
 * the two exchanges per block turn the C^T accumulators into the standard layout; and the
 * same for the W8A8 kernel's m16n8k32 8-bit fragments and its mxfp4 scale bytes.
 */
#include "hm_test.h"
#include "kernels/hm_swap_map.cuh"

/* An element of a unit or tile: (row, col) of the MMA's logical matrix. */
typedef struct elem {
  int row, col;
} elem;

/* PTX, m16n8k16 .f16/.bf16 A: element i of lane; reg r holds elements 2r (low) and 2r+1. */
static elem ptx_a(int lane, int i) {
  const int g = lane >> 2, t = lane & 3;
  const elem e = {(i < 2 || (i >= 4 && i < 6)) ? g : g + 8, t * 2 + (i & 1) + (i >= 4 ? 8 : 0)};
  return e;
}

/* PTX, B (k16 x n8): element i, row = k. */
static elem ptx_b(int lane, int i) {
  const int g = lane >> 2, t = lane & 3;
  const elem e = {t * 2 + (i & 1) + (i >= 2 ? 8 : 0), g};
  return e;
}

/* PTX, C/D (m16 x n8) with f32: element i. */
static elem ptx_c(int lane, int i) {
  const int g = lane >> 2, t = lane & 3;
  const elem e = {i < 2 ? g : g + 8, t * 2 + (i & 1)};
  return e;
}

/* hm_dequant.cuh: the (unit column, k) of half h of pair slot ps of a lane. */
static elem unit_slot(int lane, int ps, int h) {
  const int g = lane >> 2, t = lane & 3;
  const elem e = {(ps >> 1) * 8 + g, 2 * t + 8 * (ps & 1) + h};
  return e;
}

/* Standard path: pair slots 2j, 2j+1 are B registers 0, 1 of n8 block j (what the kernel relies on). */
static void pair_slots_are_standard_b_fragments(void **state) {
  (void)state;
  for (int lane = 0; lane < 32; lane++)
    for (int j = 0; j < 8; j++)
      for (int i = 0; i < 4; i++) {
        const elem b = ptx_b(lane, i), w = unit_slot(lane, 2 * j + i / 2, i & 1);
        assert_int_equal(w.row, 8 * j + b.col);
        assert_int_equal(w.col, b.row);
      }
}

/* Swapped: A register r of m16 block J holds unit columns 16J + row, the same codes. */
static void pair_slots_are_swapped_a_fragments(void **state) {
  (void)state;
  for (int lane = 0; lane < 32; lane++)
    for (int block = 0; block < 4; block++)
      for (int i = 0; i < 8; i++) {
        const elem a = ptx_a(lane, i);
        const elem w = unit_slot(lane, hm_swap_a_slot(block, i / 2), i & 1);
        assert_int_equal(w.row, 16 * block + a.row);
        assert_int_equal(w.col, a.col);
      }
  /* Each of the 16 slots feeds exactly one (block, register). */
  int used[16] = {0};
  for (int block = 0; block < 4; block++)
    for (int r = 0; r < 4; r++) used[hm_swap_a_slot(block, r)]++;
  for (int ps = 0; ps < 16; ps++) assert_int_equal(used[ps], 1);
}

/*
 * ldmatrix .x2 as the kernel addresses it (lane l < 16: row l % 8, chunk 2s + l / 8 of
 * the swizzled A tile): lane l receives row l / 4, columns 2(l % 4).. of each matrix,
 * which must be the B fragment of the 8 tokens (row = token, k within the step).
 */
static void token_rows_give_the_n8_fragment(void **state) {
  (void)state;
  for (int lane = 0; lane < 32; lane++)
    for (int i = 0; i < 4; i++) {
      const int matrix = i / 2;
      const int addr_lane = matrix * 8 + (lane >> 2); /* the lane that addressed this row */
      const int token = addr_lane & 7, k = 8 * ((addr_lane >> 3) & 1) + 2 * (lane & 3) + (i & 1);
      const elem b = ptx_b(lane, i);
      assert_int_equal(token, b.col);
      assert_int_equal(k, b.row);
    }
}

/* PTX, m16n8k32 8-bit A: byte i of register r (row, k). */
static elem ptx_a8(int lane, int r, int i) {
  const int g = lane >> 2, t = lane & 3;
  const elem e = {(r & 1) ? g + 8 : g, t * 4 + i + ((r >> 1) ? 16 : 0)};
  return e;
}

/* PTX, m16n8k32 8-bit B (k32 x n8): byte i of register r, row = k. */
static elem ptx_b8(int lane, int r, int i) {
  const int g = lane >> 2, t = lane & 3;
  const elem e = {t * 4 + i + 16 * r, g};
  return e;
}

/*
 * The W8A8 swapped tile (hm_w8_weight_frags): A register r of m16 block J is B register
 * slot % 2 of n8 block slot / 2 (slot = hm_swap_a_slot(J, r)), the token rows' ldmatrix
 * .x2 (lane l < 16: row l % 8, 16-byte chunk 2s + l / 8) gives the 8-bit n8 fragment, and
 * a lane's mxfp4 scales of columns 16J + 8i + g sit where the kernel reads them.
 */
static void w8_slots_are_swapped_a_fragments(void **state) {
  (void)state;
  for (int lane = 0; lane < 32; lane++)
    for (int block = 0; block < 4; block++)
      for (int r = 0; r < 4; r++)
        for (int i = 0; i < 4; i++) {
          const int slot = hm_swap_a_slot(block, r);
          const elem a = ptx_a8(lane, r, i), b = ptx_b8(lane, slot % 2, i);
          assert_int_equal(16 * block + a.row, 8 * (slot / 2) + b.col);
          assert_int_equal(a.col, b.row);
        }
}

static void w8_token_rows_give_the_n8_fragment(void **state) {
  (void)state;
  for (int lane = 0; lane < 32; lane++)
    for (int r = 0; r < 2; r++)
      for (int i = 0; i < 4; i++) {
        const int addr_lane = r * 8 + (lane >> 2); /* ldmatrix: matrix r, row lane / 4 */
        const int token = addr_lane & 7, k = 16 * ((addr_lane >> 3) & 1) + 4 * (lane & 3) + i;
        const elem b = ptx_b8(lane, r, i);
        assert_int_equal(token, b.col);
        assert_int_equal(k, b.row);
      }
}

static void w8_mx_scales_of_swapped_columns(void **state) {
  (void)state;
  for (int lane = 0; lane < 32; lane++)
    for (int block = 0; block < 4; block++)
      for (int i = 0; i < 2; i++) {
        const int col = 16 * block + 8 * i + (lane >> 2);
        /* transform_w4a8.cuh: column 8j + 2t + h at byte 16t + 2j + h of a unit's 64 */
        const int want = 16 * ((col % 8) / 2) + 2 * (col / 8) + col % 2;
        const int got = 16 * hm_swap8_scale_row(lane) + 4 * block + hm_swap8_scale_byte(lane, i);
        assert_int_equal(got, want);
      }
}

/* Values as (token, unit column) codes so that a misplaced one is visible. */
static float code(int token, int col) {
  return (float)(token * 100 + col);
}

static void exchanges_give_the_standard_layout(void **state) {
  (void)state;
  float ct[32][4][4], out[32][8][4];
  /* After the swapped MMAs: C^T, rows = unit columns 16J.., columns = tokens. */
  for (int lane = 0; lane < 32; lane++)
    for (int block = 0; block < 4; block++)
      for (int i = 0; i < 4; i++) {
        const elem c = ptx_c(lane, i);
        ct[lane][block][i] = code(c.col, 16 * block + c.row);
      }
  for (int block = 0; block < 4; block++)
    for (int h = 0; h < 2; h++) {
      float got[32][2];
      for (int x = 0; x < 2; x++) {
        int reads[32] = {0};
        for (int lane = 0; lane < 32; lane++) {
          const int src = hm_swap_src_lane(lane, x);
          assert_true(src >= 0 && src < 32);
          reads[src]++;
          got[lane][x] = ct[src][block][2 * h + hm_swap_send_reg(src, x)];
        }
        for (int lane = 0; lane < 32; lane++) assert_int_equal(reads[lane], 1);
      }
      for (int lane = 0; lane < 32; lane++) {
        float *c = out[lane][2 * block + h];
        c[hm_swap_recv_col(lane, 0)] = got[lane][0];
        c[hm_swap_recv_col(lane, 1)] = got[lane][1];
        assert_int_not_equal(hm_swap_recv_col(lane, 0), hm_swap_recv_col(lane, 1));
      }
    }
  /* Standard: c0, c1 of n8 block j are (row g, columns 8j + 2t, 8j + 2t + 1); rows 8..15 are empty. */
  for (int lane = 0; lane < 32; lane++)
    for (int j = 0; j < 8; j++)
      for (int i = 0; i < 2; i++) {
        const elem c = ptx_c(lane, i);
        assert_float_equal(out[lane][j][i], code(c.row, 8 * j + c.col), 0.0);
      }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(pair_slots_are_standard_b_fragments),
      cmocka_unit_test(pair_slots_are_swapped_a_fragments),
      cmocka_unit_test(token_rows_give_the_n8_fragment),
      cmocka_unit_test(exchanges_give_the_standard_layout),
      cmocka_unit_test(w8_slots_are_swapped_a_fragments),
      cmocka_unit_test(w8_token_rows_give_the_n8_fragment),
      cmocka_unit_test(w8_mx_scales_of_swapped_columns),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
