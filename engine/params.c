/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Parameters are read once, validated against their bounds and cached. A value out
 * of bounds or not a number is refused with an error line and the default is used:
 * a typo in a variable must not change behaviour silently, nor stop a serving job.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "params.h"

enum param_type { PARAM_INT, PARAM_STR };

struct param {
  const char *name;
  const char *env;
  enum param_type type;
  int64_t int_default, lo, hi;
  const char *str_default;
  const char *help;
  bool cached;
  int64_t int_value;
  char *str_value;
};

static struct param params[] = {
#define HM_PARAM_INT(n, e, def, l, h, hp) {#n, e, PARAM_INT, def, l, h, NULL, hp, false, 0, NULL},
#define HM_PARAM_STR(n, e, def, hp) {#n, e, PARAM_STR, 0, 0, 0, def, hp, false, 0, NULL},
#include "params.def"
#undef HM_PARAM_INT
#undef HM_PARAM_STR
};

enum {
#define HM_PARAM_INT(n, e, def, l, h, hp) PARAM_ID_##n,
#define HM_PARAM_STR(n, e, def, hp) PARAM_ID_##n,
#include "params.def"
#undef HM_PARAM_INT
#undef HM_PARAM_STR
};

/* Recursive: loading a parameter may log, and the log reads its own parameters. */
static pthread_mutex_t params_lock = PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP;

/* The log reads its own parameters; logging about them would recurse. */
static bool param_is_log(const struct param *p) { return strncmp(p->name, "log_", 4) == 0; }

static void param_load_int(struct param *p) {
  const char *raw = getenv(p->env);
  p->int_value = p->int_default;
  if (raw == NULL || raw[0] == '\0') return;
  char *end = NULL;
  errno = 0;
  long long v = strtoll(raw, &end, 10);
  if (errno != 0 || *end != '\0' || v < p->lo || v > p->hi) {
    hm_log(HM_LOG_ERROR, HM_SUBSYS_INIT, "%s=%s is not an integer in [%lld, %lld]; using %lld",
           p->env, raw, (long long)p->lo, (long long)p->hi, (long long)p->int_default);
    return;
  }
  p->int_value = v;
  if (!param_is_log(p)) hm_log(HM_LOG_INFO, HM_SUBSYS_INIT, "%s set to %lld", p->env, v);
}

static void param_load_str(struct param *p) {
  const char *raw = getenv(p->env);
  bool set = raw != NULL && raw[0] != '\0';
  free(p->str_value);
  p->str_value = strdup(set ? raw : p->str_default);
  if (set && !param_is_log(p) && p->env[0] == 'H')
    hm_log(HM_LOG_INFO, HM_SUBSYS_INIT, "%s set to %s", p->env, raw);
}

static struct param *param_get(int id) {
  struct param *p = &params[id];
  pthread_mutex_lock(&params_lock);
  if (!p->cached) {
    if (p->type == PARAM_INT)
      param_load_int(p);
    else
      param_load_str(p);
    p->cached = true;
  }
  pthread_mutex_unlock(&params_lock);
  return p;
}

#define HM_PARAM_INT(n, e, def, l, h, hp)                                               \
  int64_t hm_param_##n(void) { return param_get(PARAM_ID_##n)->int_value; }
#define HM_PARAM_STR(n, e, def, hp)                                                     \
  const char *hm_param_##n(void) {                                                      \
    struct param *p = param_get(PARAM_ID_##n);                                          \
    return p->str_value ? p->str_value : p->str_default;                                \
  }
#include "params.def"
#undef HM_PARAM_INT
#undef HM_PARAM_STR

void hm_params_print(FILE *out) {
  fprintf(out, "%-26s %-5s %-14s %s\n", "variable", "type", "default", "meaning");
  for (size_t i = 0; i < sizeof(params) / sizeof(params[0]); i++) {
    const struct param *p = &params[i];
    char def[32];
    if (p->type == PARAM_INT)
      snprintf(def, sizeof(def), "%lld", (long long)p->int_default);
    else
      snprintf(def, sizeof(def), "\"%s\"", p->str_default);
    fprintf(out, "%-26s %-5s %-14s %s\n", p->env, p->type == PARAM_INT ? "int" : "str", def,
            p->help);
  }
}

void hm_params_reload(void) {
  pthread_mutex_lock(&params_lock);
  for (size_t i = 0; i < sizeof(params) / sizeof(params[0]); i++) {
    params[i].cached = false;
    free(params[i].str_value);
    params[i].str_value = NULL;
  }
  pthread_mutex_unlock(&params_lock);
}
