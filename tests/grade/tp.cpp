// Grade tests for lab 7 (tensor, sequence and context parallelism). The
// online-softmax merge on rows split into blocks every way, large scores
// included, and ring attention built on it against dense causal attention.
// Run: ./labkit grade tp
#include <algorithm>
#include <cmath>
#include <limits>
#include <random>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "checks.h"
#include "labkit/ops.h"
#include "labkit/parallel/equivalence.h"
#include "labkit/parallel/ring_attention.h"

using namespace labkit;
using namespace labkit::grade;

namespace {

std::vector<float> normal_floats(std::size_t n, unsigned seed, float scale = 1.0f) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = normal(gen);
  return v;
}

// Softmax-weighted values of keys [from, to) of one row, in double: the
// output (hs values) and the log-sum-exp.
std::pair<std::vector<float>, float> attend(const std::vector<float>& scores, const std::vector<float>& values, int hs,
                                            int from, int to) {
  double max = -std::numeric_limits<double>::infinity(), sum = 0;
  for (int j = from; j < to; ++j) max = std::max(max, double(scores[j]));
  std::vector<double> out(hs, 0.0);
  for (int j = from; j < to; ++j) {
    const double w = std::exp(scores[j] - max);
    sum += w;
    for (int d = 0; d < hs; ++d) out[d] += w * values[std::size_t(j) * hs + d];
  }
  std::vector<float> normalised(hs);
  for (int d = 0; d < hs; ++d) normalised[d] = float(out[d] / sum);
  return {normalised, float(max + std::log(sum))};
}

}  // namespace

// ---- 7.4 merge_attention ----------------------------------------------------------

TEST(merge_attention, FoldingBlocksGivesTheSoftmaxOverAllKeys) {
  Sweep sweep("merge_attention");
  const int hs = 8;
  for (int keys : {1, 2, 7, 64, 4096})
    for (int block : {1, 3, 16, 4096})
      for (float spread : {1.0f, 30.0f}) {
        if (block > keys && block != 4096) continue;
        sweep.check({0, std::size_t(keys), fmt::format("{} keys in blocks of {}, scores ~ N(0, {:g})", keys, block,
                                                       spread)},
                    [&]() -> std::string {
                      const std::vector<float> scores = normal_floats(keys, unsigned(keys + block), spread);
                      const std::vector<float> values = normal_floats(std::size_t(keys) * hs, unsigned(keys));
                      const auto [want, want_lse] = attend(scores, values, hs, 0, keys);
                      std::vector<float> out(hs, 0.0f);
                      float lse = -std::numeric_limits<float>::infinity();
                      for (int from = 0; from < keys; from += block) {
                        const auto [block_out, block_lse] = attend(scores, values, hs, from, std::min(keys, from + block));
                        merge_attention(out, lse, block_out, block_lse);
                        const int merged = std::min(keys, from + block);
                        if (lse == -std::numeric_limits<float>::infinity())
                          return fmt::format("after merging keys [0, {}), lse is still -inf: the block was not "
                                             "folded in", merged);
                        if (!std::isfinite(lse))
                          return fmt::format("after merging keys [0, {}), lse = {}: a log-sum-exp taken as "
                                             "log(exp(a) + exp(b)) overflows; take it through the max", merged, lse);
                      }
                      if (std::abs(lse - want_lse) > 1e-4f * std::max(1.0f, std::abs(want_lse)))
                        return fmt::format("lse = {}, expected {}", lse, want_lse);
                      // 4096 merges in float drift by about 1e-5: wrong weights are off by far more.
                      if (const double d = relative_difference(out, want); !(d <= 1e-4))
                        return fmt::format("the output differs from the softmax over all keys by {:.2g} (relative; "
                                           "at most 1e-4 passes): out[0] = {}, expected {}", d, out[0], want[0]);
                      return "";
                    });
      }
  sweep.report("merged = max(lse, block_lse) + log1p(exp(-|lse - block_lse|)); then out = exp(lse - merged) out + "
               "exp(block_lse - merged) block_out, and lse = merged. From lse = -inf the block's own comes out.");
}

TEST(merge_attention, RingAttentionEqualsDenseCausalAttention) {
  Sweep sweep("merge_attention");
  const AttentionShape s{.B = 2, .T = 32, .C = 16, .NH = 2};
  const std::size_t BT = std::size_t(s.B) * s.T;
  const std::vector<float> qkv = normal_floats(BT * 3 * s.C, 1), dout = normal_floats(BT * s.C, 2);
  std::vector<float> out(BT * s.C), preatt(BT * s.NH * s.T), att(preatt.size()), dqkv(qkv.size(), 0.0f),
      dpreatt(preatt.size(), 0.0f), datt(att.size(), 0.0f);
  ops::attention_forward(out.data(), preatt.data(), att.data(), qkv.data(), s.B, s.T, s.C, s.NH);
  ops::attention_backward(dqkv.data(), dpreatt.data(), datt.data(), dout.data(), qkv.data(), att.data(), s.B, s.T,
                          s.C, s.NH);
  for (const SequenceLayout layout : {SequenceLayout::contiguous, SequenceLayout::zigzag})
    for (int cp : {1, 2, 4})
      sweep.check({cp, BT * s.C, fmt::format("{} layout, cp={}", name_of(layout), cp)}, [&]() -> std::string {
        Buffers got_out(cp), got_grads(cp);
        const Observed run = run_ranks(cp, [&](Comm& c) {
          RingAttention ring(c, layout, s);
          const std::vector<float> my_qkv = shard_sequence(qkv, s.B, s.T, 3 * s.C, layout, c.rank(), cp);
          got_out[c.rank()].resize(std::size_t(s.B) * ring.rows() * s.C);
          got_grads[c.rank()].resize(my_qkv.size());
          ring.forward(my_qkv.data(), got_out[c.rank()].data());
          ring.backward(shard_sequence(dout, s.B, s.T, s.C, layout, c.rank(), cp).data(), got_grads[c.rank()].data());
        });
        if (!run.error.empty()) return run.error;
        for (int r = 0; r < cp; ++r) {
          if (const double d = relative_difference(got_out[r], shard_sequence(out, s.B, s.T, s.C, layout, r, cp));
              !(d <= 1e-5))
            return fmt::format("rank {}'s attention output differs from dense causal attention's rows by {:.2g} "
                               "(relative; at most 1e-5 passes)", r, d);
          if (const double d = relative_difference(got_grads[r], shard_sequence(dqkv, s.B, s.T, 3 * s.C, layout, r, cp));
              !(d <= 1e-5))
            return fmt::format("rank {}'s gradients of q, k and v differ from dense attention's by {:.2g} (relative; "
                               "backward uses the log-sum-exp the merges left)", r, d);
        }
        return "";
      });
  sweep.report("forward merges each K/V block into the running output and log-sum-exp as it arrives; backward "
               "recomputes each probability as exp(score - lse) from the final lse.");
}
