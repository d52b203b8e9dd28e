/* SPDX-License-Identifier: Apache-2.0 */
/*
 * humming-moe-embed-example: what a serving stack does to embed the engine, with no MPI.
 * It owns its processes (one per GPU, forked here) and hands rank 0's NCCL unique id to
 * the others through pipes. Each rank creates the engine on its device's primary context
 * (the one the CUDA runtime and torch use), a MoE layer sharded by tensor parallelism
 * from weights it placed in engine memory itself, and runs forward on a CUDA stream it
 * created, then the TP all-reduce on that stream. Each rank checks y against the whole
 * layer on the host backend. Without a GPU it runs the same flow on the host backend.
 *
 *   humming-moe-embed-example [--gpus N] [--backend auto|host|cuda] [--tokens T]
 *                             [--hidden H] [--intermediate I] [--experts E] [--top-k K]
 *
 * Exit status: 0 when every rank matches, 1 on a failure or a mismatch, 77 with
 * --backend cuda on a machine without a CUDA device.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "embed/embed_stream.h"
#include "embed/embed_weights.h"
#include "humming.h"

#define EXIT_SKIP 77
/* w4a16 through bf16 intermediates and bf16 TP partial sums, against the host layer. */
#define REL_ERROR_BOUND 2e-2

enum { T_GATE_UP = 1, T_DOWN, T_BIAS, T_X, T_LOGITS };

typedef struct options {
  int gpus;
  hm_backend_kind backend;
  int64_t tokens, hidden, intermediate, experts;
  int top_k;
  uint64_t seed;
} options;

/* What one rank holds; every member is released by rank_free, whatever was made. */
typedef struct rank {
  int index, world;
  hm_engine *engine, *host;
  embed_stream own;
  hm_stream *stream;
  hm_comm *comm;
  int64_t local_i, first_i;
  hm_moe_layer *layer, *ref;
  float *bias_dev;
  void *x_dev, *logits_dev, *y_dev;
  uint16_t *x, *y, *y_ref;
  float *logits;
} rank;

/* Prints a failed library call with the library's own message; returns st. */
static hm_status report(const rank *r, const char *what, hm_status st) {
  if (st != HM_OK)
    fprintf(stderr, "rank %d: %s: %s: %s\n", r->index, what, hm_status_str(st), hm_last_error());
  return st;
}

static hm_status out_of_memory(const rank *r, const char *what) {
  fprintf(stderr, "rank %d: out of host memory for %s\n", r->index, what);
  return HM_OUT_OF_MEMORY;
}

#define TRY(r, expr)                            \
  do {                                          \
    hm_status st_ = report((r), #expr, (expr)); \
    if (st_ != HM_OK) return st_;               \
  } while (0)

static int usage(const char *bad) {
  fprintf(stderr,
          "humming-moe-embed-example: %s\n"
          "usage: humming-moe-embed-example [--gpus N] [--backend auto|host|cuda] [--tokens T]\n"
          "       [--hidden H] [--intermediate I] [--experts E] [--top-k K] [--seed S]\n",
          bad);
  return 1;
}

static int parse_int(const char *flag, const char *v, int64_t lo, int64_t *out) {
  char *end = NULL;
  errno = 0;
  long long x = strtoll(v ? v : "", &end, 10);
  if (v == NULL || *v == '\0' || *end != '\0' || errno != 0 || x < lo) {
    fprintf(stderr, "humming-moe-embed-example: %s %s: expected an integer >= %lld\n", flag,
            v ? v : "(missing)", (long long)lo);
    return 1;
  }
  *out = x;
  return 0;
}

static int parse_backend(const char *v, hm_backend_kind *out) {
  if (v && strcmp(v, "auto") == 0)
    *out = HM_BACKEND_AUTO;
  else if (v && strcmp(v, "host") == 0)
    *out = HM_BACKEND_HOST;
  else if (v && strcmp(v, "cuda") == 0)
    *out = HM_BACKEND_CUDA;
  else
    return usage("--backend takes auto, host or cuda");
  return 0;
}

static int parse_options(int argc, char **argv, options *o) {
  *o = (options){1, HM_BACKEND_AUTO, 16, 512, 1024, 16, 4, 1234};
  for (int i = 1; i < argc; i++) {
    const char *f = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    int64_t x = 0;
    int bad = 0;
    if (strcmp(f, "--backend") == 0)
      bad = parse_backend(v, &o->backend);
    else if (strcmp(f, "--gpus") == 0)
      bad = parse_int(f, v, 1, &x), o->gpus = (int)x;
    else if (strcmp(f, "--tokens") == 0)
      bad = parse_int(f, v, 1, &o->tokens);
    else if (strcmp(f, "--hidden") == 0)
      bad = parse_int(f, v, EMBED_GROUP, &o->hidden);
    else if (strcmp(f, "--intermediate") == 0)
      bad = parse_int(f, v, EMBED_GROUP, &o->intermediate);
    else if (strcmp(f, "--experts") == 0)
      bad = parse_int(f, v, 4, &o->experts);
    else if (strcmp(f, "--top-k") == 0)
      bad = parse_int(f, v, 1, &x), o->top_k = (int)x;
    else if (strcmp(f, "--seed") == 0)
      bad = parse_int(f, v, 0, &x), o->seed = (uint64_t)x;
    else
      return usage(f);
    if (bad) return 1;
    i++;
  }
  if (o->hidden % EMBED_GROUP != 0) return usage("--hidden must be a multiple of 128 (w4a16 groups)");
  if (o->intermediate % ((int64_t)EMBED_GROUP * o->gpus) != 0)
    return usage("--intermediate must be a multiple of 128 x --gpus (each TP slice holds whole groups)");
  if (o->experts % 4 != 0 || o->top_k > o->experts / 2)
    return usage("--experts must be a multiple of 4 and --top-k at most experts/2 (4 groups, 2 kept)");
  return 0;
}

/* DeepSeek-style routing: sigmoid scores, 4 groups of which 2 stay, a correction bias. */
static hm_status layer_config(const options *o, int64_t intermediate, hm_moe_config *out) {
  hm_moe_config c = HM_MOE_CONFIG_INIT;
  c.hidden = o->hidden;
  c.intermediate = intermediate;
  c.router = (hm_moe_router_config){HM_MOE_SCORING_SIGMOID, o->experts, o->top_k, 4, 2, true, true, 2.5f};
  hm_status st = hm_quant_scheme_parse("w4a16", &c.scheme);
  *out = c;
  return st;
}

/* ---- NCCL id from rank 0 to the others, through pipes the parent made ---- */

typedef struct id_pipes {
  int (*fds)[2]; /* fds[r] carries the id to rank r */
} id_pipes;

static int write_all(int fd, const void *buf, size_t n) {
  for (const char *p = buf; n > 0;) {
    ssize_t w = write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return -1;
    p += w, n -= (size_t)w;
  }
  return 0;
}

static int read_all(int fd, void *buf, size_t n) {
  for (char *p = buf; n > 0;) {
    ssize_t r = read(fd, p, n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return -1;
    p += r, n -= (size_t)r;
  }
  return 0;
}

/* Rank 0 makes the id (when its engine is CUDA and NCCL loads) and sends it, or a refusal. */
static hm_status share_id(rank *r, const id_pipes *p, hm_comm_nccl_id *id, bool *have) {
  const bool cuda = hm_engine_backend(r->engine) == HM_BACKEND_CUDA;
  hm_status st = cuda ? hm_comm_nccl_id_create(id) : HM_UNSUPPORTED;
  *have = st == HM_OK;
  if (!cuda && r->world == 1) printf("# rank 0: host backend: one rank, no communicator\n");
  if (cuda && !*have && r->world == 1)
    printf("# rank 0: no NCCL (%s): one GPU, no communicator\n", hm_last_error());
  for (int i = 1; i < r->world; i++) {
    char ok = *have;
    if (write_all(p->fds[i][1], &ok, 1) != 0 || write_all(p->fds[i][1], id, sizeof(*id)) != 0) {
      fprintf(stderr, "rank 0: sending the NCCL id to rank %d: %s\n", i, strerror(errno));
      return HM_SYSTEM;
    }
  }
  if (!*have && r->world > 1) {
    fprintf(stderr, "rank 0: no NCCL id (%s) for %d ranks\n", hm_last_error(), r->world);
    return st;
  }
  return HM_OK;
}

static hm_status receive_id(rank *r, const id_pipes *p, hm_comm_nccl_id *id) {
  char ok = 0;
  if (read_all(p->fds[r->index][0], &ok, 1) != 0 || read_all(p->fds[r->index][0], id, sizeof(*id)) != 0) {
    fprintf(stderr, "rank %d: rank 0 exited before sending the NCCL id\n", r->index);
    return HM_REMOTE;
  }
  if (!ok) {
    fprintf(stderr, "rank %d: rank 0 has no NCCL id to share\n", r->index);
    return HM_REMOTE;
  }
  return HM_OK;
}

/* TP over all ranks: each holds I/world columns of every expert. */
static hm_status join_ranks(rank *r, const options *o, const id_pipes *p) {
  hm_comm_nccl_id id;
  memset(&id, 0, sizeof(id));
  bool have = true;
  /* Both print their own reasons. */
  hm_status st = r->index == 0 ? share_id(r, p, &id, &have) : receive_id(r, p, &id);
  if (st != HM_OK) return st;
  r->local_i = o->intermediate;
  if (!have) return HM_OK;
  hm_comm_config cc = HM_COMM_CONFIG_INIT;
  cc.ep = 1;
  cc.tp = r->world;
  cc.experts = o->experts;
  cc.hidden = o->hidden;
  cc.intermediate = o->intermediate;
  cc.top_k = o->top_k;
  cc.max_tokens = o->tokens;
  cc.bind = false; /* the serving stack binds its own threads */
  TRY(r, hm_comm_create_nccl(r->engine, &cc, &id, r->index, r->world, &r->comm));
  hm_comm_plan plan;
  TRY(r, hm_comm_get_plan(r->comm, &plan));
  r->local_i = plan.local_intermediate;
  r->first_i = plan.first_intermediate;
  return HM_OK;
}

/* ---- Weights the rank places in engine memory itself, then hands to the layer ---- */

typedef struct placed {
  void *ptr[3];
  hm_weights_view view;
} placed;

static void placed_free(hm_engine *e, placed *p) {
  for (int i = 0; i < 3; i++) hm_mem_free(e, p->ptr[i]);
  memset(p, 0, sizeof(*p));
}

/* Packs a slice on the host and uploads it; sizes must be what the layer expects. */
static hm_status place(rank *r, hm_engine *e, const embed_slice *s, const hm_weights_bytes *want,
                       placed *out) {
  const size_t bytes[3] = {(size_t)embed_qweight_words(s) * 4, (size_t)embed_scale_count(s) * 2,
                           (size_t)embed_zero_words(s) * 4};
  const size_t wanted[3] = {want->qweight, want->scales, want->zeros};
  memset(out, 0, sizeof(*out));
  void *host[3] = {malloc(bytes[0]), malloc(bytes[1]), malloc(bytes[2])};
  hm_status st = host[0] && host[1] && host[2] ? HM_OK : out_of_memory(r, "packing weights");
  for (int i = 0; i < 3 && st == HM_OK; i++)
    if (bytes[i] != wanted[i]) {
      fprintf(stderr, "rank %d: tensor %d array %d holds %zu bytes, the layer reads %zu\n", r->index,
              s->tensor, i, bytes[i], wanted[i]);
      st = HM_INVALID_ARGUMENT;
    }
  if (st == HM_OK) embed_pack(s, host[0], host[1], host[2]);
  for (int i = 0; i < 3 && st == HM_OK; i++) {
    st = report(r, "hm_mem_alloc (weights)", hm_mem_alloc(e, bytes[i], &out->ptr[i]));
    if (st == HM_OK)
      st = report(r, "hm_mem_upload (weights)", hm_mem_upload(e, out->ptr[i], host[i], bytes[i]));
  }
  for (int i = 0; i < 3; i++) free(host[i]);
  if (st != HM_OK) {
    placed_free(e, out);
    return st;
  }
  out->view = (hm_weights_view){.qweight = out->ptr[0], .scales = out->ptr[1], .zeros = out->ptr[2]};
  return HM_OK;
}

/* Rows of this rank's gate_up slice: its gate rows, then its up rows. */
static int64_t *gate_up_rows(int64_t intermediate, int64_t first, int64_t local) {
  int64_t *rows = malloc((size_t)(2 * local) * sizeof(int64_t));
  for (int64_t j = 0; rows && j < local; j++) rows[j] = first + j, rows[local + j] = intermediate + first + j;
  return rows;
}

static int64_t *identity_rows(int64_t n) {
  int64_t *rows = malloc((size_t)n * sizeof(int64_t));
  for (int64_t j = 0; rows && j < n; j++) rows[j] = j;
  return rows;
}

/*
 * A layer on engine e holding columns [first, first + local) of the intermediate
 * dimension, loaded from engine memory (device) or from host memory (the reference).
 */
static hm_status build_layer(rank *r, const options *o, hm_engine *e, int64_t first, int64_t local,
                             bool device, hm_moe_layer **out) {
  hm_moe_config c;
  TRY(r, layer_config(o, local, &c));
  TRY(r, hm_moe_layer_create(e, &c, out));
  hm_weights_bytes b_gu, b_dn;
  TRY(r, hm_moe_layer_weights_bytes(*out, false, &b_gu, &b_dn));
  int64_t *gu_rows = gate_up_rows(o->intermediate, first, local), *dn_rows = identity_rows(o->hidden);
  embed_slice gu = {o->seed, T_GATE_UP, o->experts, o->hidden, 2 * local, gu_rows, 0, o->hidden};
  embed_slice dn = {o->seed, T_DOWN, o->experts, o->intermediate, o->hidden, dn_rows, first, local};
  placed pg, pd;
  memset(&pg, 0, sizeof(pg)), memset(&pd, 0, sizeof(pd));
  hm_status st = gu_rows && dn_rows ? HM_OK : out_of_memory(r, "row maps");
  if (st == HM_OK) st = place(r, e, &gu, &b_gu, &pg);
  if (st == HM_OK) st = place(r, e, &dn, &b_dn, &pd);
  if (st == HM_OK && device)
    st = report(r, "hm_moe_layer_load_device", hm_moe_layer_load_device(*out, &pg.view, &pd.view, r->stream));
  if (st == HM_OK && !device)
    st = report(r, "hm_moe_layer_load", hm_moe_layer_load(*out, &pg.view, &pd.view));
  /* The layer copied the weights: the engine arrays can go before transform. */
  placed_free(e, &pg), placed_free(e, &pd);
  free(gu_rows), free(dn_rows);
  return st;
}

static hm_status make_inputs(rank *r, const options *o) {
  const int64_t th = o->tokens * o->hidden, te = o->tokens * o->experts;
  r->x = malloc((size_t)th * 2), r->y = malloc((size_t)th * 2), r->y_ref = malloc((size_t)th * 2);
  r->logits = malloc((size_t)te * sizeof(float));
  if (!r->x || !r->y || !r->y_ref || !r->logits) return out_of_memory(r, "inputs");
  for (int64_t i = 0; i < th; i++) r->x[i] = embed_bf16(embed_uniform(o->seed, T_X, i, -2.0f, 2.0f));
  for (int64_t i = 0; i < te; i++) r->logits[i] = embed_uniform(o->seed, T_LOGITS, i, -3.0f, 3.0f);
  TRY(r, hm_mem_alloc(r->engine, (size_t)th * 2, &r->x_dev));
  TRY(r, hm_mem_alloc(r->engine, (size_t)th * 2, &r->y_dev));
  TRY(r, hm_mem_alloc(r->engine, (size_t)te * sizeof(float), &r->logits_dev));
  TRY(r, hm_mem_upload(r->engine, r->x_dev, r->x, (size_t)th * 2));
  TRY(r, hm_mem_upload(r->engine, r->logits_dev, r->logits, (size_t)te * sizeof(float)));
  return HM_OK;
}

static hm_status set_bias(rank *r, const options *o, hm_moe_layer *l, bool device) {
  float *bias = malloc((size_t)o->experts * sizeof(float));
  if (bias == NULL) return out_of_memory(r, "the router bias");
  for (int64_t e = 0; e < o->experts; e++) bias[e] = embed_uniform(o->seed, T_BIAS, e, -0.05f, 0.05f);
  const size_t bytes = (size_t)o->experts * sizeof(float);
  hm_status st = HM_OK;
  if (device) {
    st = hm_mem_alloc(r->engine, bytes, (void **)&r->bias_dev);
    if (st == HM_OK) st = hm_mem_upload(r->engine, r->bias_dev, bias, bytes);
    /* Copied on the stream: bias_dev lives until the rank ends. */
    if (st == HM_OK) st = hm_moe_layer_set_router_bias_device(l, r->bias_dev, r->stream);
  } else {
    st = hm_moe_layer_set_router_bias(l, bias);
  }
  free(bias);
  return report(r, device ? "router bias from engine memory" : "router bias from the host", st);
}

/* The serving stack's path: its stream, its device pointers, no host wait until the end. */
static hm_status serve(rank *r, const options *o) {
  TRY(r, build_layer(r, o, r->engine, r->first_i, r->local_i, true, &r->layer));
  TRY(r, set_bias(r, o, r->layer, true));
  TRY(r, hm_moe_layer_transform(r->layer, r->stream));
  TRY(r, hm_moe_layer_reserve(r->layer, o->tokens, r->stream));
  TRY(r, make_inputs(r, o));
  hm_moe_forward_args a = {.tokens = o->tokens, .x = r->x_dev, .router_logits = r->logits_dev, .y = r->y_dev};
  TRY(r, hm_moe_layer_forward(r->layer, &a, r->stream));
  if (r->comm != NULL && r->world > 1)
    TRY(r, hm_comm_tp_all_reduce(r->comm, r->y_dev, o->tokens * o->hidden, HM_BF16, r->stream));
  if (r->comm != NULL)
    TRY(r, hm_comm_synchronize(r->comm, r->stream));
  else
    TRY(r, hm_stream_synchronize(r->stream));
  TRY(r, hm_mem_download(r->engine, r->y, r->y_dev, (size_t)(o->tokens * o->hidden) * 2));
  return HM_OK;
}

static hm_status reference(rank *r, const options *o) {
  hm_engine_config ec = HM_ENGINE_CONFIG_INIT;
  ec.backend = HM_BACKEND_HOST;
  ec.rank = r->index;
  TRY(r, hm_engine_create(&ec, &r->host));
  TRY(r, build_layer(r, o, r->host, 0, o->intermediate, false, &r->ref));
  TRY(r, set_bias(r, o, r->ref, false));
  TRY(r, hm_moe_layer_transform(r->ref, NULL));
  hm_moe_forward_args a = {.tokens = o->tokens, .x = r->x, .router_logits = r->logits, .y = r->y_ref};
  TRY(r, hm_moe_layer_forward(r->ref, &a, NULL));
  return HM_OK;
}

static float bf16_value(uint16_t b) {
  uint32_t bits = (uint32_t)b << 16;
  float f;
  memcpy(&f, &bits, sizeof(f));
  return f;
}

static double rel_error(const uint16_t *got, const uint16_t *want, int64_t n) {
  double diff = 0, norm = 0;
  for (int64_t i = 0; i < n; i++) {
    double g = bf16_value(got[i]), w = bf16_value(want[i]);
    diff += (g - w) * (g - w), norm += w * w;
  }
  return norm > 0 ? sqrt(diff / norm) : (diff > 0 ? INFINITY : 0);
}

static void rank_free(rank *r) {
  hm_moe_layer_destroy(r->layer);
  hm_moe_layer_destroy(r->ref);
  hm_comm_destroy(r->comm);
  hm_mem_free(r->engine, r->x_dev), hm_mem_free(r->engine, r->logits_dev), hm_mem_free(r->engine, r->y_dev);
  hm_mem_free(r->engine, r->bias_dev);
  hm_stream_destroy(r->stream);
  embed_stream_destroy(&r->own);
  hm_engine_destroy(r->host);
  hm_engine_destroy(r->engine);
  free(r->x), free(r->y), free(r->y_ref), free(r->logits);
  hm_shutdown();
}

static hm_status start(rank *r, const options *o) {
  hm_engine_config ec = HM_ENGINE_CONFIG_INIT;
  ec.backend = o->backend;
  ec.device = r->index; /* the serving stack chose this process's GPU */
  ec.rank = r->index;
  ec.local_rank = r->index;
  TRY(r, hm_engine_create(&ec, &r->engine));
  if (hm_engine_backend(r->engine) == HM_BACKEND_HOST && r->world > 1) {
    fprintf(stderr, "rank %d: no CUDA device; the host backend runs one rank (--gpus 1)\n", r->index);
    return HM_NO_DEVICE;
  }
  if (embed_stream_create(r->engine, &r->own) != HM_OK) return HM_CUDA;
  TRY(r, hm_stream_wrap(r->engine, r->own.native, &r->stream));
  return HM_OK;
}

static int run_rank(const options *o, int index, int world, const id_pipes *p) {
  rank r;
  memset(&r, 0, sizeof(r));
  r.index = index, r.world = world;
  hm_status st = start(&r, o);
  if (st == HM_NO_DEVICE && o->backend == HM_BACKEND_CUDA) {
    printf("SKIP: no CUDA device (%s)\n", hm_last_error());
    rank_free(&r);
    return EXIT_SKIP;
  }
  if (st == HM_OK) st = join_ranks(&r, o, p);
  if (st == HM_OK) st = serve(&r, o);
  if (st == HM_OK) st = reference(&r, o);
  int code = 1;
  if (st == HM_OK) {
    double err = rel_error(r.y, r.y_ref, o->tokens * o->hidden);
    bool cuda = hm_engine_backend(r.engine) == HM_BACKEND_CUDA;
    printf("# rank %d/%d %s %s%s I[%lld,%lld) T=%lld rel_err %.3g (bound %.0e) %s\n", index, world,
           cuda ? "cuda" : "host", hm_engine_device_name(r.engine), r.comm ? ", NCCL communicator," : "",
           (long long)r.first_i, (long long)(r.first_i + r.local_i), (long long)o->tokens, err,
           REL_ERROR_BOUND, err <= REL_ERROR_BOUND ? "OK" : "WRONG");
    if (!cuda) printf("# rank %d ran on the host backend: no CUDA device was used\n", index);
    code = err <= REL_ERROR_BOUND ? 0 : 1;
  }
  fflush(stdout);
  rank_free(&r);
  return code;
}

/* One process a GPU, as a serving stack forks its workers; the exit codes are combined. */
static int run_ranks(const options *o) {
  if (o->gpus == 1) return run_rank(o, 0, 1, &(id_pipes){NULL});
  int(*fds)[2] = calloc((size_t)o->gpus, sizeof(*fds));
  pid_t *pids = calloc((size_t)o->gpus, sizeof(pid_t));
  if (fds == NULL || pids == NULL) return usage("out of memory");
  for (int i = 1; i < o->gpus; i++)
    if (pipe(fds[i]) != 0) return usage(strerror(errno));
  fflush(stdout), fflush(stderr);
  for (int i = 0; i < o->gpus; i++) {
    pids[i] = fork();
    if (pids[i] < 0) return usage(strerror(errno));
    if (pids[i] > 0) continue;
    for (int j = 1; j < o->gpus; j++) {
      if (i != 0) close(fds[j][1]);
      if (j != i) close(fds[j][0]);
    }
    _exit(run_rank(o, i, o->gpus, &(id_pipes){fds}));
  }
  for (int j = 1; j < o->gpus; j++) close(fds[j][0]), close(fds[j][1]);
  int worst = 0, skipped = 0;
  for (int i = 0; i < o->gpus; i++) {
    int status = 0;
    if (waitpid(pids[i], &status, 0) < 0 || !WIFEXITED(status))
      worst = 1;
    else if (WEXITSTATUS(status) == EXIT_SKIP)
      skipped++;
    else if (WEXITSTATUS(status) != 0)
      worst = 1;
  }
  free(fds), free(pids);
  return worst ? 1 : skipped == o->gpus ? EXIT_SKIP : skipped ? 1 : 0;
}

int main(int argc, char **argv) {
  options o;
  if (parse_options(argc, argv, &o) != 0) return 1;
  printf("# humming-moe-embed-example %s: %d rank(s), H=%lld I=%lld E=%lld top_k=%d T=%lld, w4a16\n",
         hm_get_version(), o.gpus, (long long)o.hidden, (long long)o.intermediate, (long long)o.experts,
         o.top_k, (long long)o.tokens);
  int code = run_ranks(&o);
  printf("# %s\n", code == 0 ? "all ranks match the host backend" : code == EXIT_SKIP ? "skipped" : "FAILED");
  return code;
}
