/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The one process-wide registry: modules that keep state across engines (the in-process
 * kernel table, loaded modules, the driver handle) register a cleanup here, and
 * hm_shutdown runs them in reverse order.
 */
#ifndef HM_REGISTRY_H
#define HM_REGISTRY_H

#include "humming.h"

typedef void (*hm_cleanup_fn)(void);

/* Registers fn once (a second call with the same fn is ignored). */
hm_status hm_registry_on_shutdown(hm_cleanup_fn fn);
/* Counts live engines, so hm_shutdown can warn when called too early. */
void hm_registry_acquire(void);
void hm_registry_release(void);

#endif
