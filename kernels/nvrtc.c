/* SPDX-License-Identifier: Apache-2.0 */
/* Compiling one job with NVRTC into a cubin. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "kernels/jit_compiler.h"
#include "kernels/nvrtc.h"
#include "registry.h"

struct hm_nvrtc_table hm_nvrtc = {
#define HM_NVRTC_INIT_(name) name,
    HM_NVRTC_FUNCTIONS(HM_NVRTC_INIT_)
#undef HM_NVRTC_INIT_
};

void hm_nvrtc_restore(void) {
#define HM_NVRTC_SET_(name) hm_nvrtc.name = name;
  HM_NVRTC_FUNCTIONS(HM_NVRTC_SET_)
#undef HM_NVRTC_SET_
}

hm_status hm_nvrtc_identity(char *buf, size_t len) {
  int major = 0, minor = 0;
  nvrtcResult r = hm_nvrtc.nvrtcVersion(&major, &minor);
  if (r != NVRTC_SUCCESS) HM_FAIL(HM_NVRTC, "nvrtcVersion failed: %s", hm_nvrtc.nvrtcGetErrorString(r));
  snprintf(buf, len, "nvrtc %d.%d", major, minor);
  return HM_OK;
}

static char *describe_command(const hm_compile_job *job) {
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  if (f == NULL) return NULL;
  fprintf(f, "nvrtcCompileProgram %s.cu", job->name);
  for (int i = 0; i < job->option_count; i++) fprintf(f, " %s", job->options[i]);
  fprintf(f, "\nheaders:");
  for (int i = 0; job->headers && i < job->headers->count; i++) fprintf(f, " %s", job->headers->names[i]);
  fprintf(f, "\n");
  fclose(f);
  return text;
}

/* The program log, led by NVRTC's own word for the failure when there is one. */
static hm_status read_log(nvrtcProgram prog, nvrtcResult compiled, char **log) {
  size_t size = 0;
  if (hm_nvrtc.nvrtcGetProgramLogSize(prog, &size) != NVRTC_SUCCESS) size = 1;
  const char *what = compiled == NVRTC_SUCCESS ? "" : hm_nvrtc.nvrtcGetErrorString(compiled);
  size_t head = compiled == NVRTC_SUCCESS ? 0 : strlen(what) + 1;
  char *buf = malloc(head + size + 1);
  if (buf == NULL) HM_FAIL(HM_OUT_OF_MEMORY, "%zu bytes of compile log", size);
  if (head) snprintf(buf, head + 1, "%s\n", what);
  buf[head] = '\0';
  if (size > 1 && hm_nvrtc.nvrtcGetProgramLog(prog, buf + head) != NVRTC_SUCCESS) buf[head] = '\0';
  buf[head + size] = '\0';
  *log = buf;
  return HM_OK;
}

static hm_status read_cubin(nvrtcProgram prog, const char *name, hm_compile_output *out) {
  size_t size = 0;
  nvrtcResult r = hm_nvrtc.nvrtcGetCUBINSize(prog, &size);
  if (r != NVRTC_SUCCESS || size == 0)
    HM_FAIL(HM_NVRTC, "%s: no cubin from NVRTC (%s); was a virtual arch (compute_XX) requested?", name,
            hm_nvrtc.nvrtcGetErrorString(r));
  out->cubin = malloc(size);
  if (out->cubin == NULL) HM_FAIL(HM_OUT_OF_MEMORY, "%zu bytes of cubin for %s", size, name);
  r = hm_nvrtc.nvrtcGetCUBIN(prog, out->cubin);
  if (r != NVRTC_SUCCESS)
    HM_FAIL(HM_NVRTC, "nvrtcGetCUBIN for %s failed: %s", name, hm_nvrtc.nvrtcGetErrorString(r));
  out->cubin_size = size;
  return HM_OK;
}

hm_status hm_nvrtc_compile(const hm_compile_job *job, hm_compile_output *out) {
  HM_CHECK_NOT_NULL(job);
  HM_CHECK_NOT_NULL(out);
  memset(out, 0, sizeof(*out));
  HM_CHECK(hm_registry_on_shutdown(hm_nvrtc_restore));
  char file[256];
  snprintf(file, sizeof(file), "%s.cu", job->name);
  double start = hm_jit_now_s(), cpu_start = hm_jit_thread_cpu_s();
  nvrtcProgram prog = NULL;
  int header_count = job->headers ? job->headers->count : 0;
  nvrtcResult r = hm_nvrtc.nvrtcCreateProgram(&prog, job->source, file, header_count,
                                              header_count ? job->headers->contents : NULL,
                                              header_count ? job->headers->names : NULL);
  if (r != NVRTC_SUCCESS)
    HM_FAIL(HM_NVRTC, "nvrtcCreateProgram for %s failed: %s", job->name, hm_nvrtc.nvrtcGetErrorString(r));
  hm_status ret = HM_OK;
  nvrtcResult compiled = hm_nvrtc.nvrtcCompileProgram(prog, job->option_count, job->options);
  out->command = describe_command(job);
  if (out->command == NULL) HM_FAIL_GOTO(HM_OUT_OF_MEMORY, fail, "command text for %s", job->name);
  HM_CHECK_GOTO(read_log(prog, compiled, &out->log), fail);
  if (compiled == NVRTC_SUCCESS) HM_CHECK_GOTO(read_cubin(prog, job->name, out), fail);
  out->ok = compiled == NVRTC_SUCCESS;
  out->seconds = hm_jit_now_s() - start;
  out->cpu_seconds = hm_jit_thread_cpu_s() - cpu_start;
  hm_nvrtc.nvrtcDestroyProgram(&prog);
  return HM_OK;
fail:
  hm_nvrtc.nvrtcDestroyProgram(&prog);
  hm_compile_output_free(out);
  return ret;
}

void hm_compile_output_free(hm_compile_output *out) {
  if (out == NULL) return;
  free(out->cubin);
  free(out->log);
  free(out->command);
  memset(out, 0, sizeof(*out));
}
