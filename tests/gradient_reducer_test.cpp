// parallel/gradient_reducer: DDP's bucket layout, every bucket reduced once,
// the same average as one allreduce of the whole buffer, and (in virtual time)
// the buckets' allreduces overlapping the backward compute issued after ready().
#include <numeric>

#include <gtest/gtest.h>

#include "harness.h"
#include "labkit/error.h"
#include "labkit/parallel/gradient_reducer.h"

using namespace labkit;
using labkit::test::simulate;

namespace {

// Ranges for gradients of these sizes (elements), in the order backward
// finishes them: laid out in reverse, the first to finish at the buffer's end.
std::vector<ParameterRange> backward_order(const std::vector<std::size_t>& counts) {
  std::size_t end = std::accumulate(counts.begin(), counts.end(), std::size_t(0));
  std::vector<ParameterRange> ranges;
  for (std::size_t count : counts) {
    end -= count;
    ranges.push_back({end, count});
  }
  return ranges;
}

std::size_t total(const std::vector<std::size_t>& counts) {
  return std::accumulate(counts.begin(), counts.end(), std::size_t(0));
}

std::string error_of(const std::function<void(Comm&)>& fn) {
  try {
    simulate(1, fn);
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

constexpr std::size_t KiB = 1024 / 4, MiB = KiB * 1024;  // in fp32 elements

}  // namespace

TEST(GradientReducer, BucketsFollowDdpsCapsFirstBucketOneMiB) {
  // 0.25 + 0.5 + 0.5 MiB reach the first cap (1 MiB) together; then 25 MiB caps:
  // 10 + 20 reach it, 4 + 30 reach it, and the last 1 KiB is a bucket of its own.
  const std::vector<std::size_t> counts = {MiB / 4, MiB / 2, MiB / 2, 10 * MiB, 20 * MiB, 4 * MiB, 30 * MiB, KiB};
  simulate(1, [&](Comm& c) {
    const GradientReducer reducer(c, meta_view(total(counts), DType::f32), backward_order(counts));
    const std::vector<std::pair<int, int>> want = {{0, 2}, {3, 4}, {5, 6}, {7, 7}};
    ASSERT_EQ(reducer.buckets().size(), want.size());
    for (std::size_t b = 0; b < want.size(); ++b) {
      const GradientReducer::Bucket& bucket = reducer.buckets()[b];
      EXPECT_EQ(std::pair(bucket.first, bucket.last), want[b]) << "bucket " << b;
      std::size_t count = 0;
      for (int p = bucket.first; p <= bucket.last; ++p) count += counts[p];
      EXPECT_EQ(bucket.grads.count, count) << "bucket " << b;
    }
  });
}

TEST(GradientReducer, BucketsAreViewsOfTheirGradients) {
  const std::vector<std::size_t> counts = {3, 5, 2, 8, 1};
  std::vector<float> grads(total(counts));
  simulate(1, [&](Comm& c) {  // caps of 16 and 32 bytes: 3+5, 2+8, 1
    const GradientReducer reducer(c, view_of(grads), backward_order(counts), {.first_bytes = 16, .bytes = 32});
    ASSERT_EQ(reducer.buckets().size(), 3u);
    const std::vector<std::pair<std::size_t, std::size_t>> want = {{11, 8}, {1, 10}, {0, 1}};  // (offset, count)
    for (std::size_t b = 0; b < 3; ++b) {
      const View v = reducer.buckets()[b].grads;
      EXPECT_EQ(static_cast<float*>(v.data) - grads.data(), std::ptrdiff_t(want[b].first)) << "bucket " << b;
      EXPECT_EQ(v.count, want[b].second) << "bucket " << b;
    }
  });
}

TEST(GradientReducer, AveragesLikeOneAllReduceOfTheWholeBuffer) {
  const std::vector<std::size_t> counts = {5, 300, 1, 70, 0, 129, 33, 64};
  const std::size_t n = total(counts);
  for (int ranks : {1, 2, 3, 4, 8}) {
    auto run = simulate(ranks, [&](Comm& c) {
      std::vector<float> grads(n), whole(n);
      for (std::size_t i = 0; i < n; ++i) grads[i] = whole[i] = float(c.rank() * 1000 + i);
      // Buckets of parameters {0, 1}, {2, 3, 4, 5}, {6, 7}: 1220 bytes >= 256, 800 >= 512, then the rest.
      GradientReducer reducer(c, view_of(grads), backward_order(counts), {.first_bytes = 256, .bytes = 512});
      ASSERT_EQ(reducer.buckets().size(), 3u);
      // Each rank finishes its gradients in its own order; the buckets still
      // start in the same order everywhere.
      for (std::size_t k = 0; k < counts.size(); ++k) reducer.ready(int((k + c.rank()) % counts.size()));
      reducer.wait_all();
      c.all_reduce(view_of(whole), ReduceOp::avg);
      for (std::size_t i = 0; i < n; ++i)
        ASSERT_EQ(grads[i], whole[i]) << ranks << " ranks: rank " << c.rank() << ", element " << i;
    });
    // One allreduce per bucket, plus the whole buffer's.
    for (int r = 0; r < ranks; ++r) {
      int all_reduces = 0;
      for (const TraceEvent& e : run.trace->tracks()[r].events)
        all_reduces += e.kind == TraceEvent::Kind::collective && e.name == "all_reduce";
      EXPECT_EQ(all_reduces, 3 + 1) << ranks << " ranks: rank " << r;
    }
  }
}

TEST(GradientReducer, ServesStepAfterStep) {
  const std::vector<std::size_t> counts = {4, 4, 4};
  simulate(2, [&](Comm& c) {
    std::vector<float> grads(12);
    GradientReducer reducer(c, view_of(grads), backward_order(counts), {.first_bytes = 16, .bytes = 16});
    for (int step = 0; step < 3; ++step) {
      std::fill(grads.begin(), grads.end(), float(c.rank() + step));
      for (int p = 0; p < 3; ++p) reducer.ready(p);
      reducer.wait_all();
      for (float g : grads) ASSERT_EQ(g, 0.5f + step) << "rank " << c.rank() << ", step " << step;
    }
  });
}

TEST(GradientReducer, OverlapsBackwardInVirtualTime) {
  // Backward over 4 layers, 200 us of compute each, a 32 MiB bucket per layer
  // (payload-free: sizes only). Each bucket's allreduce runs while backward
  // computes the layers before it; only the last one is left exposed.
  const std::vector<std::size_t> counts(4, 8 * MiB);
  const std::size_t bucket_bytes = 8 * MiB * 4;
  const double layer_seconds = 200e-6;
  const int ranks = 8;
  const double one_all_reduce = simulate(ranks, [&](Comm& c) {
    c.all_reduce(meta_view(8 * MiB, DType::f32), ReduceOp::avg);
  }, "dgx-h100", false).elapsed;
  const double step = simulate(ranks, [&](Comm& c) {
    GradientReducer reducer(c, meta_view(total(counts), DType::f32), backward_order(counts),
                            {.first_bytes = bucket_bytes, .bytes = bucket_bytes});
    ASSERT_EQ(reducer.buckets().size(), 4u);
    for (int layer = 0; layer < 4; ++layer) {
      c.compute_seconds("backward", layer_seconds);
      reducer.ready(layer);  // this layer's bucket starts; the next layer computes meanwhile
    }
    reducer.wait_all();
  }, "dgx-h100", false).elapsed;
  const double compute = 4 * layer_seconds, communication = 4 * one_all_reduce;
  ASSERT_LT(one_all_reduce, layer_seconds) << "each bucket's allreduce fits under one layer's compute";
  EXPECT_LT(step, compute + communication) << "serialized, the step would take compute + every allreduce";
  EXPECT_NEAR(step, compute + one_all_reduce, 0.05 * one_all_reduce) << "only the last bucket is exposed";
}

TEST(GradientReducer, MisuseIsNamed) {
  std::vector<float> grads(10);
  EXPECT_EQ(error_of([&](Comm& c) { GradientReducer(c, view_of(grads), {{6, 4}, {0, 5}}); }),
            "rank 0: gradient reducer: parameter 1's gradients [0, 5) do not end where parameter 0's begin (6): "
            "buckets are views of the buffer, so each range must end where the one before it begins");
  EXPECT_EQ(error_of([&](Comm& c) { GradientReducer(c, view_of(grads), {{6, 5}}); }),
            "rank 0: gradient reducer: parameter 0's gradients [6, 11) pass the end of the buffer (10 elements)");
  EXPECT_EQ(error_of([&](Comm& c) {
              GradientReducer reducer(c, view_of(grads), {{5, 5}, {0, 5}});
              reducer.ready(0);
              reducer.ready(0);
            }),
            "rank 0: gradient reducer ready: param=0 is already ready this step (wait_all ends a step)");
  EXPECT_EQ(error_of([&](Comm& c) { GradientReducer(c, view_of(grads), {{5, 5}, {0, 5}}).ready(2); }),
            "rank 0: gradient reducer ready: param=2 is out of range for 2 parameters");
  EXPECT_EQ(error_of([&](Comm& c) {
              GradientReducer reducer(c, view_of(grads), {{5, 5}, {0, 5}});
              reducer.ready(1);
              reducer.wait_all();
            }),
            "rank 0: gradient reducer wait_all: parameter 0 was never ready this step: its bucket's allreduce "
            "cannot start");
}
