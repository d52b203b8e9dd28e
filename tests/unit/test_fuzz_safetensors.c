/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The safetensors reader against hostile input: a catalogue of headers that lie
 * (truncations, bad and huge offsets, overflowing shapes, overlaps, holes, duplicate
 * keys), every truncation of a valid file, and thousands of random mutations of one.
 * Buffers are allocated to their exact size, so under HM_SANITIZE=ON AddressSanitizer
 * turns any read outside them into a failure; the test itself checks that every
 * accepted tensor lies inside the buffer and reads all of its bytes.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "hm_test.h"
#include "safetensors.h"

/* A file image: the 8-byte length of json, json, then data_len bytes. */
static uint8_t *image(const char *json, uint64_t header_len, size_t data_len, size_t *size) {
  size_t len = strlen(json);
  *size = 8 + len + data_len;
  uint8_t *buf = malloc(*size);
  memcpy(buf, &header_len, 8);
  memcpy(buf + 8, json, len);
  for (size_t i = 0; i < data_len; i++) buf[8 + len + i] = (uint8_t)i;
  return buf;
}

/* Parses buf; an accepted file must only point inside it. Returns the status. */
static hm_status parse(const uint8_t *buf, size_t size) {
  uint8_t *exact = malloc(size ? size : 1);
  memcpy(exact, buf, size);
  hm_safetensors *st = NULL;
  hm_status status = hm_safetensors_open_buffer(exact, size, "fuzz.safetensors", &st);
  if (status == HM_OK) {
    unsigned sum = 0;
    for (size_t i = 0; i < hm_safetensors_count(st); i++) {
      const hm_st_tensor *t = hm_safetensors_at(st, i);
      assert_true(t->data >= exact + 8 && t->data + t->nbytes <= exact + size);
      for (uint64_t j = 0; j < t->nbytes; j++) sum += t->data[j];
      assert_ptr_equal(hm_safetensors_find(st, t->name), t);
    }
    (void)sum;
  } else {
    assert_int_equal(status, HM_CORRUPT);
    assert_null(st);
    assert_non_null(strstr(hm_last_error(), "fuzz.safetensors"));
  }
  hm_safetensors_close(st);
  free(exact);
  return status;
}

struct bad_case {
  const char *json;
  size_t data_len;
  const char *message; /* expected in hm_last_error() */
};

#define T(name, body) "\"" name "\": {" body "}"
static const struct bad_case bad_cases[] = {
    {"[1, 2]", 0, "does not start with '{'"},
    {"{\"a\": ", 0, "not valid JSON"},
    {"{\"a\": 5}", 0, "'a': entry is not an object"},
    {"{" T("a", "\"shape\": [1], \"data_offsets\": [0, 1]") "}", 1, "'a': no \"dtype\""},
    {"{" T("a", "\"dtype\": \"F128\", \"shape\": [1], \"data_offsets\": [0, 1]") "}", 1,
     "unknown dtype 'F128'"},
    {"{" T("a", "\"dtype\": \"U8\", \"shape\": 3, \"data_offsets\": [0, 1]") "}", 1,
     "\"shape\" is not an array"},
    {"{" T("a", "\"dtype\": \"U8\", \"shape\": [-1], \"data_offsets\": [0, 1]") "}", 1, "shape[0]"},
    {"{" T("a", "\"dtype\": \"U8\", \"shape\": [1.5], \"data_offsets\": [0, 1]") "}", 1, "shape[0]"},
    {"{" T("a", "\"dtype\": \"U8\", \"shape\": [1,1,1,1,1,1,1,1,1], \"data_offsets\": [0, 1]") "}", 1,
     "9 dimensions"},
    {"{" T("a", "\"dtype\": \"F32\", \"shape\": [4294967296, 4294967296, 16], \"data_offsets\": [0, 4]") "}",
     4, "overflows"},
    {"{" T("a", "\"dtype\": \"F32\", \"shape\": [4611686018427387904], \"data_offsets\": [0, 0]") "}", 0,
     "overflows"},
    {"{" T("a", "\"dtype\": \"F4\", \"shape\": [3], \"data_offsets\": [0, 2]") "}", 2,
     "whole number of bytes"},
    {"{" T("a", "\"dtype\": \"U8\", \"shape\": [1], \"data_offsets\": [0]") "}", 1, "not [begin, end]"},
    {"{" T("a", "\"dtype\": \"U8\", \"shape\": [4], \"data_offsets\": [8, 4]") "}", 8, "0 <= begin <= end"},
    {"{" T("a", "\"dtype\": \"U8\", \"shape\": [4], \"data_offsets\": [-4, 0]") "}", 4, "0 <= begin <= end"},
    {"{" T("a", "\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 4]") "}", 4, "needs 8 bytes"},
    {"{" T("a", "\"dtype\": \"U8\", \"shape\": [8], \"data_offsets\": [0, 8]") "}", 4,
     "past the data region"},
    {"{" T("a",
           "\"dtype\": \"U8\", \"shape\": [4], \"data_offsets\": [9223372036854775800, "
           "9223372036854775804]") "}",
     4, "past the data region"},
    {"{" T("a", "\"dtype\": \"U8\", \"shape\": [1], \"data_offsets\": [0, 99999999999999999999]") "}", 1,
     "not valid JSON"},
    {"{" T("a", "\"dtype\": \"U8\", \"shape\": [8], \"data_offsets\": [0, 8]") ", " T(
         "b", "\"dtype\": \"U8\", \"shape\": [8], \"data_offsets\": [4, 12]") "}",
     12, "overlaps"},
    {"{" T("a", "\"dtype\": \"U8\", \"shape\": [4], \"data_offsets\": [0, 4]") ", " T(
         "b", "\"dtype\": \"U8\", \"shape\": [4], \"data_offsets\": [8, 12]") "}",
     12, "leaves a hole"},
    {"{" T("a", "\"dtype\": \"U8\", \"shape\": [4], \"data_offsets\": [0, 4]") "}", 8, "cover 4 bytes"},
    {"{" T("a", "\"dtype\": \"U8\", \"shape\": [4], \"data_offsets\": [0, 4]") ", " T(
         "a", "\"dtype\": \"U8\", \"shape\": [4], \"data_offsets\": [4, 8]") "}",
     8, "not valid JSON"},
    {"{\"__metadata__\": [1]}", 0, "\"__metadata__\" is not an object"},
    {"{\"__metadata__\": {\"k\": 1}}", 0, "value of 'k' is not a string"},
};
#undef T

static void lying_headers(void **state) {
  (void)state;
  for (size_t i = 0; i < sizeof(bad_cases) / sizeof(bad_cases[0]); i++) {
    size_t size;
    uint8_t *buf = image(bad_cases[i].json, strlen(bad_cases[i].json), bad_cases[i].data_len, &size);
    if (parse(buf, size) != HM_CORRUPT) fail_msg("case %zu accepted: %s", i, bad_cases[i].json);
    if (strstr(hm_last_error(), bad_cases[i].message) == NULL)
      fail_msg("case %zu: '%s' not in '%s'", i, bad_cases[i].message, hm_last_error());
    free(buf);
  }
}

static void lying_lengths(void **state) {
  (void)state;
  const char *json = "{\"a\": {\"dtype\": \"U8\", \"shape\": [4], \"data_offsets\": [0, 4]}}";
  const uint64_t lengths[] = {0, 1, strlen(json) + 5, 1ull << 32, 1ull << 63, UINT64_MAX};
  for (size_t i = 0; i < sizeof(lengths) / sizeof(lengths[0]); i++) {
    size_t size;
    uint8_t *buf = image(json, lengths[i], 4, &size);
    assert_int_equal(parse(buf, size), HM_CORRUPT);
    free(buf);
  }
  uint8_t tiny[5] = {1, 0, 0, 0, 0};
  assert_int_equal(parse(tiny, sizeof(tiny)), HM_CORRUPT);
  assert_non_null(strstr(hm_last_error(), "too short"));
}

/* A valid file of several tensors, written by the library's writer. */
static uint8_t *valid_file(size_t *size) {
  char path[] = "/tmp/hm-fuzz-XXXXXX";
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  close(fd);
  hm_st_writer *w;
  uint8_t data[64];
  for (int i = 0; i < 64; i++) data[i] = (uint8_t)(i * 7);
  HM_ASSERT_OK(hm_st_writer_create(&w));
  HM_ASSERT_OK(hm_st_writer_add(w, "w.qweight", HM_ST_I32, 2, (int64_t[]){2, 4}, data));
  HM_ASSERT_OK(hm_st_writer_add(w, "w.scales", HM_ST_F16, 2, (int64_t[]){1, 4}, data));
  HM_ASSERT_OK(hm_st_writer_add(w, "w.g_idx", HM_ST_I32, 1, (int64_t[]){3}, data));
  HM_ASSERT_OK(hm_st_writer_add(w, "w.blocks", HM_ST_U8, 3, (int64_t[]){1, 2, 5}, data));
  HM_ASSERT_OK(hm_st_writer_metadata(w, "format", "pt"));
  HM_ASSERT_OK(hm_st_writer_save(w, path));
  hm_st_writer_destroy(w);
  FILE *f = fopen(path, "rb");
  uint8_t *buf = malloc(4096);
  *size = fread(buf, 1, 4096, f);
  fclose(f);
  unlink(path);
  HM_ASSERT_OK(parse(buf, *size));
  return buf;
}

static void every_truncation(void **state) {
  (void)state;
  size_t size;
  uint8_t *buf = valid_file(&size);
  for (size_t len = 0; len < size; len++) assert_int_equal(parse(buf, len), HM_CORRUPT);
  free(buf);
}

/* Bit flips, digit and token swaps in the header, length edits, truncations. */
static void mutate(hm_rng *rng, uint8_t *buf, size_t *size) {
  uint64_t header;
  memcpy(&header, buf, 8);
  size_t header_end = header < *size - 8 ? 8 + (size_t)header : *size;
  static const char tokens[] = "0123456789-[]{},:\"eE.";
  switch (hm_rng_next(rng) % 5) {
    case 0: buf[hm_rng_next(rng) % *size] ^= (uint8_t)(1u << (hm_rng_next(rng) % 8)); break;
    case 1:
      buf[8 + hm_rng_next(rng) % (header_end - 8)] = (uint8_t)tokens[hm_rng_next(rng) % (sizeof(tokens) - 1)];
      break;
    case 2: {
      size_t at = 8 + hm_rng_next(rng) % (header_end - 8);
      if (buf[at] >= '0' && buf[at] <= '9') buf[at] = (uint8_t)('0' + hm_rng_next(rng) % 10);
      break;
    }
    case 3: {
      uint64_t len = header + (hm_rng_next(rng) % 17) - 8;
      memcpy(buf, &len, 8);
      break;
    }
    default: *size = 1 + hm_rng_next(rng) % *size; break;
  }
}

static void random_mutations(void **state) {
  (void)state;
  size_t size;
  uint8_t *valid = valid_file(&size), *buf = malloc(size);
  hm_rng rng;
  hm_rng_seed(&rng, 20240501);
  int accepted = 0;
  for (int iter = 0; iter < 20000; iter++) {
    size_t len = size;
    memcpy(buf, valid, size);
    int edits = 1 + (int)(hm_rng_next(&rng) % 3);
    for (int e = 0; e < edits && len > 8; e++) mutate(&rng, buf, &len);
    accepted += parse(buf, len) == HM_OK;
  }
  /* Flips in tensor data leave the file valid: both outcomes must have been seen. */
  assert_true(accepted > 0 && accepted < 20000);
  free(valid);
  free(buf);
}

/* The mmap path: a file cut short on disk is refused by name. */
static void truncated_file_on_disk(void **state) {
  (void)state;
  size_t size;
  uint8_t *buf = valid_file(&size);
  char path[] = "/tmp/hm-fuzz-XXXXXX";
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  assert_int_equal(write(fd, buf, size - 3), (ssize_t)(size - 3));
  close(fd);
  hm_safetensors *st;
  assert_int_equal(hm_safetensors_open(path, &st), HM_CORRUPT);
  assert_non_null(strstr(hm_last_error(), path));
  assert_non_null(strstr(hm_last_error(), "data region"));
  unlink(path);
  free(buf);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(lying_headers),          cmocka_unit_test(lying_lengths),
      cmocka_unit_test(every_truncation),       cmocka_unit_test(random_mutations),
      cmocka_unit_test(truncated_file_on_disk),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
