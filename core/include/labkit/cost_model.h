// The alpha-beta cost model (Hockney 1994):
// a message of n bytes over a link costs alpha + n beta, beta = 1 / bandwidth.
//
// native_cost: what NCCL would take (its own tuning model, nccl_model.h) — the
// simulator charges it for a native collective.
// predict: the closed form of each labkit algorithm, step by step, where a step
// costs its slowest pair's alpha + bytes beta (so it is topology-aware). On a
// uniform topology these are the published closed forms (Thakur, Rabenseifner
// & Gropp 2005; Patarasuk & Yuan 2009 for the ring). The model is free of
// contention: it never puts two messages on one port. The simulator splits a
// port's bandwidth fairly among the messages on it (as SimGrid does; ./labkit
// simgrid checks it), so where one step's messages share a node's NIC the
// simulated time is longer than the model's: recursive halving-doubling across
// nodes with one NIC each, up to 5.9x at 1 GiB on 16 ranks (book chapter 2).
// n is nccl-tests' "size": the bytes of the larger buffer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "labkit/collective.h"
#include "labkit/topology.h"

namespace labkit {

struct CostEstimate {
  double seconds;
  std::string_view algorithm;  // the algorithm the library would pick: "ring", "tree"
  std::string_view protocol;   // and NCCL's protocol for it: "LL", "LL128", "Simple" (empty where none)
};

// `ranks` ranks of `topology` spanning `nodes` nodes.
CostEstimate native_cost(Collective op, std::size_t bytes, int ranks, int nodes, const Topology& topology);

// A group's ranks by node, counted once per group (a collective asks for
// every rank, and groups reach thousands): rank i is on node node[i], which is
// the index[i]-th node the group's ranks meet in rank order and holds share[i]
// of them.
struct GroupNodes {
  explicit GroupNodes(std::vector<int> node_of_rank);
  std::vector<int> node, index, share;
  int count = 0;  // distinct nodes
};

// The bytes group rank `rank` sends to ranks on other nodes when the library
// runs `call` as `algorithm` (native_cost's choice) over `group`. NCCL orders its rings node by node, so a ring leaves
// each node once per channel, and its channels leave through different GPUs'
// NICs: the node's off-node bytes, (P-1)/P of the buffer a pass, are shared by
// its ranks. So is the tree's: in each of the two trees over nodes a node
// sends its half of the buffer up to its parent and down to each child. A
// chain (broadcast, reduce) sends to the next rank; gather and scatter to and
// from the root; all-to-all each peer its block.
std::uint64_t native_off_node_bytes(const CollectiveCall& call, std::string_view algorithm, int rank,
                                    const GroupNodes& group);

// Seconds for labkit's `algo` (a name from the registry) on ranks 0..ranks-1.
double predict(Collective op, std::string_view algo, std::size_t bytes, int ranks, const Topology& topology);

// nccl-tests' bus bandwidth factor (doc/PERFORMANCE.md): busbw = algbw x factor,
// which makes busbw comparable with the link's bandwidth whatever the rank count.
double bus_bandwidth_factor(Collective op, int ranks);

// The message size where latency and bandwidth cost the same: n* = alpha / beta.
inline double crossover_bytes(const Link& link) { return link.alpha * link.bandwidth; }

}  // namespace labkit
