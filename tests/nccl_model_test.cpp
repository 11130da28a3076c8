// NCCL's tuning model (nccl_model.h) against its formulas worked by hand from
// src/graph/tuning.cc, the double binary tree against trees.cc, and the
// simulator charging it for a native collective.
#include <set>

#include <gtest/gtest.h>

#include "harness.h"
#include "labkit/cost_model.h"
#include "labkit/nccl_model.h"

using namespace labkit;

namespace {
constexpr double us = 1e-6, GB = 1e9;
const Topology kDgxH100 = find_topology("dgx-h100");

NcclSystem dgx(int nodes) { return nccl_system(kDgxH100, 8 * nodes, nodes); }

const NcclEstimate& find(const std::vector<NcclEstimate>& all, NcclAlgorithm a, NcclProtocol p) {
  for (const NcclEstimate& e : all)
    if (e.algorithm == a && e.protocol == p) return e;
  throw std::runtime_error("no such estimate");
}
}  // namespace

TEST(NcclModel, ChannelsShareNvlinkInANodeAndTheNodesNicsAcrossNodes) {
  EXPECT_EQ(dgx(1).bus_bandwidth, 450 * GB);               // NVLink 4, one direction
  EXPECT_EQ(dgx(2).bus_bandwidth, 400 * GB);               // 8 NICs x 50 GB/s
  EXPECT_EQ(nccl_system(kDgxH100, 2, 2).bus_bandwidth, 50 * GB);  // one GPU a node: its own NIC
  const NcclSystem cloud = nccl_system(find_topology("ethernet"), 16, 2);
  EXPECT_EQ(cloud.bus_bandwidth, 12.5 * GB);  // one NIC for 8 GPUs
  EXPECT_FALSE(cloud.nvlink);
  EXPECT_FALSE(nccl_system(find_topology("dgx-a100"), 8, 1).hopper);
}

// One DGX H100, 8 ranks, 1 KiB. Tree/LL: busbw min(450 x .92, 16 x 38.7) / 3.8,
// halved, x .9 at 1 KiB (64 B x 2^4); latency 6.8 + 2 x 7 x 0.6 us. Ring/LL:
// min(141, 450 / 2) x 8/14; 6.6 + 14 x 0.6 us. Ring/LL wins by 0.2 us.
TEST(NcclModel, SmallAllReduceInANodeIsRingLLAsNcclComputesIt) {
  const std::vector<NcclEstimate> all = nccl_estimates(Collective::all_reduce, 1024, dgx(1));
  ASSERT_EQ(all.size(), 6u);
  const NcclEstimate& tree = find(all, NcclAlgorithm::tree, NcclProtocol::ll);
  EXPECT_NEAR(tree.latency, 15.2 * us, 1e-12);
  EXPECT_NEAR(tree.bandwidth, 414.0 / 3.8 * .5 * .9 * GB, 1e3);
  const NcclEstimate& ring = find(all, NcclAlgorithm::ring, NcclProtocol::ll);
  EXPECT_NEAR(ring.latency, 15.0 * us, 1e-12);
  EXPECT_NEAR(ring.bandwidth, 141.0 * 8 / 14 * GB, 1e3);
  const NcclEstimate pick = nccl_choice(Collective::all_reduce, 1024, dgx(1));
  EXPECT_EQ(pick.algorithm, NcclAlgorithm::ring);
  EXPECT_EQ(pick.protocol, NcclProtocol::ll);
  EXPECT_NEAR(pick.seconds, 15.0 * us + 1024 / (141.0 * 8 / 14 * GB), 1e-12);
}

// 1 GiB in one node: ring/Simple at the full 450 GB/s busbw, latency 8.4 + 14 x 3.4 us.
TEST(NcclModel, LargeAllReduceInANodeIsRingSimpleAtNvlinkBandwidth) {
  const NcclEstimate pick = nccl_choice(Collective::all_reduce, 1 << 30, dgx(1));
  EXPECT_EQ(pick.algorithm, NcclAlgorithm::ring);
  EXPECT_EQ(pick.protocol, NcclProtocol::simple);
  EXPECT_NEAR(pick.latency, 56.0 * us, 1e-12);
  EXPECT_NEAR(pick.seconds, 56.0 * us + double(1 << 30) / (450.0 * 8 / 14 * GB), 1e-12);
}

// Across 16 nodes the ring pays a hop for each of its 254 steps, the tree a
// chain of 7 in the node and log2 16 = 4 network levels, each way. At 1 GiB the
// ring/Simple's 1.67 ms of latency ((8.4 + 224 x 3.4 + 30 x 14) x 1.4 us) still
// outweighs its bandwidth (400 x 128/254 against the tree's 400 x .92 / 2 GB/s);
// by 16 GiB it does not.
TEST(NcclModel, AcrossManyNodesTheTreeWinsUntilTheRingsBandwidthPaysForItsLatency) {
  const NcclSystem s = dgx(16);
  const std::vector<NcclEstimate> all = nccl_estimates(Collective::all_reduce, 1024, s);
  EXPECT_NEAR(find(all, NcclAlgorithm::tree, NcclProtocol::ll).latency, (6.8 + 2 * (7 * 0.6 + 4 * 5.0)) * us, 1e-12);
  // The host posts each network step: at least 1 us a step (Intel), 2.7 us across nodes.
  EXPECT_NEAR(find(all, NcclAlgorithm::ring, NcclProtocol::ll).latency, (6.6 + 224 * 1.0 + 30 * 2.7) * us, 1e-12);
  EXPECT_EQ(nccl_choice(Collective::all_reduce, 1024, s).algorithm, NcclAlgorithm::tree);
  const std::vector<NcclEstimate> large = nccl_estimates(Collective::all_reduce, 1 << 30, s);
  EXPECT_NEAR(find(large, NcclAlgorithm::ring, NcclProtocol::simple).latency,
              (8.4 + 224 * 3.4 + 30 * 14.0) * 1.4 * us, 1e-12);
  EXPECT_NEAR(find(large, NcclAlgorithm::tree, NcclProtocol::simple).latency, (8.4 + 2 * (7 * 4.0 + 4 * 14.0)) * us,
              1e-12);
  EXPECT_EQ(nccl_choice(Collective::all_reduce, 1 << 30, s).algorithm, NcclAlgorithm::tree);
  EXPECT_EQ(nccl_choice(Collective::all_reduce, std::size_t(16) << 30, s).algorithm, NcclAlgorithm::ring);
}

// Two nodes, 1 GiB: ring/Simple at 400 GB/s x 16/30, latency 8.4 + 28 x 3.4 +
// 2 x 14 us, x 1.4 for the ring's plateau; tree/Simple at 400 x .92 / 2.
TEST(NcclModel, TwoNodeRingPaysThePlateauAndBeatsTheTree) {
  const std::vector<NcclEstimate> all = nccl_estimates(Collective::all_reduce, 1 << 30, dgx(2));
  const NcclEstimate& ring = find(all, NcclAlgorithm::ring, NcclProtocol::simple);
  EXPECT_NEAR(ring.latency, (8.4 + 28 * 3.4 + 2 * 14) * 1.4 * us, 1e-12);
  EXPECT_NEAR(ring.bandwidth, 400.0 * 16 / 30 * GB, 1e3);
  const NcclEstimate& tree = find(all, NcclAlgorithm::tree, NcclProtocol::simple);
  EXPECT_NEAR(tree.latency, (8.4 + 2 * (7 * 4.0 + 1 * 14)) * us, 1e-12);
  EXPECT_NEAR(tree.bandwidth, 400.0 * .92 / 2 * GB, 1e3);
  EXPECT_LT(ring.seconds, tree.seconds);
}

TEST(NcclModel, OtherCollectivesRunOnlyTheRingAndLL128OnlyOnNvlink) {
  const std::vector<NcclEstimate> gather = nccl_estimates(Collective::all_gather, 1 << 20, dgx(1));
  ASSERT_EQ(gather.size(), 3u);
  for (const NcclEstimate& e : gather) EXPECT_EQ(e.algorithm, NcclAlgorithm::ring);
  // A broadcast is a pipelined chain: one hop's latency, the buffer at the full busbw.
  const NcclEstimate& chain = find(nccl_estimates(Collective::broadcast, 1 << 30, dgx(1)), NcclAlgorithm::ring,
                                   NcclProtocol::simple);
  EXPECT_NEAR(chain.latency, (8.4 + 3.4) * us, 1e-12);
  EXPECT_NEAR(chain.bandwidth, 450 * GB, 1e3);
  EXPECT_EQ(nccl_estimates(Collective::all_reduce, 1024, nccl_system(find_topology("pcie"), 4, 1)).size(), 4u);
  EXPECT_TRUE(nccl_estimates(Collective::all_to_all, 1024, dgx(1)).empty());
}

// trees.cc on 4 nodes: tree 0 is 0 -> 2 -> {1, 3}; tree 1 mirrors it, 3 -> 1 -> {2, 0}.
TEST(NcclModel, DoubleBinaryTreeIsNcclsAndEachNodeIsALeafInOneTree) {
  EXPECT_EQ(nccl_tree(0, 4, 0).children, std::vector<int>({2}));
  EXPECT_EQ(nccl_tree(0, 4, 2).children, std::vector<int>({1, 3}));
  EXPECT_EQ(nccl_tree(1, 4, 3).parent, -1);
  EXPECT_EQ(nccl_tree(1, 4, 1).children, std::vector<int>({2, 0}));
  for (int count : {2, 3, 4, 5, 7, 8, 16, 33}) {
    for (int tree : {0, 1}) {
      int roots = 0, edges = 0;
      for (int node = 0; node < count; ++node) {
        const TreeLinks links = nccl_tree(tree, count, node);
        roots += links.parent < 0;
        for (int child : links.children) {
          EXPECT_EQ(nccl_tree(tree, count, child).parent, node) << count << " nodes, tree " << tree;
          ++edges;
        }
      }
      EXPECT_EQ(roots, 1);
      EXPECT_EQ(edges, count - 1);  // with one root and every child's parent right, a spanning tree
    }
    if (count % 2 == 0) {
      for (int node = 0; node < count; ++node) {  // a node with children in one tree has none in the other
        EXPECT_TRUE(nccl_tree(0, count, node).children.empty() || nccl_tree(1, count, node).children.empty())
            << count << " nodes, node " << node;
      }
    }
  }
}

// The simulator charges NCCL's choice, and the trace names it.
TEST(NcclModel, TheSimulatorChargesNcclsChoiceForANativeAllReduce) {
  for (std::size_t bytes : {std::size_t(1024), std::size_t(1) << 30}) {
    sim::Engine engine({.ranks = 16, .topology = kDgxH100, .payload = false});
    engine.run([&](Comm& c) { c.all_reduce(meta_view(bytes / 4, DType::f32), ReduceOp::sum); });
    EXPECT_NEAR(engine.elapsed(), nccl_choice(Collective::all_reduce, bytes, dgx(2)).seconds, 1e-12) << bytes;
  }
}

// A node's off-node bytes: the ring's 2(P-1)/P of the buffer, the tree's halves
// up and down, shared by the node's ranks.
TEST(NcclModel, OffNodeBytesFollowTheRingAndTheDoubleBinaryTree) {
  const std::vector<int> nodes = {0, 0, 1, 1, 2, 2, 3, 3};
  const GroupNodes group(nodes);
  const std::uint64_t n = 1 << 20;
  CollectiveCall call;
  call.op = Collective::all_reduce;
  call.send = call.recv = meta_view(n / 4, DType::f32);
  std::uint64_t ring = 0, tree = 0;
  std::vector<std::uint64_t> per_node(4);
  for (int r = 0; r < 8; ++r) {
    ring += native_off_node_bytes(call, "ring", r, group);
    const std::uint64_t t = native_off_node_bytes(call, "tree", r, group);
    tree += t;
    per_node[std::size_t(nodes[std::size_t(r)])] += t;
  }
  EXPECT_EQ(ring, 4 * (2 * 7 * n / 8));
  // tree 0: 0 -> 2 -> {1, 3}; tree 1: 3 -> 1 -> {2, 0}; each edge carries n/2 each way.
  EXPECT_EQ(tree, 2 * 3 * 2 * (n / 2));
  EXPECT_EQ(per_node, std::vector<std::uint64_t>({n / 2 + n / 2, n / 2 + 3 * (n / 2), 3 * (n / 2) + n / 2,
                                                  n / 2 + n / 2}));
}
