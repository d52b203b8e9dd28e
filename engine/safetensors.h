/* SPDX-License-Identifier: Apache-2.0 */
/*
 * safetensors files (library-internal). Layout: a u64 little-endian header length H,
 * H bytes of JSON {"name": {"dtype", "shape", "data_offsets": [begin, end]}, ...,
 * "__metadata__": {str: str}}, then the data region that the offsets index.
 * The reader validates the whole header before handing out any tensor: every
 * tensor's bytes lie inside the data region, sizes agree with dtype x shape (checked
 * arithmetic), tensors neither overlap nor leave holes (as the reference
 * implementation demands). Data pointers are not aligned: read them with the
 * hm_st_load_* helpers. Hosts are assumed little-endian, like the format.
 */
#ifndef HM_SAFETENSORS_H
#define HM_SAFETENSORS_H

#include <stdint.h>
#include <string.h>

#include "humming.h"

/* Columns: id, name in the header, bits per element. */
#define HM_ST_DTYPE_TABLE(X) \
  X(BOOL, "BOOL", 8)         \
  X(U8, "U8", 8)             \
  X(I8, "I8", 8)             \
  X(F8_E4M3, "F8_E4M3", 8)   \
  X(F8_E5M2, "F8_E5M2", 8)   \
  X(F8_E8M0, "F8_E8M0", 8)   \
  X(F4, "F4", 4)             \
  X(F6_E2M3, "F6_E2M3", 6)   \
  X(F6_E3M2, "F6_E3M2", 6)   \
  X(I16, "I16", 16)          \
  X(U16, "U16", 16)          \
  X(F16, "F16", 16)          \
  X(BF16, "BF16", 16)        \
  X(I32, "I32", 32)          \
  X(U32, "U32", 32)          \
  X(F32, "F32", 32)          \
  X(I64, "I64", 64)          \
  X(U64, "U64", 64)          \
  X(F64, "F64", 64)

typedef enum hm_st_dtype {
#define HM_ST_DTYPE_ENUM_(id, name, bits) HM_ST_##id,
  HM_ST_DTYPE_TABLE(HM_ST_DTYPE_ENUM_)
#undef HM_ST_DTYPE_ENUM_
      HM_ST_DTYPE_COUNT
} hm_st_dtype;

#define HM_ST_MAX_DIMS 8
/* Headers beyond this are refused before parsing (the reference reader's limit). */
#define HM_ST_MAX_HEADER_BYTES (100u << 20)

/* The header's name of a dtype ("BF16"), or "invalid". */
const char *hm_st_dtype_name(hm_st_dtype dtype);
/* Bits per element, 0 for an invalid dtype. */
int hm_st_dtype_bits(hm_st_dtype dtype);

typedef struct hm_st_tensor {
  const char *name;
  hm_st_dtype dtype;
  int ndim;
  int64_t shape[HM_ST_MAX_DIMS];
  int64_t elems;   /* product of shape */
  uint64_t offset; /* from the start of the data region */
  uint64_t nbytes;
  const uint8_t *data; /* inside the mapping; unaligned */
} hm_st_tensor;

typedef struct hm_safetensors hm_safetensors;

/* Maps and validates a file. Errors are HM_CORRUPT (or HM_SYSTEM) naming the path. */
hm_status hm_safetensors_open(const char *path, hm_safetensors **out);
/* Validates a buffer the caller keeps alive and unchanged; label names it in errors. */
hm_status hm_safetensors_open_buffer(const void *buf, size_t size, const char *label, hm_safetensors **out);
/* Unmaps and frees; NULL is a no-op. */
void hm_safetensors_close(hm_safetensors *st);

/* The path (or label) given at open. */
const char *hm_safetensors_path(const hm_safetensors *st);
/* Number of tensors and the i-th in name order. */
size_t hm_safetensors_count(const hm_safetensors *st);
const hm_st_tensor *hm_safetensors_at(const hm_safetensors *st, size_t i);
/* The tensor of that name, or NULL. */
const hm_st_tensor *hm_safetensors_find(const hm_safetensors *st, const char *name);
/* A "__metadata__" value, or NULL. */
const char *hm_safetensors_metadata(const hm_safetensors *st, const char *key);

/* Element i of an unaligned little-endian array. */
static inline uint16_t hm_st_load_u16(const uint8_t *p, int64_t i) {
  uint16_t v;
  memcpy(&v, p + i * 2, sizeof(v));
  return v;
}
static inline uint32_t hm_st_load_u32(const uint8_t *p, int64_t i) {
  uint32_t v;
  memcpy(&v, p + i * 4, sizeof(v));
  return v;
}
static inline float hm_st_load_f32(const uint8_t *p, int64_t i) {
  float v;
  memcpy(&v, p + i * 4, sizeof(v));
  return v;
}
static inline int64_t hm_st_load_i64(const uint8_t *p, int64_t i) {
  int64_t v;
  memcpy(&v, p + i * 8, sizeof(v));
  return v;
}

/*
 * Writer, for tests and for `humming-moe quantize`: tensors are laid out in the order
 * they are added, the header is padded with spaces to a multiple of 8 bytes, and the
 * file appears under its name only once complete (temporary name, then rename).
 */
typedef struct hm_st_writer hm_st_writer;

hm_status hm_st_writer_create(hm_st_writer **out);
/* Adds a tensor; data (nbytes implied by dtype and shape) is copied. */
hm_status hm_st_writer_add(hm_st_writer *w, const char *name, hm_st_dtype dtype, int ndim,
                           const int64_t *shape, const void *data);
/* Sets a "__metadata__" entry. */
hm_status hm_st_writer_metadata(hm_st_writer *w, const char *key, const char *value);
hm_status hm_st_writer_save(const hm_st_writer *w, const char *path);
/* NULL is a no-op. */
void hm_st_writer_destroy(hm_st_writer *w);

/* Bytes of a tensor of dtype and shape, with overflow and sub-byte checks; false if invalid. */
bool hm_st_tensor_bytes(hm_st_dtype dtype, int ndim, const int64_t *shape, uint64_t *elems, uint64_t *nbytes);

#endif
