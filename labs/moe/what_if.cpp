// --what-if MODEL: one MoE layer of a real model at --ep ranks, payload-free.
// Each rank holds b x s tokens and E / ep experts; every token picks k
// experts, uniformly and seeded (a router balanced as well as it can be),
// and the layer runs as the lab's does: the tokens to their experts by one
// all_to_allv, the experts' FLOPs on the topology's GPU, the outputs back by
// another. Only sizes travel. The ep ranks sit either in as few nodes as they
// fit (consecutive ranks, 8 a node on a DGX) or one a node (the ep group
// strided across the nodes, each node's other GPUs running their own groups
// beside it): what leaves the node is what the placement decides.
#include <algorithm>
#include <chrono>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "labkit/error.h"
#include "labkit/memory.h"
#include "labkit/output.h"
#include "labkit/topology.h"
#include "labkit/units.h"
#include "moe.h"

namespace moe_lab {

namespace {

// Every ep rank's assignments per expert (ep x E) under uniform routing: its
// k x tokens assignments spread over the experts by a multinomial draw (each
// expert's count binomial in what is left), so that the cost is E a rank, not
// k x tokens.
std::vector<std::int64_t> uniform_routing(int ep, int E, int k, std::int64_t tokens, std::uint64_t seed) {
  std::vector<std::int64_t> counts(std::size_t(ep) * E, 0);
  std::mt19937_64 gen(seed);
  for (int q = 0; q < ep; ++q) {
    std::int64_t left = std::int64_t(k) * tokens;
    for (int e = 0; e < E; ++e) {
      std::binomial_distribution<std::int64_t> share(left, 1.0 / double(E - e));
      const std::int64_t c = e + 1 == E ? left : share(gen);
      counts[std::size_t(q) * E + std::size_t(e)] = c;
      left -= c;
    }
  }
  return counts;
}

struct Placement {
  std::string name;
  int world = 0;   // ranks simulated: the ep group and the groups beside it
  bool strided = false;  // the ep group one a node (ranks g, g + 8, ...), else consecutive ranks
};

struct LayerRun {
  double dispatch = 0, experts = 0, combine = 0;  // the slowest ep rank's
  double sent = 0, across = 0;                     // the dispatch's bytes per rank, and those leaving the node
  double wall = 0;                                 // seconds the simulation took
};

LayerRun play(const Placement& p, const RunOptions& given, int ep, int E, const std::vector<std::int64_t>& counts,
              double expert_flops_per_token, int h) {
  RunOptions run_options = given;
  run_options.payload_free = true;
  run_options.ranks = p.world;
  const Topology topology = find_topology(run_options.topology);
  const int groups = p.world / ep, local = E / ep;
  LayerRun out;
  const auto started = std::chrono::steady_clock::now();
  run(run_options, [&](Comm& world) {
    const int r = world.rank();
    const int group = p.strided ? r % groups : r / ep, q = p.strided ? r / groups : r % ep;
    const std::unique_ptr<Comm> ep_group = world.split(group, q);
    const auto global = [&](int member) { return p.strided ? member * groups + group : group * ep + member; };
    std::vector<std::size_t> send(std::size_t(ep), 0), recv(std::size_t(ep), 0);
    double received_tokens = 0, across = 0;
    for (int m = 0; m < ep; ++m)
      for (int i = 0; i < local; ++i) {
        send[std::size_t(m)] += std::size_t(counts[std::size_t(q) * E + m * local + i]) * h;
        recv[std::size_t(m)] += std::size_t(counts[std::size_t(m) * E + q * local + i]) * h;
        received_tokens += double(counts[std::size_t(m) * E + q * local + i]);
      }
    double sent = 0;
    for (int m = 0; m < ep; ++m)
      if (m != q) {
        sent += double(send[std::size_t(m)]) * 2;  // bf16
        if (topology.node_of(global(m)) != topology.node_of(r)) across += double(send[std::size_t(m)]) * 2;
      }
    const auto total = [](const std::vector<std::size_t>& v) {
      std::size_t n = 0;
      for (std::size_t c : v) n += c;
      return n;
    };
    double t = world.now();
    ep_group->all_to_allv(sizes_only(total(send), DType::bf16), send, sizes_only(total(recv), DType::bf16), recv);
    const double dispatch = world.now() - t;
    t = world.now();
    world.compute("experts", received_tokens * expert_flops_per_token);
    const double experts = world.now() - t;
    t = world.now();
    ep_group->all_to_allv(sizes_only(total(recv), DType::bf16), recv, sizes_only(total(send), DType::bf16), send);
    const double combine = world.now() - t;
    std::vector<double> report = {dispatch, experts, combine, sent, across};
    const auto all = world.inspect(view_of(report));
    if (r != 0) return;
    for (const std::vector<double>& v : all) {
      out.dispatch = std::max(out.dispatch, v[0]), out.experts = std::max(out.experts, v[1]);
      out.combine = std::max(out.combine, v[2]);
      out.sent += v[3] / double(all.size()), out.across += v[4] / double(all.size());
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
  const int seq = o.seq ? o.seq : 4096;
  const std::int64_t tokens = std::int64_t(o.micro_batch) * seq;
  // A routed expert's FLOPs per token: 2 per weight, 3 matrices when gated (SwiGLU), 2 otherwise.
  const double expert_flops = 2.0 * (arch.gated_ffn ? 3 : 2) * double(h) * arch.ffn;
  const std::vector<std::int64_t> counts = uniform_routing(ep, E, k, tokens, o.seed);

  std::vector<Placement> placements;
  const int nodes_packed = (ep + per_node - 1) / per_node;
  placements.push_back({fmt::format("{} a node, {} node{}", std::min(ep, per_node), nodes_packed,
                                    nodes_packed == 1 ? "" : "s"),
                        nodes_packed * per_node, false});
  if (ep > 1 && ep <= per_node)
    placements.push_back({fmt::format("1 a node, {} nodes", ep), ep * per_node, true});

  fmt::print("moe --what-if {}: {} experts, top-{}{}, h = {}, an expert's FFN {}{}; ep {} ({} expert{} a rank), "
             "b = {} x s = {} tokens a rank, bf16, routing uniform; one MoE layer's forward, payload-free on {} ...\n",
             o.what_if, E, k, arch.shared_experts ? fmt::format(" + {} shared", arch.shared_experts) : "", h, arch.ffn,
             arch.gated_ffn ? " (gated)" : "", ep, E / ep, E / ep == 1 ? "" : "s", o.micro_batch, seq,
             run_options.topology);
  std::fflush(stdout);
  fmt::print("{:<22} {:>6} {:>10} {:>10} {:>8} {:>10} {:>10} {:>10} {:>6}\n", "placement", "ranks", "sent/rank",
             "formula", "leaves", "dispatch", "experts", "combine", "a2a");
  // With routing uniform, (ep - 1) / ep of a rank's k x tokens assignments go to other ranks.
  const double formula = double(k) * double(tokens) * h * 2 * (ep - 1) / ep;
  nlohmann::json rows = nlohmann::json::array();
  double wall = 0;
  for (const Placement& p : placements) {
    const LayerRun r = play(p, run_options, ep, E, counts, expert_flops, h);
    wall += r.wall;
    const double a2a = (r.dispatch + r.combine) / (r.dispatch + r.experts + r.combine);
    fmt::print("{:<22} {:>6} {:>10} {:>10} {:>7.0f}% {:>10} {:>10} {:>10} {:>5.0f}%\n", p.name, p.world,
               format_bytes(std::uint64_t(r.sent)), format_bytes(std::uint64_t(formula)),
               r.sent > 0 ? 100 * r.across / r.sent : 0.0, format_seconds(r.dispatch), format_seconds(r.experts),
               format_seconds(r.combine), 100 * a2a);
    rows.push_back({{"placement", p.name}, {"ranks", p.world}, {"sent_per_rank", r.sent}, {"formula", formula},
                    {"across_nodes", r.across}, {"dispatch", r.dispatch}, {"experts", r.experts},
                    {"combine", r.combine}});
  }
  fmt::print("(ranks: simulated, the ep group and the groups beside it on the same nodes; sent/rank: the dispatch's "
             "bytes to other ranks, the combine's the same back; formula: k b s h (ep-1)/ep x 2 bytes; leaves: the "
             "share that crosses between nodes; dispatch, experts, combine: the slowest rank's, the routed experts at "
             "{:.0f}% of the GPU's peak (a shared expert, which needs no all-to-all, left out), the combine waiting "
             "for the busiest expert's rank; a2a: the two all-to-alls' share of "
             "the layer; backward sends as much again)\n",
             100 * run_options.efficiency);
  if (o.bench) fmt::print("simulated in {} wall\n", format_seconds(wall));
  if (!o.json.empty())
    create_file(o.json) << nlohmann::json{{"model", o.what_if}, {"experts", E}, {"top_k", k}, {"ep", ep},
                                          {"tokens_per_rank", tokens}, {"placements", rows}}
                               .dump(2)
                        << '\n';
  return 0;
}

}  // namespace moe_lab
