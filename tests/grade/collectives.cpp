// Grade tests for lab 1 (collectives). Each suite is one exercise; each test
// checks one property over many rank counts, sizes and roots, and on failure
// says where it fails and where it passes, what went wrong in the learner's
// terms (which rank, which element, expected versus got) and a hint. A pattern
// test that fails costs the whole exercise. Observed: ./labkit grade collectives
#include <bit>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "checks.h"
#include "labkit/algorithms.h"
#include "labkit/topology.h"

using namespace labkit;
using namespace labkit::grade;

namespace {
int lowest_bit(int v) { return v & -v; }
}  // namespace

// ---- 1.1 naive_all_reduce ---------------------------------------------------------

TEST(naive_all_reduce, GivesEveryRankTheReduction) {
  Sweep sweep("naive_all_reduce");
  for (int p = 1; p <= 9; ++p)
    for (std::size_t n : {1, 5, 100})
      for (ReduceOp op : {ReduceOp::sum, ReduceOp::max})
        sweep.check({p, n, fmt::format("P={}, count={}, op={}", p, n, name_of(op))}, [&] {
          Buffers got(p);
          const Observed run = run_ranks(p, [&](Comm& c) {
            got[c.rank()] = inputs(c.rank(), n);
            naive_all_reduce(c, view_of(got[c.rank()]), op);
          });
          if (const std::string bad = run_problem(run); !bad.empty()) return bad;
          return first_mismatch(got, n, [&](int, std::size_t i) {
            float acc = input(0, i);
            for (int q = 1; q < p; ++q) acc = op == ReduceOp::sum ? acc + input(q, i) : std::max(acc, input(q, i));
            return acc;
          });
        });
  sweep.report("rank 0 must receive every other rank's buffer, fold each in with reduce_local(op, ...), then send "
               "the result back to every rank.");
}

TEST(naive_all_reduce, GoesThroughRankZeroOverPointToPoint) {
  Sweep sweep("naive_all_reduce", Sweep::Checks::pattern);
  for (int p : {3, 5}) sweep.check({p, 4, fmt::format("P={}, count=4", p)}, [&] {
    const Observed run = run_ranks(p, [&](Comm& c) {
      std::vector<float> buf = inputs(c.rank(), 4);
      naive_all_reduce(c, view_of(buf), ReduceOp::sum);
    });
    if (const std::string bad = run_problem(run); !bad.empty()) return bad;
    for (int r = 1; r < p; ++r) {
      const auto sends = run.sends(r), recvs = run.recvs(r);
      if (!(sends.size() == 1 && sends[0].peer == 0 && recvs.size() == 1 && recvs[0].peer == 0))
        return fmt::format("rank {} sent {} and received {} messages; in the naive algorithm every rank other than 0 "
                           "sends its buffer to rank 0 once and receives the result from rank 0 once",
                           r, sends.size(), recvs.size());
    }
    if (run.sends(0).size() != std::size_t(p - 1))
      return fmt::format("rank 0 sent {} messages; it sends the result to each of the other {} ranks, one message "
                         "each", run.sends(0).size(), p - 1);
    return std::string();
  });
  sweep.report("");
}

// ---- 1.2 binomial_tree_broadcast --------------------------------------------------

TEST(binomial_tree_broadcast, EveryRankGetsTheRootsBuffer) {
  Sweep sweep("binomial_tree_broadcast");
  for (int p = 1; p <= 9; ++p)
    for (int root : {0, p - 1, p / 2})
      for (std::size_t n : {1, 7})
        sweep.check({p, n, fmt::format("P={}, root={}, count={}", p, root, n), root}, [&] {
          Buffers got(p);
          const Observed run = run_ranks(p, [&](Comm& c) {
            got[c.rank()] = c.rank() == root ? inputs(root, n) : std::vector<float>(n, -1.0f);
            binomial_tree_broadcast(c, view_of(got[c.rank()]), root);
          });
          if (const std::string bad = run_problem(run); !bad.empty()) return bad;
          return first_mismatch(got, n, [&](int, std::size_t i) { return input(root, i); });
        });
  sweep.report("work with vr = (rank - root) mod P and map back with (vr + root) mod P; a rank must receive before "
               "it sends.");
}

TEST(binomial_tree_broadcast, FollowsTheBinomialTree) {
  Sweep sweep("binomial_tree_broadcast", Sweep::Checks::pattern);
  // Each P with the root at 0 and elsewhere, odd and even P: a failure's summary
  // names what its cases share, and one case a P would pin it on the rank count.
  for (auto [p, root] : {std::pair{8, 3}, std::pair{8, 0}, std::pair{7, 2}, std::pair{7, 0}, std::pair{6, 0},
                         std::pair{6, 5}, std::pair{5, 4}, std::pair{5, 0}})
    sweep.check({p, 1024, fmt::format("P={}, root={}, count=1024", p, root), root}, [&] {
      const std::size_t n = 1024;
      const Observed run = run_ranks(p, [&](Comm& c) {
        std::vector<float> buf(n, float(c.rank()));
        binomial_tree_broadcast(c, view_of(buf), root);
      });
      if (const std::string bad = run_problem(run); !bad.empty()) return bad;
      for (int r = 0; r < p; ++r) {
        const int vr = (r - root + p) % p;
        const auto recvs = run.recvs(r);
        const int parent = vr == 0 ? -1 : (vr - lowest_bit(vr) + root) % p;
        const std::string who = fmt::format("rank {} (vr {})", r, vr);
        if (vr == 0 && !recvs.empty()) return who + " is the root and must not receive";
        if (vr == 0) continue;
        if (recvs.size() != 1)
          return fmt::format("{} received {} messages; every rank but the root receives exactly once", who,
                             recvs.size());
        if (recvs[0].peer != parent)
          return fmt::format("{} received from rank {}; its parent is vr {} = rank {} (vr with its lowest set bit "
                             "cleared)", who, recvs[0].peer, vr - lowest_bit(vr), parent);
      }
      const Topology t = find_topology("dgx-h100");
      const double rounds = std::bit_width(unsigned(p - 1));
      const double expected = rounds * (t.intra.alpha + 4.0 * n / t.intra.bandwidth);
      if (std::abs(run.elapsed - expected) > 1e-12)
        return fmt::format("took {:.3f} us, expected {:.3f} us: a binomial tree finishes in ceil(log2 P) = {} "
                           "rounds; send to the farthest child first so the subtrees start early",
                           run.elapsed * 1e6, expected * 1e6, rounds);
      return std::string();
    });
  sweep.report("");
}

// ---- 1.3 ring_all_gather ----------------------------------------------------------

TEST(ring_all_gather, EveryRankGetsEveryBlock) {
  Sweep sweep("ring_all_gather");
  for (int p = 1; p <= 9; ++p)
    for (std::size_t n : {1, 5})
      sweep.check({p, n, fmt::format("P={}, count={}", p, n)}, [&] {
        Buffers got(p);
        const Observed run = run_ranks(p, [&](Comm& c) {
          std::vector<float> mine = inputs(c.rank(), n);
          got[c.rank()].assign(n * p, -1.0f);
          ring_all_gather(c, view_of(mine), view_of(got[c.rank()]));
        });
        if (const std::string bad = run_problem(run); !bad.empty()) return bad;
        return first_mismatch(got, n * p, [&](int, std::size_t i) { return input(int(i / n), i % n); }, n);
      });
  sweep.report("block i of recv is rank i's send; copy your own first, then at step s forward block (rank - s) and "
               "receive block (rank - s - 1), both mod P.");
}

TEST(ring_all_gather, SendsBlockRankMinusStepToTheRightNeighbour) {
  Sweep sweep("ring_all_gather", Sweep::Checks::pattern);
  for (int p : {4, 6}) sweep.check({p, 16, fmt::format("P={}, count=16", p)}, [&] {
    const std::size_t n = 16;
    Buffers mine(p), all(p);
    const Observed run = run_ranks(p, [&](Comm& c) {
      mine[c.rank()] = inputs(c.rank(), n);
      all[c.rank()].assign(n * p, 0.0f);
      ring_all_gather(c, view_of(mine[c.rank()]), view_of(all[c.rank()]));
    });
    if (!run.native.empty()) return native_called(run);
    for (int r = 0; r < p; ++r) {
      const auto sends = run.sends(r);
      for (std::size_t s = 0; s < sends.size(); ++s) {
        const int expected = ((r - int(s)) % p + p) % p;
        int block = chunk_index(all[r].data(), n * p, p, sends[s].buf);
        if (sends[s].buf.data == mine[r].data() && sends[s].buf.count == n) block = r;
        if (sends[s].peer != (r + 1) % p)
          return fmt::format("rank {} sent to rank {} at step {}; in a ring it sends only to rank {}", r,
                             sends[s].peer, s, (r + 1) % p);
        if (block != expected)
          return fmt::format("rank {}, step {}: sent {}, expected block {} (rank - step, mod P)", r, s,
                             block < 0 ? fmt::format("{} elements that are not one block", sends[s].buf.count)
                                       : fmt::format("block {}", block),
                             expected);
      }
    }
    if (!run.error.empty()) return run.error;
    for (int r = 0; r < p; ++r)
      if (run.sends(r).size() != std::size_t(p - 1))
        return fmt::format("rank {} sent {} messages; a ring all-gather sends P-1 = {} blocks", r, run.sends(r).size(),
                           p - 1);
    return std::string();
  });
  sweep.report("");
}

// ---- 1.4 pairwise_all_to_all ------------------------------------------------------

TEST(pairwise_all_to_all, DeliversEveryBlockToItsRank) {
  Sweep sweep("pairwise_all_to_all");
  for (int p = 1; p <= 9; ++p)
    for (std::size_t n : {1, 3})
      sweep.check({p, n, fmt::format("P={}, count={}", p, n)}, [&] {
        Buffers got(p);
        const Observed run = run_ranks(p, [&](Comm& c) {
          std::vector<float> send = inputs(c.rank(), n * p);
          got[c.rank()].assign(n * p, -1.0f);
          pairwise_all_to_all(c, view_of(send), view_of(got[c.rank()]));
        });
        if (const std::string bad = run_problem(run); !bad.empty()) return bad;
        // Rank r's block q is rank q's send block r.
        return first_mismatch(got, n * p, [&](int r, std::size_t i) { return input(int(i / n), r * n + i % n); }, n);
      });
  sweep.report("recv block q comes from rank q, which sends you its send block number (your rank).");
}

TEST(pairwise_all_to_all, SendsOneBlockToEachPeerInRoundOrder) {
  Sweep sweep("pairwise_all_to_all", Sweep::Checks::pattern);
  for (int p : {5, 6}) sweep.check({p, 8, fmt::format("P={}, count=8", p)}, [&] {
    const Observed run = run_ranks(p, [&](Comm& c) {
      std::vector<float> send = inputs(c.rank(), 8 * p), recv(8 * p);
      pairwise_all_to_all(c, view_of(send), view_of(recv));
    });
    if (const std::string bad = run_problem(run); !bad.empty()) return bad;
    for (int r = 0; r < p; ++r) {
      const auto sends = run.sends(r);
      if (sends.size() != std::size_t(p - 1))
        return fmt::format("rank {} sent {} messages; expected one to each of the other {} ranks", r, sends.size(),
                           p - 1);
      for (int s = 1; s < p; ++s)
        if (sends[s - 1].peer != (r + s) % p)
          return fmt::format("in round {} rank {} sent to rank {}; pairwise exchange sends to rank + round = {}", s, r,
                             sends[s - 1].peer, (r + s) % p);
    }
    return std::string();
  });
  sweep.report("");
}
