// SPDX-License-Identifier: Apache-2.0
// Lane maps of the swapped-operand MMA (gemm_swap.cuh), in plain C so that a CPU test
// checks them against the PTX fragment layouts of mma.m16n8k16 (g = lane / 4,
// t = lane % 4):
//   A (m16 x k16, row major): reg 0 (row g, k 2t..2t+1), reg 1 (row g+8, same k),
//                              reg 2 (row g, k 2t+8..2t+9), reg 3 (row g+8, k 2t+8..)
//   B (k16 x n8):             reg 0 (k 2t..2t+1, col g), reg 1 (k 2t+8..2t+9, col g)
//   C (m16 x n8):             c0, c1 (row g, cols 2t, 2t+1), c2, c3 (row g+8, same cols)
// A lane's pair slot 2j / 2j+1 of a weight unit (hm_dequant.cuh) is its B register 0 / 1
// of n8 block j: column 8j+g, k 2t.. / 2t+8... As the A operand, m16 block J covers unit
// columns 16J..16J+15, so rows g and g+8 are columns 8(2J)+g and 8(2J+1)+g: the same
// codes, no new transform.
#ifndef HM_SWAP_MAP_CUH
#define HM_SWAP_MAP_CUH

#if defined(__CUDACC__)
#define HM_LANE_FN __host__ __device__ __forceinline__
#else
#define HM_LANE_FN static inline
#endif

// The pair slot a lane feeds as A register r (0..3) of m16 block J (0..3) of a unit.
HM_LANE_FN int hm_swap_a_slot(int block, int r) {
  return 4 * block + 2 * (r & 1) + (r >> 1);
}

/*
 * The W8A8 kernel's swapped tile (gemm_w8a8_kernel.cuh), m16n8k32 with 8-bit codes
 * (hm_mma8.cuh): A registers 0..3 hold (row g, k 4t..), (row g+8, k 4t..), (row g,
 * k 16+4t..), (row g+8, k 16+4t..) and B registers 0, 1 (k 4t.., col g), (k 16+4t..,
 * col g), so A register r of m16 block J is B register slot % 2 of n8 block slot / 2,
 * slot = hm_swap_a_slot(J, r), as with 16-bit pairs. Its mxfp4 scales come in 16-byte
 * rows, byte 2j + i of row t holding unit column 8j + 2t + i (transform_w4a8.cuh): the
 * columns 8(2J + i) + g of a lane lie in row g / 2, at byte 4J + hm_swap8_scale_byte.
 */
HM_LANE_FN int hm_swap8_scale_row(int lane) {
  return lane >> 3;
}

HM_LANE_FN int hm_swap8_scale_byte(int lane, int i) {
  return 2 * i + ((lane >> 2) & 1);
}

/*
 * The swapped accumulators hold C^T: c[2h+e] of block J is (unit column 16J+8h+g,
 * token 2t+e). The standard layout wants, in lane (g, t), token g at columns 8j+2t+i
 * (j = 2J+h, i = 0, 1), rows 8..15 empty. Two exchanges per (J, h) move them: in
 * exchange x, lane l reads lane hm_swap_src_lane(l, x), which sends its
 * c[2h + hm_swap_send_reg(src, x)], and l keeps it as column i = hm_swap_recv_col(l, x).
 * Each source lane is read by exactly one lane per exchange.
 */
HM_LANE_FN int hm_swap_src_lane(int lane, int x) {
  const int g = lane >> 2, t = lane & 3;
  return (2 * t + ((g & 1) ^ x)) * 4 + (g >> 1);
}

HM_LANE_FN int hm_swap_send_reg(int lane, int x) {
  return ((lane >> 2) & 1) ^ x;
}

HM_LANE_FN int hm_swap_recv_col(int lane, int x) {
  return ((lane >> 2) & 1) ^ x;
}

/*
 * The late-scale fold (gemm_swap.cuh): C^T element i of block J is unit column
 * 16J + 8(i / 2) + g, whose scale and zero are those of n8 block 2J + i / 2 (column
 * 8j + g of the scale and zero words), and token 2t + i % 2, whose activation sum is
 * element i % 2 of the all-ones MMA (rows g and g + 8 of it hold the same sums).
 */
HM_LANE_FN int hm_swap_fold_block(int block, int i) {
  return 2 * block + (i >> 1);
}

HM_LANE_FN int hm_swap_fold_token(int i) {
  return i & 1;
}

// acc + s (part - zb sa): the partial sum of magic-biased codes part, less the biased zero
// zb times the tokens' activation sum sa over the same k, scaled by the column's scale.
HM_LANE_FN float hm_swap_fold_one(float acc, float part, float s, float zb, float sa) {
  return acc + s * (part - zb * sa);
}

#endif
