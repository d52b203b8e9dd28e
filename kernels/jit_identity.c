/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The library's identity in cache keys. HM_BUILD_COMMIT comes from kernels/module.cmake;
 * HM_CACHE_LAYOUT changes whenever the entry format or the meaning of a key changes.
 */
#include <stdio.h>

#include "kernels/jit.h"

#ifndef HM_BUILD_COMMIT
#define HM_BUILD_COMMIT "unknown"
#endif
#define HM_CACHE_LAYOUT 1

void hm_jit_library_id(char *buf, size_t len) {
  snprintf(buf, len, "humming %s build %s cache %d", hm_get_version(), HM_BUILD_COMMIT, HM_CACHE_LAYOUT);
}
