/* SPDX-License-Identifier: Apache-2.0 */
/*
 * SHA-256 (OpenSSL EVP) and the cache key: a digest over everything that can change
 * a cubin or the meaning of a cache entry. Each field is framed by a tag and its
 * length, so no two different inputs hash the same bytes.
 */
#ifndef HM_CACHE_KEY_H
#define HM_CACHE_KEY_H

#include <stddef.h>

#include "humming.h"
#include "kernels/embed.h"

#define HM_SHA256_HEX 65 /* 64 hex digits and a NUL */

/* Hex SHA-256 of a buffer. */
hm_status hm_sha256_hex(const void *data, size_t size, char hex[HM_SHA256_HEX]);

typedef struct hm_cache_key_input {
  const char *library;  /* hm_jit_library_id(): version, build, cache format */
  const char *compiler; /* "nvrtc 13.0" or nvcc's version line */
  const char *const *options;
  int option_count;
  const char *arch; /* "sm_90a" */
  const char *name;
  const char *source;
  const hm_header_set *headers; /* names and contents, in include order */
} hm_cache_key_input;

hm_status hm_cache_key(const hm_cache_key_input *in, char key[HM_SHA256_HEX]);

#endif
