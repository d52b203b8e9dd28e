/* SPDX-License-Identifier: Apache-2.0 */
/*
 * GPU/NUMA binding choice from topologies given as hwloc XML (two sockets, one GPU
 * each) and synthetic descriptions (no PCI): the cores and node nearest the GPU, or a
 * clear reason why nothing is bound.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "comm/topo.h"
#include "hm_test.h"

#define PU(i, node) \
  "  <object type=\"PU\" os_index=\"" #i "\" cpuset=\"" node "\" complete_cpuset=\"" node "\"/>\n"

/* Socket s: PUs 4s..4s+3, NUMA node s, one GPU behind a host bridge. */
static const char two_sockets[] =
    "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<!DOCTYPE topology SYSTEM \"hwloc2.dtd\">\n"
    "<topology version=\"2.0\">\n"
    "<object type=\"Machine\" os_index=\"0\" cpuset=\"0xff\" complete_cpuset=\"0xff\" allowed_cpuset=\"0xff\""
    " nodeset=\"0x3\" complete_nodeset=\"0x3\" allowed_nodeset=\"0x3\">\n"
    " <object type=\"Package\" os_index=\"0\" cpuset=\"0x0f\" complete_cpuset=\"0x0f\" nodeset=\"0x1\" complete_nodeset=\"0x1\">\n"
    "  <object type=\"NUMANode\" os_index=\"0\" cpuset=\"0x0f\" complete_cpuset=\"0x0f\" nodeset=\"0x1\" complete_nodeset=\"0x1\"/>\n"
    PU(0, "0x1") PU(1, "0x2") PU(2, "0x4") PU(3, "0x8")
    "  <object type=\"HostBridge\" os_index=\"0\" bridge_type=\"0-1\" depth=\"0\" bridge_pci=\"0000:[17-17]\">\n"
    "   <object type=\"PCIDev\" os_index=\"1\" pci_busid=\"0000:17:00.0\" pci_type=\"0302 [10de:2330] [10de:16c1] a1\"/>\n"
    "  </object>\n"
    " </object>\n"
    " <object type=\"Package\" os_index=\"1\" cpuset=\"0xf0\" complete_cpuset=\"0xf0\" nodeset=\"0x2\" complete_nodeset=\"0x2\">\n"
    "  <object type=\"NUMANode\" os_index=\"1\" cpuset=\"0xf0\" complete_cpuset=\"0xf0\" nodeset=\"0x2\" complete_nodeset=\"0x2\"/>\n"
    PU(4, "0x10") PU(5, "0x20") PU(6, "0x40") PU(7, "0x80")
    "  <object type=\"HostBridge\" os_index=\"1\" bridge_type=\"0-1\" depth=\"0\" bridge_pci=\"0000:[c1-c1]\">\n"
    "   <object type=\"PCIDev\" os_index=\"2\" pci_busid=\"0000:c1:00.0\" pci_type=\"0302 [10de:2330] [10de:16c1] a1\"/>\n"
    "  </object>\n"
    " </object>\n"
    "</object>\n</topology>\n";

static char xml_source[64];

static int write_xml(void **state) {
  (void)state;
  char path[] = "/tmp/hm_topo_XXXXXX";
  int fd = mkstemp(path);
  if (fd < 0) return -1;
  FILE *f = fdopen(fd, "w");
  fputs(two_sockets, f);
  fclose(f);
  snprintf(xml_source, sizeof(xml_source), "xml:%s", path);
  return 0;
}

static int remove_xml(void **state) {
  (void)state;
  unlink(xml_source + 4);
  return 0;
}

static void gpu_binds_to_its_socket(void **state) {
  (void)state;
  hm_binding b;
  HM_ASSERT_OK(hm_topo_bind(xml_source, "0000:c1:00.0", false, &b));
  assert_true(b.gpu_found);
  assert_false(b.bound);
  assert_string_equal(b.cpus, "4-7");
  assert_string_equal(b.numa, "1");
  HM_ASSERT_OK(hm_topo_bind(xml_source, "0000:17:00.0", false, &b));
  assert_string_equal(b.cpus, "0-3");
  assert_string_equal(b.numa, "0");
  char line[256];
  hm_topo_describe(&b, 3, 0, line, sizeof(line));
  assert_string_equal(line, "rank 3 GPU 0 0000:17:00.0 NUMA 0 cores 0-3");
}

static void foreign_topology_is_never_applied(void **state) {
  (void)state;
  hm_binding b;
  HM_ASSERT_OK(hm_topo_bind(xml_source, "0000:17:00.0", true, &b));
  assert_false(b.bound);
  assert_non_null(strstr(b.reason, "not this machine's"));
}

static void unknown_gpu_and_no_gpu_are_not_bound(void **state) {
  (void)state;
  hm_binding b;
  HM_ASSERT_OK(hm_topo_bind(xml_source, "0000:99:00.0", true, &b));
  assert_false(b.gpu_found);
  assert_string_equal(b.reason, "GPU 0000:99:00.0 is not in the topology, not bound");
  HM_ASSERT_OK(hm_topo_bind("synthetic:pack:2 numa:1 core:4 pu:2", "0000:17:00.0", false, &b));
  assert_false(b.gpu_found);
  HM_ASSERT_OK(hm_topo_bind(NULL, "none", true, &b));
  char line[256];
  hm_topo_describe(&b, 5, -1, line, sizeof(line));
  assert_string_equal(line, "rank 5 no GPU, not bound");
}

static void bad_sources_are_refused(void **state) {
  (void)state;
  hm_binding b;
  assert_int_equal(hm_topo_bind("xml:/nonexistent/topo.xml", "0000:17:00.0", false, &b), HM_INVALID_ARGUMENT);
  assert_non_null(strstr(hm_last_error(), "/nonexistent/topo.xml"));
  assert_int_equal(hm_topo_bind("synthetic:pack:banana", "0000:17:00.0", false, &b), HM_INVALID_ARGUMENT);
  assert_int_equal(hm_topo_bind("lstopo", "0000:17:00.0", false, &b), HM_INVALID_ARGUMENT);
  assert_non_null(strstr(hm_last_error(), "expected xml:<path> or synthetic:<description>"));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(gpu_binds_to_its_socket),
      cmocka_unit_test(foreign_topology_is_never_applied),
      cmocka_unit_test(unknown_gpu_and_no_gpu_are_not_bound),
      cmocka_unit_test(bad_sources_are_refused),
  };
  return cmocka_run_group_tests(tests, write_xml, remove_xml);
}
