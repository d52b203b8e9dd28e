/* SPDX-License-Identifier: Apache-2.0 */
/* The safetensors writer (tests, `humming-moe quantize`). */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "check.h"
#include "safetensors.h"

struct st_entry {
  char *name;
  hm_st_dtype dtype;
  int ndim;
  int64_t shape[HM_ST_MAX_DIMS];
  uint64_t nbytes;
  void *data;
};

struct hm_st_writer {
  struct st_entry *entries;
  size_t count, capacity;
  json_t *metadata;
};

hm_status hm_st_writer_create(hm_st_writer **out) {
  HM_CHECK_NOT_NULL(out);
  *out = calloc(1, sizeof(**out));
  if (*out == NULL) HM_FAIL(HM_OUT_OF_MEMORY, "safetensors writer");
  return HM_OK;
}

void hm_st_writer_destroy(hm_st_writer *w) {
  if (w == NULL) return;
  for (size_t i = 0; i < w->count; i++) {
    free(w->entries[i].name);
    free(w->entries[i].data);
  }
  free(w->entries);
  json_decref(w->metadata);
  free(w);
}

static hm_status grow(hm_st_writer *w) {
  if (w->count < w->capacity) return HM_OK;
  size_t capacity = w->capacity ? 2 * w->capacity : 16;
  struct st_entry *entries = realloc(w->entries, capacity * sizeof(*entries));
  if (entries == NULL) HM_FAIL(HM_OUT_OF_MEMORY, "safetensors writer: %zu entries", capacity);
  w->entries = entries;
  w->capacity = capacity;
  return HM_OK;
}

hm_status hm_st_writer_add(hm_st_writer *w, const char *name, hm_st_dtype dtype, int ndim,
                           const int64_t *shape, const void *data) {
  HM_CHECK_NOT_NULL(w);
  HM_CHECK_NOT_NULL(name);
  if (ndim > 0) HM_CHECK_NOT_NULL(shape);
  uint64_t elems, nbytes;
  if (!hm_st_tensor_bytes(dtype, ndim, shape, &elems, &nbytes))
    HM_FAIL(HM_INVALID_ARGUMENT, "safetensors writer: tensor '%s': invalid dtype or shape", name);
  if (strcmp(name, "__metadata__") == 0)
    HM_FAIL(HM_INVALID_ARGUMENT, "safetensors writer: '__metadata__' is not a tensor name");
  for (size_t i = 0; i < w->count; i++) {
    if (strcmp(w->entries[i].name, name) == 0)
      HM_FAIL(HM_INVALID_ARGUMENT, "safetensors writer: tensor '%s' added twice", name);
  }
  if (nbytes > 0) HM_CHECK_NOT_NULL(data);
  HM_CHECK(grow(w));
  struct st_entry *e = &w->entries[w->count];
  memset(e, 0, sizeof(*e));
  e->name = strdup(name);
  e->data = malloc(nbytes ? nbytes : 1);
  if (e->name == NULL || e->data == NULL) {
    free(e->name);
    free(e->data);
    HM_FAIL(HM_OUT_OF_MEMORY, "safetensors writer: tensor '%s' (%llu bytes)", name,
            (unsigned long long)nbytes);
  }
  e->dtype = dtype;
  e->ndim = ndim;
  if (ndim > 0) memcpy(e->shape, shape, (size_t)ndim * sizeof(*shape));
  e->nbytes = nbytes;
  if (nbytes > 0) memcpy(e->data, data, nbytes);
  w->count++;
  return HM_OK;
}

hm_status hm_st_writer_metadata(hm_st_writer *w, const char *key, const char *value) {
  HM_CHECK_NOT_NULL(w);
  HM_CHECK_NOT_NULL(key);
  HM_CHECK_NOT_NULL(value);
  if (w->metadata == NULL && (w->metadata = json_object()) == NULL)
    HM_FAIL(HM_OUT_OF_MEMORY, "safetensors writer: metadata");
  if (json_object_set_new(w->metadata, key, json_string(value)) != 0)
    HM_FAIL(HM_INVALID_ARGUMENT, "safetensors writer: metadata '%s' is not valid UTF-8", key);
  return HM_OK;
}

static json_t *entry_json(const struct st_entry *e, uint64_t begin) {
  json_t *shape = json_array();
  for (int i = 0; i < e->ndim; i++) json_array_append_new(shape, json_integer(e->shape[i]));
  return json_pack("{s:s, s:o, s:[I, I]}", "dtype", hm_st_dtype_name(e->dtype), "shape", shape,
                   "data_offsets", (json_int_t)begin, (json_int_t)(begin + e->nbytes));
}

static hm_status header_text(const hm_st_writer *w, char **text, size_t *padded) {
  json_t *root = json_object();
  if (root == NULL) HM_FAIL(HM_OUT_OF_MEMORY, "safetensors writer: header");
  if (w->metadata) json_object_set(root, "__metadata__", w->metadata);
  uint64_t offset = 0;
  for (size_t i = 0; i < w->count; i++) {
    json_t *entry = entry_json(&w->entries[i], offset);
    if (entry == NULL || json_object_set_new(root, w->entries[i].name, entry) != 0) {
      json_decref(root);
      HM_FAIL(HM_INVALID_ARGUMENT, "safetensors writer: tensor '%s': name is not valid UTF-8",
              w->entries[i].name);
    }
    offset += w->entries[i].nbytes;
  }
  *text = json_dumps(root, JSON_COMPACT);
  json_decref(root);
  if (*text == NULL) HM_FAIL(HM_OUT_OF_MEMORY, "safetensors writer: header text");
  *padded = (strlen(*text) + 7) / 8 * 8;
  return HM_OK;
}

static hm_status write_all(FILE *f, const char *path, const void *data, size_t bytes) {
  if (bytes > 0 && fwrite(data, 1, bytes, f) != bytes)
    HM_FAIL(HM_SYSTEM, "%s: write: %s", path, strerror(errno));
  return HM_OK;
}

static hm_status write_file(const hm_st_writer *w, FILE *f, const char *path, const char *text,
                            size_t padded) {
  uint64_t header_bytes = padded;
  HM_CHECK(write_all(f, path, &header_bytes, sizeof(header_bytes)));
  HM_CHECK(write_all(f, path, text, strlen(text)));
  for (size_t i = strlen(text); i < padded; i++) HM_CHECK(write_all(f, path, " ", 1));
  for (size_t i = 0; i < w->count; i++)
    HM_CHECK(write_all(f, path, w->entries[i].data, w->entries[i].nbytes));
  if (fflush(f) != 0 || fsync(fileno(f)) != 0) HM_FAIL(HM_SYSTEM, "%s: flush: %s", path, strerror(errno));
  return HM_OK;
}

hm_status hm_st_writer_save(const hm_st_writer *w, const char *path) {
  HM_CHECK_NOT_NULL(w);
  HM_CHECK_NOT_NULL(path);
  hm_status ret = HM_OK;
  char *text = NULL;
  size_t padded = 0;
  char tmp[4096];
  FILE *f = NULL;
  if (snprintf(tmp, sizeof(tmp), "%s.tmp.%ld", path, (long)getpid()) >= (int)sizeof(tmp))
    HM_FAIL(HM_INVALID_ARGUMENT, "%s: path too long", path);
  HM_CHECK(header_text(w, &text, &padded));
  f = fopen(tmp, "wb");
  if (f == NULL) HM_FAIL_GOTO(HM_SYSTEM, fail, "%s: %s", tmp, strerror(errno));
  HM_CHECK_GOTO(write_file(w, f, tmp, text, padded), fail);
  if (fclose(f) != 0) {
    f = NULL;
    HM_FAIL_GOTO(HM_SYSTEM, fail, "%s: close: %s", tmp, strerror(errno));
  }
  f = NULL;
  if (rename(tmp, path) != 0) HM_FAIL_GOTO(HM_SYSTEM, fail, "%s: rename: %s", path, strerror(errno));
  free(text);
  return HM_OK;
fail:
  if (f) fclose(f);
  unlink(tmp);
  free(text);
  return ret;
}
