/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Logging to stderr (or HUMMING_LOG_FILE, or the host's callback), one line per call,
 * prefixed "host:pid [rank r/dev d] LEVEL SUBSYS". HUMMING_LOG picks the level,
 * HUMMING_LOG_SUBSYS the subsystems.
 */
#ifndef HM_LOG_H
#define HM_LOG_H

#include "humming.h"

enum hm_subsys {
  HM_SUBSYS_INIT = 1 << 0,
  HM_SUBSYS_JIT = 1 << 1,
  HM_SUBSYS_CACHE = 1 << 2,
  HM_SUBSYS_COMM = 1 << 3,
  HM_SUBSYS_GEMM = 1 << 4,
  HM_SUBSYS_MOE = 1 << 5,
  HM_SUBSYS_TUNE = 1 << 6,
  HM_SUBSYS_BENCH = 1 << 7,
  HM_SUBSYS_ALL = 0xff
};

void hm_log(hm_log_level level, unsigned subsys, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Whether a line of this level and subsystem would be written. */
bool hm_log_enabled(hm_log_level level, unsigned subsys);
/* Sets the rank and device shown in the prefix (-1 hides them). */
void hm_log_set_rank(int rank, int device);
/* Closes the log file and forgets parsed settings (hm_shutdown, tests). */
void hm_log_reset(void);

#define HM_ERROR(sub, ...) hm_log(HM_LOG_ERROR, HM_SUBSYS_##sub, __VA_ARGS__)
#define HM_WARN(sub, ...) hm_log(HM_LOG_WARN, HM_SUBSYS_##sub, __VA_ARGS__)
#define HM_INFO(sub, ...) hm_log(HM_LOG_INFO, HM_SUBSYS_##sub, __VA_ARGS__)
#define HM_DEBUG(sub, ...) hm_log(HM_LOG_DEBUG, HM_SUBSYS_##sub, __VA_ARGS__)

#endif
