/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The cache under faults: a damaged entry (truncated cubin, flipped byte, bad checksum,
 * an entry of another key or library build), a failed or torn write, an unwritable
 * cache dir, and a process SIGKILLed while compiling or writing. Each time the next
 * run detects it and recompiles, no lock stays held, and no run loads a bad cubin:
 * every cubin handed out equals the reference compile byte for byte.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "kernels/cache_file.h"
#include "kernels/nvrtc.h"
#include "test_jit_util.h"

static tj_axpy kernel;
static hm_cubin reference;

static int cleanup(void **state) {
  hm_cache_file_set_ops(NULL);
  return tj_teardown(state);
}

/* Gets the kernel and checks it is the reference image; returns it. */
static const hm_cubin *get_checked(void) {
  const hm_cubin *c = NULL;
  HM_ASSERT_OK(hm_jit_get_cubin(&kernel.src, &c));
  assert_int_equal(c->size, reference.size);
  assert_memory_equal(c->data, reference.data, reference.size);
  return c;
}

static void expect_stats(uint64_t compiled, uint64_t disk_hits, uint64_t broken) {
  hm_jit_stats st;
  hm_jit_get_stats(&st);
  assert_int_equal(st.compiled, compiled);
  assert_int_equal(st.disk_hits, disk_hits);
  assert_int_equal(st.broken, broken);
}

static void entry_file(const char *file, char *out) {
  tj_entry_file(tj_cache_dir, reference.key, file, out, PATH_MAX);
}

static void rewrite_file(const char *file, const void *data, size_t size) {
  char path[PATH_MAX];
  entry_file(file, path);
  FILE *f = fopen(path, "wb");
  assert_non_null(f);
  assert_int_equal(fwrite(data, 1, size, f), size);
  fclose(f);
}

static char *read_file(const char *file, size_t *size) {
  char path[PATH_MAX];
  entry_file(file, path);
  FILE *f = fopen(path, "rb");
  assert_non_null(f);
  char *buf = calloc(1, 1 << 20);
  *size = fread(buf, 1, 1 << 20, f);
  fclose(f);
  return buf;
}

static void damage_truncate(void) {
  size_t size;
  char *cubin = read_file("kernel.cubin", &size);
  rewrite_file("kernel.cubin", cubin, size / 2);
  free(cubin);
}

static void damage_flip_byte(void) {
  size_t size;
  char *cubin = read_file("kernel.cubin", &size);
  cubin[size / 3] ^= 0x01;
  rewrite_file("kernel.cubin", cubin, size);
  free(cubin);
}

static void damage_checksum(void) {
  size_t size;
  char *sum = read_file("checksum", &size);
  char *sha = strstr(sum, "sha256 ");
  assert_non_null(sha);
  sha[7] = sha[7] == '0' ? '1' : '0';
  rewrite_file("checksum", sum, size);
  free(sum);
}

static void damage_remove_checksum(void) {
  char path[PATH_MAX];
  entry_file("checksum", path);
  assert_int_equal(unlink(path), 0);
}

/* An entry written by another library build: same bytes, other identity line. */
static void damage_library_line(void) {
  size_t size;
  char *sum = read_file("checksum", &size);
  char *lib = strstr(sum, "library humming ");
  assert_non_null(lib);
  lib[16] = lib[16] == '9' ? '8' : '9';
  rewrite_file("checksum", sum, size);
  free(sum);
}

/* Another key's complete entry copied under this key: valid checksum, wrong key line. */
static void damage_foreign_entry(void) {
  tj_axpy other;
  tj_axpy_make(&other, 9, 80, false);
  const hm_cubin *c = NULL;
  HM_ASSERT_OK(hm_jit_get_cubin(&other.src, &c));
  char from[PATH_MAX], to[PATH_MAX];
  const char *files[] = {"kernel.cubin", "checksum"};
  for (int i = 0; i < 2; i++) {
    tj_entry_file(tj_cache_dir, c->key, files[i], from, sizeof(from));
    entry_file(files[i], to);
    assert_int_equal(rename(from, to), 0);
  }
}

static void damaged_entries_are_recompiled(void **state) {
  (void)state;
  struct {
    const char *what;
    void (*damage)(void);
  } cases[] = {
      {"truncated cubin", damage_truncate},   {"flipped byte", damage_flip_byte},
      {"bad checksum", damage_checksum},      {"no checksum", damage_remove_checksum},
      {"other library", damage_library_line}, {"other key", damage_foreign_entry},
  };
  for (size_t i = 0; i < HM_ARRAY_SIZE(cases); i++) {
    printf("# %s\n", cases[i].what);
    hm_shutdown();
    get_checked();
    hm_shutdown();
    cases[i].damage();
    hm_shutdown();
    get_checked();
    expect_stats(1, 0, 1);
    hm_shutdown();
    get_checked(); /* the entry was repaired */
    expect_stats(0, 1, 0);
  }
}

/* Fault hooks for the file layer. */
static int writes_failed;

static ssize_t write_enospc(int fd, const void *buf, size_t count) {
  (void)fd, (void)buf, (void)count;
  writes_failed++;
  errno = ENOSPC;
  return -1;
}

static bool fd_is(int fd, const char *name_part) {
  char link[64], target[PATH_MAX];
  snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
  ssize_t n = readlink(link, target, sizeof(target) - 1);
  if (n <= 0) return false;
  target[n] = '\0';
  return strstr(target, name_part) != NULL;
}

/* A torn write that the OS reported as whole (what a crash without fsync can leave). */
static ssize_t write_torn_cubin(int fd, const void *buf, size_t count) {
  if (!fd_is(fd, ".kernel.cubin.tmp")) return write(fd, buf, count);
  if (write(fd, buf, count / 2) < 0) return -1;
  return (ssize_t)count;
}

static int warnings;

static void count_warnings(hm_log_level level, const char *line, void *user) {
  (void)user;
  if (level == HM_LOG_WARN && strstr(line, "CACHE")) warnings++;
}

static void failed_writes_keep_kernels_in_memory(void **state) {
  (void)state;
  warnings = 0;
  hm_log_set(count_warnings, NULL);
  struct hm_cache_file_ops ops = {write_enospc, fsync, rename};
  hm_cache_file_set_ops(&ops);
  const hm_cubin *c = get_checked();
  assert_false(c->from_cache);
  tj_axpy second;
  tj_axpy_make(&second, 5, 80, false);
  HM_ASSERT_OK(hm_jit_get_cubin(&second.src, &c));
  assert_true(writes_failed >= 2);
  assert_int_equal(warnings, 1); /* once per process, not once per kernel */
  hm_log_set(NULL, NULL);
  char path[PATH_MAX];
  entry_file("checksum", path);
  assert_false(tj_exists(path));
  hm_cache_file_set_ops(NULL);
  hm_shutdown();
  get_checked();
  expect_stats(1, 0, 0);
}

static void torn_cubin_write_is_detected(void **state) {
  (void)state;
  struct hm_cache_file_ops ops = {write_torn_cubin, fsync, rename};
  hm_cache_file_set_ops(&ops);
  get_checked(); /* the compiling process keeps the good image in memory */
  hm_cache_file_set_ops(NULL);
  hm_shutdown();
  get_checked();
  expect_stats(1, 0, 1);
}

static void unwritable_cache_dir_warns_once(void **state) {
  (void)state;
  char file[PATH_MAX], bad[PATH_MAX + 8];
  snprintf(file, sizeof(file), "%s/a-file", tj_cache_dir);
  FILE *f = fopen(file, "w");
  assert_non_null(f);
  fclose(f);
  snprintf(bad, sizeof(bad), "%s/cache", file); /* a directory under a regular file */
  setenv("HUMMING_CACHE_DIR", bad, 1);
  hm_shutdown();
  warnings = 0;
  hm_log_set(count_warnings, NULL);
  const hm_cubin *c = get_checked();
  assert_false(c->from_cache);
  tj_axpy second;
  tj_axpy_make(&second, 6, 80, false);
  HM_ASSERT_OK(hm_jit_get_cubin(&second.src, &c));
  assert_false(c->from_cache);
  hm_log_set(NULL, NULL);
  assert_int_equal(warnings, 1);
  expect_stats(2, 0, 0);
  setenv("HUMMING_CACHE_DIR", tj_cache_dir, 1);
}

/* --- a child process that stops at a chosen point and is SIGKILLed there --- */

static int child_signal_fd = -1;

static void signal_parent_and_wait(void) {
  if (write(child_signal_fd, "x", 1) != 1) _exit(3);
  for (;;) pause();
}

static nvrtcResult compile_and_hang(nvrtcProgram prog, int n, const char *const *options) {
  (void)prog, (void)n, (void)options;
  signal_parent_and_wait();
  return NVRTC_ERROR_INTERNAL_ERROR;
}

static ssize_t write_half_and_hang(int fd, const void *buf, size_t count) {
  if (!fd_is(fd, ".kernel.cubin.tmp")) return write(fd, buf, count);
  if (write(fd, buf, count / 2) < 0) _exit(3);
  signal_parent_and_wait();
  return -1;
}

static int rename_and_hang_before_checksum(const char *from, const char *to) {
  size_t n = strlen(to);
  if (n > 9 && strcmp(to + n - 9, "/checksum") == 0) signal_parent_and_wait();
  return rename(from, to);
}

static int child_main(const char *mode, int fd) {
  child_signal_fd = fd;
  static struct hm_cache_file_ops ops = {write, fsync, rename};
  if (strcmp(mode, "compile") == 0) hm_nvrtc.nvrtcCompileProgram = compile_and_hang;
  if (strcmp(mode, "write") == 0) ops.write = write_half_and_hang;
  if (strcmp(mode, "rename") == 0) ops.rename = rename_and_hang_before_checksum;
  hm_cache_file_set_ops(&ops);
  const hm_cubin *c = NULL;
  hm_jit_get_cubin(&kernel.src, &c);
  return 4; /* never reached: the parent kills us first */
}

static void kill_child_at(const char *mode) {
  int fds[2];
  assert_int_equal(pipe(fds), 0);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    close(fds[0]);
    char fd_text[16];
    snprintf(fd_text, sizeof(fd_text), "%d", fds[1]);
    execl("/proc/self/exe", "test_cache_faults", "--child", mode, fd_text, (char *)NULL);
    _exit(5);
  }
  close(fds[1]);
  char byte = 0;
  assert_int_equal(read(fds[0], &byte, 1), 1); /* the child reached its stop */
  close(fds[0]);
  assert_int_equal(kill(pid, SIGKILL), 0);
  int status = 0;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
}

static void assert_lock_free(void) {
  char path[PATH_MAX];
  snprintf(path, sizeof(path), "%s/kernels/%.2s/%s.lock", tj_cache_dir, reference.key, reference.key);
  int fd = open(path, O_RDWR);
  assert_true(fd >= 0);                              /* the child took it... */
  assert_int_equal(flock(fd, LOCK_EX | LOCK_NB), 0); /* ...and its death released it */
  close(fd);
}

static void killed_while_compiling(void **state) {
  (void)state;
  kill_child_at("compile");
  assert_lock_free();
  char path[PATH_MAX];
  entry_file("kernel.cubin", path);
  assert_false(tj_exists(path));
  get_checked();
  expect_stats(1, 0, 0);
}

static void killed_while_writing_the_cubin(void **state) {
  (void)state;
  kill_child_at("write");
  assert_lock_free();
  char path[PATH_MAX];
  entry_file("kernel.cubin", path);
  assert_false(tj_exists(path)); /* only the temporary file was written */
  get_checked();
  expect_stats(1, 0, 0);
  size_t size;
  free(read_file("checksum", &size));
  char cmd[PATH_MAX + 64];
  snprintf(cmd, sizeof(cmd), "ls -a %s/kernels/*/*/ | grep -c tmp", tj_cache_dir);
  FILE *p = popen(cmd, "r");
  int stale = -1;
  assert_int_equal(fscanf(p, "%d", &stale), 1);
  pclose(p);
  assert_int_equal(stale, 0); /* the next writer cleared the killed one's leftovers */
}

static void killed_before_the_checksum(void **state) {
  (void)state;
  kill_child_at("rename");
  assert_lock_free();
  char path[PATH_MAX];
  entry_file("kernel.cubin", path);
  assert_true(tj_exists(path)); /* a whole cubin, but not yet vouched for */
  get_checked();
  expect_stats(1, 0, 1);
}

int main(int argc, char **argv) {
  tj_axpy_make(&kernel, 7, 80, false);
  if (argc == 4 && strcmp(argv[1], "--child") == 0) return child_main(argv[2], atoi(argv[3]));
  if (hm_jit_compile_uncached(&kernel.src, &reference) != HM_OK) {
    fprintf(stderr, "reference compile failed: %s\n", hm_last_error());
    return 1;
  }
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(damaged_entries_are_recompiled, tj_setup, cleanup),
      cmocka_unit_test_setup_teardown(failed_writes_keep_kernels_in_memory, tj_setup, cleanup),
      cmocka_unit_test_setup_teardown(torn_cubin_write_is_detected, tj_setup, cleanup),
      cmocka_unit_test_setup_teardown(unwritable_cache_dir_warns_once, tj_setup, cleanup),
      cmocka_unit_test_setup_teardown(killed_while_compiling, tj_setup, cleanup),
      cmocka_unit_test_setup_teardown(killed_while_writing_the_cubin, tj_setup, cleanup),
      cmocka_unit_test_setup_teardown(killed_before_the_checksum, tj_setup, cleanup),
  };
  int failed = cmocka_run_group_tests(tests, NULL, NULL);
  hm_jit_cubin_free(&reference);
  return failed;
}
