#include "labkit/nccl_model.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <limits>

namespace labkit {

namespace {
// NCCL's tuner constants, as src/graph/tuning.cc gives them (NCCL 2.28):
// latencies in microseconds, bandwidths in GB/s. Indexed [algorithm][protocol]
// in NCCL's order: tree, ring; LL, LL128, Simple.
using PerProtocol = std::array<double, 3>;
using PerAlgorithm = std::array<PerProtocol, 2>;
constexpr PerAlgorithm kBaseLatency = {{{6.8, 14.0, 8.4}, {6.6, 14.0, 8.4}}};
// A hop's latency on each kind of hardware.
constexpr PerAlgorithm kNvlinkLatency = {{{0.6, 1.25, 4.0}, {0.6, 1.9, 3.4}}};
constexpr PerAlgorithm kPcieLatency = {{{1.0, 1.9, 4.0}, {1.0, 2.5, 5.7}}};
constexpr PerAlgorithm kNetLatency = {{{5.0, 8.5, 14.0}, {2.7, 4.0, 14.0}}};

// Ceilings, by the node count (1, 2, more: NCCL's "N1/N2/N4") and the GPU.
// LL's ceiling is the GPU's inside one node, and the host CPU's across nodes.
constexpr std::array<double, 3> kLlMaxIntelHost = {39.0, 39.0, 20.4}, kLlMaxAmdHost = {87.7, 22.5, 19.0},
                                kLlMaxA100 = {87.7, 22.5, 19.0}, kLlMaxH100 = {141.0, 45.0, 35.0};
constexpr std::array<double, 3> kRingLl128PerChannelA100 = {20.0, 20.0, 20.0},
                                kRingLl128PerChannelH100 = {36.7, 36.7, 36.7};
constexpr std::array<double, 3> kTreeLl128PerChannelA100 = {20.0, 20.0, 20.0},
                                kTreeLl128PerChannelH100 = {36.7, 36.7, 29.0};
constexpr std::array<double, 3> kTreePerChannelA100 = {24.0, 23.6, 17.8}, kTreePerChannelH100 = {38.7, 41.4, 36.0};

// "Trees are not perfectly sticking to the model for medium sizes": NCCL scales
// the tree's bandwidth by these, for sizes 64 B x 2^i.
constexpr std::array<std::array<double, 24>, 3> kTreeCorrection = {{
    {1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1.0, 1.0, 1.0, 1.0, 1.0},
    {1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .6, .6, .6, .8, .9, .9, .9, .9, 1.0, 1.0, 1.0},
    {.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7, .8, .9, .9, .9},
}};

int log2_floor(std::size_t n) { return n == 0 ? -1 : int(std::bit_width(n)) - 1; }  // NCCL's log2i

// Steps of a ring over `count` members: allreduce goes round twice.
int ring_steps(Collective op, int count) {
  if (op == Collective::all_reduce) return 2 * (count - 1);
  if (op == Collective::all_gather || op == Collective::reduce_scatter) return count - 1;
  return count;  // broadcast, reduce: a chain
}

bool runs_on_nccl_tuning(Collective op) {
  return op == Collective::all_reduce || op == Collective::all_gather || op == Collective::reduce_scatter ||
         op == Collective::broadcast || op == Collective::reduce;
}

// algbw in GB/s: the channels' bus bandwidth, NCCL's refinements for the
// algorithm and protocol, then bus to algorithm bandwidth.
double algorithm_bandwidth(Collective op, NcclAlgorithm a, NcclProtocol p, const NcclSystem& s) {
  const int n = s.nodes <= 2 ? s.nodes - 1 : 2;
  const double channels = s.channels;
  const double ll_max = s.nodes == 1 ? (s.hopper ? kLlMaxH100 : kLlMaxA100)[n]
                                     : (s.amd_cpu ? kLlMaxAmdHost : kLlMaxIntelHost)[n];
  double bus = s.bus_bandwidth / 1e9;
  if (a == NcclAlgorithm::ring) {
    if (p == NcclProtocol::ll) bus = std::min(ll_max, bus * .5);
    if (p == NcclProtocol::ll128)  // 120 of every 128 bytes are data
      bus = std::min(bus * .92, channels * (s.hopper ? kRingLl128PerChannelH100 : kRingLl128PerChannelA100)[n]);
    return bus * s.ranks / ring_steps(op, s.ranks);
  }
  bus = std::min(bus * .92, channels * (s.hopper ? kTreePerChannelH100 : kTreePerChannelA100)[n]);
  if (p == NcclProtocol::ll) bus = std::min(bus / 3.8, ll_max);
  if (p == NcclProtocol::ll128)
    bus = std::min(bus * (s.nodes == 1 ? 7.0 / 9.0 : 120.0 / 128.0),
                   channels * (s.hopper ? kTreeLl128PerChannelH100 : kTreeLl128PerChannelA100)[n]);
  return bus * .5;  // up the tree and down again: the buffer crosses twice
}

// Latency in microseconds: a base, plus each step's hop inside or between nodes.
double latency(Collective op, NcclAlgorithm a, NcclProtocol p, const NcclSystem& s) {
  const int ai = int(a), pi = int(p);
  const bool simple = p == NcclProtocol::simple;
  const int per_node = s.ranks / s.nodes;
  const PerAlgorithm& intra_hw = s.nvlink ? kNvlinkLatency : kPcieLatency;
  double intra = intra_hw[ai][pi];
  // One GPU a node exposes the network's latency fully: NCCL takes the tree's.
  const double inter = kNetLatency[per_node == 1 ? int(NcclAlgorithm::tree) : ai][pi];
  double lat = kBaseLatency[ai][pi];
  if (a == NcclAlgorithm::tree)  // a chain in each node, log2(nodes) levels between them, up and down
    return lat + 2 * ((per_node - 1) * intra + log2_floor(std::size_t(s.nodes)) * inter);
  if (op == Collective::broadcast || op == Collective::reduce)  // a chain, pipelined: one hop's latency
    return lat + (s.nodes == 1 ? intra : inter);
  if (s.nodes > 1) {  // each step launches network work: the host's overhead per post
    const double overhead = (s.amd_cpu ? 2.0 : 1.0) * (simple ? 3 : 1);
    intra = std::max(intra, overhead);
  }
  const int steps = ring_steps(op, s.ranks);
  const int inter_steps = s.nodes == 1 ? 0 : op == Collective::all_reduce ? 2 * (s.nodes - 1) : s.nodes - 1;
  return lat + (steps - inter_steps) * intra + inter_steps * inter;
}

NcclEstimate estimate(Collective op, std::size_t bytes, NcclAlgorithm a, NcclProtocol p, const NcclSystem& s) {
  double bw = algorithm_bandwidth(op, a, p, s), lat = latency(op, a, p, s);
  const int size_class = log2_floor(bytes >> 6);
  if (a == NcclAlgorithm::tree && size_class >= 0 && size_class < 23) bw *= kTreeCorrection[int(p)][size_class];
  // "Plateau effect of ring": large multi-node allreduces pay more latency.
  if (a == NcclAlgorithm::ring && p == NcclProtocol::simple && s.nodes > 1 && op == Collective::all_reduce &&
      double(bytes) / (s.channels * s.ranks) >= 64)
    lat *= 1.4;
  return {a, p, lat * 1e-6, bw * 1e9, (lat + double(bytes) / (1000 * bw)) * 1e-6};
}
}  // namespace

std::string_view name_of(NcclAlgorithm a) { return a == NcclAlgorithm::tree ? "tree" : "ring"; }

std::string_view name_of(NcclProtocol p) {
  return p == NcclProtocol::ll ? "LL" : p == NcclProtocol::ll128 ? "LL128" : "Simple";
}

NcclSystem nccl_system(const Topology& t, int ranks, int nodes) {
  NcclSystem s;
  s.ranks = ranks;
  s.nodes = std::max(1, nodes);
  const int per_node = ranks / s.nodes;
  if (s.nodes == 1) {
    s.bus_bandwidth = t.intra.bandwidth;
  } else {
    // The group's GPUs of a node reach its NICs in proportion: all 8 of a DGX's with 8 GPUs there, 1 with 1.
    const int nics = std::max(1, (t.nics_per_node * per_node + t.devices_per_node - 1) / t.devices_per_node);
    s.bus_bandwidth = nics * t.inter.bandwidth;
    if (per_node > 1) s.bus_bandwidth = std::min(s.bus_bandwidth, t.intra.bandwidth);
  }
  s.nvlink = t.intra.bandwidth > 64e9;
  s.channels = s.nvlink ? 16 : 2;
  s.hopper = t.device.name != "a100";
  s.amd_cpu = !s.hopper;  // DGX A100: AMD EPYC; DGX H100: Intel Xeon
  return s;
}

std::vector<NcclEstimate> nccl_estimates(Collective op, std::size_t bytes, const NcclSystem& s) {
  std::vector<NcclEstimate> out;
  if (!runs_on_nccl_tuning(op) || s.ranks <= 1) return out;
  for (NcclAlgorithm a : {NcclAlgorithm::tree, NcclAlgorithm::ring}) {
    if (a == NcclAlgorithm::tree && op != Collective::all_reduce) continue;
    for (NcclProtocol p : {NcclProtocol::ll, NcclProtocol::ll128, NcclProtocol::simple})
      if (p != NcclProtocol::ll128 || s.nvlink) out.push_back(estimate(op, bytes, a, p, s));
  }
  return out;
}

NcclEstimate nccl_choice(Collective op, std::size_t bytes, const NcclSystem& s) {
  const std::vector<NcclEstimate> all = nccl_estimates(op, bytes, s);
  if (all.empty()) return {NcclAlgorithm::ring, NcclProtocol::simple, 0, std::numeric_limits<double>::infinity(), 0};
  return *std::min_element(all.begin(), all.end(),
                           [](const NcclEstimate& a, const NcclEstimate& b) { return a.seconds < b.seconds; });
}

// ncclGetBtree: node r's parent flips r's lowest set bit and sets the next one
// up; its children sit half that bit below and above. Tree 1 mirrors tree 0
// (an even count) or shifts it by one (odd), so that a node inside one tree is
// a leaf of the other and the two share the links' load.
TreeLinks nccl_tree(int tree, int count, int node) {
  const bool mirrored = count % 2 == 0;
  const int r = tree == 0 ? node : mirrored ? count - 1 - node : (node - 1 + count) % count;
  const auto back = [&](int v) { return v < 0 || tree == 0 ? v : mirrored ? count - 1 - v : (v + 1) % count; };
  int bit = 1;
  while (bit < count && !(bit & r)) bit <<= 1;
  TreeLinks links{-1, {}};
  if (r == 0) {
    if (count > 1) links.children.push_back(back(bit >> 1));
    return links;
  }
  int up = (r ^ bit) | (bit << 1);
  if (up >= count) up = r ^ bit;
  links.parent = back(up);
  int low = bit >> 1;
  if (low == 0) return links;
  links.children.push_back(back(r - low));
  int down = r + low;
  while (down >= count && low > 0) {
    low >>= 1;
    down = r + low;
  }
  if (low > 0) links.children.push_back(back(down));
  return links;
}

}  // namespace labkit
