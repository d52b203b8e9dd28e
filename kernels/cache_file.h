/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The file layer under the compile cache, the one place it touches the file system.
 * Writes go to a temporary name, are fsynced and renamed, so a reader sees a whole
 * file or none. The write, fsync and rename calls go through a table that tests
 * replace to fail a write, tear one, or stop a writer halfway.
 */
#ifndef HM_CACHE_FILE_H
#define HM_CACHE_FILE_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "humming.h"

struct hm_cache_file_ops {
  ssize_t (*write)(int fd, const void *buf, size_t count);
  int (*fsync)(int fd);
  int (*rename)(const char *from, const char *to);
};

/* Routes the cache's I/O through ops (tests); NULL restores the system calls. */
void hm_cache_file_set_ops(const struct hm_cache_file_ops *ops);

/* mkdir -p. */
hm_status hm_cache_file_mkdirs(const char *path);
/* Writes dir/name through a temporary file in dir and a rename; sync: fsync before the rename. */
hm_status hm_cache_file_write(const char *dir, const char *name, const void *data, size_t size, bool sync);
/* fsync of a directory, so the renames in it survive a crash. */
hm_status hm_cache_file_sync_dir(const char *dir);
/*
 * Reads a whole file (NUL-terminated, the NUL not counted) of at most max_bytes.
 * A missing file is not a failure: *missing is set and *data is NULL.
 */
hm_status hm_cache_file_read(const char *path, size_t max_bytes, void **data, size_t *size, bool *missing);
/* Removes the plain files of dir (not dir itself); a missing dir is fine. */
hm_status hm_cache_file_clear_dir(const char *dir);
/*
 * Takes an exclusive flock on path (created if needed); *fd holds it. With wait false
 * a lock held elsewhere is not a failure: *fd is -1 and *busy is set.
 */
hm_status hm_cache_file_lock(const char *path, bool wait, int *fd, bool *busy);
/* Releases a lock from hm_cache_file_lock; -1 is a no-op. */
void hm_cache_file_unlock(int fd);

#endif
