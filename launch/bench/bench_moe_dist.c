/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Shards of a preset's layer for the distributed layer and e2e modes. Expert e's
 * weights are drawn from its own seed, one expert at a time: a rank draws its local
 * experts and keeps its TP slice of each (rows of gate_up, columns of down, in the
 * canonical contract), and the host reference draws them all. Slicing a quantized
 * array is exact when the slice holds whole words and whole scale groups; a format
 * that cannot be split at this TP is refused naming why.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mpi.h>

#include "bench/bench_data.h"
#include "bench/bench_moe_dist.h"
#include "check.h"

/* A host reference of more than this many weight bytes on every rank is not drawn. */
#define CHECK_MAX_LAYER_BYTES ((double)(256ull << 20))

bool hm_bench_dist(const hm_bench *b) {
  const hm_bench_opts *o = &b->o;
  if (o->mode != HM_MODE_LAYER && o->mode != HM_MODE_E2E) return false;
  return b->mpi && o->ep * o->tp == b->world && (b->world > 1 || o->seen_ep);
}

bool hm_bench_dist_checkable(const hm_bench *b, const hm_moe_config *config) {
  return b->o.check && hm_bench_moe_layer_bytes(config) <= CHECK_MAX_LAYER_BYTES;
}

#define RANK_LINE 256

void hm_bench_dist_header(hm_bench *b, hm_comm *comm, const hm_moe_config *config, bool checked) {
  bool fp8 = config->scheme.act == HM_F8E4M3 && config->scheme.act_scale == HM_ACT_SCALE_GROUP128;
  bool masked = config->layout == HM_MOE_LAYOUT_MASKED;
  hm_report_header(b->report,
                   "sharded: %d ranks, EP %lld x TP %lld; dispatch %s rows into the %s layout, one message a "
                   "peer; shared experts on each token's rank; check %s",
                   b->world, (long long)b->o.ep, (long long)b->o.tp, fp8 ? "fp8" : "bf16",
                   masked ? "masked" : "contiguous",
                   checked      ? "against the whole layer on the host, per rank"
                   : b->o.check ? "off (the whole layer is too large for a host copy on every rank)"
                                : "off");
  hm_comm_plan p;
  char mine[RANK_LINE] = "";
  if (hm_comm_get_plan(comm, &p) == HM_OK)
    snprintf(mine, sizeof(mine),
             "rank %d: EP rank %d TP rank %d, experts [%lld, %lld), intermediate [%lld, %lld); %s", p.rank,
             p.ep_rank, p.tp_rank, (long long)p.first_expert, (long long)(p.first_expert + p.local_experts),
             (long long)p.first_intermediate, (long long)(p.first_intermediate + p.local_intermediate),
             hm_comm_binding(comm));
  char *all = b->rank == 0 ? malloc((size_t)b->world * RANK_LINE) : NULL;
  MPI_Gather(mine, RANK_LINE, MPI_CHAR, all, RANK_LINE, MPI_CHAR, 0, MPI_COMM_WORLD);
  for (int r = 0; all != NULL && r < b->world; r++)
    hm_report_header(b->report, "%s", all + (size_t)r * RANK_LINE);
  free(all);
}

hm_status hm_bench_dist_comm(hm_bench *b, const hm_moe_config *config, int64_t max_tokens, hm_comm **out) {
  hm_comm_config cfg = HM_COMM_CONFIG_INIT;
  cfg.ep = (int)b->o.ep;
  cfg.tp = (int)b->o.tp;
  cfg.experts = config->router.experts;
  cfg.hidden = config->hidden;
  cfg.intermediate = config->intermediate;
  cfg.top_k = config->router.top_k;
  cfg.max_tokens = max_tokens;
  bool fp8 = config->scheme.act == HM_F8E4M3 && config->scheme.act_scale == HM_ACT_SCALE_GROUP128;
  cfg.payload = fp8 ? HM_COMM_PAYLOAD_FP8 : HM_COMM_PAYLOAD_BF16;
  cfg.layout = config->layout == HM_MOE_LAYOUT_MASKED ? HM_COMM_LAYOUT_MASKED : HM_COMM_LAYOUT_CONTIGUOUS;
  return hm_comm_create_mpi(b->engine, &cfg, out);
}

/* Seeds of expert e's two arrays, apart from those of the shared experts and the bias. */
static uint64_t expert_seed(uint64_t seed, int64_t e, int which) {
  return seed * 1000003u + 16 + 2 * (uint64_t)e + (uint64_t)which;
}

/* Which part of an expert a rank keeps: the intermediate columns [i0, i0 + li) of I. */
typedef struct slice {
  int64_t inter, i0, li;
} slice;

static hm_status need_multiple(int64_t value, int64_t unit, const char *what, const slice *s) {
  if (unit > 0 && value % unit == 0) return HM_OK;
  HM_FAIL(HM_INVALID_ARGUMENT, "the scheme cannot be split at TP %lld: %s %lld is not a multiple of %lld",
          (long long)(s->inter / s->li), what, (long long)value, (long long)unit);
}

/* dst (rows, cols) = src[r][col0 .. col0 + cols) for rows of src_row bytes. */
static char *copy_cols(char *dst, const char *src, int64_t rows, size_t src_row, size_t col0, size_t cols) {
  for (int64_t r = 0; r < rows; r++) memcpy(dst + (size_t)r * cols, src + (size_t)r * src_row + col0, cols);
  return dst + (size_t)rows * cols;
}

/* Zero points are packed along N, one row a K group: each row takes every run's columns. */
static hm_status slice_zero_columns(const hm_host_weights *w, const slice *s, const int64_t *starts, int runs,
                                    uint32_t *out) {
  const hm_quant_format *f = &w->fmt;
  int bits = hm_dtype_bits(f->weight);
  HM_CHECK(need_multiple(s->li * bits, 32, "local intermediate x weight bits (packed zero points)", s));
  int64_t src_words = hm_quant_qweight_words(f, 1, w->n),
          groups = hm_quant_zero_words(f, w->n, w->k) / src_words;
  int64_t run_words = s->li * bits / 32;
  for (int64_t g = 0; g < groups; g++)
    for (int r = 0; r < runs; r++)
      memcpy(out + (g * runs + r) * run_words, w->zeros + g * src_words + starts[r] * bits / 32,
             (size_t)run_words * 4);
  return HM_OK;
}

/* gate_up of one expert (2I rows of K = H) into shard expert j: the slice's gate rows, then its up rows. */
static hm_status slice_rows(const hm_host_weights *w, const slice *s, hm_host_weights *out, int64_t j) {
  const hm_quant_format *f = &w->fmt;
  int sb = hm_quant_scale_bytes(f), runs = 2;
  int64_t starts[2] = {s->i0, s->inter + s->i0}, k = w->k, out_n = runs * s->li;
  size_t row_bytes = (size_t)hm_quant_qweight_words(f, 1, k) * 4;
  char *q = (char *)(out->qweight + j * hm_quant_qweight_words(f, out_n, k));
  char *sc = (char *)out->scales + (size_t)(j * hm_quant_scale_count(f, out_n, k) * sb);
  for (int r = 0; r < runs; r++) {
    q = copy_cols(q, (const char *)w->qweight + (size_t)starts[r] * row_bytes, s->li, row_bytes, 0,
                  row_bytes);
    if (f->scale_kind == HM_SCALE_GROUP || f->scale_kind == HM_SCALE_CHANNEL) {
      size_t per_row = (size_t)(hm_quant_scale_count(f, 1, k) * sb);
      sc = copy_cols(sc, (const char *)w->scales + (size_t)starts[r] * per_row, s->li, per_row, 0, per_row);
    } else if (f->scale_kind == HM_SCALE_BLOCK) {
      HM_CHECK(need_multiple(s->li, f->group_n, "local intermediate (gate_up scale blocks)", s));
      size_t per_block = (size_t)(hm_quant_scale_count(f, f->group_n, k) * sb);
      sc = copy_cols(sc, (const char *)w->scales + (size_t)(starts[r] / f->group_n) * per_block,
                     s->li / f->group_n, per_block, 0, per_block);
    }
  }
  if (f->scale_kind == HM_SCALE_TENSOR) memcpy(sc, w->scales, (size_t)sb);
  if (out->zeros)
    HM_CHECK(slice_zero_columns(w, s, starts, runs, out->zeros + j * hm_quant_zero_words(f, out_n, k)));
  if (out->global_scale) out->global_scale[j] = w->global_scale[0];
  return HM_OK;
}

/* down of one expert (N = H rows of K = I) into shard expert j: the slice's columns of K. */
static hm_status slice_columns(const hm_host_weights *w, const slice *s, hm_host_weights *out, int64_t j) {
  const hm_quant_format *f = &w->fmt;
  int bits = hm_dtype_bits(f->weight), sb = hm_quant_scale_bytes(f);
  int64_t n = w->n, k = w->k;
  HM_CHECK(need_multiple(s->li * bits, 32, "local intermediate x weight bits (packed down weights)", s));
  size_t row_bytes = (size_t)hm_quant_qweight_words(f, 1, k) * 4;
  copy_cols((char *)(out->qweight + j * hm_quant_qweight_words(f, n, s->li)), (const char *)w->qweight, n,
            row_bytes, (size_t)(s->i0 * bits / 8), (size_t)(s->li * bits / 8));
  char *sc = (char *)out->scales + (size_t)(j * hm_quant_scale_count(f, n, s->li) * sb);
  int64_t gk = f->group_k, rows = f->scale_kind == HM_SCALE_BLOCK ? n / f->group_n : n;
  if (f->scale_kind == HM_SCALE_GROUP || f->scale_kind == HM_SCALE_BLOCK) {
    HM_CHECK(need_multiple(s->li, gk, "local intermediate (down scale groups)", s));
    copy_cols(sc, w->scales, rows, (size_t)(k / gk * sb), (size_t)(s->i0 / gk * sb),
              (size_t)(s->li / gk * sb));
  } else if (f->scale_kind != HM_SCALE_NONE) {
    /* One scale for all of K: the slice keeps it, and its dequantized values stay the same. */
    memcpy(sc, w->scales, (size_t)(hm_quant_scale_count(f, n, k) * sb));
  }
  if (out->zeros) {
    int64_t row_words = hm_quant_qweight_words(f, 1, n), groups = hm_quant_zero_words(f, n, k) / row_words;
    int64_t first = groups == 1 ? 0 : s->i0 / gk, count = groups == 1 ? 1 : s->li / gk;
    memcpy(out->zeros + j * hm_quant_zero_words(f, n, s->li), w->zeros + first * row_words,
           (size_t)(count * row_words) * 4);
  }
  if (out->global_scale) out->global_scale[j] = w->global_scale[0];
  return HM_OK;
}

/* Expert e's arrays whole into slot j of w. */
static void place_expert(const hm_host_weights *src, int64_t j, hm_host_weights *w) {
  const hm_quant_format *f = &w->fmt;
  size_t q = (size_t)hm_quant_qweight_words(f, w->n, w->k), z = (size_t)hm_quant_zero_words(f, w->n, w->k);
  size_t sc = (size_t)(hm_quant_scale_count(f, w->n, w->k) * hm_quant_scale_bytes(f));
  memcpy(w->qweight + (size_t)j * q, src->qweight, q * 4);
  if (sc) memcpy((char *)w->scales + (size_t)j * sc, src->scales, sc);
  if (z) memcpy(w->zeros + (size_t)j * z, src->zeros, z * 4);
  if (w->global_scale) w->global_scale[j] = src->global_scale[0];
}

/* Experts [first, first + count) of config, whole (s NULL) or sliced, into w. */
static hm_status draw_experts(const hm_moe_config *c, uint64_t seed, int64_t first, int64_t count,
                              const slice *s, hm_bench_moe_weights *w) {
  const hm_quant_format *f = &c->scheme.weight;
  int64_t h = c->hidden, inter = c->intermediate, li = s ? s->li : inter;
  if (s && (f->scale_kind == HM_SCALE_GROUP || f->scale_kind == HM_SCALE_BLOCK))
    HM_CHECK(need_multiple(li, f->group_k, "local intermediate I/tp (down's scale groups along K)", s));
  HM_CHECK(hm_host_weights_alloc(&w->gate_up, f, count, 2 * li, h));
  HM_CHECK(hm_host_weights_alloc(&w->down, f, count, h, li));
  hm_status ret = HM_OK;
  for (int64_t j = 0; j < count && ret == HM_OK; j++) {
    hm_host_weights gu, dn;
    memset(&dn, 0, sizeof(dn));
    ret = hm_bench_random_weights(&gu, f, 1, 2 * inter, h, expert_seed(seed, first + j, 0));
    if (ret != HM_OK) break;
    ret = hm_bench_random_weights(&dn, f, 1, h, inter, expert_seed(seed, first + j, 1));
    if (ret == HM_OK && s) ret = slice_rows(&gu, s, &w->gate_up, j);
    if (ret == HM_OK && s) ret = slice_columns(&dn, s, &w->down, j);
    if (ret == HM_OK && !s) place_expert(&gu, j, &w->gate_up), place_expert(&dn, j, &w->down);
    hm_host_weights_free(&gu);
    hm_host_weights_free(&dn);
  }
  return ret;
}

/* Routed experts drawn (whole or sliced), shared experts and router bias as the single-rank bench draws them.
 */
static hm_status draw(const hm_moe_config *c, uint64_t seed, int64_t first, int64_t count, const slice *s,
                      hm_bench_moe_weights *w) {
  memset(w, 0, sizeof(*w));
  hm_status ret = draw_experts(c, seed, first, count, s, w);
  if (ret == HM_OK) ret = hm_bench_moe_weights_shared(c, seed, w);
  if (ret != HM_OK) hm_bench_moe_weights_free(w);
  return ret;
}

static hm_status load(hm_moe_dist *d, const hm_moe_config *c, const hm_bench_moe_weights *w) {
  hm_weights_view gu = hm_host_weights_view(&w->gate_up), dn = hm_host_weights_view(&w->down);
  HM_CHECK(hm_moe_dist_load_shard(d, &gu, &dn));
  if (c->shared_experts > 0) {
    hm_weights_view sg = hm_host_weights_view(&w->shared_gate_up), sd = hm_host_weights_view(&w->shared_down);
    HM_CHECK(hm_moe_dist_load_shared(d, &sg, &sd));
  }
  return w->router_bias ? hm_moe_dist_set_router_bias(d, w->router_bias) : HM_OK;
}

hm_status hm_bench_dist_layer(hm_bench *b, hm_comm *comm, const hm_moe_config *config, uint64_t seed,
                              hm_bench_moe *out) {
  memset(out, 0, sizeof(*out));
  hm_comm_plan p;
  HM_CHECK(hm_comm_get_plan(comm, &p));
  slice s = {config->intermediate, p.first_intermediate, p.local_intermediate};
  hm_bench_moe_weights w;
  HM_CHECK(draw(config, seed, p.first_expert, p.local_experts, &s, &w));
  hm_status ret = HM_OK;
  HM_CHECK_GOTO(hm_moe_dist_create(b->engine, comm, config, &out->dist), done);
  HM_CHECK_GOTO(load(out->dist, config, &w), done);
  HM_CHECK_GOTO(hm_moe_dist_transform(out->dist, b->stream), done);
  HM_CHECK_GOTO(hm_stream_synchronize(b->stream), done);
done:
  hm_bench_moe_weights_free(&w);
  if (ret != HM_OK) hm_bench_moe_destroy(out);
  return ret;
}

hm_status hm_bench_dist_reference(hm_bench *b, const hm_moe_config *config, uint64_t seed, int64_t max_tokens,
                                  hm_moe_layer **out) {
  hm_bench_moe_weights w;
  HM_CHECK(draw(config, seed, 0, config->router.experts, NULL, &w));
  hm_status ret = hm_bench_moe_layer_make(b->host, b->host_stream, config, &w, max_tokens, out);
  hm_bench_moe_weights_free(&w);
  return ret;
}
