/* SPDX-License-Identifier: Apache-2.0 */
/* Core of the public API: versions, status codes, dtypes, logging, engine, streams, memory. */
#ifndef HUMMING_CORE_H
#define HUMMING_CORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(HM_BUILDING_LIBRARY)
#define HM_API __attribute__((visibility("default")))
#else
#define HM_API
#endif

#define HM_VERSION_MAJOR 0
#define HM_VERSION_MINOR 1
#define HM_VERSION_PATCH 0
#define HM_VERSION_CODE (HM_VERSION_MAJOR * 10000 + HM_VERSION_MINOR * 100 + HM_VERSION_PATCH)

/* "major.minor.patch" of the loaded library (may differ from the header's). */
HM_API const char *hm_get_version(void);

/*
 * Status codes; the name says who is at fault. One table makes both the enum and
 * hm_status_str(). Details of a failure go to the log and to hm_last_error().
 */
#define HM_STATUS_TABLE(X)                                                              \
  X(OK, "success")                                                                      \
  X(INVALID_ARGUMENT, "invalid argument")                                               \
  X(UNSUPPORTED, "unsupported on this device or in this configuration")                 \
  X(OUT_OF_MEMORY, "out of memory")                                                     \
  X(NOT_READY, "object not in the state the call needs")                                \
  X(NO_DEVICE, "no usable CUDA device")                                                 \
  X(CUDA, "CUDA driver error")                                                          \
  X(NVRTC, "kernel compilation failed")                                                 \
  X(NCCL, "NCCL error")                                                                 \
  X(MPI, "MPI error")                                                                   \
  X(SYSTEM, "operating system error")                                                   \
  X(CORRUPT, "corrupt data (checkpoint, cache entry)")                                  \
  X(TIMEOUT, "timed out")                                                               \
  X(REMOTE, "a peer rank failed")                                                       \
  X(INTERNAL, "internal error")

typedef enum hm_status {
#define HM_STATUS_ENUM_(name, text) HM_##name,
  HM_STATUS_TABLE(HM_STATUS_ENUM_)
#undef HM_STATUS_ENUM_
      HM_STATUS_COUNT
} hm_status;

/* A constant description of a status code; never NULL. */
HM_API const char *hm_status_str(hm_status status);
/* The message of the last failure on the calling thread ("" if none). */
HM_API const char *hm_last_error(void);

/*
 * Element types. Sub-byte types are stored packed LSB-first in 32-bit words.
 * Columns: name, bits, is_float, is_signed.
 */
#define HM_DTYPE_TABLE(X)                                                               \
  X(F32, "f32", 32, 1, 1)                                                               \
  X(F16, "f16", 16, 1, 1)                                                               \
  X(BF16, "bf16", 16, 1, 1)                                                             \
  X(F8E4M3, "f8e4m3", 8, 1, 1)                                                          \
  X(F8E5M2, "f8e5m2", 8, 1, 1)                                                          \
  X(E8M0, "e8m0", 8, 1, 0)                                                              \
  X(F4E2M1, "f4e2m1", 4, 1, 1)                                                          \
  X(I32, "i32", 32, 0, 1)                                                               \
  X(I8, "i8", 8, 0, 1)                                                                  \
  X(I4, "i4", 4, 0, 1)                                                                  \
  X(U8, "u8", 8, 0, 0)                                                                  \
  X(U7, "u7", 7, 0, 0)                                                                  \
  X(U6, "u6", 6, 0, 0)                                                                  \
  X(U5, "u5", 5, 0, 0)                                                                  \
  X(U4, "u4", 4, 0, 0)                                                                  \
  X(U3, "u3", 3, 0, 0)                                                                  \
  X(U2, "u2", 2, 0, 0)                                                                  \
  X(U1, "u1", 1, 0, 0)

typedef enum hm_dtype {
#define HM_DTYPE_ENUM_(id, name, bits, is_float, is_signed) HM_##id,
  HM_DTYPE_TABLE(HM_DTYPE_ENUM_)
#undef HM_DTYPE_ENUM_
      HM_DTYPE_COUNT
} hm_dtype;

/* Lower-case name ("bf16"), or "invalid". */
HM_API const char *hm_dtype_name(hm_dtype dtype);
/* Bits per element, 0 for an invalid dtype. */
HM_API int hm_dtype_bits(hm_dtype dtype);
/* Parses a name from hm_dtype_name(); HM_INVALID_ARGUMENT if unknown. */
HM_API hm_status hm_dtype_parse(const char *name, hm_dtype *out);

typedef enum hm_log_level {
  HM_LOG_NONE = 0,
  HM_LOG_ERROR,
  HM_LOG_WARN,
  HM_LOG_INFO,
  HM_LOG_DEBUG
} hm_log_level;

/* Receives each formatted log line (with its prefix, without newline). */
typedef void (*hm_log_fn)(hm_log_level level, const char *line, void *user);
/* Routes log lines to fn instead of stderr; NULL restores stderr. */
HM_API void hm_log_set(hm_log_fn fn, void *user);

typedef enum hm_backend_kind {
  HM_BACKEND_AUTO = 0, /* CUDA when a driver and a device are there, else host */
  HM_BACKEND_HOST,     /* the reference: plain C on the CPU */
  HM_BACKEND_CUDA
} hm_backend_kind;

#define HM_ENGINE_CONFIG_MAGIC 0x686d6563u /* "hmec" */

/*
 * Engine configuration, passed with its size and magic so that the ABI can grow.
 * Precedence: a field set here > HUMMING_* environment > automatic choice.
 */
typedef struct hm_engine_config {
  uint32_t size;
  uint32_t magic;
  hm_backend_kind backend; /* AUTO: HUMMING_BACKEND, then automatic */
  int device;              /* CUDA device ordinal, -1: the local rank's */
  int rank;                /* for log lines; -1: unknown */
  int local_rank;          /* rank within the node; picks the device when device < 0 */
} hm_engine_config;

#define HM_ENGINE_CONFIG_INIT                                                           \
  { sizeof(hm_engine_config), HM_ENGINE_CONFIG_MAGIC, HM_BACKEND_AUTO, -1, -1, 0 }

typedef struct hm_engine hm_engine;
typedef struct hm_stream hm_stream;

/*
 * Creates an engine (one per rank and device). A CUDA engine works in the primary
 * context of its device, the one the CUDA runtime (and so torch) uses, retained until
 * destroy: pointers and streams of the caller's runtime on that device are the engine's.
 * Each CUDA call makes that context current on the calling thread and leaves it so, as
 * cudaSetDevice would; a host driving several devices from one thread sets its own again.
 */
HM_API hm_status hm_engine_create(const hm_engine_config *config, hm_engine **out);
/* Destroys an engine; NULL is a no-op. */
HM_API void hm_engine_destroy(hm_engine *engine);
/* The backend the engine runs on (never AUTO). */
HM_API hm_backend_kind hm_engine_backend(const hm_engine *engine);
/* A one-line description of the device ("NVIDIA H200 (132 SMs, sm_90)" or "host (8 threads)"). */
HM_API const char *hm_engine_device_name(const hm_engine *engine);
/* Compute capability as 10*major+minor (90 for H200), 0 on the host backend. */
HM_API int hm_engine_arch(const hm_engine *engine);
/* The CUDA device ordinal the engine runs on (torch's cuda:N), -1 on the host backend. */
HM_API int hm_engine_device(const hm_engine *engine);

/* Creates a stream owned by the engine. */
HM_API hm_status hm_stream_create(hm_engine *engine, hm_stream **out);
/*
 * Wraps a stream owned by the caller (a CUstream of the engine's device's primary
 * context, e.g. torch.cuda.current_stream().cuda_stream; NULL: the legacy default
 * stream); destroy does not free it. The caller's stream must outlive the wrapper.
 * On the host backend work runs on the calling thread; native_stream is ignored.
 */
HM_API hm_status hm_stream_wrap(hm_engine *engine, void *native_stream, hm_stream **out);
/* Waits until all work on the stream is done. */
HM_API hm_status hm_stream_synchronize(hm_stream *stream);
/* Destroys a stream; NULL is a no-op. */
HM_API void hm_stream_destroy(hm_stream *stream);

/* Memory on the engine's device (host memory on the host backend). */
HM_API hm_status hm_mem_alloc(hm_engine *engine, size_t bytes, void **out);
/* Frees memory from hm_mem_alloc; NULL is a no-op. */
HM_API void hm_mem_free(hm_engine *engine, void *ptr);
/* Copies host->device. Synchronous with respect to the host. */
HM_API hm_status hm_mem_upload(hm_engine *engine, void *dst, const void *src, size_t bytes);
/* Copies device->host. Synchronous with respect to the host. */
HM_API hm_status hm_mem_download(hm_engine *engine, void *dst, const void *src, size_t bytes);

/*
 * sizeof of a public struct by its name ("hm_moe_config"), 0 for a name it does not
 * know: lets a binding check its mirrors of the structs against this library.
 */
HM_API size_t hm_abi_sizeof(const char *type_name);

/* Frees the process-wide registry (caches, loaded modules). Call after the last destroy. */
HM_API void hm_shutdown(void);

#ifdef __cplusplus
}
#endif

#endif
