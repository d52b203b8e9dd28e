/* SPDX-License-Identifier: Apache-2.0 */
/*
 * humming-moe: the one public header. Include only this file; the parts under
 * humming/ are split by concern so that each stays small, not to be included alone.
 */
#ifndef HUMMING_H
#define HUMMING_H

#include "humming/core.h"
#include "humming/formats.h"
#include "humming/layer.h"
#include "humming/moe.h"
#include "humming/comm.h"

#endif
