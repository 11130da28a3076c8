// The simulated cluster: nodes x devices per node, an alpha-beta link inside a
// node and another between nodes, and the device every rank computes on.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace labkit {

// One hop of the alpha-beta model: a message of n bytes takes alpha + n / bandwidth.
struct Link {
  double alpha;      // seconds of latency per message
  double bandwidth;  // bytes per second, one direction
};

struct DeviceModel {
  std::string name;
  double peak_flops;  // dense BF16 tensor-core peak, FLOP/s
};

struct Topology {
  std::string name;
  int devices_per_node = 8;
  int nics_per_node = 8;  // devices share the node's NICs round-robin
  Link intra;             // device <-> device inside a node
  Link inter;             // NIC <-> NIC between nodes
  DeviceModel device;

  int node_of(int rank) const { return rank / devices_per_node; }
  int nic_of(int rank) const { return (rank % devices_per_node) % nics_per_node; }
  const Link& link(int a, int b) const { return node_of(a) == node_of(b) ? intra : inter; }
};

std::vector<std::string_view> topology_presets();
DeviceModel device_preset(std::string_view name);  // "h100", "a100"
// A preset name or the path of a JSON file (see book/01-collectives.md for the format).
Topology find_topology(std::string_view name_or_path);

}  // namespace labkit
