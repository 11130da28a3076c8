// Grade tests for lab 5 (data parallelism). The averaging on many rank counts
// and sizes, the buckets against PyTorch's rule, and the tiny GPT trained on P
// ranks against one rank on the whole batch, in each mode the exercises serve;
// the overlap must show in the trace: communication starting before backward
// ends. Run: ./labkit grade ddp
#include <algorithm>
#include <cmath>
#include <random>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gtest/gtest.h>

#include "checks.h"
#include "labkit/parallel/data_parallel.h"
#include "labkit/parallel/equivalence.h"

using namespace labkit;
using namespace labkit::grade;

namespace {

constexpr std::size_t KiB = 1024, MiB = 1024 * KiB;

// The tiny GPT's averaged gradients after one forward and backward of a global
// batch of B sequences on P ranks (each its B/P rows) in `mode`, against one
// rank's on the whole batch: what is wrong, or "". On the fenced device the
// ranks' models live where a GPU's would: host code reading them is stopped.
std::string check_equal_to_one_rank(int p, DdpMode mode, BucketCaps caps = {}, DeviceKind where = DeviceKind::cpu) {
  const GptConfig config = gpt_preset("tiny-gpt", 65);
  const int B = 12, T = 16, rows = B / p;
  std::vector<int> tokens(B * T), targets(B * T);
  std::mt19937 rng(7);
  for (int i = 0; i < B * T; ++i) tokens[i] = int(rng() % 65), targets[i] = int(rng() % 65);

  Gpt one(config, 1);
  one.forward(tokens, targets, B, T);
  one.zero_grad();
  one.backward();
  const std::vector<float> want = one.gradients().to_host();

  std::vector<std::vector<float>> got(p);
  const Observed run = run_ranks(p, [&](Comm& c) {
    Gpt model(config, 1, where);
    DataParallel dp(c, model, mode, caps);
    auto shard = [&](const std::vector<int>& all) {
      return std::vector<int>(all.begin() + c.rank() * rows * T, all.begin() + (c.rank() + 1) * rows * T);
    };
    dp.forward_backward(shard(tokens), shard(targets), rows, T);
    got[c.rank()] = model.gradients().to_host();
  });
  if (!run.error.empty()) return run.error;
  // P times the mean is a sum not divided; said only where it is that (at P = 2
  // a rank's own gradient is as far off as the sum).
  const auto summed = [&](std::vector<float> g) {
    for (float& x : g) x /= float(p);
    return p > 1 && relative_difference(g, want) <= 1e-4;
  };
  for (int r = 0; r < p; ++r)
    if (const double d = relative_difference(got[r], want); !(d <= 1e-6))
      return fmt::format("rank {}'s gradients after averaging differ from one rank's on the whole batch by {:.2g} "
                         "(relative; at most 1e-6 passes){}", r, d,
                         summed(got[r]) ? ": P times too large, a sum and not a mean?" : "");
  return "";
}

// Tiny-GPT runs over P = 1..4, summarised by Sweep.
void sweep_equal_to_one_rank(const std::string& exercise, DdpMode mode, BucketCaps caps, const std::string& hint) {
  Sweep sweep(exercise);
  for (int p : {1, 2, 3, 4})
    sweep.check({p, 12 * 16, fmt::format("tiny GPT, {} mode, P={}", name_of(mode), p)},
                [&] { return check_equal_to_one_rank(p, mode, caps); });
  sweep.check({2, 12 * 16, fmt::format("tiny GPT, {} mode, P=2, on the fenced device", name_of(mode))},
              [&] { return check_equal_to_one_rank(2, mode, caps, DeviceKind::fenced); });
  sweep.report(hint);
}

// Small caps, so that the tiny GPT's four gradient ranges (final norm, block 1,
// block 0, embeddings) make three buckets: {norm, block 1}, {block 0}, {embeddings}.
constexpr BucketCaps kSmallCaps{.first_bytes = 16 * KiB, .bytes = 64 * KiB};

// The rule, as PyTorch's compute_bucket_assignment_by_size applies it.
std::vector<int> pytorch_buckets(const std::vector<std::size_t>& bytes, BucketCaps caps) {
  std::vector<int> firsts;
  std::size_t filled = 0;
  for (int g = 0; g < int(bytes.size()); ++g) {
    if (g == 0 || filled >= (firsts.size() == 1 ? caps.first_bytes : caps.bytes)) firsts.push_back(g), filled = 0;
    filled += bytes[g];
  }
  return firsts;
}

std::string mib(std::size_t bytes) {
  if (bytes >= MiB && bytes % MiB == 0) return fmt::format("{} MiB", bytes / MiB);
  return bytes >= KiB && bytes % KiB == 0 ? fmt::format("{} KiB", bytes / KiB) : fmt::format("{} B", bytes);
}

}  // namespace

// ---- 5.1 average_gradients --------------------------------------------------------

TEST(average_gradients, GivesEveryRankTheMean) {
  Sweep sweep("average_gradients");
  for (int p : {1, 2, 3, 4, 5, 8})
    for (std::size_t n : {1, 7, 840, 1001})
      sweep.check({p, n, fmt::format("P={}, count={}", p, n)}, [&] {
        Buffers got(p);
        const Observed run = run_ranks(p, [&](Comm& c) {
          got[c.rank()] = inputs(c.rank(), n);
          average_gradients(c, view_of(got[c.rank()]));
        });
        if (!run.error.empty()) return run.error;
        for (int r = 0; r < p; ++r)
          for (std::size_t i = 0; i < n; ++i) {
            double sum = 0;
            for (int q = 0; q < p; ++q) sum += input(q, i);
            const double mean = sum / p;
            if (std::abs(got[r][i] - mean) > 1e-6 * mean)
              return fmt::format("rank {}, element {}: expected the mean {:g}, got {:g}{}", r, i, mean, got[r][i],
                                 std::abs(got[r][i] - p * mean) < 1e-3 * mean ? " (the sum: divide by P)" : "");
          }
        return std::string();
      });
  sweep.report("sum the gradients over the ranks (all_reduce, ReduceOp::sum), then divide each by comm.size().");
}

TEST(average_gradients, RunsPayloadFree) {
  // The what-if runs pass views with no data (sizes only): a 7B step over a
  // thousand ranks simulates the bytes, not the values.
  Sweep sweep("average_gradients");
  sweep.check({4, 1 << 20, "P=4, a payload-free buffer of 2^20 floats"}, [&] {
    const Observed run = run_ranks(4, [&](Comm& c) { average_gradients(c, meta_view(1 << 20, DType::f32)); });
    if (!run.error.empty()) return run.error;
    if (run.native != "all_reduce")
      return fmt::format("expected one comm.all_reduce, saw {}", run.native.empty() ? "none" : run.native);
    return std::string();
  });
  sweep.report("sum with comm.all_reduce(grads, ReduceOp::sum), which a payload-free view passes through with its "
               "size alone, then divide with divide_local, which skips a view whose data is null.");
}

TEST(average_gradients, TrainsTheTinyGptAsOneRankDoes) {
  sweep_equal_to_one_rank("average_gradients", DdpMode::naive, {},
                          "each rank's gradient is of its shard's mean loss; the mean of the P of them is the "
                          "gradient of the whole batch's mean loss.");
}

// ---- 5.2 assign_buckets -----------------------------------------------------------

TEST(assign_buckets, FollowsPyTorchsRule) {
  struct Case {
    std::vector<std::size_t> bytes;
    BucketCaps caps;
    std::vector<int> want;
    const char* rule;
  };
  const Case cases[] = {
      {{400'000, 700'000, 10'000'000, 9'000'000, 8'000'000, 30'000'000, 2'000'000}, {}, {0, 2, 5, 6},
       "a bucket closes once it holds at least its cap: 1 MiB for the first, 25 MiB after"},
      {{100 * MiB, MiB, MiB}, {}, {0, 1}, "a gradient larger than the cap fills a bucket by itself"},
      {{MiB, 25 * MiB, 25 * MiB}, {}, {0, 1, 2}, "a bucket that reaches its cap exactly is full"},
      {{KiB, KiB, KiB}, {}, {0}, "the last bucket holds what is left, however little"},
      {{10, 10, 10, 10}, {.first_bytes = 0, .bytes = 0}, {0, 1, 2, 3}, "caps of 0: a bucket per gradient"},
      {{10, 10, 10, 10}, {.first_bytes = 20, .bytes = 30}, {0, 2}, "the first cap applies to the first bucket only"},
      {{}, {}, {}, "no gradients, no buckets"},
  };
  Sweep sweep("assign_buckets");
  for (const Case& c : cases)
    sweep.check({0, 0, fmt::format("sizes {} with caps {} then {}", c.bytes, mib(c.caps.first_bytes),
                                   mib(c.caps.bytes))}, [&] {
      const std::vector<int> got = assign_buckets(c.bytes, c.caps);
      if (got == c.want) return std::string();
      return fmt::format("expected buckets starting at gradients {}, got {} ({})", c.want, got, c.rule);
    });
  sweep.report("walk the gradients in the order given; open a bucket when none is open, close it once its bytes "
               "reach its cap (caps.first_bytes for bucket 0, caps.bytes after).");
}

TEST(assign_buckets, MatchesPyTorchOnTheTinyGpt) {
  const Gpt model(gpt_preset("tiny-gpt", 65), 1);
  std::vector<std::size_t> bytes;
  for (const ParameterRange& r : model.backward_order()) bytes.push_back(r.count * sizeof(float));
  Sweep sweep("assign_buckets");
  for (BucketCaps caps : {BucketCaps{}, kSmallCaps, BucketCaps{.first_bytes = 4 * KiB, .bytes = 256 * KiB}})
    sweep.check({0, 0, fmt::format("the tiny GPT's gradients {} (bytes, backward order), caps {} then {}", bytes,
                                   mib(caps.first_bytes), mib(caps.bytes))}, [&] {
      const std::vector<int> got = assign_buckets(bytes, caps), want = pytorch_buckets(bytes, caps);
      return got == want ? "" : fmt::format("expected buckets starting at gradients {}, got {}", want, got);
    });
  sweep.report("");
}

// ---- 5.3 launch_ready_buckets (and wait_for_buckets) ------------------------------

TEST(launch_ready_buckets, StartsEachBucketOnceReadyAndInOrder) {
  // Three buckets of 100, 200 and 300 floats: the trace tells them apart by size.
  Sweep sweep("launch_ready_buckets", Sweep::Checks::pattern);
  struct Moment {
    std::vector<int> unready;
    std::size_t started;  // buckets in flight after the call
    const char* why;
  };
  const Moment moments[] = {
      {{1, 0, 1}, 0, "bucket 1 is ready but bucket 0 is not: buckets start in order, so none yet"},
      {{0, 0, 1}, 2, "buckets 0 and 1 are ready: both start, 0 first"},
      {{0, 0, 1}, 2, "nothing new is ready: no bucket starts twice"},
      {{0, 0, 0}, 3, "bucket 2 is ready"},
  };
  sweep.check({2, 600, "P=2, buckets of 100, 200, 300 floats becoming ready out of order"}, [&] {
    std::string wrong;
    Buffers grads(2);
    const Observed run = run_ranks(2, [&](Comm& c) {
      std::vector<float>& g = grads[c.rank()] = inputs(c.rank(), 600);
      const View all = view_of(g);
      const std::vector<GradientReducer::Bucket> buckets = {
          {0, 0, all.slice(0, 100)}, {1, 1, all.slice(100, 200)}, {2, 2, all.slice(300, 300)}};
      std::vector<Request> in_flight;
      for (const Moment& m : moments) {
        launch_ready_buckets(c, buckets, m.unready, in_flight);
        if (in_flight.size() != m.started && wrong.empty())
          wrong = fmt::format("with unready = {}, {} bucket(s) in flight, expected {}: {}", m.unready,
                              in_flight.size(), m.started, m.why);
      }
      wait_for_buckets(in_flight);
      if (!in_flight.empty() && wrong.empty())
        wrong = fmt::format("wait_for_buckets left {} requests in in_flight; it empties it for the next step",
                            in_flight.size());
    });
    if (!wrong.empty()) return wrong;
    if (!run.error.empty()) return run.error;
    std::vector<std::uint64_t> order;  // the allreduces' bytes, in the order rank 0 started them
    for (const TraceEvent& e : run.trace->tracks()[0].events)
      if (e.kind == TraceEvent::Kind::collective) order.push_back(e.bytes);
    std::sort(order.begin(), order.end());  // ended in any order; each must have run once
    if (order != std::vector<std::uint64_t>{400, 800, 1200})
      return fmt::format("the allreduces carried {} bytes; one per bucket, the whole bucket each, is "
                         "[400, 800, 1200]", order);
    return first_mismatch(grads, 600, [](int, std::size_t i) { return (input(0, i) + input(1, i)) / 2; });
  });
  sweep.report("in_flight.size() is the next bucket to start; start it (i_all_reduce, avg) while its unready count "
               "is 0, and stop at the first bucket that is not ready.");
}

TEST(launch_ready_buckets, TrainsTheTinyGptAsOneRankDoes) {
  sweep_equal_to_one_rank("launch_ready_buckets", DdpMode::overlap, kSmallCaps,
                          "start each bucket's allreduce with ReduceOp::avg, and wait for every one before returning "
                          "from wait_for_buckets.");
}

TEST(launch_ready_buckets, CommunicationStartsBeforeBackwardEnds) {
  Sweep sweep("launch_ready_buckets");
  sweep.check({0, 0, "tiny GPT, overlap mode, P=4, three buckets"}, [&] {
    const GptConfig config = gpt_preset("tiny-gpt", 65);
    const int B = 2, T = 16;
    const Observed run = run_ranks(4, [&](Comm& c) {
      Gpt model(config, 1);
      DataParallel dp(c, model, DdpMode::overlap, kSmallCaps);
      std::vector<int> tokens(B * T);
      for (int i = 0; i < B * T; ++i) tokens[i] = (i * 7 + c.rank()) % 65;
      dp.forward_backward(tokens, tokens, B, T);
    });
    if (!run.error.empty()) return run.error;
    double first_allreduce = -1, backward_end = 0;
    for (const TraceEvent& e : run.trace->tracks()[0].events) {
      if (e.kind == TraceEvent::Kind::collective && first_allreduce < 0) first_allreduce = e.start;
      if (e.kind == TraceEvent::Kind::compute && e.name == "backward") backward_end = std::max(backward_end, e.end);
    }
    if (first_allreduce < 0) return std::string("rank 0 ran no allreduce");
    if (first_allreduce >= backward_end)
      return fmt::format("rank 0's first allreduce started at {:.6g} us, once backward had ended ({:.6g} us): start "
                         "each bucket as soon as its gradients are ready, not when they all are",
                         first_allreduce * 1e6, backward_end * 1e6);
    return std::string();
  });
  sweep.report("");
}
