// bench/calibration.h, the mechanics of ./labkit calibrate without a machine to
// time: the fit recovers the link that made a set of timings, and the topology
// it writes makes the simulator predict what the fit says. (How well a fit
// predicts this machine is calibrate's own output: a benchmark's, which a busy
// machine changes.)
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "calibration.h"
#include "harness.h"
#include "labkit/algorithms.h"

using namespace labkit;
using namespace labkit::bench;

namespace {
const Link kLink{3.5e-6, 12e9};  // 3.5 us, 12 GB/s
constexpr std::size_t kLatencyBelow = 64 << 10, kBandwidthAbove = 32 << 20;  // calibrate's defaults

// The times `link` gives `algo` from 1 KiB to 64 MiB, as calibrate's sweep measures them.
std::vector<Sample> timings_on(const Link& link, const std::string& algo, int ranks) {
  std::vector<Sample> samples;
  for (std::size_t bytes = 1 << 10; bytes <= std::size_t(64) << 20; bytes *= 2) {
    Sample s = sample_of(algo, bytes, ranks, 0);
    s.seconds = predicted(s, link);
    samples.push_back(s);
  }
  return samples;
}
}  // namespace

TEST(Calibration, TheFitRecoversTheLinkThatMadeTheTimings) {
  for (const std::string algo : {"ring", "recursive_halving_doubling", "binomial_tree"})
    for (int ranks : {2, 3, 4, 8}) {
      const Link got = fit(timings_on(kLink, algo, ranks), kLatencyBelow, kBandwidthAbove);
      EXPECT_NEAR(got.alpha, kLink.alpha, 1e-9 * kLink.alpha) << algo << " on " << ranks << " ranks";
      EXPECT_NEAR(got.bandwidth, kLink.bandwidth, 1e-9 * kLink.bandwidth) << algo << " on " << ranks << " ranks";
    }
}

TEST(Calibration, TooFewSizesForARegimeAreNamed) {
  const std::vector<Sample> samples = timings_on(kLink, "ring", 2);
  EXPECT_THROW(fit(samples, 512, kBandwidthAbove), Error);  // no message up to 512 B: no alpha
  EXPECT_THROW(fit(samples, kLatencyBelow, std::size_t(1) << 30), Error);  // none from 1 GiB: no beta
}

// The file calibrate writes, read back as --topology reads it: the simulator's
// ring at 128 MiB (calibrate's --check, beyond the fitted sizes) takes what the
// fitted model says.
TEST(Calibration, TheWrittenTopologyMakesTheSimulatorPredictTheFit) {
  constexpr int kRanks = 4;
  constexpr std::size_t kCheck = std::size_t(128) << 20;
  const Link link = fit(timings_on(kLink, "ring", kRanks), kLatencyBelow, kBandwidthAbove);
  const std::filesystem::path file = std::filesystem::temp_directory_path() / "labkit_calibration_test.json";
  std::ofstream(file) << topology_json("calibrated (test)", kRanks, link, nlohmann::json::array()).dump(2);
  const Topology loaded = find_topology(file.string());
  EXPECT_EQ(loaded.devices_per_node, kRanks);
  EXPECT_NEAR(loaded.intra.alpha, link.alpha, 1e-12 * link.alpha);
  EXPECT_NEAR(loaded.intra.bandwidth, link.bandwidth, 1e-12 * link.bandwidth);
  const double simulated = test::simulate(kRanks, [](Comm& comm) {
    use_algorithm(comm, Collective::all_reduce, "ring");
    comm.all_reduce(meta_view(kCheck / sizeof(float), DType::f32), ReduceOp::sum);
  }, file.string(), false).elapsed;
  const double model = predicted(sample_of("ring", kCheck, kRanks, 0), link);
  EXPECT_NEAR(simulated, model, 1e-9 * model);
  std::filesystem::remove(file);
}
