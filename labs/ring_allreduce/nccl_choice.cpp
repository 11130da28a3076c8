// What NCCL would run at each size, and why: its tuning model's predicted time
// for every algorithm and protocol (nccl_model.h), the fastest marked with the
// latency and bandwidth that made it so.
#include <fmt/format.h>

#include "labkit/lab/table.h"
#include "labkit/nccl_model.h"
#include "labkit/units.h"
#include "ring_allreduce.h"

using namespace labkit;

namespace ring_lab {

nlohmann::json print_nccl_choices(Collective op, const std::vector<std::size_t>& sizes, int ranks,
                                  const Topology& topology) {
  const int nodes = topology.node_of(ranks - 1) + 1;
  const NcclSystem system = nccl_system(topology, ranks, nodes);
  fmt::print("#\n# what NCCL would run (its tuning model, src/graph/tuning.cc in NCCL 2.28; ring and tree, no NVLS): "
             "{} ranks on {} node{}, busbw {:g} GB/s over {} channels, {}, {}\n",
             ranks, nodes, nodes > 1 ? "s" : "", system.bus_bandwidth / 1e9, system.channels,
             system.nvlink ? "NVLink" : "PCIe", system.hopper ? "H100" : "A100");
  fmt::print("# predicted time (us) of each algorithm/protocol, time = latency + size / algbw; NCCL runs the "
             "fastest\n");
  const auto name = [](const NcclEstimate& e) {
    return fmt::format("{}/{}", name_of(e.algorithm), name_of(e.protocol));
  };
  std::vector<lab::Column> columns = {{.header = "size", .key = "bytes", .width = 10}};
  for (const NcclEstimate& e : nccl_estimates(op, sizes.front(), system))
    columns.push_back({.header = name(e), .key = name(e) + "_us", .width = 11, .gap = 2});
  columns.insert(columns.end(), {{.header = "NCCL runs", .key = "nccl_runs", .width = 11, .gap = 2},
                                 {.header = "latency", .key = "latency_us", .width = 9, .gap = 2},
                                 {.header = "algbw", .key = "algbw_gb_s", .width = 9, .gap = 2}});
  lab::Table table(std::move(columns), {.rows = "  ", .header = "# "});
  table.print_header();
  for (std::size_t bytes : sizes) {
    std::vector<lab::Cell> row = {bytes};
    for (const NcclEstimate& e : nccl_estimates(op, bytes, system))
      row.push_back(lab::number(e.seconds * 1e6, "{:.2f}"));
    const NcclEstimate pick = nccl_choice(op, bytes, system);
    row.insert(row.end(), {name(pick), lab::number(pick.latency * 1e6, "{:.2f} us"),
                           lab::number(pick.bandwidth / 1e9, "{:.0f} GB/s")});
    table.add(std::move(row));
  }
  return table.json();
}

}  // namespace ring_lab
