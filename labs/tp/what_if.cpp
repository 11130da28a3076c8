// Lab 7 at scale, payload-free: --what-if MODEL. One transformer layer of a
// real model (one sequence of its context, bf16) with Megatron's tensor
// parallelism, on t GPUs inside a node and on t GPUs across nodes: its
// compute shrinks as 1/t, its 4 allreduces of b s h do not, and across nodes
// they run at the network's bandwidth instead of NVLink's.
#include <algorithm>
#include <cstdio>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "labkit/error.h"
#include "labkit/lab/output.h"
#include "labkit/lab/table.h"
#include "labkit/memory.h"
#include "labkit/output.h"
#include "labkit/parallel/tensor_parallel_gpt.h"
#include "labkit/topology.h"
#include "labkit/units.h"
#include "tp.h"

namespace tp_lab {

namespace {

// One column list for the printed rows and the JSON.
lab::Table what_if_table() {
  return lab::Table({{.header = "tp", .key = "tp", .width = 4},
                     {.header = "topology", .key = "topology", .width = 10, .align = lab::Align::left},
                     {.header = "nodes", .key = "nodes", .width = 6},
                     {.header = "compute", .key = "compute", .width = 10},
                     {.header = "allreduces", .key = "allreduces", .width = 10},
                     {.header = "T_layer", .key = "t_layer", .width = 10},
                     {.header = "comm share", .key = "comm_share", .width = 11}});
}

}  // namespace

int what_if(const Options& o, RunOptions run_options) {
  const memory::Architecture arch = memory::model_preset(o.what_if);
  const double seq = memory::what_if_seq(arch, o.seq), b = 1, bsh = seq * b * arch.hidden;
  struct Case {
    int t;
    const char* topology;
  };
  // Inside a node (DGX H100: NVLink), one node further (16 GPUs on two), and a
  // GPU per node (every allreduce over InfiniBand).
  const std::vector<Case> cases = {{2, "dgx-h100"}, {4, "dgx-h100"}, {8, "dgx-h100"}, {16, "dgx-h100"},
                                   {2, "ib-ndr"},   {4, "ib-ndr"},   {8, "ib-ndr"}};
  const auto refused = [&](const Case& c) { return !tensor_parallel_refusal(arch, c.t).empty(); };
  if (std::all_of(cases.begin(), cases.end(), refused))  // a table of refusals alone is no answer
    throw Error(fmt::format("--what-if {}: {}", o.what_if, tensor_parallel_refusal(arch, 2)));
  run_options.payload_free = true;
  fmt::print("tp --what-if {}: one layer (h = {}, s = {:g}, b = {:g}, bf16) forward and backward, compute at {:.0f}% "
             "of the GPU's peak; its 4 allreduces of b s h = {} each ...\n", o.what_if, arch.hidden, seq, b,
             100 * run_options.efficiency, format_bytes(std::uint64_t(bsh * 2)));
  std::fflush(stdout);
  lab::Table table = what_if_table();
  table.print_header();
  for (const Case& c : cases) {
    if (const std::string no = tensor_parallel_refusal(arch, c.t); !no.empty()) {
      fmt::print("{:>4} {:<10} refused: {}\n", c.t, c.topology, no);
      continue;
    }
    run_options.ranks = c.t;
    run_options.topology = c.topology;
    const Topology topology = find_topology(c.topology);
    const double compute =
        memory::layer_flops(arch, seq * b, seq).total() / c.t / (topology.device.peak_flops * run_options.efficiency);
    // Forward: attention then its allreduce (g), the MLP then its allreduce;
    // backward: the MLP then f's allreduce, attention then f's. Each part
    // computes half the layer's share (their FLOPs are near equal at h >> s).
    const double elapsed = run(run_options, [&](Comm& comm) {
                             const View activations = meta_view(std::size_t(bsh), DType::bf16);
                             for (const char* part : {"forward attention", "forward mlp"}) {
                               comm.compute_seconds(part, compute / 3 / 2);
                               comm.all_reduce(activations, ReduceOp::sum);
                             }
                             for (const char* part : {"backward mlp", "backward attention"}) {
                               comm.compute_seconds(part, compute * 2 / 3 / 2);
                               comm.all_reduce(activations, ReduceOp::sum);
                             }
                           }).elapsed;
    const int nodes = (c.t + topology.devices_per_node - 1) / topology.devices_per_node;
    table.add({c.t, c.topology, nodes, lab::seconds(compute), lab::seconds(elapsed - compute), lab::seconds(elapsed),
               {(elapsed - compute) / elapsed, fmt::format("{:.0f}%", 100 * (elapsed - compute) / elapsed)}});
  }
  fmt::print("(compute: the layer's FLOPs, 6 per weight a token meets and 12 s h per token for attention, over t "
             "GPUs; allreduces: the rest of the executed step, for tensor parallelism's allreduces sit between the "
             "layer's parts and nothing overlaps them; "
             "ib-ndr: one GPU per node, so every allreduce crosses InfiniBand)\n");
  lab::write_json(o.json, {{"model", o.what_if}, {"hidden", arch.hidden}, {"seq", seq}, {"micro_batch", b},
                           {"allreduce_bytes", bsh * 2}, {"rows", table.json()}});
  return 0;
}

}  // namespace tp_lab
