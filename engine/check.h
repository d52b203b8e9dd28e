/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Error recording and the check macros every fallible function uses.
 * The function that detects a failure records it once with HM_FAIL (message, file,
 * line); callers pass the status up with HM_CHECK, or jump to their cleanup label
 * with HM_CHECK_GOTO, which expects a local `hm_status ret`.
 */
#ifndef HM_CHECK_H
#define HM_CHECK_H

#include "humming.h"

/* Records a failure for hm_last_error() and the log; returns status. */
hm_status hm_error_set(hm_status status, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Clears the calling thread's last error. */
void hm_error_clear(void);

/*
 * Brackets checks a caller runs only to learn whether something is legal (the heuristic
 * trying thousands of candidate tunings). A failure inside is an answer: it still returns
 * its status and sets hm_last_error() for the code between, but is not logged, and the
 * thread's last error is what it was before on hm_error_quiet_end. They nest.
 */
void hm_error_quiet_begin(void);
void hm_error_quiet_end(void);

#define HM_FAIL(status, ...) return hm_error_set((status), __FILE__, __LINE__, __VA_ARGS__)

#define HM_FAIL_GOTO(status, label, ...)                                                \
  do {                                                                                  \
    ret = hm_error_set((status), __FILE__, __LINE__, __VA_ARGS__);                      \
    goto label;                                                                         \
  } while (0)

#define HM_CHECK(expr)                                                                  \
  do {                                                                                  \
    hm_status hm_check_status_ = (expr);                                                \
    if (hm_check_status_ != HM_OK) return hm_check_status_;                             \
  } while (0)

#define HM_CHECK_GOTO(expr, label)                                                      \
  do {                                                                                  \
    ret = (expr);                                                                       \
    if (ret != HM_OK) goto label;                                                       \
  } while (0)

/* Fails with HM_INVALID_ARGUMENT naming the argument when ptr is NULL. */
#define HM_CHECK_NOT_NULL(ptr)                                                          \
  do {                                                                                  \
    if ((ptr) == NULL) HM_FAIL(HM_INVALID_ARGUMENT, "%s must not be NULL", #ptr);       \
  } while (0)

#define HM_ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

#endif
