/* SPDX-License-Identifier: Apache-2.0 */
/* The option table parser and the size-list syntax shared by the humming-moe binaries. */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "common/options.h"

static bool failf(char *err, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail_arg(char *err, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static bool failf(char *err, size_t len, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, len, fmt, ap);
  va_end(ap);
  return false;
}

/* The same for hm_opts_parse, whose failure value is -1. */
static int fail_arg(char *err, size_t len, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, len, fmt, ap);
  va_end(ap);
  return -1;
}

/* Whole-string integer: "12" yes, "12x" and "" no. */
static bool parse_i64(const char *s, int64_t *out) {
  if (s == NULL || *s == '\0') return false;
  char *end = NULL;
  errno = 0;
  long long v = strtoll(s, &end, 10);
  if (errno != 0 || *end != '\0') return false;
  *out = v;
  return true;
}

static bool parse_f64(const char *s, double *out) {
  if (s == NULL || *s == '\0') return false;
  char *end = NULL;
  errno = 0;
  double v = strtod(s, &end);
  if (errno != 0 || *end != '\0' || !isfinite(v)) return false;
  *out = v;
  return true;
}

static bool list_push(hm_int_list *l, int64_t v, int64_t lo, int64_t hi, char *err, size_t len) {
  if (v < lo || v > hi)
    return failf(err, len, "%lld is outside [%lld, %lld]", (long long)v, (long long)lo, (long long)hi);
  if (l->count == HM_INT_LIST_MAX) return failf(err, len, "more than %d values", HM_INT_LIST_MAX);
  l->v[l->count++] = v;
  return true;
}

/* LO:HI[:xF | :+S]; a step that does not grow would loop forever, so it is refused. */
static bool parse_range(char *item, int64_t lo, int64_t hi, hm_int_list *l, char *err, size_t len) {
  char *save = NULL;
  char *first = strtok_r(item, ":", &save);
  char *last = strtok_r(NULL, ":", &save);
  char *step = strtok_r(NULL, ":", &save);
  int64_t a, b, s = 2;
  bool mult = true;
  if (!parse_i64(first, &a) || !parse_i64(last, &b) || strtok_r(NULL, ":", &save) != NULL)
    return failf(err, len, "expected LO:HI[:xF|:+S]");
  if (step != NULL) {
    mult = step[0] == 'x' || step[0] == '*';
    if ((step[0] != '+' && !mult) || !parse_i64(step + 1, &s))
      return failf(err, len, "step '%s' must be xF (multiply) or +S (add)", step);
  }
  if (a > b) return failf(err, len, "range %lld:%lld runs backwards", (long long)a, (long long)b);
  if ((mult && (s < 2 || a < 1)) || (!mult && s < 1))
    return failf(err, len, "step %s%lld does not grow from %lld", mult ? "x" : "+", (long long)s,
                 (long long)a);
  for (int64_t v = a; v <= b; v = mult ? v * s : v + s)
    if (!list_push(l, v, lo, hi, err, len)) return false;
  return true;
}

bool hm_int_list_parse(const char *text, int64_t lo, int64_t hi, hm_int_list *out, char *err,
                       size_t err_len) {
  out->count = 0;
  if (text == NULL || *text == '\0') return failf(err, err_len, "empty list");
  char *copy = strdup(text);
  if (copy == NULL) return failf(err, err_len, "out of memory");
  bool ok = true;
  char *save = NULL;
  for (char *item = strtok_r(copy, ",", &save); ok && item != NULL; item = strtok_r(NULL, ",", &save)) {
    int64_t v;
    if (strchr(item, ':') != NULL)
      ok = parse_range(item, lo, hi, out, err, err_len);
    else if (parse_i64(item, &v))
      ok = list_push(out, v, lo, hi, err, err_len);
    else
      ok = failf(err, err_len, "'%s' is not a number or a LO:HI[:xF|:+S] range", item);
  }
  free(copy);
  if (ok && out->count == 0) return failf(err, err_len, "empty list");
  return ok;
}

bool hm_range_parse(const char *text, int64_t min, int64_t max, int64_t *lo, int64_t *hi, char *err,
                    size_t err_len) {
  char first[32];
  const char *colon = text ? strchr(text, ':') : NULL;
  size_t n = colon ? (size_t)(colon - text) : (text ? strlen(text) : 0);
  if (text == NULL || n == 0 || n >= sizeof(first)) return failf(err, err_len, "expected N or LO:HI");
  memcpy(first, text, n);
  first[n] = '\0';
  if (!parse_i64(first, lo)) return failf(err, err_len, "'%s' is not a number", first);
  *hi = *lo;
  if (colon && !parse_i64(colon + 1, hi)) return failf(err, err_len, "'%s' is not a number", colon + 1);
  if (*lo > *hi) return failf(err, err_len, "range %s runs backwards", text);
  if (*lo < min || *hi > max)
    return failf(err, err_len, "%s is outside [%lld, %lld]", text, (long long)min, (long long)max);
  return true;
}

void hm_int_list_format(const hm_int_list *list, char *buf, size_t len) {
  if (len == 0) return;
  buf[0] = '\0';
  size_t used = 0;
  for (int i = 0; i < list->count && used < len; i++)
    used += (size_t)snprintf(buf + used, len - used, "%s%lld", i ? "," : "", (long long)list->v[i]);
}

static const hm_opt *find_opt(const hm_opt *opts, int count, const char *name, size_t name_len) {
  for (int i = 0; i < count; i++)
    if (strlen(opts[i].name) == name_len && strncmp(opts[i].name, name, name_len) == 0) return &opts[i];
  return NULL;
}

static bool set_value(const hm_opt *o, const char *value, char *err, size_t len) {
  char why[160];
  int64_t i;
  double d;
  switch (o->kind) {
    case HM_OPT_FLAG: *(bool *)o->dst = true; return true;
    case HM_OPT_INT:
      if (!parse_i64(value, &i) || i < o->lo || i > o->hi)
        return failf(err, len, "%s: '%s' is not an integer in [%.0f, %.0f]", o->name, value, o->lo, o->hi);
      *(int64_t *)o->dst = i;
      return true;
    case HM_OPT_DOUBLE:
      if (!parse_f64(value, &d) || d < o->lo || d > o->hi)
        return failf(err, len, "%s: '%s' is not a number in [%g, %g]", o->name, value, o->lo, o->hi);
      *(double *)o->dst = d;
      return true;
    case HM_OPT_STR:
      if (strlen(value) >= HM_OPT_STR_LEN) return failf(err, len, "%s: value too long", o->name);
      strcpy((char *)o->dst, value);
      return true;
    case HM_OPT_LIST:
      if (!hm_int_list_parse(value, (int64_t)o->lo, (int64_t)o->hi, o->dst, why, sizeof(why)))
        return failf(err, len, "%s %s: %s", o->name, value, why);
      return true;
  }
  return failf(err, len, "%s: bad option table entry", o->name);
}

int hm_opts_parse(const hm_opt *opts, int count, int argc, char **argv, int first, char *err,
                  size_t err_len) {
  for (int i = first; i < argc; i++) {
    const char *arg = argv[i];
    if (strncmp(arg, "--", 2) != 0) return fail_arg(err, err_len, "unexpected argument '%s'", arg);
    const char *eq = strchr(arg, '=');
    size_t name_len = eq ? (size_t)(eq - arg) : strlen(arg);
    const hm_opt *o = find_opt(opts, count, arg, name_len);
    if (o == NULL) return fail_arg(err, err_len, "unknown option '%.*s' (see --help)", (int)name_len, arg);
    const char *value = eq ? eq + 1 : NULL;
    if (o->kind == HM_OPT_FLAG && value != NULL) return fail_arg(err, err_len, "%s takes no value", o->name);
    if (o->kind != HM_OPT_FLAG && value == NULL) {
      if (i + 1 >= argc) return fail_arg(err, err_len, "%s needs a value (%s)", o->name, o->arg);
      value = argv[++i];
    }
    if (!set_value(o, value, err, err_len)) return -1;
    if (o->seen) *o->seen = true;
  }
  return argc - first;
}

static void format_default(const hm_opt *o, char *buf, size_t len) {
  buf[0] = '\0';
  switch (o->kind) {
    case HM_OPT_FLAG: break;
    case HM_OPT_INT: snprintf(buf, len, "%lld", (long long)*(int64_t *)o->dst); break;
    case HM_OPT_DOUBLE: snprintf(buf, len, "%g", *(double *)o->dst); break;
    case HM_OPT_STR: snprintf(buf, len, "%s", (const char *)o->dst); break;
    case HM_OPT_LIST: hm_int_list_format(o->dst, buf, len); break;
  }
}

void hm_opts_usage(FILE *out, const hm_opt *opts, int count) {
  for (int i = 0; i < count; i++) {
    char name[48], def[96];
    snprintf(name, sizeof(name), "%s%s%s", opts[i].name, opts[i].arg ? " " : "",
             opts[i].arg ? opts[i].arg : "");
    format_default(&opts[i], def, sizeof(def));
    fprintf(out, "  %-24s %s%s%s%s\n", name, opts[i].help, def[0] ? " [" : "", def, def[0] ? "]" : "");
  }
}
