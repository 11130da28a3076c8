// Ring attention (context parallelism): every rank's output and gradients
// equal dense causal attention's rows for its positions, under both layouts;
// the work each rank does and the K/V bytes it sends, from the trace.
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>

#include <gtest/gtest.h>

#include "harness.h"
#include "labkit/ops.h"
#include "labkit/parallel/equivalence.h"
#include "labkit/parallel/ring_attention.h"

using namespace labkit;
using labkit::test::simulate;

namespace {

std::vector<float> random_floats(std::size_t n, unsigned seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = normal(gen);
  return v;
}

struct Difference {
  double out = 0, grads = 0;
};

// Dense causal attention on B x T against ring attention on cp ranks.
Difference against_dense(int cp, SequenceLayout layout, AttentionShape s) {
  const std::size_t BT = std::size_t(s.B) * s.T;
  const std::vector<float> qkv = random_floats(BT * 3 * s.C, 1), dout = random_floats(BT * s.C, 2);
  std::vector<float> out(BT * s.C), preatt(BT * s.NH * s.T), att(preatt.size()), dqkv(qkv.size(), 0.0f),
      dpreatt(preatt.size(), 0.0f), datt(att.size(), 0.0f);
  ops::attention_forward(out.data(), preatt.data(), att.data(), qkv.data(), s.B, s.T, s.C, s.NH);
  ops::attention_backward(dqkv.data(), dpreatt.data(), datt.data(), dout.data(), qkv.data(), att.data(), s.B, s.T, s.C,
                          s.NH);
  Difference d;
  simulate(cp, [&](Comm& c) {
    RingAttention ring(c, layout, s);
    const std::vector<float> my_qkv = shard_sequence(qkv, s.B, s.T, 3 * s.C, layout, c.rank(), cp);
    const std::vector<float> my_dout = shard_sequence(dout, s.B, s.T, s.C, layout, c.rank(), cp);
    std::vector<float> my_out(my_dout.size()), my_dqkv(my_qkv.size(), -1.0f);
    ring.forward(my_qkv.data(), my_out.data());
    ring.backward(my_dout.data(), my_dqkv.data());
    d.out = std::max(d.out, relative_difference(my_out, shard_sequence(out, s.B, s.T, s.C, layout, c.rank(), cp)));
    d.grads =
        std::max(d.grads, relative_difference(my_dqkv, shard_sequence(dqkv, s.B, s.T, 3 * s.C, layout, c.rank(), cp)));
  });
  return d;
}

// Each rank's seconds in the compute regions named `what`, from the trace.
std::vector<double> compute_seconds_by_rank(const Trace& trace, std::string_view what) {
  std::vector<double> seconds;
  for (const TraceTrack& track : trace.tracks()) {
    double sum = 0;
    for (const TraceEvent& e : track.events)
      if (e.kind == TraceEvent::Kind::compute && e.name == what) sum += e.end - e.start;
    seconds.push_back(sum);
  }
  return seconds;
}

double busiest_over_mean(const std::vector<double>& v) {
  return *std::max_element(v.begin(), v.end()) / (std::accumulate(v.begin(), v.end(), 0.0) / double(v.size()));
}

}  // namespace

TEST(RingAttention, ForwardAndBackwardEqualDenseCausalAttention) {
  const AttentionShape shape{.B = 2, .T = 32, .C = 32, .NH = 4};
  for (const SequenceLayout layout : {SequenceLayout::contiguous, SequenceLayout::zigzag})
    for (int cp : {1, 2, 4, 8}) {
      const Difference d = against_dense(cp, layout, shape);
      EXPECT_LE(d.out, 1e-5) << name_of(layout) << ", cp " << cp;
      EXPECT_LE(d.grads, 1e-5) << name_of(layout) << ", cp " << cp;
    }
}

TEST(RingAttention, ZigZagGivesRankRChunksRAndTheirMirror) {
  const std::vector<PositionRange> p = positions_of(SequenceLayout::zigzag, 1, 4, 32);
  ASSERT_EQ(p.size(), 2u);
  EXPECT_EQ(p[0].first, 4);
  EXPECT_EQ(p[1].first, 24);  // chunk 2 x 4 - 1 - 1 = 6 of 8
  EXPECT_EQ(p[0].count + p[1].count, 8);
  EXPECT_EQ(positions_of(SequenceLayout::contiguous, 3, 4, 32)[0].first, 24);
  EXPECT_THROW(positions_of(SequenceLayout::zigzag, 0, 4, 36), Error);  // 36 is not 8 chunks
  EXPECT_NO_THROW(positions_of(SequenceLayout::contiguous, 0, 4, 36));
}

TEST(RingAttention, CausalPairsCountsTheKeysAtOrBeforeEachQuery) {
  std::mt19937 gen(7);
  std::uniform_int_distribution<int> at(0, 40), length(0, 12);
  for (int trial = 0; trial < 500; ++trial) {
    const PositionRange q{at(gen), length(gen)}, k{at(gen), length(gen)};
    double brute = 0;
    for (int i = q.first; i < q.first + q.count; ++i)
      for (int j = k.first; j < k.first + k.count; ++j) brute += j <= i;
    ASSERT_EQ(causal_pairs(std::span(&q, 1), std::span(&k, 1)), brute)
        << "queries [" << q.first << ", +" << q.count << "), keys [" << k.first << ", +" << k.count << ")";
  }
}

TEST(RingAttention, MergingTwoBlocksEqualsTheSoftmaxOverBoth) {
  const std::vector<float> scores = {0.5f, -1.0f, 2.0f, 0.25f, 1.5f}, values = {1, 2, 3, 4, 5};
  const auto attend = [&](int from, int to, float& lse) {
    float max = -std::numeric_limits<float>::infinity(), sum = 0, out = 0;
    for (int j = from; j < to; ++j) max = std::max(max, scores[j]);
    for (int j = from; j < to; ++j) sum += std::exp(scores[j] - max), out += std::exp(scores[j] - max) * values[j];
    lse = max + std::log(sum);
    return out / sum;
  };
  float whole_lse = 0, lse = -std::numeric_limits<float>::infinity(), block_lse = 0;
  const float whole = attend(0, 5, whole_lse);
  std::vector<float> out = {0.0f};
  for (const auto& [from, to] : {std::pair{0, 2}, std::pair{2, 5}}) {
    const std::vector<float> block = {attend(from, to, block_lse)};
    merge_attention(out, lse, block, block_lse);
  }
  EXPECT_NEAR(out[0], whole, 1e-6);
  EXPECT_NEAR(lse, whole_lse, 1e-6);
}

// Contiguous under a causal mask: rank r does r + 1/2 chunks' worth of
// pairs, the last 2cp - 1 halves of the mean's cp; zig-zag evens it out.
TEST(RingAttention, ContiguousWorkIsUnequalAndZigZagIsEven) {
  const int cp = 8;
  const AttentionShape shape{.B = 1, .T = 4096, .C = 512, .NH = 8};
  for (const SequenceLayout layout : {SequenceLayout::contiguous, SequenceLayout::zigzag}) {
    const auto run = simulate(cp, [&](Comm& c) {
      RingAttention ring(c, layout, shape);
      ring.forward(nullptr, nullptr);
      ring.backward(nullptr, nullptr);
    }, "dgx-h100", false);
    for (const char* what : {"ring attention forward", "ring attention backward"}) {
      const double imbalance = busiest_over_mean(compute_seconds_by_rank(*run.trace, what));
      if (layout == SequenceLayout::contiguous)
        EXPECT_NEAR(imbalance, (2.0 * cp - 1) / cp, 1e-3) << what;  // the diagonal blocks keep a little over half
      else
        EXPECT_NEAR(imbalance, 1.0, 1e-9) << what;
    }
  }
}

// Forward passes the K/V block cp - 1 times; backward too, and the block's
// gradients cp times (the last hop takes them home).
TEST(RingAttention, SendsTheKvBlockAroundTheRing) {
  const int cp = 4;
  const AttentionShape shape{.B = 2, .T = 32, .C = 16, .NH = 2};
  for (const bool payload : {true, false}) {
    std::size_t block = 0;
    const auto run = simulate(cp, [&](Comm& c) {
      RingAttention ring(c, SequenceLayout::zigzag, shape);
      block = ring.block_elements() * sizeof(float);
      std::vector<float> qkv = random_floats(std::size_t(ring.rows()) * shape.B * 3 * shape.C, 3), out(qkv.size() / 3);
      ring.forward(payload ? qkv.data() : nullptr, payload ? out.data() : nullptr);
      ring.backward(payload ? out.data() : nullptr, payload ? qkv.data() : nullptr);
    }, "dgx-h100", payload);
    EXPECT_EQ(block, 2u * shape.B * (shape.T / cp) * shape.C * sizeof(float));
    for (const TraceTrack& track : run.trace->tracks()) {
      std::uint64_t kv = 0, grads = 0;
      for (const TraceEvent& e : track.events)
        if (e.kind == TraceEvent::Kind::send) (e.tag == RingAttention::kTag ? kv : grads) += e.bytes;
      EXPECT_EQ(kv, 2 * (cp - 1) * block) << "rank " << track.rank << (payload ? "" : ", payload-free");
      EXPECT_EQ(grads, cp * block) << "rank " << track.rank << (payload ? "" : ", payload-free");
    }
  }
}

TEST(RingAttention, BackwardBeforeForwardIsAnError) {
  const std::string error = labkit::test::error_of(2, [](Comm& c) {
    RingAttention ring(c, SequenceLayout::contiguous, {.B = 1, .T = 8, .C = 4, .NH = 2});
    std::vector<float> dout(16), dqkv(48);
    ring.backward(dout.data(), dqkv.data());
  });
  EXPECT_NE(error.find("backward without a forward"), std::string::npos) << error;
}

TEST(RingAttention, ASequenceThatDoesNotSplitIsRefusedNamingTheRank) {
  const std::string error = labkit::test::error_of(4, [](Comm& c) {
    RingAttention ring(c, SequenceLayout::zigzag, {.B = 1, .T = 12, .C = 4, .NH = 2});
  });
  EXPECT_NE(error.find("rank 0: ring attention: a sequence of 12 does not split into 8 equal chunks"),
            std::string::npos) << error;
}
