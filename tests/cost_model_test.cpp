// The closed forms agree with the simulator: on a contention-free topology the
// simulated time of ring, tree and recursive halving-doubling allreduce is the
// model's prediction to within 1%, for every size from 1 KiB to 1 GiB and every
// rank count from 2 to 64. Runs are payload-free (sizes only), so this is fast.
#include <gtest/gtest.h>

#include "harness.h"
#include "labkit/algorithms.h"
#include "labkit/cost_model.h"

using namespace labkit;

namespace {
// One switch joining 64 devices: every pair has its own ports, nothing is shared.
const Topology kFlat{"flat", 64, 64, {2e-6, 100e9}, {2e-6, 100e9}, device_preset("h100")};

double simulated(Collective op, const std::string& algo, std::size_t bytes, int p, const Topology& t) {
  sim::Engine engine({.ranks = p, .topology = t, .payload = false});
  engine.run([&](Comm& c) {
    use_algorithm(c, op, algo);
    const std::size_t count = bytes / 4;
    switch (op) {
      case Collective::all_reduce: c.all_reduce(meta_view(count, DType::f32), ReduceOp::sum); break;
      case Collective::broadcast: c.broadcast(meta_view(count, DType::f32), 0); break;
      case Collective::all_gather:
        c.all_gather(meta_view(count / p, DType::f32), meta_view(count / p * p, DType::f32));
        break;
      case Collective::all_to_all:
        c.all_to_all(meta_view(count / p * p, DType::f32), meta_view(count / p * p, DType::f32));
        break;
      case Collective::all_to_allv: {
        const std::vector<std::size_t> blocks(p, count / p);
        c.all_to_allv(meta_view(count / p * p, DType::f32), blocks, meta_view(count / p * p, DType::f32), blocks);
        break;
      }
      default: FAIL() << "not swept";
    }
  });
  return engine.elapsed();
}
}  // namespace

TEST(CostModel, RingTreeAndHalvingDoublingMatchTheSimulatorWithinOnePercent) {
  double worst = 0;
  std::string where;
  for (const char* algo : {"ring", "binomial_tree", "recursive_halving_doubling"})
    for (int p = 2; p <= 64; ++p)
      for (std::size_t bytes = 1 << 10; bytes <= (std::size_t(1) << 30); bytes *= 2) {
        const double model = predict(Collective::all_reduce, algo, bytes, p, kFlat);
        const double sim = simulated(Collective::all_reduce, algo, bytes, p, kFlat);
        const double error = std::abs(sim - model) / model;
        if (error > worst) {
          worst = error;
          where = std::string(algo) + " P=" + std::to_string(p) + " bytes=" + std::to_string(bytes);
        }
      }
  EXPECT_LT(worst, 0.01) << "worst at " << where;
  RecordProperty("worst_error", std::to_string(worst));
  std::printf("worst model-vs-simulation error: %.4f%% (%s)\n", worst * 100, where.c_str());
}

TEST(CostModel, ReproducesTheReadingsFormulasOnAUniformTopology) {
  const double a = kFlat.intra.alpha, b = 1 / kFlat.intra.bandwidth, n = 1 << 20;
  const int p = 8;
  EXPECT_NEAR(predict(Collective::all_reduce, "naive", n, p, kFlat), 2 * (p - 1) * a + 2 * (p - 1) * n * b, 1e-12);
  EXPECT_NEAR(predict(Collective::all_reduce, "binomial_tree", n, p, kFlat), 2 * 3 * a + 2 * 3 * n * b, 1e-12);
  EXPECT_NEAR(predict(Collective::all_reduce, "ring", n, p, kFlat), 2 * (p - 1) * a + 2.0 * (p - 1) / p * n * b, 1e-12);
  EXPECT_NEAR(predict(Collective::all_reduce, "recursive_halving_doubling", n, p, kFlat),
              2 * 3 * a + 2.0 * (p - 1) / p * n * b, 1e-12);
  EXPECT_DOUBLE_EQ(bus_bandwidth_factor(Collective::all_reduce, 8), 2.0 * 7 / 8);
  EXPECT_DOUBLE_EQ(bus_bandwidth_factor(Collective::all_gather, 8), 7.0 / 8);
  EXPECT_DOUBLE_EQ(bus_bandwidth_factor(Collective::broadcast, 8), 1.0);
  EXPECT_DOUBLE_EQ(crossover_bytes({1e-6, 450e9}), 450e3);  // NVLink: 450 KB
}

TEST(CostModel, OtherCollectivesAlgorithmsMatchTheSimulator) {
  for (int p : {2, 5, 8})
    for (std::size_t bytes : {std::size_t(4096), std::size_t(1) << 24}) {
      for (auto [op, algo] : {std::pair{Collective::broadcast, "binomial_tree"}, {Collective::all_gather, "ring"},
                              {Collective::all_to_all, "pairwise"}, {Collective::all_to_allv, "pairwise"},
                              {Collective::all_reduce, "naive"}}) {
        const std::size_t whole = bytes / 4 / p * p * 4;  // what the sweep really moves
        const double model = predict(op, algo, op == Collective::all_reduce || op == Collective::broadcast ? bytes : whole, p, kFlat);
        EXPECT_NEAR(simulated(op, algo, bytes, p, kFlat) / model, 1.0, 1e-9) << name_of(op) << " " << algo << " P=" << p;
      }
    }
}

TEST(CostModel, HierarchicalBeatsAFlatRingAcrossNodesAndMatchesItsModel) {
  const Topology dgx = find_topology("dgx-h100");
  const std::size_t bytes = 1 << 20;  // 1 MiB: latency still matters across 64 ranks
  const double flat = simulated(Collective::all_reduce, "ring", bytes, 64, dgx);
  const double hier = simulated(Collective::all_reduce, "hierarchical", bytes, 64, dgx);
  EXPECT_LT(hier, flat);
  EXPECT_NEAR(hier / predict(Collective::all_reduce, "hierarchical", bytes, 64, dgx), 1.0, 1e-9);
  EXPECT_NEAR(flat / predict(Collective::all_reduce, "ring", bytes, 64, dgx), 1.0, 1e-9);
}
