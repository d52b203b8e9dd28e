/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Result tables in the nccl-tests style: '#' header lines, a column-name line, one
 * fixed-width row per measurement and a '#' summary footer, printed as rows arrive.
 * The same rows are kept as JSON (jansson) and written to --json / --csv at the end.
 * Only a report created with print = true writes to its stream (rank 0).
 */
#ifndef HM_LAUNCH_REPORT_H
#define HM_LAUNCH_REPORT_H

#include <stdbool.h>
#include <stdio.h>

#include <jansson.h>

typedef enum hm_col_kind {
  HM_COL_INT,   /* integral number */
  HM_COL_REAL,  /* number with `precision` decimals */
  HM_COL_RATIO, /* number printed as "2.71x" */
  HM_COL_TEXT   /* left as given */
} hm_col_kind;

typedef struct hm_col {
  const char *name; /* column header and JSON key */
  int width;        /* printed width; 0 keeps the column out of the table (JSON/CSV only) */
  int precision;
  hm_col_kind kind;
} hm_col;

/* One cell: numbers in num (NaN prints "-", JSON null), text in text. */
typedef struct hm_cell {
  double num;
  const char *text;
} hm_cell;

#define HM_NUM(x) ((hm_cell){(double)(x), NULL})
#define HM_TEXT(s) ((hm_cell){0.0, (s)})
#define HM_NONE ((hm_cell){NAN, NULL})

typedef struct hm_report hm_report;

/* A report over cols (kept by pointer: a static table). NULL when out of memory. */
hm_report *hm_report_create(const char *title, const hm_col *cols, int count, FILE *out, bool print);
void hm_report_destroy(hm_report *r);
/* A "# ..." header line, also kept under "header" in the JSON. */
void hm_report_header(hm_report *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* A key of the JSON "config" object (stolen reference); not printed. */
void hm_report_config(hm_report *r, const char *key, json_t *value);
/* Prints the column names line; call once before the first row of a table. */
void hm_report_columns(hm_report *r);
/* Adds a row of count(cols) cells. */
void hm_report_row(hm_report *r, const hm_cell *cells);
/* A "# ..." footer line, kept under "summary". */
void hm_report_footer(hm_report *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Number of rows so far. */
int hm_report_rows(const hm_report *r);
/* Writes the whole report as JSON / the rows as CSV; false with errno set on failure. */
bool hm_report_write_json(const hm_report *r, const char *path);
bool hm_report_write_csv(const hm_report *r, const char *path);
/* The JSON document (borrowed), for a caller that merges several reports. */
json_t *hm_report_json(const hm_report *r);

#endif
