// NCCL's own model of its collectives: how long each algorithm and protocol
// would take, and so which one NCCL runs (src/graph/tuning.cc, NCCL 2.28).
//
// NCCL predicts every (algorithm, protocol) pair as
//
//   time = latency + bytes / algbw
//
// and runs the fastest. Its two general algorithms, both pipelined:
//   ring  C channels, each a ring through every rank, the buffer cut in chunks
//         that flow around it: 2(P-1) steps for allreduce, P-1 for all-gather
//         and reduce-scatter, a chain for broadcast and reduce.
//         algbw = busbw x P / steps.
//   tree  allreduce only: a chain through the GPUs of each node, and across
//         nodes a double binary tree (Sanders, Speck, Traeff 2009): two trees,
//         each a node's parent in one and a leaf in the other, each carrying
//         half of the buffer. Reduce up, broadcast down, in chunks, so the
//         whole buffer crosses a link only twice: algbw = busbw / 2, and the
//         latency grows with log2(nodes), not with the rank count.
// And three protocols, trading bandwidth for latency:
//   LL      8-byte stores that carry their own flag: lowest latency, half the
//           bandwidth (and capped);
//   LL128   128-byte lines with a flag, 120 of them data: on NVLink only;
//   Simple  plain copies behind a fence: full bandwidth, highest latency.
//
// labkit keeps NCCL's constants (microseconds, GB/s) and formulas as they are,
// and takes the bandwidths from the topology. NVLS, CollNet and PAT (hardware
// reductions in the switch or the network, and one GPU per node all-gathers)
// are left out: what is modelled is NCCL with NCCL_ALGO=ring,tree.
#pragma once

#include <cstddef>
#include <string_view>
#include <vector>

#include "labkit/collective.h"
#include "labkit/topology.h"

namespace labkit {

enum class NcclAlgorithm { tree, ring };
enum class NcclProtocol { ll, ll128, simple };
std::string_view name_of(NcclAlgorithm a);  // "tree", "ring"
std::string_view name_of(NcclProtocol p);   // "LL", "LL128", "Simple"

// What NCCL's tuner knows of a communicator.
struct NcclSystem {
  int ranks = 1;
  int nodes = 1;
  double bus_bandwidth = 0;  // bytes/s a rank's channels move together (NCCL's nChannels x bw)
  int channels = 16;         // NCCL's nChannels; matters only where a per-channel ceiling binds
  bool nvlink = true;        // inside a node: NVLink, else PCIe (LL128 needs NVLink)
  bool hopper = true;        // H100 (compute capability 9.0), else A100 (8.0)
  bool amd_cpu = false;      // the host's CPU, for LL's ceiling across nodes and the network overhead
};

// The communicator of `ranks` ranks spanning `nodes` nodes of `topology`. Inside
// one node the channels share the GPU's NVLink (or PCIe) bandwidth. Across
// nodes each channel's ring (or tree) leaves the node through its own NIC, so
// the channels together move up to nics_per_node x the NIC's bandwidth, and no
// more than NVLink. NVLink is any link inside the node faster than PCIe 5.0 x16
// (64 GB/s a direction); the host CPU is the DGX's (H100: Intel, A100: AMD).
NcclSystem nccl_system(const Topology& topology, int ranks, int nodes);

struct NcclEstimate {
  NcclAlgorithm algorithm;
  NcclProtocol protocol;
  double latency;    // seconds
  double bandwidth;  // algbw, bytes/s, after NCCL's corrections for this size
  double seconds;    // latency + bytes / bandwidth
};

// Every (algorithm, protocol) NCCL would consider for `op` on `bytes` (nccl-tests'
// size: the larger buffer), in NCCL's order (tree before ring, LL, LL128,
// Simple). Empty for the collectives NCCL runs as point-to-point (gather,
// scatter, all-to-all) and for barrier, which NCCL does not have.
std::vector<NcclEstimate> nccl_estimates(Collective op, std::size_t bytes, const NcclSystem& system);

// The one NCCL runs: the fastest of nccl_estimates (the first, on a tie).
NcclEstimate nccl_choice(Collective op, std::size_t bytes, const NcclSystem& system);

// The two trees of NCCL's double binary tree over `count` nodes (trees.cc): for
// node `node`, its parent (-1 at a root) and children in tree 0 and tree 1.
struct TreeLinks {
  int parent;
  std::vector<int> children;
};
TreeLinks nccl_tree(int tree, int count, int node);

}  // namespace labkit
