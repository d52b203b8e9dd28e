/* SPDX-License-Identifier: Apache-2.0 */
/* The safetensors reader: mapping, header validation, lookup. */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "safetensors.h"

struct hm_safetensors {
  char *path;
  const uint8_t *base; /* whole file or buffer */
  size_t size;
  bool mapped;
  json_t *header; /* owns the names the tensors point to */
  const uint8_t *data;
  uint64_t data_bytes;
  hm_st_tensor *tensors; /* sorted by name */
  size_t count;
  json_t *metadata;
};

static const struct {
  const char *name;
  int bits;
} st_dtypes[] = {
#define HM_ST_DTYPE_ROW_(id, name, bits) {name, bits},
    HM_ST_DTYPE_TABLE(HM_ST_DTYPE_ROW_)
#undef HM_ST_DTYPE_ROW_
};

const char *hm_st_dtype_name(hm_st_dtype dtype) {
  return (unsigned)dtype < HM_ST_DTYPE_COUNT ? st_dtypes[dtype].name : "invalid";
}

int hm_st_dtype_bits(hm_st_dtype dtype) {
  return (unsigned)dtype < HM_ST_DTYPE_COUNT ? st_dtypes[dtype].bits : 0;
}

static bool st_dtype_parse(const char *name, hm_st_dtype *out) {
  for (int i = 0; i < HM_ST_DTYPE_COUNT; i++) {
    if (strcmp(st_dtypes[i].name, name) == 0) {
      *out = (hm_st_dtype)i;
      return true;
    }
  }
  return false;
}

bool hm_st_tensor_bytes(hm_st_dtype dtype, int ndim, const int64_t *shape, uint64_t *elems,
                        uint64_t *nbytes) {
  int bits = hm_st_dtype_bits(dtype);
  if (bits == 0 || ndim < 0 || ndim > HM_ST_MAX_DIMS) return false;
  uint64_t n = 1;
  for (int i = 0; i < ndim; i++) {
    if (shape[i] < 0 || __builtin_mul_overflow(n, (uint64_t)shape[i], &n)) return false;
  }
  uint64_t total_bits;
  if (__builtin_mul_overflow(n, (uint64_t)bits, &total_bits) || total_bits % 8 != 0) return false;
  /* Element counts must also fit the int64 arithmetic of every consumer. */
  if (n > (uint64_t)INT64_MAX / 8) return false;
  *elems = n;
  *nbytes = total_bits / 8;
  return true;
}

static void format_shape(const hm_st_tensor *t, char *buf, size_t len) {
  size_t used = (size_t)snprintf(buf, len, "[");
  for (int i = 0; i < t->ndim && used < len; i++)
    used += (size_t)snprintf(buf + used, len - used, i ? ", %lld" : "%lld", (long long)t->shape[i]);
  if (used < len) snprintf(buf + used, len - used, "]");
}

static hm_status parse_shape(const hm_safetensors *st, const char *name, json_t *shape, hm_st_tensor *t) {
  if (!json_is_array(shape))
    HM_FAIL(HM_CORRUPT, "%s: tensor '%s': \"shape\" is not an array", st->path, name);
  size_t ndim = json_array_size(shape);
  if (ndim > HM_ST_MAX_DIMS)
    HM_FAIL(HM_CORRUPT, "%s: tensor '%s': %zu dimensions (at most %d)", st->path, name, ndim, HM_ST_MAX_DIMS);
  t->ndim = (int)ndim;
  for (size_t i = 0; i < ndim; i++) {
    json_t *d = json_array_get(shape, i);
    if (!json_is_integer(d) || json_integer_value(d) < 0)
      HM_FAIL(HM_CORRUPT, "%s: tensor '%s': shape[%zu] is not a non-negative integer", st->path, name, i);
    t->shape[i] = (int64_t)json_integer_value(d);
  }
  return HM_OK;
}

static hm_status parse_offsets(const hm_safetensors *st, const char *name, json_t *offsets, uint64_t *begin,
                               uint64_t *end) {
  if (!json_is_array(offsets) || json_array_size(offsets) != 2)
    HM_FAIL(HM_CORRUPT, "%s: tensor '%s': \"data_offsets\" is not [begin, end]", st->path, name);
  json_t *b = json_array_get(offsets, 0), *e = json_array_get(offsets, 1);
  if (!json_is_integer(b) || !json_is_integer(e) || json_integer_value(b) < 0 ||
      json_integer_value(e) < json_integer_value(b))
    HM_FAIL(HM_CORRUPT, "%s: tensor '%s': data_offsets must be integers 0 <= begin <= end", st->path, name);
  *begin = (uint64_t)json_integer_value(b);
  *end = (uint64_t)json_integer_value(e);
  return HM_OK;
}

static hm_status parse_tensor(hm_safetensors *st, const char *name, json_t *entry, hm_st_tensor *t) {
  if (!json_is_object(entry)) HM_FAIL(HM_CORRUPT, "%s: tensor '%s': entry is not an object", st->path, name);
  t->name = name;
  const char *dtype = json_string_value(json_object_get(entry, "dtype"));
  if (dtype == NULL) HM_FAIL(HM_CORRUPT, "%s: tensor '%s': no \"dtype\" string", st->path, name);
  if (!st_dtype_parse(dtype, &t->dtype))
    HM_FAIL(HM_CORRUPT, "%s: tensor '%s': unknown dtype '%s'", st->path, name, dtype);
  HM_CHECK(parse_shape(st, name, json_object_get(entry, "shape"), t));
  uint64_t begin = 0, end = 0, elems = 0, nbytes = 0;
  HM_CHECK(parse_offsets(st, name, json_object_get(entry, "data_offsets"), &begin, &end));
  char shape[160];
  format_shape(t, shape, sizeof(shape));
  if (!hm_st_tensor_bytes(t->dtype, t->ndim, t->shape, &elems, &nbytes))
    HM_FAIL(HM_CORRUPT, "%s: tensor '%s': shape %s of %s overflows or is not a whole number of bytes",
            st->path, name, shape, dtype);
  if (end - begin != nbytes)
    HM_FAIL(HM_CORRUPT, "%s: tensor '%s': shape %s of %s needs %llu bytes but data_offsets span %llu",
            st->path, name, shape, dtype, (unsigned long long)nbytes, (unsigned long long)(end - begin));
  if (end > st->data_bytes)
    HM_FAIL(HM_CORRUPT, "%s: tensor '%s': data_offsets end %llu is past the data region (%llu bytes)",
            st->path, name, (unsigned long long)end, (unsigned long long)st->data_bytes);
  t->elems = (int64_t)elems;
  t->offset = begin;
  t->nbytes = nbytes;
  t->data = st->data + begin;
  return HM_OK;
}

static hm_status parse_metadata(hm_safetensors *st, json_t *meta) {
  if (!json_is_object(meta)) HM_FAIL(HM_CORRUPT, "%s: \"__metadata__\" is not an object", st->path);
  const char *key;
  json_t *value;
  json_object_foreach(meta, key, value) {
    if (!json_is_string(value))
      HM_FAIL(HM_CORRUPT, "%s: \"__metadata__\" value of '%s' is not a string", st->path, key);
  }
  st->metadata = meta;
  return HM_OK;
}

static int by_offset(const void *a, const void *b) {
  const hm_st_tensor *x = a, *y = b;
  if (x->offset != y->offset) return x->offset < y->offset ? -1 : 1;
  return x->nbytes < y->nbytes ? -1 : x->nbytes > y->nbytes;
}

static int by_name(const void *a, const void *b) {
  return strcmp(((const hm_st_tensor *)a)->name, ((const hm_st_tensor *)b)->name);
}

/* The reference writer leaves no holes; refusing them also keeps hidden payloads out. */
static hm_status check_layout(hm_safetensors *st) {
  qsort(st->tensors, st->count, sizeof(*st->tensors), by_offset);
  uint64_t expected = 0;
  for (size_t i = 0; i < st->count; i++) {
    const hm_st_tensor *t = &st->tensors[i];
    if (t->offset < expected)
      HM_FAIL(HM_CORRUPT, "%s: tensor '%s' at offset %llu overlaps the previous tensor (ends at %llu)",
              st->path, t->name, (unsigned long long)t->offset, (unsigned long long)expected);
    if (t->offset > expected)
      HM_FAIL(HM_CORRUPT, "%s: tensor '%s' at offset %llu leaves a hole after offset %llu", st->path, t->name,
              (unsigned long long)t->offset, (unsigned long long)expected);
    expected = t->offset + t->nbytes;
  }
  if (expected != st->data_bytes)
    HM_FAIL(HM_CORRUPT, "%s: the tensors cover %llu bytes but the data region holds %llu", st->path,
            (unsigned long long)expected, (unsigned long long)st->data_bytes);
  qsort(st->tensors, st->count, sizeof(*st->tensors), by_name);
  return HM_OK;
}

static hm_status parse_entries(hm_safetensors *st) {
  size_t entries = json_object_size(st->header);
  st->tensors = calloc(entries ? entries : 1, sizeof(*st->tensors));
  if (st->tensors == NULL) HM_FAIL(HM_OUT_OF_MEMORY, "%s: %zu tensor entries", st->path, entries);
  const char *name;
  json_t *entry;
  json_object_foreach(st->header, name, entry) {
    if (strcmp(name, "__metadata__") == 0) {
      HM_CHECK(parse_metadata(st, entry));
      continue;
    }
    HM_CHECK(parse_tensor(st, name, entry, &st->tensors[st->count]));
    st->count++;
  }
  return check_layout(st);
}

static hm_status parse_header(hm_safetensors *st) {
  if (st->size < 8)
    HM_FAIL(HM_CORRUPT, "%s: %zu bytes, too short for the 8-byte header length", st->path, st->size);
  uint64_t header_bytes;
  memcpy(&header_bytes, st->base, sizeof(header_bytes));
  if (header_bytes > st->size - 8)
    HM_FAIL(HM_CORRUPT,
            "%s: header length %llu is past the end of the file (%zu bytes): truncated or corrupt", st->path,
            (unsigned long long)header_bytes, st->size);
  if (header_bytes < 2 || header_bytes > HM_ST_MAX_HEADER_BYTES)
    HM_FAIL(HM_CORRUPT, "%s: header length %llu is outside 2..%u bytes", st->path,
            (unsigned long long)header_bytes, HM_ST_MAX_HEADER_BYTES);
  if (st->base[8] != '{') HM_FAIL(HM_CORRUPT, "%s: header does not start with '{'", st->path);
  json_error_t err;
  st->header = json_loadb((const char *)st->base + 8, (size_t)header_bytes, JSON_REJECT_DUPLICATES, &err);
  if (st->header == NULL)
    HM_FAIL(HM_CORRUPT, "%s: header is not valid JSON (byte %d: %s)", st->path, err.position, err.text);
  if (!json_is_object(st->header)) HM_FAIL(HM_CORRUPT, "%s: header is not a JSON object", st->path);
  st->data = st->base + 8 + header_bytes;
  st->data_bytes = st->size - 8 - header_bytes;
  return parse_entries(st);
}

static hm_status st_new(const char *label, hm_safetensors **out) {
  hm_safetensors *st = calloc(1, sizeof(*st));
  if (st == NULL || (st->path = strdup(label)) == NULL) {
    free(st);
    HM_FAIL(HM_OUT_OF_MEMORY, "%s: safetensors handle", label);
  }
  *out = st;
  return HM_OK;
}

hm_status hm_safetensors_open_buffer(const void *buf, size_t size, const char *label, hm_safetensors **out) {
  HM_CHECK_NOT_NULL(out);
  *out = NULL;
  HM_CHECK_NOT_NULL(buf);
  HM_CHECK_NOT_NULL(label);
  hm_safetensors *st = NULL;
  HM_CHECK(st_new(label, &st));
  st->base = buf;
  st->size = size;
  hm_status ret = parse_header(st);
  if (ret != HM_OK) {
    hm_safetensors_close(st);
    return ret;
  }
  *out = st;
  return HM_OK;
}

static hm_status map_file(hm_safetensors *st) {
  int fd = open(st->path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) HM_FAIL(errno == ENOENT ? HM_INVALID_ARGUMENT : HM_SYSTEM, "%s: %s", st->path, strerror(errno));
  hm_status ret = HM_OK;
  struct stat sb;
  if (fstat(fd, &sb) != 0) HM_FAIL_GOTO(HM_SYSTEM, done, "%s: stat: %s", st->path, strerror(errno));
  if (!S_ISREG(sb.st_mode)) HM_FAIL_GOTO(HM_INVALID_ARGUMENT, done, "%s: not a regular file", st->path);
  if (sb.st_size < 8)
    HM_FAIL_GOTO(HM_CORRUPT, done, "%s: %lld bytes, too short for the 8-byte header length", st->path,
                 (long long)sb.st_size);
  void *p = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
  if (p == MAP_FAILED) HM_FAIL_GOTO(HM_SYSTEM, done, "%s: mmap: %s", st->path, strerror(errno));
  st->base = p;
  st->size = (size_t)sb.st_size;
  st->mapped = true;
done:
  close(fd);
  return ret;
}

hm_status hm_safetensors_open(const char *path, hm_safetensors **out) {
  HM_CHECK_NOT_NULL(out);
  *out = NULL;
  HM_CHECK_NOT_NULL(path);
  hm_safetensors *st = NULL;
  HM_CHECK(st_new(path, &st));
  hm_status ret = HM_OK;
  HM_CHECK_GOTO(map_file(st), fail);
  HM_CHECK_GOTO(parse_header(st), fail);
  *out = st;
  return HM_OK;
fail:
  hm_safetensors_close(st);
  return ret;
}

void hm_safetensors_close(hm_safetensors *st) {
  if (st == NULL) return;
  if (st->mapped) munmap((void *)st->base, st->size);
  json_decref(st->header);
  free(st->tensors);
  free(st->path);
  free(st);
}

const char *hm_safetensors_path(const hm_safetensors *st) {
  return st ? st->path : "";
}

size_t hm_safetensors_count(const hm_safetensors *st) {
  return st ? st->count : 0;
}

const hm_st_tensor *hm_safetensors_at(const hm_safetensors *st, size_t i) {
  return st && i < st->count ? &st->tensors[i] : NULL;
}

const hm_st_tensor *hm_safetensors_find(const hm_safetensors *st, const char *name) {
  if (st == NULL || name == NULL) return NULL;
  hm_st_tensor key = {.name = name};
  return bsearch(&key, st->tensors, st->count, sizeof(*st->tensors), by_name);
}

const char *hm_safetensors_metadata(const hm_safetensors *st, const char *key) {
  if (st == NULL || st->metadata == NULL || key == NULL) return NULL;
  return json_string_value(json_object_get(st->metadata, key));
}
