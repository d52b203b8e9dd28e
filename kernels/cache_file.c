/* SPDX-License-Identifier: Apache-2.0 */
/* POSIX implementation of the cache's file layer. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "kernels/cache_file.h"
#include "registry.h"

static const struct hm_cache_file_ops system_ops = {write, fsync, rename};
static _Atomic(const struct hm_cache_file_ops *) current_ops = &system_ops;

static void restore_system_ops(void) {
  atomic_store(&current_ops, &system_ops);
}

void hm_cache_file_set_ops(const struct hm_cache_file_ops *ops) {
  /* A test that forgets to restore must not leave hm_shutdown's successor faulty. */
  if (ops && hm_registry_on_shutdown(restore_system_ops) != HM_OK) return;
  atomic_store(&current_ops, ops ? ops : &system_ops);
}

static const struct hm_cache_file_ops *ops_now(void) {
  return atomic_load(&current_ops);
}

hm_status hm_cache_file_mkdirs(const char *path) {
  HM_CHECK_NOT_NULL(path);
  char buf[PATH_MAX];
  if (snprintf(buf, sizeof(buf), "%s", path) >= (int)sizeof(buf))
    HM_FAIL(HM_INVALID_ARGUMENT, "path too long: %s", path);
  for (char *p = buf + 1;; p++) {
    bool end = *p == '\0';
    if (*p != '/' && !end) continue;
    *p = '\0';
    if (mkdir(buf, 0775) != 0 && errno != EEXIST)
      HM_FAIL(HM_SYSTEM, "cannot create directory %s: %s", buf, strerror(errno));
    if (end) break;
    *p = '/';
  }
  struct stat st;
  if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode)) HM_FAIL(HM_SYSTEM, "%s is not a directory", path);
  return HM_OK;
}

static hm_status write_all(int fd, const char *path, const void *data, size_t size) {
  const char *p = data;
  while (size > 0) {
    ssize_t n = ops_now()->write(fd, p, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) HM_FAIL(HM_SYSTEM, "cannot write %s: %s", path, n < 0 ? strerror(errno) : "no progress");
    p += n;
    size -= (size_t)n;
  }
  return HM_OK;
}

hm_status hm_cache_file_write(const char *dir, const char *name, const void *data, size_t size, bool sync) {
  char tmp[PATH_MAX], path[PATH_MAX];
  if (snprintf(path, sizeof(path), "%s/%s", dir, name) >= (int)sizeof(path) ||
      snprintf(tmp, sizeof(tmp), "%s/.%s.tmp.XXXXXX", dir, name) >= (int)sizeof(tmp))
    HM_FAIL(HM_INVALID_ARGUMENT, "path too long: %s/%s", dir, name);
  int fd = mkostemp(tmp, O_CLOEXEC);
  if (fd < 0) HM_FAIL(HM_SYSTEM, "cannot create %s: %s", tmp, strerror(errno));
  hm_status ret = write_all(fd, tmp, data, size);
  if (ret == HM_OK && fchmod(fd, 0644) != 0)
    ret = hm_error_set(HM_SYSTEM, __FILE__, __LINE__, "chmod of %s failed: %s", tmp, strerror(errno));
  if (ret == HM_OK && sync && ops_now()->fsync(fd) != 0)
    ret = hm_error_set(HM_SYSTEM, __FILE__, __LINE__, "fsync of %s failed: %s", tmp, strerror(errno));
  if (close(fd) != 0 && ret == HM_OK)
    ret = hm_error_set(HM_SYSTEM, __FILE__, __LINE__, "close of %s failed: %s", tmp, strerror(errno));
  if (ret == HM_OK && ops_now()->rename(tmp, path) != 0)
    ret =
        hm_error_set(HM_SYSTEM, __FILE__, __LINE__, "cannot rename %s to %s: %s", tmp, path, strerror(errno));
  if (ret != HM_OK) unlink(tmp);
  return ret;
}

hm_status hm_cache_file_sync_dir(const char *dir) {
  int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) HM_FAIL(HM_SYSTEM, "cannot open directory %s: %s", dir, strerror(errno));
  int rc = ops_now()->fsync(fd);
  int err = errno;
  close(fd);
  if (rc != 0) HM_FAIL(HM_SYSTEM, "fsync of directory %s failed: %s", dir, strerror(err));
  return HM_OK;
}

static hm_status read_fd(int fd, const char *path, size_t max_bytes, void **data, size_t *size) {
  struct stat st;
  if (fstat(fd, &st) != 0) HM_FAIL(HM_SYSTEM, "cannot stat %s: %s", path, strerror(errno));
  if ((size_t)st.st_size > max_bytes)
    HM_FAIL(HM_CORRUPT, "%s holds %lld bytes, more than the %zu allowed", path, (long long)st.st_size,
            max_bytes);
  size_t want = (size_t)st.st_size;
  char *buf = malloc(want + 1);
  if (buf == NULL) HM_FAIL(HM_OUT_OF_MEMORY, "%zu bytes for %s", want + 1, path);
  size_t got = 0;
  while (got < want) {
    ssize_t n = read(fd, buf + got, want - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += (size_t)n;
  }
  /* A file that shrank under us reads short; the caller's checksum decides. */
  buf[got] = '\0';
  *data = buf;
  *size = got;
  return HM_OK;
}

hm_status hm_cache_file_read(const char *path, size_t max_bytes, void **data, size_t *size, bool *missing) {
  *data = NULL;
  *size = 0;
  *missing = false;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0 && errno == ENOENT) {
    *missing = true;
    return HM_OK;
  }
  if (fd < 0) HM_FAIL(HM_SYSTEM, "cannot open %s: %s", path, strerror(errno));
  hm_status ret = read_fd(fd, path, max_bytes, data, size);
  close(fd);
  return ret;
}

hm_status hm_cache_file_clear_dir(const char *dir) {
  DIR *d = opendir(dir);
  if (d == NULL && errno == ENOENT) return HM_OK;
  if (d == NULL) HM_FAIL(HM_SYSTEM, "cannot open directory %s: %s", dir, strerror(errno));
  hm_status ret = HM_OK;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
    if (unlinkat(dirfd(d), e->d_name, 0) != 0 && errno != ENOENT) {
      ret = hm_error_set(HM_SYSTEM, __FILE__, __LINE__, "cannot remove %s/%s: %s", dir, e->d_name,
                         strerror(errno));
      break;
    }
  }
  closedir(d);
  return ret;
}

hm_status hm_cache_file_lock(const char *path, bool wait, int *fd, bool *busy) {
  *fd = -1;
  *busy = false;
  int lock_fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0666);
  if (lock_fd < 0) HM_FAIL(HM_SYSTEM, "cannot open lock file %s: %s", path, strerror(errno));
  int rc;
  while ((rc = flock(lock_fd, LOCK_EX | (wait ? 0 : LOCK_NB))) != 0 && errno == EINTR) continue;
  if (rc != 0 && errno == EWOULDBLOCK) {
    close(lock_fd);
    *busy = true;
    return HM_OK;
  }
  if (rc != 0) {
    int err = errno;
    close(lock_fd);
    HM_FAIL(HM_SYSTEM, "cannot lock %s: %s", path, strerror(err));
  }
  *fd = lock_fd;
  return HM_OK;
}

void hm_cache_file_unlock(int fd) {
  if (fd < 0) return;
  flock(fd, LOCK_UN);
  close(fd);
}
