/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Command-line options of the humming-moe binaries, described by a table so that the
 * parser, the usage text and the error messages come from one place. "--name value" and
 * "--name=value" are both accepted; a bad option or value is reported in err and the
 * binary exits 2.
 */
#ifndef HM_LAUNCH_OPTIONS_H
#define HM_LAUNCH_OPTIONS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef enum hm_opt_kind {
  HM_OPT_FLAG,   /* bool, no value */
  HM_OPT_INT,    /* int64_t within [lo, hi] */
  HM_OPT_DOUBLE, /* double within [lo, hi] */
  HM_OPT_STR,    /* char[HM_OPT_STR_LEN] */
  HM_OPT_LIST    /* hm_int_list, "1:8192:x2" style */
} hm_opt_kind;

#define HM_OPT_STR_LEN 256
#define HM_INT_LIST_MAX 512

typedef struct hm_opt {
  const char *name; /* with the dashes: "--iters" */
  hm_opt_kind kind;
  void *dst;
  double lo, hi;   /* bounds of numbers and list items */
  const char *arg; /* what the value is, for the usage text ("N", "LIST") */
  const char *help;
  bool *seen; /* set when the option was given, or NULL */
} hm_opt;

/* A list of positive sizes, from "1:8192:x2" (geometric), "16:256:+16" (arithmetic) or "1,8,64". */
typedef struct hm_int_list {
  int count;
  int64_t v[HM_INT_LIST_MAX];
} hm_int_list;

/*
 * Parses one list. Items are separated by commas; an item is N, LO:HI (doubling),
 * LO:HI:xF or LO:HI:+S. Returns false with a message in err on a malformed list, a
 * value outside [lo, hi] or more than HM_INT_LIST_MAX values.
 */
bool hm_int_list_parse(const char *text, int64_t lo, int64_t hi, hm_int_list *out, char *err, size_t err_len);
/* Writes a list back as "1,2,4" (truncated to len). */
void hm_int_list_format(const hm_int_list *list, char *buf, size_t len);

/* Parses "N" (lo = hi = N) or "LO:HI" with lo <= hi inside [min, max]; false with a message in err. */
bool hm_range_parse(const char *text, int64_t min, int64_t max, int64_t *lo, int64_t *hi, char *err,
                    size_t err_len);

/*
 * Parses argv[first..argc) against opts. Returns the number of arguments consumed
 * (argc - first) on success, -1 with a message in err on an unknown option, a missing
 * or malformed value, or a positional argument.
 */
int hm_opts_parse(const hm_opt *opts, int count, int argc, char **argv, int first, char *err, size_t err_len);
/* Prints one line per option: name, value kind, help and the current (default) value. */
void hm_opts_usage(FILE *out, const hm_opt *opts, int count);

#endif
