// --what-if MODEL: one MoE layer of a real model at --ep ranks, payload-free.
// Each rank holds b x s tokens and E / ep experts; every token picks k
// experts, uniformly and seeded (a router balanced as well as it can be),
// and the layer runs as the lab's does: the tokens to their experts by
// all-to-all, the experts' FLOPs on the topology's GPU, the outputs back.
// Only sizes travel. The ep ranks sit either in as few nodes as they fit
// (consecutive ranks, 8 a node on a DGX) or one a node (the ep group strided
// across the nodes, each node's other GPUs running their own groups beside
// it): what leaves the node is what the placement decides.
//
// Past one node the what-if also plays DeepSeek-V3's two cuts of what
// crosses InfiniBand, alone and together: node-limited routing and the
// two-stage dispatch (DeepSeek-AI, "DeepSeek-V3 Technical Report", 2024;
// labkit/parallel/expert_dispatch.h).
#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "labkit/cli.h"
#include "labkit/error.h"
#include "labkit/lab/output.h"
#include "labkit/lab/table.h"
#include "labkit/lab/what_if.h"
#include "labkit/memory.h"
#include "labkit/parallel/expert_dispatch.h"
#include "labkit/parallel/mesh.h"
#include "labkit/topology.h"
#include "labkit/units.h"
#include "moe.h"

namespace moe_lab {

namespace {

struct Placement {
  std::string name;
  int world = 0;         // ranks simulated: the ep group and the groups beside it
  bool strided = false;  // the ep group one a node (ranks g, g + 8, ...), else consecutive ranks
  ExpertLayout layout;
};

struct Variant {  // a placement's routing and dispatch
  const Placement* placement;
  int limit;       // node-limited routing's M; 0: any expert
  bool two_stage;  // DeepSeek-V3's dispatch through the same-index GPU of each node
};

struct LayerRun {
  ExpertLayerCost slowest;  // each phase the slowest ep rank's; the bytes every rank's mean
  double wall = 0;          // seconds the simulation took
};

LayerRun play(const Variant& v, const RunOptions& given, const UniformRouting& routing, double flops_per_row, int h) {
  const Placement& p = *v.placement;
  RunOptions run_options = given;
  run_options.payload_free = true;
  run_options.ranks = p.world;
  const int ep = p.layout.ep, groups = p.world / ep;
  LayerRun out;
  const auto started = std::chrono::steady_clock::now();
  run(run_options, [&](Comm& world) {
    const Mesh mesh(world, p.strided ? std::vector<MeshDim>{{"ep", ep}, {"dp", groups}}
                                     : std::vector<MeshDim>{{"dp", groups}, {"ep", ep}});
    const ExpertLayerCost c = play_expert_layer(mesh.group("ep"), p.layout, routing, v.two_stage, h, flops_per_row);
    const std::vector<ExpertLayerCost> all = world.gather_object(c);  // an instrument: untraced, free of time
    if (world.rank() != 0) return;
    ExpertLayerCost& s = out.slowest;
    for (const ExpertLayerCost& r : all) {
      s.dispatch = std::max(s.dispatch, r.dispatch), s.experts = std::max(s.experts, r.experts);
      s.combine = std::max(s.combine, r.combine);
      s.sent += r.sent / double(all.size()), s.across += r.across / double(all.size());
    }
  });
  out.wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  return out;
}

// The placements of an ep group: packed into as few nodes as it fits, and
// (where it fits one node) one a node.
std::vector<Placement> placements_of(int ep, int experts, int per_node) {
  std::vector<Placement> placements;
  const int nodes_packed = (ep + per_node - 1) / per_node;
  placements.push_back({fmt::format("{} a node, {} node{}", std::min(ep, per_node), nodes_packed,
                                    nodes_packed == 1 ? "" : "s"),
                        nodes_packed * per_node, false, {ep, experts, std::min(ep, per_node)}});
  if (ep > 1 && ep <= per_node)
    placements.push_back({fmt::format("1 a node, {} nodes", ep), ep * per_node, true, {ep, experts, 1}});
  return placements;
}

// Each placement with free routing and direct dispatch, then, past one node,
// each of DeepSeek-V3's cuts, alone and together; nothing to cut within one.
std::vector<Variant> variants_of(const std::vector<Placement>& placements, int node_limit) {
  std::vector<Variant> variants;
  for (const Placement& p : placements) {
    variants.push_back({&p, 0, false});
    const bool limits = node_limit > 0 && node_limit < p.layout.nodes();
    const bool forwards = p.layout.nodes() > 1 && p.layout.ranks_per_node > 1;
    if (forwards) variants.push_back({&p, 0, true});
    if (limits) variants.push_back({&p, node_limit, false});
    if (limits && forwards) variants.push_back({&p, node_limit, true});
  }
  return variants;
}

lab::Table what_if_table() {
  return lab::Table({{.header = "placement", .key = "placement", .width = 20, .align = lab::Align::left},
                     {.header = "routing", .key = "node_limit", .width = 12, .align = lab::Align::left},
                     {.header = "dispatch", .key = "two_stage", .width = 9, .align = lab::Align::left},
                     {.header = "ranks", .key = "ranks", .width = 5},
                     {.header = "sent/rank", .key = "sent_per_rank", .width = 10},
                     {.header = "over IB", .key = "across_nodes", .width = 10},
                     {.header = "IB/token", .key = "crossings_per_token", .width = 8},
                     {.header = "formula", .key = "crossings_formula", .width = 8},
                     {.header = "dispatch", .key = "t_dispatch", .width = 9},
                     {.header = "experts", .key = "t_experts", .width = 9},
                     {.header = "combine", .key = "t_combine", .width = 9},
                     {.header = "a2a", .key = "all_to_all_share", .width = 4}});
}

}  // namespace

void add_what_if_options(CLI::App& app, Options& o) {
  lab::add_what_if(app, o.what_if, "a model preset with experts (mixtral-8x7b, deepseek-v3): one MoE layer at its "
                                   "scale on --ep ranks, payload-free, its experts in one node and one a node");
  lab::add_what_if_seq(app, o.seq, "with --what-if: the tokens of a sequence (default 4096)");
  app.add_option("--micro-batch", o.micro_batch, "with --what-if: the sequences a rank holds")
      ->capture_default_str()->check(cli::in_range(1, 1024));
}

int what_if(const Options& o, const RunOptions& run_options) {
  const memory::Architecture arch = memory::model_preset(o.what_if);
  if (arch.experts == 0) throw Error(fmt::format("--what-if {}: a dense model (no experts); try mixtral-8x7b or "
                                                 "deepseek-v3", o.what_if));
  const int E = arch.experts, k = arch.active_experts, ep = o.ep, h = arch.hidden;
  check(MoeConfig{.experts = E, .top_k = k}, ep);  // the MoE layer's rules (parallel/moe.h), as the tiny GPT's run
  const Topology topology = find_topology(run_options.topology);
  const int per_node = topology.devices_per_node;
  if (ep > per_node && ep % per_node)
    throw Error(fmt::format("--ep {}: past one node the ep group fills whole nodes of {} GPUs ({}); try {}", ep,
                            per_node, run_options.topology, ep / per_node * per_node));
  const int seq = int(memory::what_if_seq(arch, o.seq, 4096));  // the model's context where it learned one
  const std::int64_t tokens = std::int64_t(o.micro_batch) * seq;
  // A routed expert's FLOPs per token: 2 per weight, 3 matrices when gated (SwiGLU), 2 otherwise.
  const double expert_flops = 2.0 * (arch.gated_ffn ? 3 : 2) * double(h) * arch.ffn;
  const std::vector<Placement> placements = placements_of(ep, E, per_node);

  fmt::print("moe --what-if {}: {} experts, top-{}{}, h = {}, an expert's FFN {}{}; ep {} ({} expert{} a rank), "
             "b = {} x s = {} tokens a rank, bf16, routing uniform; one MoE layer's forward, payload-free on {} ...\n",
             o.what_if, E, k, arch.shared_experts ? fmt::format(" + {} shared", arch.shared_experts) : "", h, arch.ffn,
             arch.gated_ffn ? " (gated)" : "", ep, E / ep, E / ep == 1 ? "" : "s", o.micro_batch, seq,
             run_options.topology);
  std::fflush(stdout);
  lab::Table table = what_if_table();
  table.print_header();
  const auto bytes = [](double b) { return format_bytes(std::uint64_t(b)); };
  double wall = 0;
  for (const Variant& v : variants_of(placements, arch.node_limit)) {
    const ExpertLayout& l = v.placement->layout;
    const LayerRun run = play(v, run_options, route_uniformly(l, k, tokens, v.limit, o.seed), expert_flops, h);
    const ExpertLayerCost& r = run.slowest;
    wall += run.wall;
    const double a2a = (r.dispatch + r.combine) / (r.dispatch + r.experts + r.combine);
    table.add({v.placement->name, {v.limit, v.limit ? fmt::format("<= {} nodes", v.limit) : fmt::format("any {}", k)},
               {v.two_stage, v.two_stage ? "two-stage" : "direct"}, v.placement->world, {r.sent, bytes(r.sent)},
               {r.across, bytes(r.across)}, lab::number(r.across / (2.0 * h * double(tokens)), "{:.2f}"),
               lab::number(crossings_per_token(l, k, v.limit, v.two_stage), "{:.2f}"), lab::seconds(r.dispatch),
               lab::seconds(r.experts), lab::seconds(r.combine), {a2a, fmt::format("{:.0f}%", 100 * a2a)}});
  }
  fmt::print("(ranks: simulated, the ep group and the groups beside it on the same nodes; routing: any k of the "
             "experts, or from at most M nodes; dispatch: direct, each assignment to its expert's rank, or two-stage, "
             "a token once to each node it needs, then on within the node; sent/rank: the dispatch's bytes to other "
             "ranks, the combine's the same back; over IB: those that cross between nodes; IB/token: copies of a "
             "token crossing, against the formula, k (N-1)/N direct, (N-1)/N of the nodes it touches two-stage; "
             "dispatch, experts, combine: the slowest rank's, the routed experts at {:.0f}% of the GPU's peak (a "
             "shared expert, which needs no all-to-all, left out), the combine waiting for the busiest expert's rank; "
             "a2a: the all-to-alls' share of the layer; backward sends as much again)\n",
             100 * run_options.efficiency);
  if (o.bench) fmt::print("simulated in {} wall\n", format_seconds(wall));
  nlohmann::json json = {{"model", o.what_if}, {"experts", E}, {"top_k", k}, {"ep", ep},
                         {"tokens_per_rank", tokens}, {"rows", table.json()}};
  if (o.bench) json["wall_seconds"] = wall;
  lab::write_json(o.json, json);
  return 0;
}

}  // namespace moe_lab
