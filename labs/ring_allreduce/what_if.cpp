// --what-if: data parallelism alone, chapter 2's exercise. Every step each GPU
// computes on its share of the global batch, then allreduces the bf16 gradients
// (2 bytes x N) with no overlap. Where does it stop working?
//
//   compute per GPU = 6 N tokens / (peak x MFU)      (6N FLOPs per token: Kaplan et al. 2020)
//   communication   = NCCL's allreduce of 2N bytes: the ring or tree its tuning model picks
//                     (nccl_model.h), beside labkit's single flat ring on the same topology
//   CCR             = FLOPs per GPU / bytes each GPU sends; compute-bound above
//                     CCR* = achieved FLOP/s / the bus bandwidth NCCL's channels reach (the roofline's ridge)
//   memory          = 16 N bytes per replica (bf16 weights and grads, fp32 master and Adam m, v:
//                     Rajbhandari et al. 2020, "ZeRO", section 3.1)
#include <fmt/format.h>

#include "labkit/cli.h"
#include "labkit/cost_model.h"
#include "labkit/lab/output.h"
#include "labkit/lab/table.h"
#include "labkit/nccl_model.h"
#include "labkit/units.h"
#include "ring_allreduce.h"

using namespace labkit;

namespace ring_lab {

namespace {
struct Scenario {
  const char* name;
  double params;
  int gpus;
  const char* topology;
};

std::string count(double v) {
  if (v >= 1e12) return fmt::format("{:.0f}T", v / 1e12);
  if (v >= 1e9) return fmt::format("{:.0f}B", v / 1e9);
  return fmt::format("{:.0f}M", v / 1e6);
}
}  // namespace

void add_what_if_options(CLI::App& app, WhatIfOptions& o) {
  app.add_option("--global-batch", o.global_batch_tokens, "--what-if: tokens per step")
      ->default_str(fmt::format("{:.0f}", o.global_batch_tokens))
      ->check(cli::above(0.0, 1e15));  // far past any run, short of a clock that overflows
  app.add_option("--mfu", o.mfu, "--what-if: achieved fraction of peak FLOP/s")
      ->capture_default_str()->check(cli::above(0.0, 1.0));
}

int what_if(const WhatIfOptions& o) {
  const Scenario scenarios[] = {{"7B on 8 A100 (NVLink)", 7e9, 8, "dgx-a100"},
                                {"70B on 64 H100, 8 nodes (IB)", 70e9, 64, "dgx-h100"},
                                {"1T on 4096 H100, 512 nodes (IB)", 1e12, 4096, "dgx-h100"}};
  constexpr double gpu_memory = 80e9;
  fmt::print("# data parallelism alone: global batch {} tokens per step, MFU {:.0f}%, bf16 gradients, NCCL's "
             "allreduce, no overlap\n", count(o.global_batch_tokens), o.mfu * 100);
  lab::Table scenarios_table({{.header = "scenario", .key = "scenario", .width = 32, .align = lab::Align::left},
                              {.header = "busbw", .key = "bus_bandwidth", .width = 9},
                              {.header = "grads", .key = "gradient_bytes", .width = 8},
                              {.header = "NCCL runs", .key = "nccl_runs", .width = 11},
                              {.header = "comm", .key = "comm_seconds", .width = 10},
                              {.header = "one ring", .key = "one_ring_seconds", .width = 10},
                              {.header = "compute", .key = "compute_seconds", .width = 9},
                              {.header = "CCR", .key = "ccr", .width = 8},
                              {.header = "CCR*", .key = "ccr_ridge", .width = 8},
                              {.header = "efficiency", .key = "efficiency", .width = 10},
                              {.header = "16N/GPU", .key = "replica_bytes", .width = 11},
                              {.key = "replica_fits"}},
                             {.rows = "  ", .header = "# "});
  scenarios_table.print_header();
  double last_ccr_over_ridge = 0, last_comm_share = 0;  // the largest scenario's, for the summary below
  for (const Scenario& s : scenarios) {
    const Topology t = find_topology(s.topology);
    const int nodes = t.node_of(s.gpus - 1) + 1;
    const NcclSystem system = nccl_system(t, s.gpus, nodes);
    const double grads = 2 * s.params;
    const CostEstimate nccl = native_cost(Collective::all_reduce, std::uint64_t(grads), s.gpus, nodes, t);
    const double ring = predict(Collective::all_reduce, "ring", std::uint64_t(grads), s.gpus, t);
    const double tokens = o.global_batch_tokens / s.gpus;
    const double flops = 6 * s.params * tokens, achieved = t.device.peak_flops * o.mfu;
    const double compute = flops / achieved;
    const double ccr = flops / (2.0 * (s.gpus - 1) / s.gpus * grads), ridge = achieved / system.bus_bandwidth;
    const double efficiency = compute / (compute + nccl.seconds), memory = 16 * s.params;
    last_ccr_over_ridge = ccr / ridge, last_comm_share = 1 - efficiency;
    scenarios_table.add({s.name, lab::number(system.bus_bandwidth, "{:.0f}GB/s", 1e9),
                         lab::number(grads, "{:.0f} GB", 1e9), fmt::format("{}/{}", nccl.algorithm, nccl.protocol),
                         lab::seconds(nccl.seconds), lab::seconds(ring), lab::seconds(compute),
                         lab::number(ccr, "{:.0f}"), lab::number(ridge, "{:.0f}"), lab::percent(efficiency),
                         lab::number(memory, "{:.0f} GB", 1e9), {memory <= gpu_memory, ""}},
                        memory > gpu_memory ? "!" : "");
  }
  fmt::print("# one ring: labkit's flat ring leaves each node through one NIC; NCCL's channels run rings through "
             "all of the node's NICs at once\n");
  // Which NCCL runs depends on the size: the 70B scenario's 64 GPUs, from a bucket to the whole gradient.
  const nlohmann::json nccl = print_nccl_choices(
      Collective::all_reduce, {1 << 10, 1 << 15, 1 << 20, 1 << 25, 1ull << 30, 1ull << 35}, 64, find_topology("dgx-h100"));
  fmt::print("# ! a full replica (16 bytes per parameter) does not fit in 80 GB: shard it (ZeRO/FSDP, chapter 6)\n");
  fmt::print("# where data parallelism alone breaks down:\n"
             "#  - memory first: above 80 GB / 16 B = 5B parameters no replica fits, so even 7B needs ZeRO or FSDP;\n"
             "#  - then communication: with the global batch fixed, tokens per GPU shrink as GPUs are added and CCR\n"
             "#    falls toward CCR*: at 1T on 4096 GPUs it is {:.1f} CCR*, and the allreduce {:.0f}% of every step\n"
             "#    (without overlap the efficiency is about 1 / (1 + CCR*/CCR)). Tensor and pipeline parallelism\n"
             "#    (chapters 7, 8) cut the bytes each GPU must synchronize.\n",
             last_ccr_over_ridge, 100 * last_comm_share);

  // Chapter 2's worked example: 7B, 8 GPUs on InfiniBand at 50 GB/s, 2 s of compute.
  const double reading = 2.0 * 7 / 8 * 14e9 / 50e9;
  fmt::print("# the reading's example: 2 x 7/8 x 14 GB / 50 GB/s = {:.2f} s; with 2 s of compute, efficiency "
             "{:.0f}%\n\n", reading, 100 * 2.0 / (2.0 + reading));

  // Crossover n* = alpha / beta: below it a message costs mostly latency.
  struct Interconnect {
    const char* name;
    Link link;
  };
  const Interconnect nets[] = {{"NVLink 4.0", {1.0e-6, 450e9}},
                               {"InfiniBand HDR", {1.5e-6, 25e9}},
                               {"100GbE RoCE", {5.0e-6, 12.5e9}},
                               {"TCP/IP Ethernet", {50e-6, 12.5e9}}};
  lab::Table table({{.header = "interconnect", .key = "interconnect", .width = 20, .align = lab::Align::left},
                    {.header = "alpha", .key = "alpha", .width = 8},
                    {.header = "bandwidth", .key = "bandwidth", .width = 10},
                    {.header = "n* (bytes)", .key = "crossover_bytes", .width = 12},
                    {.header = "n*", .width = 10}},
                   {.rows = "  ", .header = "# "});
  table.print_header();
  auto row = [&](const std::string& name, const Link& link) {
    table.add({name, lab::seconds(link.alpha), lab::number(link.bandwidth, "{:.1f} GB/s", 1e9),
               lab::number(crossover_bytes(link), "{:.0f}"), lab::bytes(crossover_bytes(link))});
  };
  for (const Interconnect& n : nets) row(n.name, n.link);
  for (std::string_view preset : topology_presets()) {
    const Topology t = find_topology(preset);
    for (auto [where, link] : {std::pair{"in node", t.intra}, std::pair{"between", t.inter}})
      if (t.devices_per_node > 1 || where != std::string_view("in node"))  // one GPU a node: no link inside
        row(fmt::format("{}, {}", preset, where), link);
  }
  fmt::print("# the reading gives InfiniBand HDR 200 GB/s (and so n* = 300 KB); HDR is 200 Gb/s = 25 GB/s\n");
  lab::write_json(o.json, {{"scenarios", scenarios_table.json()},
                           {"nccl", nccl},
                           {"reading_example", {{"comm_seconds", reading}, {"compute_seconds", 2.0},
                                                {"efficiency", 2.0 / (2.0 + reading)}}},
                           {"crossovers", table.json()}});
  return 0;
}

}  // namespace ring_lab
