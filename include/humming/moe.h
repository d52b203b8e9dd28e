/* SPDX-License-Identifier: Apache-2.0 */
/* Public part of humming.h for the moe module. */
#ifndef HUMMING_MOE_H
#define HUMMING_MOE_H

#include "core.h"
#include "formats.h"
#include "layer.h"

#ifdef __cplusplus
extern "C" {
#endif

#ifdef __cplusplus
}
#endif

#endif
