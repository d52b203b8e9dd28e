/* SPDX-License-Identifier: Apache-2.0 */
/* SHA-256 through OpenSSL's EVP interface, and the framed cache key. */
#include <openssl/evp.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "kernels/cache_key.h"

static void to_hex(const unsigned char *digest, unsigned len, char *hex) {
  static const char digits[] = "0123456789abcdef";
  for (unsigned i = 0; i < len; i++) {
    hex[2 * i] = digits[digest[i] >> 4];
    hex[2 * i + 1] = digits[digest[i] & 15];
  }
  hex[2 * len] = '\0';
}

static int update_field(EVP_MD_CTX *ctx, const char *tag, const void *data, size_t size) {
  char frame[64];
  int n = snprintf(frame, sizeof(frame), "%s:%zu:", tag, size);
  return EVP_DigestUpdate(ctx, frame, (size_t)n) && EVP_DigestUpdate(ctx, data, size);
}

static int update_string(EVP_MD_CTX *ctx, const char *tag, const char *s) {
  return update_field(ctx, tag, s ? s : "", s ? strlen(s) : 0);
}

static hm_status finish(EVP_MD_CTX *ctx, int ok, char hex[HM_SHA256_HEX]) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned len = 0;
  ok = ok && EVP_DigestFinal_ex(ctx, digest, &len) && len == 32;
  EVP_MD_CTX_free(ctx);
  if (!ok) HM_FAIL(HM_INTERNAL, "SHA-256 through OpenSSL EVP failed");
  to_hex(digest, len, hex);
  return HM_OK;
}

hm_status hm_sha256_hex(const void *data, size_t size, char hex[HM_SHA256_HEX]) {
  EVP_MD_CTX *ctx = EVP_MD_CTX_new();
  if (ctx == NULL) HM_FAIL(HM_OUT_OF_MEMORY, "EVP_MD_CTX_new");
  int ok = EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) && EVP_DigestUpdate(ctx, data, size);
  return finish(ctx, ok, hex);
}

hm_status hm_cache_key(const hm_cache_key_input *in, char key[HM_SHA256_HEX]) {
  HM_CHECK_NOT_NULL(in);
  HM_CHECK_NOT_NULL(in->source);
  HM_CHECK_NOT_NULL(in->name);
  EVP_MD_CTX *ctx = EVP_MD_CTX_new();
  if (ctx == NULL) HM_FAIL(HM_OUT_OF_MEMORY, "EVP_MD_CTX_new");
  int ok = EVP_DigestInit_ex(ctx, EVP_sha256(), NULL);
  ok = ok && update_string(ctx, "library", in->library);
  ok = ok && update_string(ctx, "compiler", in->compiler);
  for (int i = 0; ok && i < in->option_count; i++) ok = update_string(ctx, "option", in->options[i]);
  ok = ok && update_string(ctx, "arch", in->arch);
  ok = ok && update_string(ctx, "name", in->name);
  ok = ok && update_string(ctx, "source", in->source);
  for (int i = 0; ok && in->headers && i < in->headers->count; i++) {
    ok = update_string(ctx, "header", in->headers->names[i]);
    ok = ok && update_field(ctx, "contents", in->headers->contents[i], in->headers->sizes[i]);
  }
  return finish(ctx, ok, key);
}
