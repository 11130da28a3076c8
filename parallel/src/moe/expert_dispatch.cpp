#include "labkit/parallel/expert_dispatch.h"

#include <algorithm>
#include <numeric>
#include <random>

#include "labkit/parallel/mesh.h"
#include "labkit/view.h"

namespace labkit {

UniformRouting route_uniformly(const ExpertLayout& l, int k, std::int64_t tokens, int node_limit, std::uint64_t seed) {
  const std::size_t ep = l.ep, experts = l.experts, nodes = l.nodes(), per_node = l.experts_per_node();
  const int eligible_nodes = node_limit > 0 && node_limit < l.nodes() ? node_limit : l.nodes();
  // Partial Fisher-Yates shuffles of persistent arrays: after draw(v, n), v's
  // first n entries are a uniform n-subset, in O(n), so 256 ranks of 4096
  // tokens route in milliseconds.
  std::vector<int> node_order(nodes), slots(eligible_nodes * per_node);
  std::iota(node_order.begin(), node_order.end(), 0);
  std::iota(slots.begin(), slots.end(), 0);
  std::mt19937_64 gen(seed);
  const auto draw = [&](std::vector<int>& v, int n) {
    for (int i = 0; i < n; ++i) std::swap(v[i], v[std::uniform_int_distribution<int>(i, int(v.size()) - 1)(gen)]);
  };
  UniformRouting r{l.nodes(), std::vector<std::int64_t>(ep * experts), std::vector<std::int64_t>(ep * nodes)};
  std::vector<char> touched(nodes);
  for (std::size_t q = 0; q < ep; ++q)
    for (std::int64_t t = 0; t < tokens; ++t) {
      if (eligible_nodes < l.nodes()) draw(node_order, eligible_nodes);
      draw(slots, k);  // slot s: expert s % per_node of the (s / per_node)-th eligible node
      std::fill(touched.begin(), touched.end(), 0);
      for (int i = 0; i < k; ++i) {
        const std::size_t slot = slots[i], node = node_order[slot / per_node];
        ++r.assignments[q * experts + node * per_node + slot % per_node];
        touched[node] = 1;
      }
      for (std::size_t n = 0; n < nodes; ++n) r.node_tokens[q * nodes + n] += touched[n];
    }
  return r;
}

// Direct: each of a token's k assignments crosses unless its expert is on the
// token's own node, k (N - 1) / N. Two-stage: of the n nodes a token may use,
// one is touched unless all k experts fall on the others, with probability
// C(E' - E/N, k) / C(E', k), E' = n E / N; (N - 1) / N of those touched are
// another node.
double crossings_per_token(const ExpertLayout& l, int k, int node_limit, bool two_stage) {
  const double nodes = l.nodes();
  if (!two_stage) return k * (nodes - 1) / nodes;
  const int n = node_limit > 0 && node_limit < l.nodes() ? node_limit : l.nodes();
  const double eligible = double(n) * l.experts_per_node();
  double untouched = 1;
  for (int i = 0; i < k; ++i) untouched *= (eligible - l.experts_per_node() - i) / (eligible - i);
  return n * (1 - untouched) * (nodes - 1) / nodes;
}

namespace {

std::size_t total(const std::vector<std::size_t>& v) { return std::accumulate(v.begin(), v.end(), std::size_t(0)); }

// One all_to_allv over `group`: `send[m]` bf16 elements to member m, `recv[m]` from it.
struct Exchange {
  Exchange(Comm& members, std::size_t size) : group(&members), send(size), recv(size) {}
  Comm* group;
  std::vector<std::size_t> send, recv;
  void play(bool back) const {  // back: the same sizes the other way (the combine)
    const auto& out = back ? recv : send;
    const auto& in = back ? send : recv;
    group->all_to_allv(meta_view(total(out), DType::bf16), out, meta_view(total(in), DType::bf16), in);
  }
};

}  // namespace

ExpertLayerCost play_expert_layer(Comm& ep, const ExpertLayout& l, const UniformRouting& routing, bool two_stage,
                                  int h, double flops_per_row) {
  const int q = ep.rank(), local = l.experts_per_rank();
  const auto to_rank = [&](int from, int rank) {  // rows from ep rank `from` to ep rank `rank`'s experts
    std::size_t n = 0;
    for (int i = 0; i < local; ++i) n += routing.assigned(from, rank * local + i, l.experts);
    return n;
  };
  std::vector<Exchange> stages;
  std::unique_ptr<Mesh> nodes;
  if (!two_stage) {
    Exchange direct(ep, l.ep);
    for (int m = 0; m < l.ep; ++m)
      if (m != q) direct.send[m] = to_rank(q, m), direct.recv[m] = to_rank(m, q);
    stages.push_back(std::move(direct));
  } else {
    // "across": the same GPU index on every node (IB); "within": this node's GPUs (NVLink).
    const int N = l.nodes(), G = l.ranks_per_node, node = q / G, gpu = q % G;
    nodes = std::make_unique<Mesh>(ep, std::vector<MeshDim>{{"across", N}, {"within", G}});
    const auto rank_at = [&](int n, int g) { return n * G + g; };
    Exchange ib(nodes->group("across"), N);
    for (int n = 0; n < N; ++n)
      if (n != node) {
        ib.send[n] = routing.tokens_to_node(q, n);
        ib.recv[n] = routing.tokens_to_node(rank_at(n, gpu), node);
      }
    // What reached this GPU (its own tokens included) goes on to its node's experts.
    Exchange nvlink(nodes->group("within"), G);
    for (int g = 0; g < G; ++g)
      for (int n = 0; n < N && g != gpu; ++n) {
        nvlink.send[g] += to_rank(rank_at(n, gpu), rank_at(node, g));
        nvlink.recv[g] += to_rank(rank_at(n, g), q);
      }
    stages.push_back(std::move(ib));
    stages.push_back(std::move(nvlink));
  }

  ExpertLayerCost cost;
  for (Exchange& s : stages) {  // counted in rows above; all_to_allv counts elements, h a row
    for (std::size_t& c : s.send) c *= h;
    for (std::size_t& c : s.recv) c *= h;
  }
  for (const Exchange& s : stages)
    for (int m = 0; m < s.group->size(); ++m) {
      const double bytes = double(s.send[m]) * 2;  // bf16
      cost.sent += bytes;
      if (s.group->node_of(m) != s.group->node_of(s.group->rank())) cost.across += bytes;
    }
  double rows = 0;
  for (int m = 0; m < l.ep; ++m) rows += double(to_rank(m, q));
  double t = ep.now();
  for (const Exchange& s : stages) s.play(false);
  cost.dispatch = ep.now() - t;
  t = ep.now();
  ep.compute_flops("experts", rows * flops_per_row);
  cost.experts = ep.now() - t;
  t = ep.now();
  for (auto s = stages.rbegin(); s != stages.rend(); ++s) s->play(true);
  cost.combine = ep.now() - t;
  return cost;
}

}  // namespace labkit
