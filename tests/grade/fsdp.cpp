// Grade tests for lab 6 (FSDP and ZeRO). Sharding and gathering a flat run on
// many rank counts and sizes (padding included), ZeRO's step over a flat run,
// stage 3's gather-compute-free
// with what the rank's memory tracker was told, and the tiny GPT trained
// sharded against one rank on the whole batch. Run: ./labkit grade fsdp
#include <algorithm>
#include <cmath>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gtest/gtest.h>

#include "checks.h"
#include "labkit/optim.h"
#include "labkit/parallel/equivalence.h"
#include "labkit/parallel/fully_sharded.h"

using namespace labkit;
using namespace labkit::grade;

namespace {

std::vector<float> run_of(std::size_t n) { return inputs(0, n); }

// A step of the tiny GPT: a global batch of B sequences of T tokens.
constexpr int kB = 12, kT = 16;
const GptConfig kConfig = gpt_preset("tiny-gpt", 16);

std::vector<int> batch(int shift) {
  std::vector<int> t(kB * kT);
  for (int i = 0; i < kB * kT; ++i) t[i] = (i * 7 + i / 5 + shift) % 16;
  return t;
}

// One rank's weights after one step of SGD on the whole batch.
const std::vector<float>& one_rank_weights() {
  static const std::vector<float> weights = [] {
    Gpt one(kConfig, 1);
    SgdMomentum sgd{.lr = 0.05f};
    one.forward(batch(0), batch(1), kB, kT);
    one.zero_grad();
    one.backward();
    sgd.update({one.parameters().data(), one.parameter_count()}, {one.gradients().data(), one.parameter_count()});
    return one.parameters().to_host();
  }();
  return weights;
}

// The tiny GPT after one step at `stage` on P ranks (each B/P rows of the
// batch), against one rank on the whole batch: what is wrong, or "". On the
// fenced device the model lives where a GPU's would: host code reading it is stopped.
std::string check_equal_to_one_rank(int p, int stage, DeviceKind where = DeviceKind::cpu) {
  const int rows = kB / p;
  auto shard = [&](const std::vector<int>& all, int r) {
    return std::vector<int>(all.begin() + r * rows * kT, all.begin() + (r + 1) * rows * kT);
  };
  std::vector<std::vector<float>> got(p);
  const Observed run = run_ranks(p, [&](Comm& c) {
    Gpt model(kConfig, 1, where);
    FullyShardedGpt sharded(c, model, stage);
    SgdMomentum sgd{.lr = 0.05f};
    sharded.forward_backward(shard(batch(0), c.rank()), shard(batch(1), c.rank()), rows, kT);
    sharded.step([&](View w, View g) { sgd.update(w, g); });
    got[c.rank()] = sharded.gather_parameters();
  });
  if (!run.error.empty()) return run.error;
  for (int r = 0; r < p; ++r)
    if (const double d = relative_difference(got[r], one_rank_weights()); !(d <= 1e-6))
      return fmt::format("rank {}'s weights after a step differ from one rank's on the whole batch by {:.2g} "
                         "(relative; at most 1e-6 passes){}", r, d,
                         std::isnan(d) ? ": NaN, a parameter used after it was freed, or never gathered" : "");
  return "";
}

void sweep_equal_to_one_rank(const std::string& exercise, std::initializer_list<int> stages, const std::string& hint) {
  Sweep sweep(exercise);
  for (int stage : stages)
    for (int p : {1, 2, 3, 4})
      sweep.check({p, kB * kT, fmt::format("tiny GPT, stage {}, P={}", stage, p)},
                  [&] { return check_equal_to_one_rank(p, stage); });
  for (int stage : stages)
    sweep.check({2, kB * kT, fmt::format("tiny GPT, stage {}, P=2, on the fenced device", stage)},
                [&] { return check_equal_to_one_rank(2, stage, DeviceKind::fenced); });
  sweep.report(hint);
}

}  // namespace

// ---- 6.1 shard_of and unshard -----------------------------------------------------

TEST(unshard, ShardOfTakesItsSliceAndPadsWithZeros) {
  Sweep sweep("unshard");
  for (int p : {1, 2, 3, 4, 7, 8})
    for (std::size_t n : {1, 7, 10, 64, 1001})
      sweep.check({p, n, fmt::format("P={}, count={}", p, n)}, [&]() -> std::string {
        std::vector<float> full = run_of(n);
        const ShardLayout layout = shard_layout(n, p);
        for (int r = 0; r < p; ++r) {
          std::vector<float> shard(layout.shard, -1.0f);
          shard_of(view_of(full), view_of(shard), r);
          for (std::size_t i = 0; i < layout.shard; ++i) {
            const std::size_t at = r * layout.shard + i;
            const float want = at < n ? full[at] : 0.0f;
            if (shard[i] != want)
              return fmt::format("rank {}'s shard, element {}: expected {} ({}), got {}", r, i, want,
                                 at < n ? fmt::format("element {} of the run", at) : "padding", shard[i]);
          }
        }
        return "";
      });
  sweep.report("rank r's shard is elements [r S, (r+1) S) of the run, S = shard.count; past the run's end, zeros.");
}

TEST(unshard, GathersEveryShardBackWithoutThePadding) {
  Sweep sweep("unshard");
  for (int p : {1, 2, 3, 4, 5, 8})
    for (std::size_t n : {1, 7, 64, 1001})
      sweep.check({p, n, fmt::format("P={}, count={}", p, n)}, [&]() -> std::string {
        const std::vector<float> want = run_of(n);
        const ShardLayout layout = shard_layout(n, p);
        std::vector<float> padded = want;
        padded.resize(layout.padded(), 0.0f);
        Buffers got(p);
        const Observed run = run_ranks(p, [&](Comm& c) {
          std::vector<float> shard(padded.begin() + c.rank() * layout.shard,
                                   padded.begin() + (c.rank() + 1) * layout.shard);
          got[c.rank()].assign(n, -1.0f);
          unshard(c, view_of(shard), view_of(got[c.rank()]));
        });
        if (!run.error.empty()) return run.error;
        if (p > 1 && run.native != "all_gather")
          return fmt::format("expected one all_gather of the shards, saw {}", run.native.empty() ? "none" : run.native);
        return first_mismatch(got, n, [&](int, std::size_t i) { return want[i]; });
      });
  sweep.report("all_gather the shards into a Scratch of P S elements (the blocks must be equal), then copy its first "
               "full.count elements into full.");
}

TEST(unshard, ShardsTheTinyGptAsOneRankTrainsIt) {
  sweep_equal_to_one_rank("unshard", {2}, "every unit is sharded with shard_of and gathered with unshard.");
}

// ---- 6.2 zero_step ----------------------------------------------------------------

// Rank 0's collectives, in the order called: what the step sent.
std::vector<std::string> collectives_of(const Observed& run) {
  std::vector<std::string> out;
  if (run.trace)
    for (const TraceEvent& e : run.trace->tracks()[0].events)
      if (e.kind == TraceEvent::Kind::collective) out.push_back(e.name);
  return out;
}

TEST(zero_step, UpdatesItsShardOnceAndGathersEveryShard) {
  Sweep sweep("zero_step");
  constexpr float kLr = 0.5f;
  for (int p : {1, 2, 3, 4, 8})
    for (std::size_t n : {7, 24, 1001})
      sweep.check({p, n, fmt::format("P={}, count={}", p, n)}, [&]() -> std::string {
        const ShardLayout layout = shard_layout(n, p);
        const std::vector<float> start = run_of(n);
        // Rank r's gradients: inputs(r + 1, ...), padded with zeros; what every rank must end with.
        std::vector<float> mean(n, 0.0f);  // whole numbers: the sum is exact, then one division, as avg does
        for (int r = 0; r < p; ++r) {
          const std::vector<float> g = inputs(r + 1, n);
          for (std::size_t i = 0; i < n; ++i) mean[i] += g[i];
        }
        for (float& m : mean) m /= float(p);
        Buffers got(p);
        std::vector<std::string> wrong(p);
        const Observed run = run_ranks(p, [&](Comm& c) {
          std::vector<float> grads = inputs(c.rank() + 1, n);
          grads.resize(layout.padded(), 0.0f);
          std::vector<float> grad_shard(layout.shard, -1.0f), param_shard(layout.shard);
          shard_of(view_of(const_cast<std::vector<float>&>(start)), view_of(param_shard), c.rank());
          got[c.rank()].assign(n, -1.0f);
          int calls = 0;
          zero_step(c, view_of(grads), view_of(grad_shard), view_of(param_shard), view_of(got[c.rank()]),
                    [&](View w, View g) {
                      ++calls;
                      if (w.count != layout.shard || g.count != layout.shard) {
                        wrong[c.rank()] = fmt::format("rank {}'s update saw {} parameters and {} gradients; its shard "
                                                      "is {}", c.rank(), w.count, g.count, layout.shard);
                        return;
                      }
                      for (std::size_t i = 0; i < w.count; ++i)
                        static_cast<float*>(w.data)[i] -= kLr * static_cast<const float*>(g.data)[i];
                    });
          if (wrong[c.rank()].empty() && calls != 1)
            wrong[c.rank()] = fmt::format("rank {} called update {} times; once per step, over the whole shard "
                                          "(an optimizer counts its steps)", c.rank(), calls);
        });
        if (!run.error.empty()) return run.error;
        for (const std::string& w : wrong)
          if (!w.empty()) return w;
        if (p > 1 && collectives_of(run) != std::vector<std::string>{"reduce_scatter", "all_gather"})
          return fmt::format("rank 0 called {}; ZeRO's step is one reduce_scatter, the update, one all_gather",
                             collectives_of(run).empty() ? "no collective" : fmt::format("{}", fmt::join(collectives_of(run), ", ")));
        return first_mismatch(got, n, [&](int, std::size_t i) { return start[i] - kLr * mean[i]; });
      });
  sweep.report("reduce_scatter the padded gradients (avg) into grad_shard, call update once on (param_shard, "
               "grad_shard), then unshard param_shard into params.");
}

TEST(zero_step, TrainsTheTinyGptAtStageOneAsOneRankDoes) {
  sweep_equal_to_one_rank("zero_step", {1}, "stage 1 is zero_step over the whole model as one flat run.");
}

// ---- 6.3 gather_compute_free ------------------------------------------------------

TEST(gather_compute_free, ComputesOnTheWholeUnitThenFreesIt) {
  Sweep sweep("gather_compute_free");
  for (int p : {2, 3, 4})
    for (std::size_t n : {7, 1001})
      sweep.check({p, n, fmt::format("P={}, count={}", p, n)}, [&]() -> std::string {
        const std::vector<float> want = run_of(n);
        const ShardLayout layout = shard_layout(n, p);
        std::vector<float> padded = want;
        padded.resize(layout.padded(), 0.0f);
        Buffers seen(p);
        std::vector<std::string> wrong(p);
        const Observed run = run_ranks(p, [&](Comm& c) {
          std::vector<float> shard(padded.begin() + c.rank() * layout.shard,
                                   padded.begin() + (c.rank() + 1) * layout.shard);
          std::vector<float> full(n, -1.0f);
          bool computed = false;
          gather_compute_free(c, view_of(shard), view_of(full), [&] {
            seen[c.rank()] = full;
            computed = true;
          });
          const std::int64_t held = c.memory().current[std::size_t(MemoryUse::gathered)];
          const std::int64_t peak = c.memory().peak[std::size_t(MemoryUse::gathered)];
          const auto bytes = std::int64_t(n * sizeof(float));
          if (!computed)
            wrong[c.rank()] = "compute() was never called";
          else if (held > 0)
            wrong[c.rank()] = fmt::format("rank {} still holds {} bytes gathered after gather_compute_free returned, "
                                          "{} too many: free the unit (mark_freed) and tell the tracker",
                                          c.rank(), held, held);
          else if (peak != bytes)
            wrong[c.rank()] = fmt::format("rank {} told the tracker of {} bytes gathered at the peak; the unit is {} "
                                          "floats, {} bytes", c.rank(), peak, n, bytes);
          else if (std::any_of(full.begin(), full.end(), [](float v) { return !std::isnan(v); }))
            wrong[c.rank()] = fmt::format("rank {}'s whole unit still holds its values after the call: mark_freed(full), "
                                          "so that a use after the free shows", c.rank());
        });
        if (!run.error.empty()) return run.error;
        for (const std::string& w : wrong)
          if (!w.empty()) return w;
        return first_mismatch(seen, n, [&](int, std::size_t i) { return want[i]; });
      });
  sweep.report("unshard into full, track full.bytes() as gathered, compute(), then mark_freed(full) and track the "
               "bytes freed.");
}

TEST(gather_compute_free, TrainsTheTinyGptAtStageThreeAsOneRankDoes) {
  sweep_equal_to_one_rank("gather_compute_free", {3}, "gather before compute, free after, for every block.");
}
