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
// two-stage dispatch (labkit/parallel/expert_dispatch.h).
#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "labkit/error.h"
#include "labkit/memory.h"
#include "labkit/output.h"
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
    std::vector<double> report = {c.dispatch, c.experts, c.combine, c.sent, c.across};
    const auto all = world.inspect(view_of(report));
    if (world.rank() != 0) return;
    ExpertLayerCost& s = out.slowest;
    for (const std::vector<double>& r : all) {
      s.dispatch = std::max(s.dispatch, r[0]), s.experts = std::max(s.experts, r[1]);
      s.combine = std::max(s.combine, r[2]);
      s.sent += r[3] / double(all.size()), s.across += r[4] / double(all.size());
    }
  });
  out.wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  return out;
}

}  // namespace

int what_if(const Options& o, const RunOptions& run_options) {
  const memory::Architecture arch = memory::model_preset(o.what_if);
  if (arch.experts == 0) throw Error(fmt::format("--what-if {}: a dense model (no experts); try mixtral-8x7b or "
                                                 "deepseek-v3", o.what_if));
  const int E = arch.experts, k = arch.active_experts, ep = o.ep, h = arch.hidden;
  if (E % ep)
    throw Error(fmt::format("--ep {}: it does not divide {}'s {} experts", ep, o.what_if, E));
  const Topology topology = find_topology(run_options.topology);
  const int per_node = topology.devices_per_node;
  if (ep > per_node && ep % per_node)
    throw Error(fmt::format("--ep {}: past one node the ep group fills whole nodes of {} GPUs ({}); try {}", ep,
                            per_node, run_options.topology, ep / per_node * per_node));
  const int seq = o.seq ? o.seq : 4096;
  const std::int64_t tokens = std::int64_t(o.micro_batch) * seq;
  // A routed expert's FLOPs per token: 2 per weight, 3 matrices when gated (SwiGLU), 2 otherwise.
  const double expert_flops = 2.0 * (arch.gated_ffn ? 3 : 2) * double(h) * arch.ffn;

  std::vector<Placement> placements;
  const int nodes_packed = (ep + per_node - 1) / per_node;
  placements.push_back({fmt::format("{} a node, {} node{}", std::min(ep, per_node), nodes_packed,
                                    nodes_packed == 1 ? "" : "s"),
                        nodes_packed * per_node, false, {ep, E, std::min(ep, per_node)}});
  if (ep > 1 && ep <= per_node)
    placements.push_back({fmt::format("1 a node, {} nodes", ep), ep * per_node, true, {ep, E, 1}});
  // Past one node, each of DeepSeek-V3's cuts, alone and together; nothing to cut within one.
  std::vector<Variant> variants;
  for (const Placement& p : placements) {
    variants.push_back({&p, 0, false});
    const bool limits = arch.node_limit > 0 && arch.node_limit < p.layout.nodes();
    const bool forwards = p.layout.nodes() > 1 && p.layout.ranks_per_node > 1;
    if (forwards) variants.push_back({&p, 0, true});
    if (limits) variants.push_back({&p, arch.node_limit, false});
    if (limits && forwards) variants.push_back({&p, arch.node_limit, true});
  }

  fmt::print("moe --what-if {}: {} experts, top-{}{}, h = {}, an expert's FFN {}{}; ep {} ({} expert{} a rank), "
             "b = {} x s = {} tokens a rank, bf16, routing uniform; one MoE layer's forward, payload-free on {} ...\n",
             o.what_if, E, k, arch.shared_experts ? fmt::format(" + {} shared", arch.shared_experts) : "", h, arch.ffn,
             arch.gated_ffn ? " (gated)" : "", ep, E / ep, E / ep == 1 ? "" : "s", o.micro_batch, seq,
             run_options.topology);
  std::fflush(stdout);
  fmt::print("{:<20} {:<12} {:<9} {:>5} {:>10} {:>10} {:>8} {:>8} {:>9} {:>9} {:>9} {:>4}\n", "placement",
             "routing", "dispatch", "ranks", "sent/rank", "over IB", "IB/token", "formula", "dispatch", "experts",
             "combine", "a2a");
  nlohmann::json rows = nlohmann::json::array();
  double wall = 0;
  for (const Variant& v : variants) {
    const ExpertLayout& l = v.placement->layout;
    const LayerRun run = play(v, run_options, route_uniformly(l, k, tokens, v.limit, o.seed), expert_flops, h);
    const ExpertLayerCost& r = run.slowest;
    wall += run.wall;
    const std::string routing_name = v.limit ? fmt::format("<= {} nodes", v.limit) : fmt::format("any {}", k);
    const double crossings = r.across / (2.0 * h * double(tokens));
    const double formula = crossings_per_token(l, k, v.limit, v.two_stage);
    const double a2a = (r.dispatch + r.combine) / (r.dispatch + r.experts + r.combine);
    fmt::print("{:<20} {:<12} {:<9} {:>5} {:>10} {:>10} {:>8.2f} {:>8.2f} {:>9} {:>9} {:>9} {:>3.0f}%\n",
               v.placement->name, routing_name, v.two_stage ? "two-stage" : "direct", v.placement->world,
               format_bytes(std::uint64_t(r.sent)), format_bytes(std::uint64_t(r.across)), crossings, formula,
               format_seconds(r.dispatch), format_seconds(r.experts), format_seconds(r.combine), 100 * a2a);
    rows.push_back({{"placement", v.placement->name}, {"node_limit", v.limit}, {"two_stage", v.two_stage},
                    {"ranks", v.placement->world}, {"sent_per_rank", r.sent}, {"across_nodes", r.across},
                    {"crossings_per_token", crossings}, {"crossings_formula", formula}, {"dispatch", r.dispatch},
                    {"experts", r.experts}, {"combine", r.combine}});
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
  if (!o.json.empty())
    create_file(o.json) << nlohmann::json{{"model", o.what_if}, {"experts", E}, {"top_k", k}, {"ep", ep},
                                          {"tokens_per_rank", tokens}, {"rows", rows}}
                               .dump(2)
                        << '\n';
  return 0;
}

}  // namespace moe_lab
