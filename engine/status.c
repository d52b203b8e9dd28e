/* SPDX-License-Identifier: Apache-2.0 */
/* Status strings, the per-thread last error, and the library version. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "log.h"

#define HM_STR_(x) #x
#define HM_XSTR_(x) HM_STR_(x)

static _Thread_local char last_error[1024];
static _Thread_local char quiet_saved[1024];
static _Thread_local int quiet_depth;

const char *hm_get_version(void) {
  return HM_XSTR_(HM_VERSION_MAJOR) "." HM_XSTR_(HM_VERSION_MINOR) "." HM_XSTR_(HM_VERSION_PATCH);
}

const char *hm_status_str(hm_status status) {
  static const char *const text[] = {
#define HM_STATUS_TEXT_(name, str) str,
      HM_STATUS_TABLE(HM_STATUS_TEXT_)
#undef HM_STATUS_TEXT_
  };
  if ((unsigned)status >= HM_STATUS_COUNT) return "unknown status";
  return text[status];
}

const char *hm_last_error(void) { return last_error; }

void hm_error_clear(void) { last_error[0] = '\0'; }

void hm_error_quiet_begin(void) {
  if (quiet_depth++ == 0) memcpy(quiet_saved, last_error, sizeof(last_error));
}

void hm_error_quiet_end(void) {
  if (quiet_depth > 0 && --quiet_depth == 0) memcpy(last_error, quiet_saved, sizeof(last_error));
}

hm_status hm_error_set(hm_status status, const char *file, int line, const char *fmt, ...) {
  char msg[768];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  const char *base = strrchr(file, '/');
  snprintf(last_error, sizeof(last_error), "%s: %s (%s:%d)", hm_status_str(status), msg,
           base ? base + 1 : file, line);
  if (quiet_depth == 0) hm_log(HM_LOG_DEBUG, HM_SUBSYS_ALL, "%s", last_error);
  return status;
}
