/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What the tests that run humming-moe-bench as a program share: its exit status, the
 * text it left in a file of the test's folder, and a number of a JSON row.
 */
#ifndef HM_TEST_BENCH_UTIL_H
#define HM_TEST_BENCH_UTIL_H

#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>

#include <jansson.h>

#include "hm_test.h"

/* Runs a shell command line; its exit status, or -1 if it did not exit. */
static inline int tb_system(const char *cmd) {
  int st = system(cmd);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* The first 64 KiB of dir/name, "" when it cannot be read (the buffer is reused). */
static inline const char *tb_file_text(const char *dir, const char *name) {
  static char buf[1 << 16];
  char path[512];
  snprintf(path, sizeof(path), "%s/%s", dir, name);
  FILE *f = fopen(path, "r");
  if (f == NULL) return "";
  size_t n = fread(buf, 1, sizeof(buf) - 1, f);
  buf[n] = '\0';
  fclose(f);
  return buf;
}

static inline double tb_num(json_t *row, const char *key) {
  json_t *v = json_object_get(row, key);
  if (!json_is_number(v)) fail_msg("row lacks a number for '%s'", key);
  return json_number_value(v);
}

#endif
