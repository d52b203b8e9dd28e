/* SPDX-License-Identifier: Apache-2.0 */
/* The logger: level and subsystem filters, prefix, file or callback sink. */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "log.h"
#include "params.h"

static const char *const level_names[] = {"NONE", "ERROR", "WARN", "INFO", "DEBUG"};
static const char *const subsys_names[] = {"INIT", "JIT", "CACHE", "COMM", "GEMM", "MOE", "TUNE", "BENCH"};

static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
  bool parsed;
  hm_log_level level;
  unsigned subsys_mask;
  FILE *file;
  hm_log_fn fn;
  void *user;
  int rank, device;
  char host[64];
} log_state = {.rank = -1, .device = -1};

static hm_log_level parse_level(const char *s) {
  for (int i = 0; i <= HM_LOG_DEBUG; i++)
    if (strcasecmp(s, level_names[i]) == 0) return (hm_log_level)i;
  return HM_LOG_WARN;
}

static unsigned subsys_bit(const char *name, size_t len) {
  if (len == 3 && strncasecmp(name, "ALL", 3) == 0) return HM_SUBSYS_ALL;
  for (size_t i = 0; i < sizeof(subsys_names) / sizeof(subsys_names[0]); i++)
    if (strlen(subsys_names[i]) == len && strncasecmp(name, subsys_names[i], len) == 0) return 1u << i;
  return 0;
}

/* "INIT,JIT" keeps those; "^COMM" keeps all but COMM. */
static unsigned parse_subsys(const char *s) {
  bool negate = s[0] == '^';
  if (negate) s++;
  unsigned mask = 0;
  while (*s) {
    size_t len = strcspn(s, ",");
    mask |= subsys_bit(s, len);
    s += len + (s[len] == ',');
  }
  return negate ? (HM_SUBSYS_ALL & ~mask) : mask;
}

static FILE *open_log_file(const char *pattern) {
  char path[512];
  size_t o = 0;
  for (const char *c = pattern; *c && o + 64 < sizeof(path); c++) {
    if (c[0] == '%' && c[1] == 'h') {
      o += (size_t)snprintf(path + o, sizeof(path) - o, "%s", log_state.host);
      c++;
    } else if (c[0] == '%' && c[1] == 'p') {
      o += (size_t)snprintf(path + o, sizeof(path) - o, "%d", (int)getpid());
      c++;
    } else {
      path[o++] = *c;
    }
  }
  path[o] = '\0';
  return fopen(path, "a");
}

/* Parameters are read before log_lock is taken: the lock order is params, then log. */
static void log_parse(void) {
  pthread_mutex_lock(&log_lock);
  bool parsed = log_state.parsed;
  pthread_mutex_unlock(&log_lock);
  if (parsed) return;
  hm_log_level level = parse_level(hm_param_log_level());
  unsigned mask = parse_subsys(hm_param_log_subsys());
  const char *file = hm_param_log_file();
  pthread_mutex_lock(&log_lock);
  if (!log_state.parsed) {
    log_state.level = level;
    log_state.subsys_mask = mask;
    gethostname(log_state.host, sizeof(log_state.host) - 1);
    if (file[0] != '\0') log_state.file = open_log_file(file);
    log_state.parsed = true;
  }
  pthread_mutex_unlock(&log_lock);
}

bool hm_log_enabled(hm_log_level level, unsigned subsys) {
  log_parse();
  pthread_mutex_lock(&log_lock);
  bool on = level != HM_LOG_NONE && level <= log_state.level && (subsys & log_state.subsys_mask);
  pthread_mutex_unlock(&log_lock);
  return on;
}

static const char *subsys_label(unsigned subsys) {
  for (size_t i = 0; i < sizeof(subsys_names) / sizeof(subsys_names[0]); i++)
    if (subsys == (1u << i)) return subsys_names[i];
  return "ALL";
}

void hm_log(hm_log_level level, unsigned subsys, const char *fmt, ...) {
  if (!hm_log_enabled(level, subsys)) return;
  char line[1536];
  pthread_mutex_lock(&log_lock);
  int n = snprintf(line, sizeof(line), "%s:%d [rank %d/dev %d] %s %s ", log_state.host, (int)getpid(),
                   log_state.rank, log_state.device, level_names[level], subsys_label(subsys));
  pthread_mutex_unlock(&log_lock);
  va_list ap;
  va_start(ap, fmt);
  if (n > 0 && (size_t)n < sizeof(line)) vsnprintf(line + n, sizeof(line) - (size_t)n, fmt, ap);
  va_end(ap);

  pthread_mutex_lock(&log_lock);
  if (log_state.fn) {
    log_state.fn(level, line, log_state.user);
  } else {
    FILE *out = log_state.file ? log_state.file : stderr;
    fprintf(out, "%s\n", line);
    fflush(out);
  }
  pthread_mutex_unlock(&log_lock);
}

void hm_log_set(hm_log_fn fn, void *user) {
  pthread_mutex_lock(&log_lock);
  log_state.fn = fn;
  log_state.user = user;
  pthread_mutex_unlock(&log_lock);
}

void hm_log_set_rank(int rank, int device) {
  pthread_mutex_lock(&log_lock);
  log_state.rank = rank;
  log_state.device = device;
  pthread_mutex_unlock(&log_lock);
}

void hm_log_reset(void) {
  pthread_mutex_lock(&log_lock);
  if (log_state.file) fclose(log_state.file);
  log_state.file = NULL;
  log_state.parsed = false;
  pthread_mutex_unlock(&log_lock);
}
