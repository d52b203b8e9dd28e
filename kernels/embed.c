/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Include resolution over embedded and caller-supplied headers. A plain scan of
 * #include lines is enough: generated sources and components include by name only,
 * and a header pulled in by a disabled #if branch costs nothing but a wider key.
 */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "kernels/embed.h"

static int set_index(const hm_header_set *set, const char *name, size_t len) {
  for (int i = 0; i < set->count; i++)
    if (strlen(set->names[i]) == len && strncmp(set->names[i], name, len) == 0) return i;
  return -1;
}

static const hm_embed_file *find_header(const char *name, size_t len, const hm_embed_file *extras,
                                        int extra_count) {
  for (int i = 0; i < extra_count; i++)
    if (strlen(extras[i].name) == len && strncmp(extras[i].name, name, len) == 0) return &extras[i];
  for (int i = 0; i < hm_embed_file_count; i++)
    if (strlen(hm_embed_files[i].name) == len && strncmp(hm_embed_files[i].name, name, len) == 0)
      return &hm_embed_files[i];
  return NULL;
}

static hm_status set_push(hm_header_set *set, const hm_embed_file *file) {
  if (set->count == set->capacity) {
    int cap = set->capacity ? set->capacity * 2 : 8;
    const char **names = realloc(set->names, (size_t)cap * sizeof(*names));
    if (names) set->names = names;
    const char **contents = realloc(set->contents, (size_t)cap * sizeof(*contents));
    if (contents) set->contents = contents;
    size_t *sizes = realloc(set->sizes, (size_t)cap * sizeof(*sizes));
    if (sizes) set->sizes = sizes;
    if (!names || !contents || !sizes) HM_FAIL(HM_OUT_OF_MEMORY, "header set of %d entries", cap);
    set->capacity = cap;
  }
  set->names[set->count] = file->name;
  set->contents[set->count] = file->data;
  set->sizes[set->count] = file->size;
  set->count++;
  return HM_OK;
}

/* Finds the next "#include X" at or after *cursor; returns the name and its length. */
static const char *next_include(const char **cursor, size_t *len) {
  const char *p = *cursor;
  while ((p = strchr(p, '#')) != NULL) {
    const char *q = p + 1;
    while (*q == ' ' || *q == '\t') q++;
    if (strncmp(q, "include", 7) != 0) {
      p = q;
      continue;
    }
    q += 7;
    while (*q == ' ' || *q == '\t') q++;
    char close = *q == '"' ? '"' : *q == '<' ? '>' : 0;
    if (close == 0) {
      p = q;
      continue;
    }
    const char *name = q + 1;
    const char *end = name;
    while (*end && *end != close && *end != '\n') end++;
    if (*end != close) {
      p = end;
      continue;
    }
    *cursor = end + 1;
    *len = (size_t)(end - name);
    return name;
  }
  *cursor = NULL;
  return NULL;
}

static hm_status check_extras(const hm_embed_file *extras, int extra_count) {
  for (int i = 0; i < extra_count; i++) {
    if (extras[i].name == NULL || extras[i].data == NULL)
      HM_FAIL(HM_INVALID_ARGUMENT, "extra header %d has no name or no contents", i);
    for (int j = 0; j < i; j++)
      if (strcmp(extras[i].name, extras[j].name) == 0)
        HM_FAIL(HM_INVALID_ARGUMENT, "extra header '%s' given twice", extras[i].name);
  }
  return HM_OK;
}

hm_status hm_header_set_resolve(const char *source, const hm_embed_file *extras, int extra_count,
                                hm_header_set *out) {
  HM_CHECK_NOT_NULL(source);
  HM_CHECK_NOT_NULL(out);
  memset(out, 0, sizeof(*out));
  HM_CHECK(check_extras(extras, extra_count));
  hm_status ret = HM_OK;
  /* Breadth-first: the set itself is the work list, scanned as it grows. */
  for (int scanned = -1; scanned < out->count; scanned++) {
    const char *cursor = scanned < 0 ? source : out->contents[scanned];
    size_t len = 0;
    const char *name;
    while ((name = next_include(&cursor, &len)) != NULL) {
      if (set_index(out, name, len) >= 0) continue;
      const hm_embed_file *file = find_header(name, len, extras, extra_count);
      if (file) HM_CHECK_GOTO(set_push(out, file), fail);
    }
  }
  return HM_OK;
fail:
  hm_header_set_free(out);
  return ret;
}

void hm_header_set_free(hm_header_set *set) {
  if (set == NULL) return;
  free(set->names);
  free(set->contents);
  free(set->sizes);
  memset(set, 0, sizeof(*set));
}
