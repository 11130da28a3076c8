// The graded exercises on real processes: under mpirun -np N, each exercise
// algorithm runs over the MPI backend on N ranks, and rank 0 checks every
// rank's result against the simulator's run of the same algorithm, bit for bit
// (the inputs are integers in float, so sums are exact in any order), and
// against the expected values. CTest runs it with 2 and 4 processes.
#include <cstdlib>
#include <functional>
#include <string>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "grade/checks.h"
#include "harness.h"
#include "labkit/algorithms.h"
#include "labkit/output.h"
#include "labkit/run.h"

using namespace labkit;
using labkit::grade::Buffers;
using labkit::grade::input;
using labkit::grade::inputs;

namespace {
// A rank's part in one exercise: given its Comm, return its output buffer.
using RankOutput = std::function<std::vector<float>(Comm&)>;

int world_ranks() {
  static const int ranks = [] {
    RunOptions mpi;
    mpi.backend = "mpi";
    int n = 0;
    run(mpi, [&](Comm& c) { n = c.size(); });
    return n;
  }();
  return ranks;
}

// Every rank's output on the MPI backend (on rank 0; empty elsewhere).
Buffers on_mpi(const RankOutput& output) {
  RunOptions mpi;
  mpi.backend = "mpi";
  Buffers got;
  run(mpi, [&](Comm& c) {
    const std::vector<std::vector<float>> all = c.gather_objects(output(c));
    if (c.rank() == 0) got = all;
  });
  return got;
}

Buffers on_sim(int ranks, const RankOutput& output) {
  Buffers got(ranks);
  test::simulate(ranks, [&](Comm& c) { got[c.rank()] = output(c); });
  return got;
}

bool is_rank0() {
  const char* rank = std::getenv("OMPI_COMM_WORLD_RANK");
  return !rank || std::string(rank) == "0";
}

// Runs `output` on both backends and compares; `expected` as in first_mismatch.
void check(const char* exercise, const RankOutput& output, std::size_t n,
           const std::function<float(int, std::size_t)>& expected) {
  const int P = world_ranks();
  const Buffers mpi = on_mpi(output);
  if (!is_rank0()) return;
  const Buffers sim = on_sim(P, output);
  ASSERT_EQ(mpi.size(), std::size_t(P)) << exercise;
  for (int r = 0; r < P; ++r)
    ASSERT_EQ(mpi[r], sim[r]) << fmt::format("{} on {} ranks: rank {} differs between mpirun and the simulator",
                                             exercise, P, r);
  const std::string bad = grade::first_mismatch(mpi, n, expected);
  EXPECT_TRUE(bad.empty()) << exercise << " on " << P << " ranks under mpirun: " << bad;
}

float sum_of(std::size_t i, int ranks) {
  float s = 0;
  for (int q = 0; q < ranks; ++q) s += input(q, i);
  return s;
}

using AllReduce = void (*)(Comm&, View, ReduceOp);
void check_all_reduce(const char* exercise, AllReduce algorithm) {
  const std::size_t n = 1000;
  check(exercise,
        [&](Comm& c) {
          std::vector<float> buf = inputs(c.rank(), n);
          algorithm(c, view_of(buf), ReduceOp::sum);
          return buf;
        },
        n, [](int, std::size_t i) { return sum_of(i, world_ranks()); });
}
}  // namespace

TEST(MpiGrade, NaiveAllReduce) { check_all_reduce("naive_all_reduce", naive_all_reduce); }
TEST(MpiGrade, RingAllReduce) { check_all_reduce("ring_all_reduce", ring_all_reduce); }
TEST(MpiGrade, RecursiveHalvingDoublingAllReduce) {
  check_all_reduce("recursive_halving_doubling_all_reduce", recursive_halving_doubling_all_reduce);
}
TEST(MpiGrade, HierarchicalAllReduce) { check_all_reduce("hierarchical_all_reduce", hierarchical_all_reduce); }

TEST(MpiGrade, BinomialTreeBroadcast) {
  const std::size_t n = 100;
  const int root = world_ranks() - 1;
  check("binomial_tree_broadcast",
        [&](Comm& c) {
          std::vector<float> buf = c.rank() == root ? inputs(root, n) : std::vector<float>(n, -1.0f);
          binomial_tree_broadcast(c, view_of(buf), root);
          return buf;
        },
        n, [&](int, std::size_t i) { return input(root, i); });
}

TEST(MpiGrade, RingAllGather) {
  const std::size_t block = 7;
  const int P = world_ranks();
  check("ring_all_gather",
        [&](Comm& c) {
          std::vector<float> send = inputs(c.rank(), block), recv(block * c.size(), -1.0f);
          ring_all_gather(c, view_of(send), view_of(recv));
          return recv;
        },
        block * P, [&](int, std::size_t i) { return input(int(i / block), i % block); });
}

TEST(MpiGrade, PairwiseAllToAll) {
  const std::size_t block = 5;
  const int P = world_ranks();
  check("pairwise_all_to_all",
        [&](Comm& c) {
          std::vector<float> send = inputs(c.rank(), block * c.size()), recv(block * c.size(), -1.0f);
          pairwise_all_to_all(c, view_of(send), view_of(recv));
          return recv;
        },
        block * P, [&](int r, std::size_t i) { return input(int(i / block), r * block + i % block); });
}

int main(int argc, char** argv) {
  if (!is_rank0()) quiet_this_process();  // rank 0 reports for all
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
