/* SPDX-License-Identifier: Apache-2.0 */
/* Process-wide cleanups run by hm_shutdown. */
#include <pthread.h>

#include "check.h"
#include "cuda_driver.h"
#include "log.h"
#include "params.h"
#include "registry.h"

#define HM_MAX_CLEANUPS 32

static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
static hm_cleanup_fn cleanups[HM_MAX_CLEANUPS];
static int cleanup_count;
static int live_engines;

hm_status hm_registry_on_shutdown(hm_cleanup_fn fn) {
  HM_CHECK_NOT_NULL(fn);
  pthread_mutex_lock(&registry_lock);
  for (int i = 0; i < cleanup_count; i++) {
    if (cleanups[i] == fn) {
      pthread_mutex_unlock(&registry_lock);
      return HM_OK;
    }
  }
  bool full = cleanup_count == HM_MAX_CLEANUPS;
  if (!full) cleanups[cleanup_count++] = fn;
  pthread_mutex_unlock(&registry_lock);
  if (full) HM_FAIL(HM_INTERNAL, "registry full (%d cleanups)", HM_MAX_CLEANUPS);
  return HM_OK;
}

void hm_registry_acquire(void) {
  pthread_mutex_lock(&registry_lock);
  live_engines++;
  pthread_mutex_unlock(&registry_lock);
}

void hm_registry_release(void) {
  pthread_mutex_lock(&registry_lock);
  live_engines--;
  pthread_mutex_unlock(&registry_lock);
}

void hm_shutdown(void) {
  pthread_mutex_lock(&registry_lock);
  int live = live_engines;
  int n = cleanup_count;
  cleanup_count = 0;
  hm_cleanup_fn run[HM_MAX_CLEANUPS];
  for (int i = 0; i < n; i++) run[i] = cleanups[i];
  pthread_mutex_unlock(&registry_lock);
  if (live > 0) HM_WARN(INIT, "hm_shutdown with %d engine(s) still alive", live);
  for (int i = n - 1; i >= 0; i--) run[i]();
  hm_cu_unload();
  hm_log_reset();
  hm_params_reload();
}
