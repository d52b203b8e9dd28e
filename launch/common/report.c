/* SPDX-License-Identifier: Apache-2.0 */
/* Table printing and the JSON/CSV writers of hm_report. */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "common/report.h"

struct hm_report {
  const hm_col *cols;
  int count;
  FILE *out;
  bool print;
  json_t *doc;     /* {"title", "header": [], "config": {}, "rows": [], "summary": []} */
  json_t *rows;    /* borrowed from doc */
  json_t *header;  /* borrowed from doc */
  json_t *summary; /* borrowed from doc */
  json_t *config;  /* borrowed from doc */
};

hm_report *hm_report_create(const char *title, const hm_col *cols, int count, FILE *out, bool print) {
  hm_report *r = calloc(1, sizeof(*r));
  if (r == NULL) return NULL;
  r->cols = cols;
  r->count = count;
  r->out = out;
  r->print = print;
  r->doc = json_object();
  r->rows = json_array();
  r->header = json_array();
  r->summary = json_array();
  r->config = json_object();
  if (r->doc == NULL || r->rows == NULL || r->header == NULL || r->summary == NULL || r->config == NULL) {
    json_decref(r->rows), json_decref(r->header), json_decref(r->summary), json_decref(r->config);
    json_decref(r->doc);
    free(r);
    return NULL;
  }
  json_object_set_new(r->doc, "title", json_string(title));
  json_object_set_new(r->doc, "header", r->header);
  json_object_set_new(r->doc, "config", r->config);
  json_object_set_new(r->doc, "rows", r->rows);
  json_object_set_new(r->doc, "summary", r->summary);
  return r;
}

void hm_report_destroy(hm_report *r) {
  if (r == NULL) return;
  json_decref(r->doc);
  free(r);
}

static void add_line(hm_report *r, json_t *list, const char *fmt, va_list ap) {
  char line[1024];
  vsnprintf(line, sizeof(line), fmt, ap);
  json_array_append_new(list, json_string(line));
  if (r->print) fprintf(r->out, "# %s\n", line);
}

void hm_report_header(hm_report *r, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  add_line(r, r->header, fmt, ap);
  va_end(ap);
}

void hm_report_footer(hm_report *r, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  add_line(r, r->summary, fmt, ap);
  va_end(ap);
  if (r->print) fflush(r->out);
}

void hm_report_config(hm_report *r, const char *key, json_t *value) {
  json_object_set_new(r->config, key, value);
}

/* The last printed column: a text column there is not padded, so lines carry no trailing blanks. */
static int last_printed(const hm_report *r) {
  int last = -1;
  for (int i = 0; i < r->count; i++)
    if (r->cols[i].width > 0) last = i;
  return last;
}

/* The first column takes the "#" of the header line out of its own width. */
void hm_report_columns(hm_report *r) {
  if (!r->print) return;
  fputc('#', r->out);
  bool first = true;
  int last = last_printed(r);
  for (int i = 0; i < r->count; i++) {
    const hm_col *c = &r->cols[i];
    if (c->width == 0) continue;
    int w = first ? c->width - 1 : c->width;
    if (c->kind == HM_COL_TEXT)
      fprintf(r->out, "  %-*s", i == last ? 0 : w, c->name);
    else
      fprintf(r->out, "%s%*s", first ? "" : "  ", w, c->name);
    first = false;
  }
  fputc('\n', r->out);
}

static void format_cell(const hm_col *c, hm_cell v, char *buf, size_t len) {
  if (c->kind == HM_COL_TEXT) {
    snprintf(buf, len, "%s", v.text ? v.text : "-");
    return;
  }
  if (!isfinite(v.num)) {
    snprintf(buf, len, "-");
    return;
  }
  if (c->kind == HM_COL_INT)
    snprintf(buf, len, "%.0f", v.num);
  else if (c->kind == HM_COL_RATIO)
    snprintf(buf, len, "%.*fx", c->precision, v.num);
  else
    snprintf(buf, len, "%.*f", c->precision, v.num);
}

static json_t *cell_json(const hm_col *c, hm_cell v) {
  if (c->kind == HM_COL_TEXT) return v.text ? json_string(v.text) : json_null();
  if (!isfinite(v.num)) return json_null();
  if (c->kind == HM_COL_INT) return json_integer((json_int_t)llround(v.num));
  return json_real(v.num);
}

static void print_row(hm_report *r, const hm_cell *cells) {
  bool first = true;
  int last = last_printed(r);
  for (int i = 0; i < r->count; i++) {
    const hm_col *c = &r->cols[i];
    if (c->width == 0) continue;
    char buf[128];
    format_cell(c, cells[i], buf, sizeof(buf));
    if (c->kind == HM_COL_TEXT)
      fprintf(r->out, "  %-*s", i == last ? 0 : c->width, buf);
    else
      fprintf(r->out, "%s%*s", first ? "" : "  ", c->width, buf);
    first = false;
  }
  fputc('\n', r->out);
  fflush(r->out);
}

void hm_report_row(hm_report *r, const hm_cell *cells) {
  json_t *row = json_object();
  for (int i = 0; i < r->count && row != NULL; i++)
    json_object_set_new(row, r->cols[i].name, cell_json(&r->cols[i], cells[i]));
  json_array_append_new(r->rows, row);
  if (r->print) print_row(r, cells);
}

int hm_report_rows(const hm_report *r) {
  return (int)json_array_size(r->rows);
}

json_t *hm_report_json(const hm_report *r) {
  return r->doc;
}

bool hm_report_write_json(const hm_report *r, const char *path) {
  return json_dump_file(r->doc, path, JSON_INDENT(1) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(6)) == 0;
}

/* Text cells are quoted so a comma inside a kernel name cannot shift the columns. */
static void csv_value(FILE *f, const json_t *v) {
  if (json_is_string(v)) {
    fputc('"', f);
    for (const char *s = json_string_value(v); *s; s++) {
      if (*s == '"') fputc('"', f);
      fputc(*s, f);
    }
    fputc('"', f);
  } else if (json_is_integer(v)) {
    fprintf(f, "%lld", (long long)json_integer_value(v));
  } else if (json_is_real(v)) {
    fprintf(f, "%.6g", json_real_value(v));
  }
}

bool hm_report_write_csv(const hm_report *r, const char *path) {
  FILE *f = fopen(path, "w");
  if (f == NULL) return false;
  for (int i = 0; i < r->count; i++) fprintf(f, "%s%s", i ? "," : "", r->cols[i].name);
  fputc('\n', f);
  size_t idx;
  json_t *row;
  json_array_foreach(r->rows, idx, row) {
    for (int i = 0; i < r->count; i++) {
      if (i) fputc(',', f);
      csv_value(f, json_object_get(row, r->cols[i].name));
    }
    fputc('\n', f);
  }
  int saved = errno;
  bool ok = !ferror(f);
  if (fclose(f) != 0) ok = false;
  if (!ok && errno == 0) errno = saved;
  return ok;
}
