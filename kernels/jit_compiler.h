/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The two compilers behind the JIT, with one shape: a job in, a cubin and a log out.
 * A compile error is a result (ok = false with the log), not a failure; failures are
 * what stops the compiler from running at all.
 */
#ifndef HM_JIT_COMPILER_H
#define HM_JIT_COMPILER_H

#include <stdbool.h>
#include <stddef.h>

#include "humming.h"
#include "kernels/embed.h"

typedef struct hm_compile_job {
  const char *name; /* the kernel; names the source file too */
  const char *source;
  const hm_header_set *headers; /* headers the source includes, by name */
  const char *const *options;   /* every option but input, output and header dirs */
  int option_count;
} hm_compile_job;

typedef struct hm_compile_output {
  bool ok;
  void *cubin;
  size_t cubin_size;
  char *log;          /* compiler messages, "" when none */
  char *command;      /* what ran, for options.txt */
  double seconds;     /* wall clock */
  double cpu_seconds; /* CPU time of the compiler (NVRTC's thread or nvcc's processes) */
} hm_compile_output;

/* "nvrtc 13.0": part of every cache key. */
hm_status hm_nvrtc_identity(char *buf, size_t len);
hm_status hm_nvrtc_compile(const hm_compile_job *job, hm_compile_output *out);

/* The version lines of <cuda_home>/bin/nvcc. */
hm_status hm_nvcc_identity(const char *cuda_home, char *buf, size_t len);
/* Runs nvcc -cubin in a private temporary directory holding the source and headers. */
hm_status hm_nvcc_compile(const char *cuda_home, const hm_compile_job *job, hm_compile_output *out);

void hm_compile_output_free(hm_compile_output *out);
/* Seconds on a monotonic clock, for compile and load timings. */
double hm_jit_now_s(void);
/* CPU seconds of the calling thread: a compile's cost even on a loaded machine. */
double hm_jit_thread_cpu_s(void);

#endif
