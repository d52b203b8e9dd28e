/* SPDX-License-Identifier: Apache-2.0 */
/* The dtype table: names and widths. */
#include <string.h>

#include "check.h"
#include "dtype.h"

static const struct hm_dtype_info dtype_info[] = {
#define HM_DTYPE_INFO_(id, name, bits, is_float, is_signed) {name, bits, is_float, is_signed},
    HM_DTYPE_TABLE(HM_DTYPE_INFO_)
#undef HM_DTYPE_INFO_
};

const struct hm_dtype_info *hm_dtype_info(hm_dtype dtype) {
  if ((unsigned)dtype >= HM_DTYPE_COUNT) return NULL;
  return &dtype_info[dtype];
}

const char *hm_dtype_name(hm_dtype dtype) {
  const struct hm_dtype_info *info = hm_dtype_info(dtype);
  return info ? info->name : "invalid";
}

int hm_dtype_bits(hm_dtype dtype) {
  const struct hm_dtype_info *info = hm_dtype_info(dtype);
  return info ? info->bits : 0;
}

hm_status hm_dtype_parse(const char *name, hm_dtype *out) {
  HM_CHECK_NOT_NULL(name);
  HM_CHECK_NOT_NULL(out);
  for (int i = 0; i < HM_DTYPE_COUNT; i++) {
    if (strcmp(dtype_info[i].name, name) == 0) {
      *out = (hm_dtype)i;
      return HM_OK;
    }
  }
  HM_FAIL(HM_INVALID_ARGUMENT, "unknown dtype '%s'", name);
}

size_t hm_dtype_row_bytes(hm_dtype dtype, int64_t elems) {
  int bits = hm_dtype_bits(dtype);
  if (bits >= 8) return (size_t)elems * (size_t)(bits / 8);
  /* Sub-byte rows are whole 32-bit words: the packing unit of the canonical contract. */
  return (size_t)((elems * bits + 31) / 32) * 4;
}
