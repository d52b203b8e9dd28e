/* SPDX-License-Identifier: Apache-2.0 */
/*
 * nvcc as the alternative compiler (HUMMING_COMPILER=nvcc): the source and its headers
 * are written to a private temporary directory and nvcc runs there as a child process,
 * its output captured as the compile log.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "kernels/cache_file.h"
#include "kernels/jit_compiler.h"

extern char **environ;

#define HM_NVCC_MAX_LOG_BYTES ((size_t)16 << 20)
#define HM_WORK_DIR_BYTES 256 /* under P_tmpdir, so short */

static hm_status nvcc_path(const char *cuda_home, char *buf, size_t len) {
  if (snprintf(buf, len, "%s/bin/nvcc", cuda_home) >= (int)len)
    HM_FAIL(HM_INVALID_ARGUMENT, "HUMMING_CUDA_HOME too long: %s", cuda_home);
  if (access(buf, X_OK) != 0)
    HM_FAIL(HM_UNSUPPORTED, "HUMMING_COMPILER=nvcc but %s is not executable (%s); set HUMMING_CUDA_HOME", buf,
            strerror(errno));
  return HM_OK;
}

/*
 * Runs argv with stdout and stderr into log_path; *exit_code is 128+signal if killed,
 * *cpu_s the CPU time of the child and its own children (nvcc runs cicc and ptxas).
 */
static hm_status run_logged(char *const argv[], const char *log_path, int *exit_code, double *cpu_s) {
  posix_spawn_file_actions_t actions;
  if (posix_spawn_file_actions_init(&actions) != 0)
    HM_FAIL(HM_SYSTEM, "posix_spawn_file_actions_init failed");
  posix_spawn_file_actions_addopen(&actions, 1, log_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  pid_t pid;
  int rc = posix_spawn(&pid, argv[0], &actions, NULL, argv, environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) HM_FAIL(HM_SYSTEM, "cannot run %s: %s", argv[0], strerror(rc));
  int status = 0;
  struct rusage usage;
  while (wait4(pid, &status, 0, &usage) < 0) {
    if (errno != EINTR) HM_FAIL(HM_SYSTEM, "waiting for %s failed: %s", argv[0], strerror(errno));
  }
  *exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  *cpu_s = (double)usage.ru_utime.tv_sec + (double)usage.ru_utime.tv_usec * 1e-6 +
           (double)usage.ru_stime.tv_sec + (double)usage.ru_stime.tv_usec * 1e-6;
  return HM_OK;
}

static hm_status make_work_dir(char *dir, size_t len) {
  if (snprintf(dir, len, "%s/humming-nvcc-XXXXXX", P_tmpdir) >= (int)len)
    HM_FAIL(HM_INTERNAL, "temporary path too long");
  if (mkdtemp(dir) == NULL)
    HM_FAIL(HM_SYSTEM, "cannot create a directory under %s: %s", P_tmpdir, strerror(errno));
  return HM_OK;
}

static void remove_work_dir(const char *dir) {
  if (hm_cache_file_clear_dir(dir) == HM_OK) rmdir(dir);
}

static hm_status read_text(const char *dir, const char *name, size_t max, char **text) {
  char path[PATH_MAX + HM_WORK_DIR_BYTES];
  snprintf(path, sizeof(path), "%s/%s", dir, name);
  void *data = NULL;
  size_t size = 0;
  bool missing = false;
  HM_CHECK(hm_cache_file_read(path, max, &data, &size, &missing));
  *text = missing ? strdup("") : data;
  if (*text == NULL) HM_FAIL(HM_OUT_OF_MEMORY, "empty text");
  return HM_OK;
}

hm_status hm_nvcc_identity(const char *cuda_home, char *buf, size_t len) {
  char nvcc[PATH_MAX], dir[HM_WORK_DIR_BYTES], log_path[PATH_MAX];
  HM_CHECK(nvcc_path(cuda_home, nvcc, sizeof(nvcc)));
  HM_CHECK(make_work_dir(dir, sizeof(dir)));
  snprintf(log_path, sizeof(log_path), "%s/version.txt", dir);
  char *argv[] = {nvcc, "--version", NULL};
  int code = 0;
  double cpu_s = 0;
  char *text = NULL;
  hm_status ret = run_logged(argv, log_path, &code, &cpu_s);
  if (ret == HM_OK) ret = read_text(dir, "version.txt", 1 << 16, &text);
  remove_work_dir(dir);
  if (ret != HM_OK) return ret;
  if (code != 0) {
    free(text);
    HM_FAIL(HM_UNSUPPORTED, "%s --version exited with %d", nvcc, code);
  }
  /* The release and build lines are what change between toolkits. */
  for (char *c = text; *c; c++)
    if (*c == '\n') *c = ' ';
  const char *release = strstr(text, "release");
  snprintf(buf, len, "nvcc %s", release ? release : text);
  free(text);
  return HM_OK;
}

static hm_status write_inputs(const char *dir, const hm_compile_job *job) {
  HM_CHECK(hm_cache_file_write(dir, "source.cu", job->source, strlen(job->source), false));
  for (int i = 0; job->headers && i < job->headers->count; i++) {
    const char *name = job->headers->names[i];
    if (strchr(name, '/') || name[0] == '.')
      HM_FAIL(HM_INVALID_ARGUMENT, "header name '%s' must be a plain file name for nvcc", name);
    HM_CHECK(hm_cache_file_write(dir, name, job->headers->contents[i], job->headers->sizes[i], false));
  }
  return HM_OK;
}

static char *join_argv(char *const argv[]) {
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  if (f == NULL) return NULL;
  for (int i = 0; argv[i]; i++) fprintf(f, "%s%s", i ? " " : "", argv[i]);
  fprintf(f, "\n");
  fclose(f);
  return text;
}

static hm_status run_nvcc(const char *nvcc, const char *dir, const hm_compile_job *job,
                          hm_compile_output *out) {
  char include[HM_WORK_DIR_BYTES + 2], cubin_path[HM_WORK_DIR_BYTES + 16],
      source_path[HM_WORK_DIR_BYTES + 16], log_path[HM_WORK_DIR_BYTES + 16];
  snprintf(include, sizeof(include), "-I%s", dir);
  snprintf(cubin_path, sizeof(cubin_path), "%s/kernel.cubin", dir);
  snprintf(source_path, sizeof(source_path), "%s/source.cu", dir);
  snprintf(log_path, sizeof(log_path), "%s/log.txt", dir);
  int argc = 0;
  char **argv = calloc((size_t)job->option_count + 8, sizeof(*argv));
  if (argv == NULL) HM_FAIL(HM_OUT_OF_MEMORY, "nvcc arguments");
  argv[argc++] = (char *)nvcc;
  argv[argc++] = "-cubin";
  for (int i = 0; i < job->option_count; i++) argv[argc++] = (char *)job->options[i];
  argv[argc++] = include;
  argv[argc++] = "-o";
  argv[argc++] = cubin_path;
  argv[argc++] = source_path;
  hm_status ret = HM_OK;
  int code = 0;
  out->command = join_argv(argv);
  if (out->command == NULL) HM_FAIL_GOTO(HM_OUT_OF_MEMORY, done, "nvcc command text");
  HM_CHECK_GOTO(run_logged(argv, log_path, &code, &out->cpu_seconds), done);
  HM_CHECK_GOTO(read_text(dir, "log.txt", HM_NVCC_MAX_LOG_BYTES, &out->log), done);
  if (code != 0) goto done;
  bool missing = false;
  HM_CHECK_GOTO(hm_cache_file_read(cubin_path, SIZE_MAX / 2, &out->cubin, &out->cubin_size, &missing), done);
  if (missing) HM_FAIL_GOTO(HM_NVRTC, done, "nvcc exited 0 for %s but wrote no %s", job->name, cubin_path);
  out->ok = true;
done:
  free(argv);
  return ret;
}

hm_status hm_nvcc_compile(const char *cuda_home, const hm_compile_job *job, hm_compile_output *out) {
  HM_CHECK_NOT_NULL(job);
  HM_CHECK_NOT_NULL(out);
  memset(out, 0, sizeof(*out));
  char nvcc[PATH_MAX], dir[HM_WORK_DIR_BYTES];
  HM_CHECK(nvcc_path(cuda_home, nvcc, sizeof(nvcc)));
  HM_CHECK(make_work_dir(dir, sizeof(dir)));
  double start = hm_jit_now_s();
  hm_status ret = write_inputs(dir, job);
  if (ret == HM_OK) ret = run_nvcc(nvcc, dir, job, out);
  out->seconds = hm_jit_now_s() - start;
  remove_work_dir(dir);
  if (ret != HM_OK) hm_compile_output_free(out);
  return ret;
}
