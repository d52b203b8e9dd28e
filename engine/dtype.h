/* SPDX-License-Identifier: Apache-2.0 */
/* Private dtype helpers beside the public names in humming/core.h. */
#ifndef HM_DTYPE_H
#define HM_DTYPE_H

#include "humming.h"

struct hm_dtype_info {
  const char *name;
  int bits;
  bool is_float;
  bool is_signed;
};

/* The table row of a dtype, or NULL for an invalid one. */
const struct hm_dtype_info *hm_dtype_info(hm_dtype dtype);
/* Bytes of one row of elems elements; sub-byte rows round up to 32-bit words. */
size_t hm_dtype_row_bytes(hm_dtype dtype, int64_t elems);

#endif
