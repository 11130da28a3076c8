#include "labkit/cost_model.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "labkit/nccl_model.h"

namespace labkit {

CostEstimate native_cost(Collective op, std::size_t bytes, int ranks, int nodes, const Topology& topology) {
  if (ranks <= 1) return {0.0, "none", {}};
  const double p = ranks, n = double(bytes);
  const Link& link = nodes > 1 ? topology.inter : topology.intra;
  switch (info(op).native_cost) {
    case NativeCost::nccl: {
      const NcclEstimate e = nccl_choice(op, bytes, nccl_system(topology, ranks, nodes));
      return {e.seconds, name_of(e.algorithm), name_of(e.protocol)};
    }
    case NativeCost::point_to_point: return {(p - 1) * link.alpha + (p - 1) / p * n / link.bandwidth, "ring", {}};
    case NativeCost::dissemination: return {std::bit_width(unsigned(ranks - 1)) * link.alpha, "dissemination", {}};
  }
  return {0.0, "none", {}};
}

GroupNodes::GroupNodes(std::vector<int> node_of_rank) : node(std::move(node_of_rank)) {
  std::map<int, int> index_of, ranks_on;
  for (int n : node) {
    if (index_of.emplace(n, count).second) ++count;
    ++ranks_on[n];
  }
  for (int n : node) {
    index.push_back(index_of[n]);
    share.push_back(ranks_on[n]);
  }
}

namespace {
// What a node sends off itself in NCCL's double binary tree: in each tree, its
// half of the buffer up to its parent and down to each child.
std::uint64_t tree_node_bytes(int index, int count, std::uint64_t n) {
  std::uint64_t bytes = 0;
  for (int tree : {0, 1}) {
    const TreeLinks links = nccl_tree(tree, count, index);
    bytes += (std::uint64_t(links.parent >= 0) + links.children.size()) * (n / 2);
  }
  return bytes;
}
}  // namespace

std::uint64_t native_off_node_bytes(const CollectiveCall& call, std::string_view algorithm, int rank,
                                    const GroupNodes& group) {
  const std::vector<int>& nodes = group.node;
  const int p = int(nodes.size());
  const auto off = [&](int peer) { return nodes[std::size_t(peer)] != nodes[std::size_t(rank)]; };
  const int next = (rank + 1) % p;
  const std::uint64_t n = std::max(call.send.bytes(), call.recv.bytes());
  const auto share = std::uint64_t(group.share[std::size_t(rank)]);
  if (group.count == 1) return 0;
  std::uint64_t bytes = 0;
  switch (call.op) {
    case Collective::all_reduce: {
      if (algorithm != "tree") return 2 * (std::uint64_t(p) - 1) * n / std::uint64_t(p) / share;
      return tree_node_bytes(group.index[std::size_t(rank)], group.count, n) / share;
    }
    case Collective::broadcast:  // a chain from the root, ending at the rank before it
      return next != call.root && off(next) ? n : 0;
    case Collective::reduce:  // a chain from the rank after the root, ending at the root
      return rank != call.root && off(next) ? n : 0;
    case Collective::gather: return rank != call.root && off(call.root) ? call.send.bytes() : 0;
    case Collective::scatter:
      if (rank == call.root)
        for (int r = 0; r < p; ++r) bytes += off(r) ? call.recv.bytes() : 0;
      return bytes;
    case Collective::all_gather: return (std::uint64_t(p) - 1) * call.send.bytes() / share;
    case Collective::reduce_scatter: return (std::uint64_t(p) - 1) * call.recv.bytes() / share;
    case Collective::all_to_all:
      for (int r = 0; r < p; ++r) bytes += off(r) ? call.send.bytes() / std::uint64_t(p) : 0;
      return bytes;
    case Collective::all_to_allv:
      for (int r = 0; r < p; ++r) bytes += off(r) ? call.send_counts[std::size_t(r)] * size_of(call.send.dtype) : 0;
      return bytes;
    case Collective::barrier: return 0;
  }
  return 0;
}

namespace {

using Pairs = std::vector<std::pair<int, int>>;  // (sender, receiver) in one step

// One step in which every pair moves `bytes`: the slowest pair sets the pace.
double step(const Topology& t, double bytes, const Pairs& pairs) {
  double slowest = 0;
  for (auto [from, to] : pairs) {
    const Link& l = t.link(from, to);
    slowest = std::max(slowest, l.alpha + bytes / l.bandwidth);
  }
  return slowest;
}

// The rounds of a binomial tree rooted at `root` over `members`: in the round of
// distance `mask`, relative rank v sends to v + mask for v a multiple of 2 mask.
std::vector<Pairs> binomial_rounds(const std::vector<int>& members, int root) {
  const int p = int(members.size());
  std::vector<Pairs> rounds;
  for (int mask = 1; mask < p; mask <<= 1) {
    Pairs& round = rounds.emplace_back();
    for (int v = 0; v + mask < p; v += 2 * mask)
      round.push_back({members[(v + root) % p], members[(v + mask + root) % p]});
  }
  return rounds;
}

std::vector<int> iota(int from, int count) {
  std::vector<int> v(count);
  for (int i = 0; i < count; ++i) v[i] = from + i;
  return v;
}

double binomial_tree(const Topology& t, double n, const std::vector<int>& members) {
  double time = 0;
  for (const Pairs& round : binomial_rounds(members, 0)) time += step(t, n, round);
  return time;
}

double ring(const Topology& t, double bytes_per_step, int steps, const std::vector<int>& members) {
  Pairs neighbours;
  for (std::size_t i = 0; i < members.size(); ++i)
    neighbours.push_back({members[i], members[(i + 1) % members.size()]});
  return steps * step(t, bytes_per_step, neighbours);
}

double recursive_halving_doubling(const Topology& t, double n, int p) {
  const int pow2 = std::bit_floor(unsigned(p)), rem = p - pow2;
  auto real = [&](int v) { return v < rem ? 2 * v + 1 : v + rem; };
  double time = 0;
  if (rem > 0) {  // fold in and, at the end, hand back: the whole buffer each way
    Pairs fold;
    for (int i = 0; i < rem; ++i) fold.push_back({2 * i, 2 * i + 1});
    time += 2 * step(t, n, fold);
  }
  for (int distance = pow2 / 2; distance >= 1; distance /= 2) {
    Pairs swap;
    for (int v = 0; v < pow2; ++v) swap.push_back({real(v), real(v ^ distance)});
    time += 2 * step(t, n * distance / pow2, swap);  // once halving, once doubling
  }
  return time;
}

double hierarchical(const Topology& t, double n, int p) {
  const int g = std::min(p, t.devices_per_node), nodes = (p + g - 1) / g;
  std::vector<int> leaders;
  for (int k = 0; k < nodes; ++k) leaders.push_back(k * g);
  // Reduce and broadcast inside the largest node; ring among the leaders.
  return 2 * binomial_tree(t, n, iota(0, g)) + ring(t, n / nodes, 2 * (nodes - 1), leaders);
}

// Everyone sends n/P to (or receives it from) the root at once: the root's port
// carries (P-1) n/P bytes, one message after another.
double linear(const Topology& t, double n, int p) {
  double wire = 0, alpha = 0;
  for (int r = 1; r < p; ++r) {
    wire += n / p / t.link(0, r).bandwidth;
    alpha = std::max(alpha, t.link(0, r).alpha);
  }
  return alpha + wire;
}

double naive(const Topology& t, double n, int p) {
  double time = 0;  // P-1 receives at rank 0, one after the other, then P-1 sends
  for (int r = 1; r < p; ++r) time += 2 * step(t, n, {{r, 0}});
  return time;
}

double pairwise(const Topology& t, double n, int p) {
  double time = 0;
  for (int s = 1; s < p; ++s) {
    Pairs round;
    for (int r = 0; r < p; ++r) round.push_back({r, (r + s) % p});
    time += step(t, n / p, round);
  }
  return time;
}

double dissemination(const Topology& t, int p) {
  double time = 0;
  for (int d = 1; d < p; d <<= 1) {
    Pairs round;
    for (int r = 0; r < p; ++r) round.push_back({r, (r + d) % p});
    time += step(t, 0, round);
  }
  return time;
}

}  // namespace

double predict(Collective op, std::string_view algo, std::size_t bytes, int p, const Topology& t) {
  if (p <= 1) return 0;
  const double n = double(bytes);
  const std::vector<int> all = iota(0, p);
  if (op == Collective::all_reduce) {
    if (algo == "naive") return naive(t, n, p);
    if (algo == "binomial_tree") return 2 * binomial_tree(t, n, all);
    if (algo == "ring") return ring(t, n / p, 2 * (p - 1), all);
    if (algo == "recursive_halving_doubling") return recursive_halving_doubling(t, n, p);
    if (algo == "hierarchical") return hierarchical(t, n, p);
  }
  if ((op == Collective::broadcast || op == Collective::reduce) && algo == "binomial_tree")
    return binomial_tree(t, n, all);
  if ((op == Collective::gather || op == Collective::scatter) && algo == "linear") return linear(t, n, p);
  if ((op == Collective::all_gather || op == Collective::reduce_scatter) && algo == "ring")
    return ring(t, n / p, p - 1, all);
  // all_to_allv as it runs with even counts.
  if ((op == Collective::all_to_all || op == Collective::all_to_allv) && algo == "pairwise") return pairwise(t, n, p);
  if (op == Collective::barrier && algo == "dissemination") return dissemination(t, p);
  if (algo == "native") return native_cost(op, bytes, p, t.node_of(p - 1) + 1, t).seconds;
  throw std::invalid_argument("predict: no model for " + std::string(name_of(op)) + " algorithm '" +
                              std::string(algo) + "'");
}

double bus_bandwidth_factor(Collective op, int ranks) { return info(op).bus_factor(ranks); }

}  // namespace labkit
