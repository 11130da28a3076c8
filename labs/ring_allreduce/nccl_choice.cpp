// What NCCL would run at each size, and why: its tuning model's predicted time
// for every algorithm and protocol (nccl_model.h), the fastest marked with the
// latency and bandwidth that made it so.
#include <fmt/format.h>

#include "labkit/nccl_model.h"
#include "labkit/units.h"
#include "ring_allreduce.h"

using namespace labkit;

namespace ring_lab {

std::vector<NcclEstimate> print_nccl_choices(Collective op, const std::vector<std::size_t>& sizes, int ranks,
                                             const Topology& topology) {
  const int nodes = topology.node_of(ranks - 1) + 1;
  const NcclSystem system = nccl_system(topology, ranks, nodes);
  fmt::print("#\n# what NCCL would run (its tuning model, src/graph/tuning.cc in NCCL 2.28; ring and tree, no NVLS): "
             "{} ranks on {} node{}, busbw {:g} GB/s over {} channels, {}, {}\n",
             ranks, nodes, nodes > 1 ? "s" : "", system.bus_bandwidth / 1e9, system.channels,
             system.nvlink ? "NVLink" : "PCIe", system.hopper ? "H100" : "A100");
  fmt::print("# predicted time (us) of each algorithm/protocol, time = latency + size / algbw; NCCL runs the "
             "fastest\n");
  std::string head = fmt::format("# {:>10}", "size");
  for (const NcclEstimate& e : nccl_estimates(op, sizes.front(), system))
    head += fmt::format("  {:>11}", fmt::format("{}/{}", name_of(e.algorithm), name_of(e.protocol)));
  fmt::print("{}  {:>11}  {:>9}  {:>9}\n", head, "NCCL runs", "latency", "algbw");
  std::vector<NcclEstimate> choices;
  for (std::size_t bytes : sizes) {
    std::string line = fmt::format("  {:>10}", bytes);
    for (const NcclEstimate& e : nccl_estimates(op, bytes, system)) line += fmt::format("  {:>11.2f}", e.seconds * 1e6);
    const NcclEstimate& pick = choices.emplace_back(nccl_choice(op, bytes, system));
    fmt::print("{}  {:>11}  {:>6.2f} us  {:>4.0f} GB/s\n", line,
               fmt::format("{}/{}", name_of(pick.algorithm), name_of(pick.protocol)), pick.latency * 1e6,
               pick.bandwidth / 1e9);
  }
  return choices;
}

}  // namespace ring_lab
