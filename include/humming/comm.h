/* SPDX-License-Identifier: Apache-2.0 */
/* Public part of humming.h for the comm module. */
#ifndef HUMMING_COMM_H
#define HUMMING_COMM_H

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
