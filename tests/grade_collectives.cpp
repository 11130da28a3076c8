// Grade tests for lab 1 (collectives). Each suite is one exercise; each test
// checks one property on many rank counts, sizes and roots, and on failure says
// what went wrong in the learner's terms: which rank, which element, expected
// versus got, and a hint. Run: ./labkit grade collectives
#include <bit>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "grade_checks.h"
#include "grade_main.h"
#include "harness.h"
#include "labkit/algorithms.h"

using namespace labkit;
using labkit::test::recvs_of;
using labkit::test::sends_of;
using labkit::test::simulate;

namespace {

using namespace labkit::grade;

int lowest_bit(int v) { return v & -v; }

}  // namespace

// ---- 1.1 naive_all_reduce ---------------------------------------------------------

TEST(naive_all_reduce, GivesEveryRankTheReduction) {
  for (int p = 1; p <= 9; ++p)
    for (std::size_t n : {1, 5, 100})
      for (ReduceOp op : {ReduceOp::sum, ReduceOp::max}) {
        Buffers got(p);
        simulate(p, [&](Comm& c) {
          got[c.rank()] = inputs(c.rank(), n);
          naive_all_reduce(c, view_of(got[c.rank()]), op);
        });
        const std::string bad = first_mismatch(got, n, [&](int, std::size_t i) {
          float acc = input(0, i);
          for (int q = 1; q < p; ++q) acc = op == ReduceOp::sum ? acc + input(q, i) : std::max(acc, input(q, i));
          return acc;
        });
        if (!bad.empty()) FAIL() << fmt::format("P={}, count={}, op={}: {}.\nHint: rank 0 must receive every other "
                                          "rank's buffer, fold each in with reduce_local(op, ...), then send the "
                                          "result back to every rank.",
                                          p, n, name_of(op), bad);
      }
}

TEST(naive_all_reduce, GoesThroughRankZeroOverPointToPoint) {
  const int p = 5;
  auto run = simulate(p, [&](Comm& c) {
    std::vector<float> buf = inputs(c.rank(), 4);
    naive_all_reduce(c, view_of(buf), ReduceOp::sum);
  });
  for (int r = 1; r < p; ++r) {
    const auto sends = sends_of(*run.trace, r), recvs = recvs_of(*run.trace, r);
    if (!(sends.size() == 1 && sends[0].peer == 0 && recvs.size() == 1 && recvs[0].peer == 0))
      FAIL() << fmt::format("P={}: rank {} sent {} and received {} messages; in the naive algorithm every rank other "
                       "than 0 sends its buffer to rank 0 once and receives the result from rank 0 once.",
                       p, r, sends.size(), recvs.size());
  }
  if (sends_of(*run.trace, 0).size() != std::size_t(p - 1))
    FAIL() << fmt::format("P={}: rank 0 sent {} messages; it sends the result to each of the other {} ranks, one "
                          "message each.", p, sends_of(*run.trace, 0).size(), p - 1);
}

// ---- 1.2 binomial_tree_broadcast --------------------------------------------------

TEST(binomial_tree_broadcast, EveryRankGetsTheRootsBuffer) {
  for (int p = 1; p <= 9; ++p)
    for (int root : {0, p - 1, p / 2})
      for (std::size_t n : {1, 7}) {
        Buffers got(p);
        simulate(p, [&](Comm& c) {
          got[c.rank()] = c.rank() == root ? inputs(root, n) : std::vector<float>(n, -1.0f);
          binomial_tree_broadcast(c, view_of(got[c.rank()]), root);
        });
        const std::string bad = first_mismatch(got, n, [&](int, std::size_t i) { return input(root, i); });
        if (!bad.empty()) FAIL() << fmt::format("P={}, root={}, count={}: {}.\nHint: work with vr = (rank - root) mod P "
                                          "and map back with (vr + root) mod P; a rank must receive before it "
                                          "sends.", p, root, n, bad);
      }
}

TEST(binomial_tree_broadcast, FollowsTheBinomialTree) {
  for (auto [p, root] : {std::pair{8, 3}, std::pair{6, 0}, std::pair{5, 4}}) {
    const std::size_t n = 1024;
    auto run = simulate(p, [&](Comm& c) {
      std::vector<float> buf(n, float(c.rank()));
      binomial_tree_broadcast(c, view_of(buf), root);
    });
    for (int r = 0; r < p; ++r) {
      const int vr = (r - root + p) % p;
      const auto recvs = recvs_of(*run.trace, r);
      const int parent = vr == 0 ? -1 : (vr - lowest_bit(vr) + root) % p;
      const std::string what = fmt::format("P={}, root={}: rank {} (vr {})", p, root, r, vr);
      if (vr == 0) {
        if (!recvs.empty()) FAIL() << what << " is the root and must not receive.";
        continue;
      }
      if (recvs.size() != 1) FAIL() << what << " received " << recvs.size() << " messages; every rank but the root "
                                  << "receives exactly once.";
      if (recvs[0].peer != parent) FAIL() << what << " received from rank " << recvs[0].peer << "; its parent is vr "
                                       << vr - lowest_bit(vr) << " = rank " << parent
                                       << " (vr with its lowest set bit cleared).";
    }
    const Topology t = find_topology("dgx-h100");
    const double rounds = std::bit_width(unsigned(p - 1));
    const double expected = rounds * (t.intra.alpha + 4.0 * n / t.intra.bandwidth);
    if (std::abs(run.elapsed - expected) > 1e-12)
      FAIL() << fmt::format("P={}: took {:.3f} us, expected {:.3f} us. ", p, run.elapsed * 1e6, expected * 1e6) << fmt::format("P={}: a binomial tree finishes in ceil(log2 P) = {} rounds; send to the farthest child "
                       "first so the subtrees start early.", p, rounds);
  }
}

// ---- 1.3 ring_all_gather ----------------------------------------------------------

TEST(ring_all_gather, EveryRankGetsEveryBlock) {
  for (int p = 1; p <= 9; ++p)
    for (std::size_t n : {1, 5}) {
      Buffers got(p);
      simulate(p, [&](Comm& c) {
        std::vector<float> mine = inputs(c.rank(), n);
        got[c.rank()].assign(n * p, -1.0f);
        ring_all_gather(c, view_of(mine), view_of(got[c.rank()]));
      });
      const std::string bad = first_mismatch(got, n * p, [&](int, std::size_t i) { return input(int(i / n), i % n); }, n);
      if (!bad.empty()) FAIL() << fmt::format("P={}, count={}: {}.\nHint: block i of recv is rank i's send; copy your "
                                        "own first, then at step s forward block (rank - s) and receive block "
                                        "(rank - s - 1), both mod P.", p, n, bad);
    }
}

TEST(ring_all_gather, SendsOnlyToTheRightNeighbour) {
  const int p = 6;
  const std::size_t n = 16;
  auto run = simulate(p, [&](Comm& c) {
    std::vector<float> mine = inputs(c.rank(), n), all(n * p);
    ring_all_gather(c, view_of(mine), view_of(all));
  });
  for (int r = 0; r < p; ++r) {
    const auto sends = sends_of(*run.trace, r);
    if (sends.size() != std::size_t(p - 1)) FAIL() << fmt::format("P={}: rank {} sent {} messages; a ring all-gather "
                                                               "sends P-1 blocks.", p, r, sends.size());
    for (const TraceEvent& s : sends)
      if (!(s.peer == (r + 1) % p && s.bytes == n * 4))
        FAIL() << fmt::format("P={}: rank {} sent {} bytes to rank {}; in a ring it sends one block ({} bytes) at a "
                         "time, only to rank {}.", p, r, s.bytes, s.peer, n * 4, (r + 1) % p);
  }
}

// ---- 1.4 pairwise_all_to_all ------------------------------------------------------

TEST(pairwise_all_to_all, DeliversEveryBlockToItsRank) {
  for (int p = 1; p <= 9; ++p)
    for (std::size_t n : {1, 3}) {
      Buffers got(p);
      simulate(p, [&](Comm& c) {
        std::vector<float> send = inputs(c.rank(), n * p);
        got[c.rank()].assign(n * p, -1.0f);
        pairwise_all_to_all(c, view_of(send), view_of(got[c.rank()]));
      });
      // Rank r's block q is rank q's send block r.
      const std::string bad = first_mismatch(
          got, n * p, [&](int r, std::size_t i) { return input(int(i / n), r * n + i % n); }, n);
      if (!bad.empty()) FAIL() << fmt::format("P={}, count={}: {}.\nHint: recv block q comes from rank q, which sends "
                                        "you its send block number (your rank).", p, n, bad);
    }
}

TEST(pairwise_all_to_all, SendsOneBlockToEachPeerInRoundOrder) {
  const int p = 5;
  const std::size_t n = 8;
  auto run = simulate(p, [&](Comm& c) {
    std::vector<float> send = inputs(c.rank(), n * p), recv(n * p);
    pairwise_all_to_all(c, view_of(send), view_of(recv));
  });
  for (int r = 0; r < p; ++r) {
    const auto sends = sends_of(*run.trace, r);
    if (sends.size() != std::size_t(p - 1)) FAIL() << fmt::format("P={}: rank {} sent {} messages; expected one to "
                                                               "each of the other {} ranks.", p, r, sends.size(), p - 1);
    for (int s = 1; s < p; ++s)
      if (sends[s - 1].peer != (r + s) % p)
        FAIL() << fmt::format("P={}: in round {} rank {} sent to rank {}; pairwise exchange sends to rank + round = "
                         "{}.", p, s, r, sends[s - 1].peer, (r + s) % p);
  }
}

int main(int argc, char** argv) { return labkit::grade::main(argc, argv); }
