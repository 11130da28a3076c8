// labkit::expert_dispatch — an MoE layer at a real model's scale, payload-free:
// tokens routed uniformly to experts over an ep group that spans nodes, and
// the layer's dispatch, experts and combine played with sizes only (the moe
// lab's --what-if; the capstone's MoE layers).
//
// Past one node, DeepSeek-V3 (technical report, arXiv:2412.19437) cuts what
// crosses InfiniBand two ways, and each can be played here:
//   node-limited routing (section 2.1.2): a token's k experts come from at
//     most M nodes, chosen by their experts' top affinities; with scores as
//     uniform as here, a uniform draw of M nodes;
//   two-stage dispatch (section 3.2.2): a token crosses IB once per node it
//     needs, to the GPU with the same index there, which forwards it over
//     NVLink to that node's experts; the combine sums a node's outputs
//     before they cross back, so it returns the same sizes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "labkit/comm.h"

namespace labkit {

// Where an ep group's experts sit: E / ep a rank, ranks_per_node of its ranks
// a node (a node's every GPU when packed, one when strided across nodes).
struct ExpertLayout {
  int ep = 1, experts = 1, ranks_per_node = 1;
  int nodes() const { return ep / ranks_per_node; }
  int experts_per_rank() const { return experts / ep; }
  int experts_per_node() const { return experts / nodes(); }
};

// Every ep rank's `tokens` tokens routed: each picks k distinct experts
// uniformly (a router balanced as well as it can be), from all of them or,
// with node_limit M (0: none), from M nodes drawn first. Seeded.
struct UniformRouting {
  int nodes = 1;
  std::vector<std::int64_t> assignments;  // [ep rank][expert]
  std::vector<std::int64_t> node_tokens;  // [ep rank][node]: its tokens with an expert there
  std::int64_t assigned(std::size_t from, std::size_t expert, std::size_t experts) const {
    return assignments[from * experts + expert];
  }
  std::int64_t tokens_to_node(std::size_t from, std::size_t node) const { return node_tokens[from * nodes + node]; }
};
UniformRouting route_uniformly(const ExpertLayout& layout, int k, std::int64_t tokens, int node_limit,
                               std::uint64_t seed);

// The copies of a token that cross between nodes on the dispatch, expected
// under uniform routing: direct, k (N - 1) / N; two-stage, one per other
// node it touches.
double crossings_per_token(const ExpertLayout& layout, int k, int node_limit, bool two_stage);

// One rank's MoE layer forward, played with sizes only (bf16 rows of h).
struct ExpertLayerCost {
  double dispatch = 0, experts = 0, combine = 0;  // seconds on this rank
  double sent = 0, across = 0;  // bytes this rank's dispatch sends to other ranks, and those that leave its node
};
// Collective over `ep` (ep.size() == layout.ep, its ranks laid out as
// layout.ranks_per_node a node, ep rank order): each rank sends its tokens'
// kept rows toward their experts (two_stage: through the same-index GPU of
// each node), computes its experts' rows at flops_per_row, and sends the
// outputs back by the reverse path.
ExpertLayerCost play_expert_layer(Comm& ep, const ExpertLayout& layout, const UniformRouting& routing,
                                  bool two_stage, int h, double flops_per_row);

}  // namespace labkit
