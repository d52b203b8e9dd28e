/* SPDX-License-Identifier: Apache-2.0 */
/*
 * NVRTC, reached only through this table (linked directly, so the entries start out
 * as the library's own functions). Tests replace entries to fail a compile or to
 * stop in the middle of one; hm_nvrtc_restore puts the real ones back.
 */
#ifndef HM_NVRTC_H
#define HM_NVRTC_H

#include <nvrtc.h>

#define HM_NVRTC_FUNCTIONS(X) \
  X(nvrtcVersion)             \
  X(nvrtcGetErrorString)      \
  X(nvrtcCreateProgram)       \
  X(nvrtcCompileProgram)      \
  X(nvrtcGetProgramLogSize)   \
  X(nvrtcGetProgramLog)       \
  X(nvrtcGetCUBINSize)        \
  X(nvrtcGetCUBIN)            \
  X(nvrtcDestroyProgram)

struct hm_nvrtc_table {
#define HM_NVRTC_FIELD_(name) __typeof__(&name) name;
  HM_NVRTC_FUNCTIONS(HM_NVRTC_FIELD_)
#undef HM_NVRTC_FIELD_
};

extern struct hm_nvrtc_table hm_nvrtc;

/* Puts NVRTC's own functions back in every entry. */
void hm_nvrtc_restore(void);

#endif
