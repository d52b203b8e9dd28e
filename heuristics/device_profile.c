/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Built-in device profiles. Bandwidth is what a copy achieves (about 90% of the
 * datasheet; the H200 figure is the one measured on our lent machine), and tensor rates
 * are dense datasheet rates except for the H200, where cuBLAS bf16 was measured.
 */
#include <ctype.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "device_profile.h"
#include "engine.h"
#include "log.h"
#include "params.h"

#define KIB 1024
#define MIB (1024 * 1024)

static const hm_device_profile builtin[] = {
    /* name      arch  SMs  GB/s   f16    fp8     int8   smem/SM    smem/block  L2 */
    {"h20", 90, 78, 3600, 148, 296, 296, 228 * KIB, 227 * KIB, 60 * MIB, false},
    {"h200", 90, 132, 4300, 790, 1979, 1979, 228 * KIB, 227 * KIB, 50 * MIB, false},
    {"h100", 90, 132, 3000, 989, 1979, 1979, 228 * KIB, 227 * KIB, 50 * MIB, false},
    {"a100", 80, 108, 1800, 312, 0, 624, 164 * KIB, 163 * KIB, 40 * MIB, false},
    {"l40s", 89, 142, 780, 362, 733, 733, 100 * KIB, 99 * KIB, 96 * MIB, false},
    {"rtx4090", 89, 128, 910, 165, 330, 660, 100 * KIB, 99 * KIB, 72 * MIB, false},
    {"b200", 100, 148, 7200, 2250, 4500, 4500, 228 * KIB, 227 * KIB, 126 * MIB, false},
};

int hm_device_profile_count(void) { return (int)HM_ARRAY_SIZE(builtin); }

const char *hm_device_profile_name(int index) {
  if (index < 0 || index >= hm_device_profile_count()) return NULL;
  return builtin[index].name;
}

hm_status hm_device_profile_builtin(const char *name, hm_device_profile *out) {
  HM_CHECK_NOT_NULL(name);
  HM_CHECK_NOT_NULL(out);
  for (size_t i = 0; i < HM_ARRAY_SIZE(builtin); i++) {
    if (strcasecmp(builtin[i].name, name) == 0) {
      *out = builtin[i];
      return HM_OK;
    }
  }
  HM_FAIL(HM_INVALID_ARGUMENT, "unknown device profile '%s' (h20, h200, h100, a100, l40s, rtx4090, b200)",
          name);
}

/* Whether key occurs in text as a whole word ("h20" is not in "h200"). */
static bool contains_word(const char *text, const char *key) {
  size_t len = strlen(key);
  for (const char *p = strstr(text, key); p != NULL; p = strstr(p + 1, key)) {
    bool start = p == text || !isalnum((unsigned char)p[-1]);
    bool end = !isalnum((unsigned char)p[len]);
    if (start && end) return true;
  }
  return false;
}

/* "NVIDIA H200 (132 SMs, sm_90)" -> "h200": the built-in name that is a word of the device name. */
static const hm_device_profile *match_device_name(const char *device_name) {
  char lower[160];
  size_t n = 0;
  for (; device_name[n] && n + 1 < sizeof(lower); n++) lower[n] = (char)tolower((unsigned char)device_name[n]);
  lower[n] = '\0';
  for (size_t i = 0; i < HM_ARRAY_SIZE(builtin); i++) {
    /* GeForce names read "NVIDIA GeForce RTX 4090": match the number. */
    const char *key = strcmp(builtin[i].name, "rtx4090") == 0 ? "4090" : builtin[i].name;
    if (contains_word(lower, key)) return &builtin[i];
  }
  return NULL;
}

hm_status hm_device_profile_for_engine(hm_engine *engine, hm_device_profile *out) {
  HM_CHECK_NOT_NULL(engine);
  HM_CHECK_NOT_NULL(out);
  const char *forced = hm_param_device_profile();
  if (forced[0] != '\0') return hm_device_profile_builtin(forced, out);
  if (engine->kind == HM_BACKEND_HOST) return hm_device_profile_builtin("h200", out);
  const hm_device_profile *match = match_device_name(engine->device_name);
  if (match == NULL) {
    /* An unknown GPU: the closest arch's profile, scaled to its SM count. */
    const char *fallback = engine->arch >= 100 ? "b200" : engine->arch >= 90 ? "h100"
                           : engine->arch >= 89 ? "l40s" : "a100";
    HM_WARN(TUNE, "no built-in profile for %s; starting from %s", engine->device_name, fallback);
    HM_CHECK(hm_device_profile_builtin(fallback, out));
    double scale = (double)engine->sm_count / out->sm_count;
    out->tflops_f16 *= scale;
    out->tflops_fp8 *= scale;
    out->tflops_int8 *= scale;
  } else {
    *out = *match;
  }
  out->sm_count = engine->sm_count;
  out->arch = engine->arch;
  return HM_OK;
}

hm_status hm_device_profile_probe_bandwidth(hm_engine *engine, size_t bytes, hm_device_profile *profile) {
  HM_CHECK_NOT_NULL(engine);
  HM_CHECK_NOT_NULL(profile);
  if (engine->kind != HM_BACKEND_CUDA) HM_FAIL(HM_UNSUPPORTED, "bandwidth probe needs a CUDA engine");
  hm_status ret = HM_OK;
  void *src = NULL, *dst = NULL;
  hm_event *t0 = NULL, *t1 = NULL;
  hm_stream *s = NULL;
  HM_CHECK_GOTO(hm_mem_alloc(engine, bytes, &src), done);
  HM_CHECK_GOTO(hm_mem_alloc(engine, bytes, &dst), done);
  HM_CHECK_GOTO(hm_stream_create(engine, &s), done);
  HM_CHECK_GOTO(hm_event_create(engine, &t0), done);
  HM_CHECK_GOTO(hm_event_create(engine, &t1), done);
  HM_CHECK_GOTO(hm_engine_copy(engine, dst, src, bytes, HM_COPY_D2D, s), done); /* warm-up */
  const int reps = 5;
  HM_CHECK_GOTO(hm_event_record(t0, s), done);
  for (int i = 0; i < reps; i++) HM_CHECK_GOTO(hm_engine_copy(engine, dst, src, bytes, HM_COPY_D2D, s), done);
  HM_CHECK_GOTO(hm_event_record(t1, s), done);
  float ms = 0;
  HM_CHECK_GOTO(hm_event_elapsed_ms(t0, t1, &ms), done);
  if (ms > 0) profile->mem_bw_gbs = 2.0 * (double)bytes * reps / (ms * 1e-3) / 1e9;
  profile->measured = true;
  HM_INFO(TUNE, "bandwidth probe: %.0f GB/s over %zu MiB", profile->mem_bw_gbs, bytes >> 20);
done:
  hm_event_destroy(t0);
  hm_event_destroy(t1);
  hm_stream_destroy(s);
  hm_mem_free(engine, src);
  hm_mem_free(engine, dst);
  return ret;
}
