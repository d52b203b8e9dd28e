/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The '#' header every report starts with: what ran (tool, mode, model, scheme),
 * where (device, driver, NVRTC), against what (roofline, baseline), how it was timed,
 * and one line per rank with its binding (host, pid, GPU, bus id, NUMA node, CPUs).
 */
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <mpi.h>
#include <nvrtc.h>

#include "bench/bench.h"
#include "cuda_driver.h"

#define RANK_LINE 256

static void driver_versions(const hm_bench *b, char *buf, size_t len) {
  int nv_major = 0, nv_minor = 0;
  nvrtcVersion(&nv_major, &nv_minor);
  int drv = 0;
  if (b->cuda) hm_cu.cuDriverGetVersion(&drv);
  if (drv > 0)
    snprintf(buf, len, "driver %d.%d  nvrtc %d.%d", drv / 1000, drv % 1000 / 10, nv_major, nv_minor);
  else
    snprintf(buf, len, "driver -  nvrtc %d.%d", nv_major, nv_minor);
}

/* "0-3,8" from the affinity mask: the binding mpirun (or numactl) gave this rank. */
static void cpu_list(char *buf, size_t len) {
  cpu_set_t set;
  buf[0] = '\0';
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return;
  size_t used = 0;
  for (int c = 0; c < CPU_SETSIZE && used < len; c++) {
    if (!CPU_ISSET(c, &set)) continue;
    int end = c;
    while (end + 1 < CPU_SETSIZE && CPU_ISSET(end + 1, &set)) end++;
    used += (size_t)snprintf(buf + used, len - used, used ? ",%d" : "%d", c);
    if (end > c && used < len) used += (size_t)snprintf(buf + used, len - used, "-%d", end);
    c = end;
  }
}

/* The NUMA node the kernel reports for the GPU's PCI function, or -1. */
static int gpu_numa_node(const char *bus_id) {
  char path[128], lower[32];
  size_t n = 0;
  for (; bus_id[n] && n + 1 < sizeof(lower); n++)
    lower[n] = (char)(bus_id[n] >= 'A' && bus_id[n] <= 'F' ? bus_id[n] - 'A' + 'a' : bus_id[n]);
  lower[n] = '\0';
  snprintf(path, sizeof(path), "/sys/bus/pci/devices/%s/numa_node", lower);
  FILE *f = fopen(path, "r");
  int node = -1;
  if (f == NULL) return -1;
  if (fscanf(f, "%d", &node) != 1) node = -1;
  fclose(f);
  return node;
}

static void rank_line(const hm_bench *b, char *buf, size_t len) {
  char host[64] = "?", cpus[96];
  gethostname(host, sizeof(host) - 1);
  cpu_list(cpus, sizeof(cpus));
  if (b->cuda)
    snprintf(buf, len, "rank %d: %s pid %d  dev %d bus %s numa %d  cpus %s", b->rank, host, (int)getpid(),
             b->engine->device, b->engine->pci_bus_id, gpu_numa_node(b->engine->pci_bus_id), cpus);
  else
    snprintf(buf, len, "rank %d: %s pid %d  host backend  cpus %s", b->rank, host, (int)getpid(), cpus);
}

/* Every rank's line reaches rank 0, which prints them in rank order. */
static void rank_lines(hm_bench *b) {
  char mine[RANK_LINE];
  rank_line(b, mine, sizeof(mine));
  if (b->world <= 1) {
    hm_report_header(b->report, "%s", mine);
    return;
  }
  char *all = b->rank == 0 ? malloc((size_t)b->world * RANK_LINE) : NULL;
  MPI_Gather(mine, RANK_LINE, MPI_CHAR, all, RANK_LINE, MPI_CHAR, 0, MPI_COMM_WORLD);
  for (int r = 0; all != NULL && r < b->world; r++)
    hm_report_header(b->report, "%s", all + (size_t)r * RANK_LINE);
  free(all);
}

static json_t *model_json(const hm_model_preset *m) {
  return json_pack("{s:s, s:I, s:I, s:I, s:i, s:i, s:s, s:i, s:i, s:f, s:b, s:s, s:i, s:i}", "name", m->name,
                   "hidden", (json_int_t)m->hidden, "intermediate", (json_int_t)m->moe_intermediate,
                   "experts", (json_int_t)m->experts, "top_k", m->top_k, "shared_experts", m->shared_experts,
                   "router", hm_model_router_name(m->router), "n_group", m->n_group, "topk_group",
                   m->topk_group, "routed_scaling", m->routed_scaling, "renormalize", m->renormalize, "act",
                   hm_model_act_name(m->act), "layers", m->layers, "dense_layers", m->dense_layers);
}

static void config_json(hm_bench *b, const char *mode_name, const char *versions) {
  hm_report *r = b->report;
  hm_report_config(r, "mode", json_string(mode_name));
  hm_report_config(r, "version", json_string(hm_get_version()));
  hm_report_config(r, "model", model_json(&b->o.model));
  hm_report_config(r, "quant", json_string(b->o.quant_name));
  hm_report_config(r, "acc", json_string(b->o.acc_name));
  hm_report_config(r, "layout", json_string(b->o.layout_name));
  hm_report_config(r, "device", json_string(hm_engine_device_name(b->engine)));
  hm_report_config(r, "backend", json_string(b->cuda ? "cuda" : "host"));
  hm_report_config(r, "versions", json_string(versions));
  hm_report_config(r, "ranks", json_integer(b->world));
  hm_report_config(r, "ep", json_integer(b->o.ep));
  hm_report_config(r, "tp", json_integer(b->o.tp));
  hm_report_config(r, "iters", json_integer(b->o.iters));
  hm_report_config(r, "warmup", json_integer(b->o.warmup));
  hm_report_config(r, "roof_bw_gbs", json_real(b->roof.bw_bytes_per_us / 1e3));
  hm_report_config(r, "roof_tflops_bf16", json_real(b->roof.flops_per_us_16 / 1e6));
  hm_report_config(r, "baseline", json_string(b->o.baseline_name));
}

static void timing_line(hm_bench *b) {
  if (b->o.mode == HM_MODE_E2E) {
    hm_report_header(
        b->report, "timing: each batch step between %s, eager launches, max over ranks; check %s",
        b->cuda ? "CUDA events" : "wall-clock events", b->o.check ? "on (first MoE layer)" : "off");
    return;
  }
  char graphs[32];
  if (!b->cuda || b->o.graph == 0 || b->o.mode == HM_MODE_COMM)
    snprintf(graphs, sizeof(graphs), "no graphs");
  else
    snprintf(graphs, sizeof(graphs), b->o.graph == 1 ? "CUDA graphs" : "CUDA graphs for M <= 256");
  hm_report_header(b->report,
                   "timing: %lld runs after %lld warm-up, %s, median (spread p10-p90)%s, %s, check %s",
                   (long long)b->o.iters, (long long)b->o.warmup, b->cuda ? "CUDA events" : "wall clock",
                   b->flush_buf ? ", L2 flushed (256 MiB)" : "", graphs, b->o.check ? "on" : "off");
}

hm_status hm_bench_open_report(hm_bench *b, const char *mode_name, const hm_col *cols, int count) {
  b->report = hm_report_create("humming-moe-bench", cols, count, stdout, b->rank == 0);
  if (b->report == NULL) return HM_OUT_OF_MEMORY;
  char scheme[96], model[256], versions[96];
  hm_quant_scheme_describe(&b->o.scheme, scheme, sizeof(scheme));
  hm_model_preset_describe(&b->o.model, model, sizeof(model));
  driver_versions(b, versions, sizeof(versions));
  hm_report_header(b->report, "humming-moe-bench %s %s  model=%s quant=%s (%s) layout=%s  ep=%lld tp=%lld",
                   hm_get_version(), mode_name, b->o.model.name, b->o.quant_name, scheme, b->o.layout_name,
                   (long long)b->o.ep, (long long)b->o.tp);
  hm_report_header(b->report, "model: %s", model);
  hm_report_header(b->report, "dev=%s  %s", hm_engine_device_name(b->engine), versions);
  if (b->roof.bw_bytes_per_us > 0)
    hm_report_header(b->report, "roofline: %.2f TB/s, %.0f TFLOP/s bf16, %.0f 8-bit (%s)   baseline: %s",
                     b->roof.bw_bytes_per_us / 1e6, b->roof.flops_per_us_16 / 1e6,
                     b->roof.flops_per_us_8 / 1e6, b->roof.source, b->o.baseline_name);
  else
    hm_report_header(b->report, "roofline: %s (%%roof shows -)   baseline: %s", b->roof.source,
                     b->o.baseline_name);
  timing_line(b);
  rank_lines(b);
  config_json(b, mode_name, versions);
  return HM_OK;
}
