/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The safetensors writer and reader: a round trip over every kind of entry (dtypes,
 * scalars, empty and sub-byte tensors, metadata), the byte layout the format fixes, a
 * header as the reference Python writer formats it, and the writer's own refusals.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "hm_test.h"
#include "safetensors.h"

static char *read_file(const char *path, size_t *size) {
  FILE *f = fopen(path, "rb");
  assert_non_null(f);
  fseek(f, 0, SEEK_END);
  *size = (size_t)ftell(f);
  fseek(f, 0, SEEK_SET);
  char *buf = malloc(*size);
  assert_int_equal(fread(buf, 1, *size, f), *size);
  fclose(f);
  return buf;
}

static void expect_tensor(const hm_safetensors *st, const char *name, hm_st_dtype dt, int ndim,
                          const int64_t *shape, const void *data, size_t nbytes) {
  const hm_st_tensor *t = hm_safetensors_find(st, name);
  assert_non_null(t);
  assert_string_equal(t->name, name);
  assert_int_equal(t->dtype, dt);
  assert_int_equal(t->ndim, ndim);
  for (int i = 0; i < ndim; i++) assert_int_equal(t->shape[i], shape[i]);
  assert_int_equal(t->nbytes, nbytes);
  if (nbytes) assert_memory_equal(t->data, data, nbytes);
}

static void round_trip_every_kind_of_entry(void **state) {
  (void)state;
  float a[6] = {1, -2, 3.5f, 0, 1e-30f, -7};
  uint16_t b[4] = {0x3f80, 0xbf80, 0x0000, 0x7f80};
  uint8_t c = 42, f4[4] = {0x21, 0x43, 0x65, 0x87};
  int64_t d[2] = {-1, 1LL << 40};
  char path[] = "/tmp/hm-st-XXXXXX";
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  close(fd);
  hm_st_writer *w;
  HM_ASSERT_OK(hm_st_writer_create(&w));
  HM_ASSERT_OK(hm_st_writer_add(w, "layer.a", HM_ST_F32, 2, (int64_t[]){2, 3}, a));
  HM_ASSERT_OK(hm_st_writer_add(w, "layer.b", HM_ST_BF16, 1, (int64_t[]){4}, b));
  HM_ASSERT_OK(hm_st_writer_add(w, "scalar", HM_ST_U8, 0, NULL, &c));
  HM_ASSERT_OK(hm_st_writer_add(w, "empty", HM_ST_I32, 2, (int64_t[]){0, 5}, NULL));
  HM_ASSERT_OK(hm_st_writer_add(w, "fp4", HM_ST_F4, 2, (int64_t[]){2, 4}, f4));
  HM_ASSERT_OK(hm_st_writer_add(w, "ids", HM_ST_I64, 1, (int64_t[]){2}, d));
  HM_ASSERT_OK(hm_st_writer_metadata(w, "format", "pt"));
  HM_ASSERT_OK(hm_st_writer_save(w, path));
  hm_st_writer_destroy(w);

  size_t size;
  char *buf = read_file(path, &size);
  uint64_t header;
  memcpy(&header, buf, 8);
  assert_int_equal(header % 8, 0);
  assert_int_equal(size, 8 + header + sizeof(a) + sizeof(b) + 1 + 4 + sizeof(d));
  hm_safetensors *from_file, *from_buf;
  HM_ASSERT_OK(hm_safetensors_open(path, &from_file));
  HM_ASSERT_OK(hm_safetensors_open_buffer(buf, size, "in-memory", &from_buf));
  hm_safetensors *both[2] = {from_file, from_buf};
  for (int i = 0; i < 2; i++) {
    hm_safetensors *st = both[i];
    assert_int_equal(hm_safetensors_count(st), 6);
    expect_tensor(st, "layer.a", HM_ST_F32, 2, (int64_t[]){2, 3}, a, sizeof(a));
    expect_tensor(st, "layer.b", HM_ST_BF16, 1, (int64_t[]){4}, b, sizeof(b));
    expect_tensor(st, "scalar", HM_ST_U8, 0, NULL, &c, 1);
    expect_tensor(st, "empty", HM_ST_I32, 2, (int64_t[]){0, 5}, NULL, 0);
    expect_tensor(st, "fp4", HM_ST_F4, 2, (int64_t[]){2, 4}, f4, 4);
    expect_tensor(st, "ids", HM_ST_I64, 1, (int64_t[]){2}, d, sizeof(d));
    assert_int_equal(hm_st_load_i64(hm_safetensors_find(st, "ids")->data, 1), 1LL << 40);
    assert_null(hm_safetensors_find(st, "missing"));
    assert_string_equal(hm_safetensors_metadata(st, "format"), "pt");
    assert_null(hm_safetensors_metadata(st, "other"));
    for (size_t j = 1; j < hm_safetensors_count(st); j++)
      assert_true(strcmp(hm_safetensors_at(st, j - 1)->name, hm_safetensors_at(st, j)->name) < 0);
  }
  assert_string_equal(hm_safetensors_path(from_file), path);
  hm_safetensors_close(from_file);
  hm_safetensors_close(from_buf);
  free(buf);
  unlink(path);
}

/* What safetensors' Python writer emits: spaces, metadata first, offsets in key order. */
static void reads_the_reference_writers_layout(void **state) {
  (void)state;
  const char *json =
      "{\"__metadata__\": {\"format\": \"pt\"}, \"a\": {\"dtype\": \"F16\", \"shape\": [2], "
      "\"data_offsets\": [0, 4]}, \"b\": {\"dtype\": \"U8\", \"shape\": [1, 1], \"data_offsets\": [4, 5], "
      "\"extra\": true}}";
  size_t len = strlen(json), padded = (len + 7) / 8 * 8, size = 8 + padded + 5;
  uint8_t *buf = malloc(size);
  uint64_t header = padded;
  memcpy(buf, &header, 8);
  memset(buf + 8, ' ', padded);
  memcpy(buf + 8, json, len);
  memcpy(buf + 8 + padded, "\x00\x3c\x00\x40\x07", 5);
  hm_safetensors *st;
  HM_ASSERT_OK(hm_safetensors_open_buffer(buf, size, "reference", &st));
  assert_int_equal(hm_st_load_u16(hm_safetensors_find(st, "a")->data, 1), 0x4000);
  assert_int_equal(hm_safetensors_find(st, "b")->data[0], 7);
  hm_safetensors_close(st);
  free(buf);
}

static void writer_refusals(void **state) {
  (void)state;
  hm_st_writer *w;
  uint8_t data[16] = {0};
  HM_ASSERT_OK(hm_st_writer_create(&w));
  HM_ASSERT_OK(hm_st_writer_add(w, "x", HM_ST_U8, 1, (int64_t[]){4}, data));
  assert_int_equal(hm_st_writer_add(w, "x", HM_ST_U8, 1, (int64_t[]){4}, data), HM_INVALID_ARGUMENT);
  assert_int_equal(hm_st_writer_add(w, "__metadata__", HM_ST_U8, 1, (int64_t[]){4}, data),
                   HM_INVALID_ARGUMENT);
  assert_int_equal(hm_st_writer_add(w, "neg", HM_ST_U8, 1, (int64_t[]){-4}, data), HM_INVALID_ARGUMENT);
  assert_int_equal(hm_st_writer_add(w, "half", HM_ST_F4, 1, (int64_t[]){3}, data), HM_INVALID_ARGUMENT);
  assert_int_equal(hm_st_writer_add(w, "nodata", HM_ST_U8, 1, (int64_t[]){4}, NULL), HM_INVALID_ARGUMENT);
  assert_int_equal(hm_st_writer_add(w, "deep", HM_ST_U8, 9, (int64_t[]){1, 1, 1, 1, 1, 1, 1, 1, 1}, data),
                   HM_INVALID_ARGUMENT);
  assert_int_equal(hm_st_writer_save(w, "/nonexistent-dir/x.safetensors"), HM_SYSTEM);
  assert_non_null(strstr(hm_last_error(), "/nonexistent-dir/x.safetensors"));
  hm_st_writer_destroy(w);
  hm_st_writer_destroy(NULL);
  hm_safetensors_close(NULL);
}

static void missing_file_is_named(void **state) {
  (void)state;
  hm_safetensors *st = (hm_safetensors *)&st;
  assert_int_not_equal(hm_safetensors_open("/tmp/hm-no-such-file.safetensors", &st), HM_OK);
  assert_null(st);
  assert_non_null(strstr(hm_last_error(), "/tmp/hm-no-such-file.safetensors"));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(round_trip_every_kind_of_entry),
      cmocka_unit_test(reads_the_reference_writers_layout),
      cmocka_unit_test(writer_refusals),
      cmocka_unit_test(missing_file_is_named),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
