/* SPDX-License-Identifier: Apache-2.0 */
/* Building the e2e model stack, sizing it to the device memory, and one batch step through it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench_data.h"
#include "bench/bench_e2e_model.h"
#include "bench/bench_layer.h"
#include "bench/bench_moe.h"
#include "bench/bench_moe_dist.h"
#include "check.h"
#include "cuda_driver.h"

/* Device memory kept free for the allocator, the dense layers' kernels and fragmentation. */
#define HEADROOM_BYTES ((double)(3ull << 30))
/* Host memory kept free for the rest of the process and the machine. */
#define HOST_HEADROOM_BYTES ((double)(8ull << 30))
/* A block that costs less than this is too small to measure against allocator noise. */
#define MIN_MEASURED_BYTES ((double)(64ull << 20))
/* Tokens the host reference checks in the first MoE block. */
#define CHECK_TOKENS 16

typedef struct gemm_shape {
  int64_t n, k;
  bool from_x;
} gemm_shape;

/* Attention projections of the preset, then the router (MoE blocks) or the MLP (dense blocks). */
static int block_shapes(const hm_model_preset *p, bool moe, gemm_shape *s) {
  int n = 0;
  int64_t h = p->hidden;
  if (p->attn == HM_MODEL_ATTN_MLA) {
    int64_t q_dim = (int64_t)p->heads * (p->qk_nope_dim + p->qk_rope_dim);
    if (p->q_lora_rank > 0) {
      s[n++] = (gemm_shape){p->q_lora_rank, h, true};
      s[n++] = (gemm_shape){q_dim, p->q_lora_rank, false};
    } else {
      s[n++] = (gemm_shape){q_dim, h, true};
    }
    s[n++] = (gemm_shape){p->kv_lora_rank + p->qk_rope_dim, h, true};
    s[n++] = (gemm_shape){(int64_t)p->heads * (p->qk_nope_dim + p->head_dim), p->kv_lora_rank, false};
    s[n++] = (gemm_shape){h, (int64_t)p->heads * p->head_dim, false};
  } else {
    s[n++] = (gemm_shape){(int64_t)(p->heads + 2 * p->kv_heads) * p->head_dim, h, true};
    s[n++] = (gemm_shape){h, (int64_t)p->heads * p->head_dim, false};
  }
  if (moe) {
    s[n++] = (gemm_shape){p->experts, h, true};
  } else {
    s[n++] = (gemm_shape){2 * p->dense_intermediate, h, true};
    s[n++] = (gemm_shape){h, p->dense_intermediate, false};
  }
  return n;
}

static double shapes_bytes(const gemm_shape *s, int count) {
  double bytes = 0;
  for (int i = 0; i < count; i++) bytes += 2.0 * (double)s[i].n * (double)s[i].k;
  return bytes;
}

static hm_status dense_layer(hm_bench *b, const hm_host_weights *w, hm_e2e_gemm *out) {
  hm_layer_config cfg = HM_LAYER_CONFIG_INIT;
  cfg.n = w->n;
  cfg.k = w->k;
  HM_CHECK(hm_quant_scheme_parse("bf16", &cfg.scheme));
  HM_CHECK(hm_layer_create(b->engine, &cfg, &out->layer));
  out->n = w->n;
  out->k = w->k;
  hm_weights_view view = hm_host_weights_view(w);
  hm_status st = hm_layer_load(out->layer, &view);
  if (st == HM_OK) st = hm_layer_transform(out->layer, b->stream);
  if (st != HM_OK) {
    hm_layer_destroy(out->layer);
    out->layer = NULL;
  }
  return st;
}

/* The dense GEMMs of count blocks: one random weight set a shape, loaded into every block. */
static hm_status make_gemms(hm_bench *b, const gemm_shape *s, int n_shapes, hm_e2e_block *blocks, int count) {
  hm_quant_scheme bf16;
  HM_CHECK(hm_quant_scheme_parse("bf16", &bf16));
  for (int i = 0; i < n_shapes; i++) {
    hm_host_weights w;
    HM_CHECK(
        hm_bench_random_weights(&w, &bf16.weight, 1, s[i].n, s[i].k, (uint64_t)b->o.seed + 17 * (uint64_t)i));
    hm_status st = HM_OK;
    for (int j = 0; j < count && st == HM_OK; j++) {
      blocks[j].gemms[i].from_x = s[i].from_x;
      st = dense_layer(b, &w, &blocks[j].gemms[i]);
      blocks[j].count = i + 1;
    }
    hm_host_weights_free(&w);
    HM_CHECK(st);
  }
  return HM_OK;
}

static hm_status alloc_random_bf16(hm_bench *b, int64_t count, uint64_t seed, void **out) {
  uint16_t *host = malloc((size_t)count * 2);
  if (host == NULL) HM_FAIL(HM_OUT_OF_MEMORY, "%lld bf16 values", (long long)count);
  hm_status ret = HM_OK;
  HM_CHECK_GOTO(hm_bench_random_bf16(host, count, 1.0f, seed), done);
  HM_CHECK_GOTO(hm_mem_alloc(b->engine, (size_t)count * 2, out), done);
  HM_CHECK_GOTO(hm_mem_upload(b->engine, *out, host, (size_t)count * 2), done);
done:
  free(host);
  return ret;
}

static hm_status make_buffers(hm_e2e_model *m) {
  hm_bench *b = m->b;
  const hm_model_preset *p = &b->o.model;
  gemm_shape s[HM_E2E_MAX_GEMMS];
  int64_t max_n = p->vocab, max_k = 1;
  for (int moe = 0; moe < 2; moe++) {
    int n = block_shapes(p, moe, s);
    for (int i = 0; i < n; i++) {
      if (s[i].n > max_n) max_n = s[i].n;
      if (s[i].k > max_k) max_k = s[i].k;
    }
  }
  int64_t t = m->max_tokens;
  HM_CHECK(alloc_random_bf16(b, t * p->hidden, (uint64_t)b->o.seed + 1, &m->x));
  HM_CHECK(alloc_random_bf16(b, t * max_k, (uint64_t)b->o.seed + 2, &m->in_scratch));
  HM_CHECK(hm_mem_alloc(b->engine, (size_t)(t * p->hidden) * 2, &m->y));
  HM_CHECK(hm_mem_alloc(b->engine, (size_t)(t * max_n) * 2, &m->out_scratch));
  float *logits = malloc((size_t)(t * p->experts) * sizeof(float));
  if (logits == NULL) HM_FAIL(HM_OUT_OF_MEMORY, "router logits");
  hm_status ret = HM_OK;
  void *dev = NULL;
  /* Ranks route their own tokens: the same logits everywhere would send every rank to the same experts. */
  uint64_t seed = (uint64_t)b->o.seed + 3 + 7919 * (uint64_t)b->rank;
  HM_CHECK_GOTO(hm_bench_random_normal(logits, t * p->experts, 2.0f, seed), done);
  HM_CHECK_GOTO(hm_mem_alloc(b->engine, (size_t)(t * p->experts) * sizeof(float), &dev), done);
  m->logits = dev;
  HM_CHECK_GOTO(hm_mem_upload(b->engine, dev, logits, (size_t)(t * p->experts) * sizeof(float)), done);
done:
  free(logits);
  return ret;
}

double hm_e2e_moe_block_bytes(const hm_e2e_model *m) {
  gemm_shape s[HM_E2E_MAX_GEMMS];
  int n = block_shapes(&m->b->o.model, true, s);
  return hm_bench_moe_layer_bytes(&m->moe) + shapes_bytes(s, n);
}

static double device_free_bytes(const hm_bench *b) {
  size_t free_bytes = 0, total = 0;
  if (!b->cuda || hm_cu.cuMemGetInfo(&free_bytes, &total) != CUDA_SUCCESS) return 0;
  return (double)free_bytes;
}

/* MemAvailable of /proc/meminfo, in bytes; 0 when unknown. */
static double host_available_bytes(void) {
  FILE *f = fopen("/proc/meminfo", "r");
  if (f == NULL) return 0;
  char line[128];
  double kib = 0;
  while (fgets(line, sizeof(line), f))
    if (sscanf(line, "MemAvailable: %lf kB", &kib) == 1) break;
  fclose(f);
  return kib * 1024;
}

/* Free device and host memory, to measure what one block takes of each. */
typedef struct mem_free {
  double device, host;
} mem_free;

static mem_free mem_now(const hm_bench *b) {
  return (mem_free){device_free_bytes(b), host_available_bytes()};
}

/* How many more blocks of cost `per_block` fit in `left`; unbounded when the cost is noise. */
static double blocks_fitting(double left, double headroom, double per_block) {
  return per_block > MIN_MEASURED_BYTES ? (left - headroom) / per_block : 1e9;
}

/*
 * As many distinct MoE blocks as memory holds after the first, at most one a layer. The
 * first block's cost is measured on the device (weights, transform, workspace) and on
 * the host (a layer may keep a host copy of its weights), not guessed.
 */
static int fit_moe_blocks(const hm_e2e_model *m, int distinct, mem_free before, double attn_bytes) {
  int most = m->layers - m->dense_layers;
  if (distinct > 0) return distinct < most ? distinct : most;
  mem_free after = mem_now(m->b);
  double fit = 1 + blocks_fitting(after.host, HOST_HEADROOM_BYTES, before.host - after.host);
  if (m->b->cuda) {
    double dev = 1 + blocks_fitting(after.device, HEADROOM_BYTES, before.device - after.device + attn_bytes);
    fit = dev < fit ? dev : fit;
  }
  return fit < 1 ? 1 : fit > most ? most : (int)fit;
}

/*
 * The first block's layer against the host reference, on a few random tokens (each
 * rank its own when sharded, whose reference is the whole layer drawn as the shards were).
 */
static hm_status check_first(hm_e2e_model *m, const hm_bench_moe_weights *w, uint64_t seed) {
  hm_bench *b = m->b;
  hm_moe_layer *ref = NULL;
  hm_bench_layer_inputs in;
  memset(&in, 0, sizeof(in));
  hm_status ret = HM_OK;
  if (m->comm)
    HM_CHECK_GOTO(hm_bench_dist_reference(b, &m->moe, seed, CHECK_TOKENS, &ref), done);
  else
    HM_CHECK_GOTO(hm_bench_moe_layer_make(b->host, b->host_stream, &m->moe, w, CHECK_TOKENS, &ref), done);
  uint64_t input_seed = (uint64_t)b->o.seed + 5 + 7919 * (uint64_t)b->rank;
  HM_CHECK_GOTO(hm_bench_layer_inputs_make(b, &m->moe, w->router_bias, CHECK_TOKENS, input_seed, &in), done);
  HM_CHECK_GOTO(hm_bench_layer_check(b, &m->moe, &m->moe_blocks[0].moe, ref, &in, &m->wrong), done);
  if (m->comm) m->wrong = (int64_t)hm_bench_reduce_sum(b, (double)m->wrong);
done:
  hm_bench_layer_inputs_free(b, &in);
  hm_moe_layer_destroy(ref);
  return ret;
}

/* One MoE block: the whole layer on this GPU, or this rank's shard of it. */
static hm_status make_moe_block(hm_e2e_model *m, const hm_bench_moe_weights *w, uint64_t seed,
                                hm_bench_moe *out) {
  hm_bench *b = m->b;
  if (m->comm) return hm_bench_dist_layer(b, m->comm, &m->moe, seed, out);
  return hm_bench_moe_layer_make(b->engine, b->stream, &m->moe, w, m->max_tokens, &out->layer);
}

/* The sharded layer's weights are drawn per rank: here only its shared experts and router bias. */
static hm_status draw_weights(hm_e2e_model *m, uint64_t seed, hm_bench_moe_weights *w) {
  if (m->comm == NULL) return hm_bench_moe_weights_make(&m->moe, seed, w);
  memset(w, 0, sizeof(*w));
  return hm_bench_moe_weights_shared(&m->moe, seed, w);
}

static hm_status make_moe_blocks(hm_e2e_model *m, int distinct) {
  hm_bench *b = m->b;
  int most = m->layers - m->dense_layers;
  if (most <= 0) return HM_OK;
  gemm_shape s[HM_E2E_MAX_GEMMS];
  double attn_bytes = shapes_bytes(s, block_shapes(&b->o.model, true, s));
  uint64_t seed = (uint64_t)b->o.seed + 100;
  hm_bench_moe_weights w;
  HM_CHECK(draw_weights(m, seed, &w));
  hm_status ret = HM_OK;
  mem_free before = mem_now(b);
  HM_CHECK_GOTO(make_moe_block(m, &w, seed, &m->moe_blocks[0].moe), done);
  m->moe_count = 1;
  /* The reference layer comes and goes before the others are made: it must not count as theirs. */
  m->wrong = -1;
  bool checked = m->comm ? hm_bench_dist_checkable(b, &m->moe) : b->o.check;
  if (checked) HM_CHECK_GOTO(check_first(m, &w, seed), done);
  int count = fit_moe_blocks(m, distinct, before, attn_bytes);
  /* Sharded blocks are made together: every rank makes as many as the tightest one fits. */
  if (m->comm) count = -(int)hm_bench_reduce_max(b, -(double)count);
  for (; m->moe_count < count; m->moe_count++)
    HM_CHECK_GOTO(make_moe_block(m, &w, seed, &m->moe_blocks[m->moe_count].moe), done);
done:
  hm_bench_moe_weights_free(&w);
  return ret;
}

static hm_status make_lm_head(hm_e2e_model *m) {
  hm_quant_scheme bf16;
  HM_CHECK(hm_quant_scheme_parse("bf16", &bf16));
  hm_host_weights w;
  const hm_model_preset *p = &m->b->o.model;
  HM_CHECK(hm_bench_random_weights(&w, &bf16.weight, 1, p->vocab, p->hidden, (uint64_t)m->b->o.seed + 9));
  hm_status st = dense_layer(m->b, &w, &m->lm_head);
  m->lm_head.from_x = true;
  hm_host_weights_free(&w);
  return st;
}

static hm_status build(hm_e2e_model *m, int distinct) {
  const hm_model_preset *p = &m->b->o.model;
  gemm_shape s[HM_E2E_MAX_GEMMS];
  if (hm_bench_dist(m->b)) HM_CHECK(hm_bench_dist_comm(m->b, &m->moe, m->max_tokens, &m->comm));
  HM_CHECK(make_buffers(m));
  HM_CHECK(make_lm_head(m));
  /* Two dense blocks already exceed L2 between uses; more would only take memory from MoE blocks. */
  m->dense_count = m->dense_layers < 2 ? m->dense_layers : 2;
  m->dense_blocks = calloc((size_t)m->dense_count + 1, sizeof(hm_e2e_block));
  if (m->dense_blocks == NULL) HM_FAIL(HM_OUT_OF_MEMORY, "dense blocks");
  HM_CHECK(make_gemms(m->b, s, block_shapes(p, false, s), m->dense_blocks, m->dense_count));
  m->moe_blocks = calloc((size_t)(m->layers - m->dense_layers) + 1, sizeof(hm_e2e_block));
  if (m->moe_blocks == NULL) HM_FAIL(HM_OUT_OF_MEMORY, "MoE blocks");
  HM_CHECK(make_moe_blocks(m, distinct));
  HM_CHECK(make_gemms(m->b, s, block_shapes(p, true, s), m->moe_blocks, m->moe_count));
  return hm_stream_synchronize(m->b->stream);
}

hm_status hm_e2e_model_build(hm_bench *b, const hm_quant_scheme *scheme, int64_t max_tokens, int distinct,
                             hm_e2e_model *out) {
  memset(out, 0, sizeof(*out));
  out->b = b;
  out->layers = b->o.model.layers;
  out->dense_layers = b->o.model.dense_layers;
  out->max_tokens = max_tokens;
  HM_CHECK(hm_bench_moe_config(&b->o, scheme, &out->moe));
  hm_status st = build(out, distinct);
  if (st != HM_OK) hm_e2e_model_destroy(out);
  return st;
}

static void blocks_free(hm_e2e_block *blocks, int count) {
  for (int i = 0; blocks != NULL && i < count; i++) {
    for (int j = 0; j < blocks[i].count; j++) hm_layer_destroy(blocks[i].gemms[j].layer);
    hm_bench_moe_destroy(&blocks[i].moe);
  }
  free(blocks);
}

void hm_e2e_model_destroy(hm_e2e_model *m) {
  if (m->b == NULL) return;
  hm_engine *e = m->b->engine;
  blocks_free(m->moe_blocks, m->moe_count);
  blocks_free(m->dense_blocks, m->dense_count);
  hm_layer_destroy(m->lm_head.layer);
  hm_comm_destroy(m->comm);
  hm_mem_free(e, m->x), hm_mem_free(e, m->y), hm_mem_free(e, m->in_scratch), hm_mem_free(e, m->out_scratch);
  hm_mem_free(e, m->logits);
  memset(m, 0, sizeof(*m));
}

static hm_status gemm_forward(const hm_e2e_model *m, const hm_e2e_gemm *g, int64_t rows, hm_stream *stream) {
  hm_gemm_args a;
  memset(&a, 0, sizeof(a));
  a.type = HM_GEMM_DENSE;
  a.m = rows;
  a.a = g->from_x ? m->x : m->in_scratch;
  a.c = m->out_scratch;
  return hm_layer_forward(g->layer, &a, stream);
}

hm_status hm_e2e_model_step(hm_e2e_model *m, int64_t tokens, int64_t sampled, hm_stream *stream) {
  for (int i = 0; i < m->layers; i++) {
    bool dense = i < m->dense_layers;
    const hm_e2e_block *blk =
        dense ? &m->dense_blocks[i % m->dense_count] : &m->moe_blocks[(i - m->dense_layers) % m->moe_count];
    for (int g = 0; g < blk->count; g++) HM_CHECK(gemm_forward(m, &blk->gemms[g], tokens, stream));
    if (dense) continue;
    hm_moe_forward_args a = {.tokens = tokens, .x = m->x, .router_logits = m->logits, .y = m->y};
    HM_CHECK(hm_bench_moe_forward(&blk->moe, &a, stream));
  }
  return sampled > 0 ? gemm_forward(m, &m->lm_head, sampled, stream) : HM_OK;
}
