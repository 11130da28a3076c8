// Grade tests for lab 2 (ring allreduce). Results on many rank counts and sizes
// (including counts that do not divide), and the communication pattern itself,
// so calling the native collective does not pass. Run: ./labkit grade ring_allreduce
#include <bit>
#include <cmath>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "grade_checks.h"
#include "grade_main.h"
#include "harness.h"
#include "labkit/algorithms.h"

using namespace labkit;
using namespace labkit::grade;
using labkit::test::sends_of;
using labkit::test::simulate;

namespace {

using AllReduce = void (*)(Comm&, View, ReduceOp);

// Runs `algo` on P ranks of `topology` and returns the first wrong element, or "".
std::string check_sum(AllReduce algo, int p, std::size_t n, const std::string& topology = "dgx-h100") {
  Buffers got(p);
  simulate(p, [&](Comm& c) {
    got[c.rank()] = inputs(c.rank(), n);
    algo(c, view_of(got[c.rank()]), ReduceOp::sum);
  }, topology);
  return first_mismatch(got, n, [&](int, std::size_t i) {
    float sum = 0;
    for (int r = 0; r < p; ++r) sum += input(r, i);
    return sum;
  });
}

}  // namespace

// ---- 2.1 ring_all_reduce ----------------------------------------------------------

TEST(ring_all_reduce, GivesEveryRankTheSum) {
  for (int p = 2; p <= 9; ++p)
    for (std::size_t n : {1, 7, 64, 1001}) {
      const std::string bad = check_sum(ring_all_reduce, p, n);
      if (!bad.empty())
        FAIL() << fmt::format("P={}, count={}: {}.\nHint: in reduce-scatter step s send chunk (rank - s) and fold the "
                              "incoming chunk (rank - s - 1); in all-gather step s send chunk (rank + 1 - s) and "
                              "receive chunk (rank - s) in place. Counts that do not divide by P: use chunk_range.",
                              p, n, bad);
    }
}

TEST(ring_all_reduce, SendsTwiceItsShareOnlyToTheRightNeighbour) {
  for (int p : {4, 7}) {
    const std::size_t n = 1000;
    auto run = simulate(p, [&](Comm& c) {
      std::vector<float> buf = inputs(c.rank(), n);
      ring_all_reduce(c, view_of(buf), ReduceOp::sum);
    });
    for (int r = 0; r < p; ++r) {
      const auto sends = sends_of(*run.trace, r);
      std::uint64_t bytes = 0;
      for (const TraceEvent& s : sends) {
        bytes += s.bytes;
        if (s.peer != (r + 1) % p)
          FAIL() << fmt::format("P={}: rank {} sent to rank {}; a ring sends only to its right neighbour, rank {}.", p,
                                r, s.peer, (r + 1) % p);
      }
      const double share = 2.0 * (p - 1) / p * n * 4;
      if (sends.size() != std::size_t(2 * (p - 1)) || std::abs(double(bytes) - share) > 2 * (p - 1) * 4)
        FAIL() << fmt::format("P={}: rank {} sent {} messages, {} bytes; ring allreduce sends 2(P-1) = {} chunks, "
                              "2(P-1)/P of the buffer = {:.0f} bytes.", p, r, sends.size(), bytes, 2 * (p - 1), share);
    }
  }
}

// ---- 2.2 recursive_halving_doubling_all_reduce ------------------------------------

TEST(recursive_halving_doubling_all_reduce, GivesEveryRankTheSumForAnyRankCount) {
  for (int p = 2; p <= 13; ++p)
    for (std::size_t n : {1, 7, 64, 1001}) {
      const std::string bad = check_sum(recursive_halving_doubling_all_reduce, p, n);
      if (!bad.empty())
        FAIL() << fmt::format("P={}{}, count={}: {}.\nHint: in halving, partners share the same window [lo, hi) "
                              "before the step; the one whose bit is 0 keeps the lower half. In doubling, your "
                              "partner's window sits right next to yours.", p,
                              std::has_single_bit(unsigned(p)) ? "" : " (not a power of two)", n, bad);
    }
}

TEST(recursive_halving_doubling_all_reduce, HalvesThenDoublesWithPartnersAtXorDistances) {
  const int p = 8;
  const std::size_t n = 1024;
  auto run = simulate(p, [&](Comm& c) {
    std::vector<float> buf = inputs(c.rank(), n);
    recursive_halving_doubling_all_reduce(c, view_of(buf), ReduceOp::sum);
  });
  const int distances[] = {4, 2, 1, 1, 2, 4};
  for (int r = 0; r < p; ++r) {
    const auto sends = sends_of(*run.trace, r);
    if (sends.size() != 6)
      FAIL() << fmt::format("P=8: rank {} sent {} messages; halving and doubling take log2 8 = 3 steps each.", r,
                            sends.size());
    for (int k = 0; k < 6; ++k) {
      const std::uint64_t bytes = n * 4 * distances[k] / p;
      if (sends[k].peer != (r ^ distances[k]) || sends[k].bytes != bytes)
        FAIL() << fmt::format("P=8: rank {}'s message {} went to rank {} with {} bytes; expected rank {} (distance "
                              "{}) with {} bytes.", r, k + 1, sends[k].peer, sends[k].bytes, r ^ distances[k],
                              distances[k], bytes);
    }
  }
}

// ---- 2.3 hierarchical_all_reduce --------------------------------------------------

TEST(hierarchical_all_reduce, GivesEveryRankTheSumAcrossNodes) {
  // dgx-h100: 8 devices per node; 20 ranks leave the third node partly filled.
  for (int p : {2, 8, 16, 20})
    for (std::size_t n : {1, 100}) {
      const std::string bad = check_sum(hierarchical_all_reduce, p, n);
      if (!bad.empty())
        FAIL() << fmt::format("P={} ({} node(s) of 8), count={}: {}.\nHint: reduce to each node's rank 0, allreduce "
                              "among those leaders only, then broadcast inside each node.", p, (p + 7) / 8, n, bad);
    }
}

TEST(hierarchical_all_reduce, OnlyLeadersCrossNodes) {
  const int p = 32, nodes = 4;
  auto run = simulate(p, [&](Comm& c) {
    std::vector<float> buf = inputs(c.rank(), 64);
    hierarchical_all_reduce(c, view_of(buf), ReduceOp::sum);
  });
  for (int r = 0; r < p; ++r) {
    int crossing = 0;
    for (const TraceEvent& s : sends_of(*run.trace, r)) crossing += s.peer / 8 != r / 8;
    const int expected = r % 8 == 0 ? 2 * (nodes - 1) : 0;
    if (crossing != expected)
      FAIL() << fmt::format("P=32 on 4 nodes: rank {} sent {} messages to other nodes; {}.", r, crossing,
                            expected ? "a leader's ring allreduce sends 2(N-1) = 6" : "only node leaders talk across nodes");
  }
}

int main(int argc, char** argv) { return labkit::grade::main(argc, argv); }
