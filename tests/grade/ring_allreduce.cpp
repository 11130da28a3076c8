// Grade tests for lab 2 (ring allreduce). Results on many rank counts and sizes
// (including counts that do not divide), and the communication pattern itself,
// so calling the native collective does not pass. Observed: ./labkit grade ring_allreduce
#include <bit>
#include <cmath>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "checks.h"
#include "labkit/algorithms.h"

using namespace labkit;
using namespace labkit::grade;

namespace {

using AllReduce = void (*)(Comm&, View, ReduceOp);

// Runs `algo` on P ranks of `topology`: what went wrong, or "".
std::string check_sum(AllReduce algo, int p, std::size_t n, const std::string& topology = "dgx-h100") {
  Buffers got(p);
  const Observed run = run_ranks(p, [&](Comm& c) {
    got[c.rank()] = inputs(c.rank(), n);
    algo(c, view_of(got[c.rank()]), ReduceOp::sum);
  }, topology);
  if (const std::string bad = run_problem(run); !bad.empty()) return bad;
  return first_mismatch(got, n, [&](int, std::size_t i) {
    float sum = 0;
    for (int r = 0; r < p; ++r) sum += input(r, i);
    return sum;
  });
}

// Sums over P = ps and the counts, summarised by Sweep.
void sweep_sums(const std::string& exercise, AllReduce algo, const std::vector<int>& ps, const std::string& hint,
                const std::string& topology = "dgx-h100") {
  Sweep sweep(exercise);
  for (int p : ps)
    for (std::size_t n : {1, 7, 64, 1001})
      sweep.check({p, n, fmt::format("P={}, count={}", p, n)}, [&] { return check_sum(algo, p, n, topology); });
  sweep.report(hint);
}

}  // namespace

// ---- 2.1 ring_all_reduce ----------------------------------------------------------

TEST(ring_all_reduce, GivesEveryRankTheSum) {
  sweep_sums("ring_all_reduce", ring_all_reduce, {2, 3, 4, 5, 6, 7, 8, 9},
             "in reduce-scatter step s send chunk (rank - s) and fold the incoming chunk (rank - s - 1); in "
             "all-gather step s send chunk (rank + 1 - s) and receive chunk (rank - s) in place. Counts that do not "
             "divide by P: use chunk_range.");
}

TEST(ring_all_reduce, SendsEachChunkInRingOrderToTheRightNeighbour) {
  Sweep sweep("ring_all_reduce", Sweep::Checks::pattern);
  for (int p : {4, 7})
    for (std::size_t n : {1000, 1001}) sweep.check({p, n, fmt::format("P={}, count={}", p, n)}, [&] {
      Buffers buf(p);
      const Observed run = run_ranks(p, [&](Comm& c) {
        buf[c.rank()] = inputs(c.rank(), n);
        ring_all_reduce(c, view_of(buf[c.rank()]), ReduceOp::sum);
      });
      if (!run.native.empty()) return native_called(run);
      // The chunk each send should carry (the table in ring_all_reduce.cpp).
      for (int r = 0; r < p; ++r) {
        const auto sends = run.sends(r);
        for (int k = 0; k < int(sends.size()) && k < 2 * (p - 1); ++k) {
          const bool scatter = k < p - 1;
          const int step = scatter ? k : k - (p - 1);
          const int expected = (((scatter ? r - step : r + 1 - step) % p) + p) % p;
          const int chunk = chunk_index(buf[r].data(), n, p, sends[k].buf);
          const std::string where = fmt::format("rank {}, {} step {}", r, scatter ? "reduce-scatter" : "all-gather", step);
          if (sends[k].peer != (r + 1) % p)
            return fmt::format("{}: sent to rank {}; a ring sends only to its right neighbour, rank {}", where,
                               sends[k].peer, (r + 1) % p);
          if (chunk != expected)
            return fmt::format("{}: sent {}, expected chunk {} ({})", where,
                               chunk < 0 ? fmt::format("{} elements that are not one chunk of the buffer",
                                                       sends[k].buf.count)
                                         : fmt::format("chunk {}", chunk),
                               expected, scatter ? "rank - step, mod P" : "rank + 1 - step, mod P");
        }
      }
      if (!run.error.empty()) return run.error;
      for (int r = 0; r < p; ++r)
        if (run.sends(r).size() != std::size_t(2 * (p - 1)))
          return fmt::format("rank {} sent {} messages; ring allreduce sends 2(P-1) = {} chunks, 2(P-1)/P of the "
                             "buffer", r, run.sends(r).size(), 2 * (p - 1));
      return std::string();
    });
  sweep.report("");
}

// ---- 2.2 recursive_halving_doubling_all_reduce ------------------------------------

TEST(recursive_halving_doubling_all_reduce, GivesEveryRankTheSumForAnyRankCount) {
  sweep_sums("recursive_halving_doubling_all_reduce", recursive_halving_doubling_all_reduce,
             {2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13},
             "in halving, partners share the same window [lo, hi) before the step; the one whose bit is 0 keeps the "
             "lower half. In doubling, your partner's window sits right next to yours.");
}

TEST(recursive_halving_doubling_all_reduce, HalvesThenDoublesWithPartnersAtXorDistances) {
  Sweep sweep("recursive_halving_doubling_all_reduce", Sweep::Checks::pattern);
  sweep.check({8, 1024, "P=8, count=1024"}, [&] {
    const int p = 8;
    const std::size_t n = 1024;
    const Observed run = run_ranks(p, [&](Comm& c) {
      std::vector<float> buf = inputs(c.rank(), n);
      recursive_halving_doubling_all_reduce(c, view_of(buf), ReduceOp::sum);
    });
    if (const std::string bad = run_problem(run); !bad.empty()) return bad;
    const int distances[] = {4, 2, 1, 1, 2, 4};
    for (int r = 0; r < p; ++r) {
      const auto sends = run.sends(r);
      if (sends.size() != 6)
        return fmt::format("rank {} sent {} messages; halving and doubling take log2 8 = 3 steps each", r,
                           sends.size());
      for (int k = 0; k < 6; ++k) {
        const std::uint64_t bytes = n * 4 * distances[k] / p;
        if (sends[k].peer != (r ^ distances[k]) || sends[k].buf.bytes() != bytes)
          return fmt::format("rank {}'s message {} went to rank {} with {} bytes; expected rank {} (distance {}) "
                             "with {} bytes", r, k + 1, sends[k].peer, sends[k].buf.bytes(), r ^ distances[k],
                             distances[k], bytes);
      }
    }
    return std::string();
  });
  sweep.report("");
}

// ---- 2.3 hierarchical_all_reduce --------------------------------------------------
// Its grade binary links the reference ring, tree reduce and tree broadcast: a
// mistake in one of those is charged to that exercise, not to this one.

TEST(hierarchical_all_reduce, GivesEveryRankTheSumAcrossNodes) {
  // dgx-h100: 8 devices per node; 20 ranks leave the third node partly filled.
  sweep_sums("hierarchical_all_reduce", hierarchical_all_reduce, {2, 8, 16, 20},
             "reduce to each node's rank 0, allreduce among those leaders only, then broadcast inside each node.");
}

TEST(hierarchical_all_reduce, OnlyLeadersCrossNodes) {
  Sweep sweep("hierarchical_all_reduce", Sweep::Checks::pattern);
  sweep.check({32, 64, "P=32 on 4 nodes, count=64"}, [&] {
    const int p = 32, nodes = 4;
    const Observed run = run_ranks(p, [&](Comm& c) {
      std::vector<float> buf = inputs(c.rank(), 64);
      hierarchical_all_reduce(c, view_of(buf), ReduceOp::sum);
    });
    if (const std::string bad = run_problem(run); !bad.empty()) return bad;
    for (int r = 0; r < p; ++r) {
      int crossing = 0;
      for (const TraceEvent& s : run.trace->tracks()[r].events)
        crossing += s.kind == TraceEvent::Kind::send && s.peer / 8 != r / 8;
      const int expected = r % 8 == 0 ? 2 * (nodes - 1) : 0;
      if (crossing != expected)
        return fmt::format("rank {} sent {} messages to other nodes; {}", r, crossing,
                           expected ? fmt::format("a leader's ring allreduce over the N = {} leaders sends 2(N-1) = {}",
                                                  nodes, expected)
                                    : "only node leaders talk across nodes");
    }
    return std::string();
  });
  sweep.report("");
}
