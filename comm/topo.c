/* SPDX-License-Identifier: Apache-2.0 */
/* hwloc: the GPU's PCI object, its nearest non-I/O ancestor, and binding to its cpuset and nodeset. */
#include <errno.h>
#include <hwloc.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "topo.h"

static hm_status load_topology(hwloc_topology_t topo, const char *source) {
  /* PCI devices are I/O objects, filtered out by default. */
  hwloc_topology_set_io_types_filter(topo, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
  int rc = 0;
  if (source == NULL || source[0] == '\0') {
    rc = 0;
  } else if (strncmp(source, "xml:", 4) == 0) {
    rc = hwloc_topology_set_xml(topo, source + 4);
  } else if (strncmp(source, "synthetic:", 10) == 0) {
    rc = hwloc_topology_set_synthetic(topo, source + 10);
  } else {
    HM_FAIL(HM_INVALID_ARGUMENT, "topology '%s': expected xml:<path> or synthetic:<description>", source);
  }
  if (rc != 0) HM_FAIL(HM_INVALID_ARGUMENT, "topology '%s' cannot be read", source);
  if (hwloc_topology_load(topo) != 0)
    HM_FAIL(HM_SYSTEM, "hwloc cannot load the topology%s%s", source ? " " : "", source ? source : "");
  return HM_OK;
}

static bool no_gpu(const char *bus_id) {
  return bus_id == NULL || bus_id[0] == '\0' || strcmp(bus_id, "none") == 0;
}

static void locate_gpu(hwloc_topology_t topo, const char *bus_id, hm_binding *b, hwloc_obj_t *near) {
  *near = NULL;
  snprintf(b->bus_id, sizeof(b->bus_id), "%s", bus_id);
  hwloc_obj_t pci = hwloc_get_pcidev_by_busidstring(topo, bus_id);
  if (pci == NULL) {
    snprintf(b->reason, sizeof(b->reason), "GPU %s is not in the topology, not bound", bus_id);
    return;
  }
  b->gpu_found = true;
  *near = hwloc_get_non_io_ancestor_obj(topo, pci);
  hwloc_bitmap_list_snprintf(b->cpus, sizeof(b->cpus), (*near)->cpuset);
  hwloc_bitmap_list_snprintf(b->numa, sizeof(b->numa), (*near)->nodeset);
}

/* Memory binding is refused in some containers; threads still bound is worth keeping. */
static void apply_binding(hwloc_topology_t topo, hwloc_obj_t near, hm_binding *b) {
  if (!hwloc_topology_is_thissystem(topo)) {
    snprintf(b->reason, sizeof(b->reason), "topology is not this machine's, not bound");
    return;
  }
  if (hwloc_set_cpubind(topo, near->cpuset, HWLOC_CPUBIND_PROCESS) != 0) {
    snprintf(b->reason, sizeof(b->reason), "cpu binding refused: %s", strerror(errno));
    return;
  }
  b->bound = true;
  if (hwloc_set_membind(topo, near->nodeset, HWLOC_MEMBIND_BIND,
                        HWLOC_MEMBIND_PROCESS | HWLOC_MEMBIND_BYNODESET) != 0)
    snprintf(b->reason, sizeof(b->reason), "memory binding refused: %s", strerror(errno));
}

hm_status hm_topo_bind(const char *source, const char *bus_id, bool apply, hm_binding *out) {
  HM_CHECK_NOT_NULL(out);
  memset(out, 0, sizeof(*out));
  if (no_gpu(bus_id)) {
    snprintf(out->reason, sizeof(out->reason), "no GPU, not bound");
    return HM_OK;
  }
  hwloc_topology_t topo;
  if (hwloc_topology_init(&topo) != 0) HM_FAIL(HM_SYSTEM, "hwloc_topology_init failed");
  hm_status ret = load_topology(topo, source);
  if (ret == HM_OK) {
    hwloc_obj_t near = NULL;
    locate_gpu(topo, bus_id, out, &near);
    if (near != NULL && apply) apply_binding(topo, near, out);
  }
  hwloc_topology_destroy(topo);
  return ret;
}

void hm_topo_describe(const hm_binding *b, int rank, int device, char *buf, size_t len) {
  if (!b->gpu_found) {
    snprintf(buf, len, "rank %d %s", rank, b->reason);
    return;
  }
  snprintf(buf, len, "rank %d GPU %d %s NUMA %s cores %s%s%s", rank, device, b->bus_id, b->numa, b->cpus,
           b->reason[0] ? ": " : "", b->reason);
}
