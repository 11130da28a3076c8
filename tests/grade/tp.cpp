// Grade tests for lab 7 (tensor, sequence and context parallelism). Each
// exercise's layer or collective against the dense computation on 1 to 4 (or
// 8) ranks, with and without sequence parallelism, and the collectives each
// rank called with their bytes; the tiny GPT, whose layers are the learner's,
// against the dense model; the online-softmax merge on rows split into blocks
// every way, large scores included, and ring attention built on it against
// dense causal attention.
// Run: ./labkit grade tp
#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <random>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "checks.h"
#include "labkit/gpt.h"
#include "labkit/tensor_parallel.h"
#include "labkit/ops.h"
#include "labkit/parallel/equivalence.h"
#include "labkit/parallel/ring_attention.h"
#include "labkit/parallel/tensor_parallel_gpt.h"

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

// ---- shared: the tiny GPT, Linear layers over host buffers ------------------------

namespace {

// Runs `check` on t ranks, each returning what is wrong with its results ("" if
// nothing): the run (for its trace) and what the run threw or the first problem.
std::pair<Observed, std::string> run_checked(int t, const std::function<std::string(Comm&)>& check) {
  std::vector<std::string> wrong(t);
  Observed run = run_ranks(t, [&](Comm& c) { wrong[c.rank()] = check(c); });
  std::string problem = run.error;
  for (const std::string& w : wrong)
    if (problem.empty()) problem = w;
  return {std::move(run), problem};
}

// One forward and backward of the tiny GPT on t tensor-parallel ranks against
// the dense model: what is wrong, or "". Every parameter is nudged off its
// initial value first, so that no bias is zero (as GPT-2 initialises them) and
// one added t times shows. On the fenced device the model's memory is the
// host's to touch only through the device (as a GPU's is): the same checks.
std::string check_tiny_gpt(int t, bool sp, DeviceKind where = DeviceKind::cpu) {
  const GptConfig config = gpt_preset("tiny-gpt", 30);
  const int B = 2, T = 16;
  std::vector<int> x(B * T), y(B * T);
  for (int i = 0; i < B * T; ++i) x[i] = (i * 7 + 3) % 30, y[i] = (i * 11 + 5) % 30;
  Gpt dense(config, 5);
  float* weights = dense.parameters().data();
  for (std::size_t i = 0; i < dense.parameter_count(); ++i) weights[i] += 0.05f * std::sin(float(i));
  const float dense_loss = dense.forward(x, y, B, T);
  dense.zero_grad();
  dense.backward();
  const std::vector<float> dense_grads = dense.gradients().to_host();
  Gpt on_device(config, 5, where);
  on_device.device().copy_from_host(on_device.parameters().data(), weights, dense.parameters().bytes());
  return run_checked(t, [&](Comm& c) -> std::string {
           TensorParallelGpt model(c, on_device, sp);
           const float loss = model.forward(x, y, B, T);
           model.zero_grad();
           model.backward();
           const double d = relative_difference(model.gradients().to_host(), model.slice_of_dense(dense_grads));
           if (!(std::abs(loss - dense_loss) <= 1e-5f * std::abs(dense_loss)))
             return fmt::format("rank {}'s loss {} differs from the dense model's {}", c.rank(), loss, dense_loss);
           if (!(d <= 1e-5))
             return fmt::format("rank {}'s gradients differ from its slice of the dense model's by {:.2g} (relative; "
                                "at most 1e-5 passes)", c.rank(), d);
           return "";
         }).second;
}

void sweep_tiny_gpt(const std::string& exercise, std::initializer_list<bool> sps, const std::string& hint) {
  Sweep sweep(exercise);
  for (const bool sp : sps)
    for (int t : {1, 2, 4})
      sweep.check({t, 0, fmt::format("tiny GPT, t={}{}", t, sp ? ", sequence parallel" : "")},
                  [&] { return check_tiny_gpt(t, sp); });
  for (const bool sp : sps)  // where a GPU would hold the buffers: host code reading them is stopped
    sweep.check({2, 0, fmt::format("tiny GPT, t=2{}, on the fenced device", sp ? ", sequence parallel" : "")},
                [&] { return check_tiny_gpt(2, sp, DeviceKind::fenced); });
  sweep.report(hint);
}

// A Linear over host buffers: weight (out x in) then bias, and their gradients.
struct HostLinear {
  std::vector<float> values, grads;
  Linear layer;
  HostLinear(const std::vector<float>& weight, const std::vector<float>& bias, int in, int out)
      : values(weight), grads(weight.size() + bias.size(), 0.0f), layer([&] {
          values.insert(values.end(), bias.begin(), bias.end());
          Arena arena(values.data(), grads.data());
          return Linear(arena, in, out);
        }()) {}
  std::vector<float> weight_grad() const { return {grads.begin(), grads.begin() + std::ptrdiff_t(layer.in) * layer.out}; }
  std::vector<float> bias_grad() const { return {grads.begin() + std::ptrdiff_t(layer.in) * layer.out, grads.end()}; }
};

// Rank r's positions [r T/t, (r+1) T/t) of each of B sequences of a (B T, width) buffer.
std::vector<float> rows_of(const std::vector<float>& whole, int B, int T, int width, int t, int r) {
  std::vector<float> out;
  const int shard = T / t;
  for (int b = 0; b < B; ++b) {
    const auto first = whole.begin() + (std::ptrdiff_t(b) * T + std::ptrdiff_t(r) * shard) * width;
    out.insert(out.end(), first, first + std::ptrdiff_t(shard) * width);
  }
  return out;
}

// Columns [first, first + n) of each row of a (rows, width) buffer.
std::vector<float> columns_of(const std::vector<float>& m, int width, int first, int n) {
  std::vector<float> out;
  for (std::size_t row = 0; row < m.size() / std::size_t(width); ++row)
    out.insert(out.end(), m.begin() + std::ptrdiff_t(row * width + first), m.begin() + std::ptrdiff_t(row * width + first + n));
  return out;
}

std::string collectives_were(const Observed& run, int t, const std::vector<std::pair<std::string, std::uint64_t>>& want) {
  for (int r = 0; r < t; ++r) {
    std::vector<std::pair<std::string, std::uint64_t>> got;
    for (const TraceEvent& e : run.trace->tracks()[r].events)
      if (e.kind == TraceEvent::Kind::collective) got.emplace_back(e.name, e.bytes);
    const auto show = [](const std::vector<std::pair<std::string, std::uint64_t>>& v) {
      std::string out;
      for (const auto& [name, bytes] : v) out += fmt::format("{}{} of {} bytes", out.empty() ? "" : ", ", name, bytes);
      return out.empty() ? std::string("none") : out;
    };
    if (got != want) return fmt::format("rank {}'s collectives: {}; expected {}", r, show(got), show(want));
  }
  return "";
}

std::string compare(const std::string& what, int r, const std::vector<float>& got, const std::vector<float>& want) {
  if (got.size() != want.size()) return fmt::format("rank {}'s {}: {} values, expected {}", r, what, got.size(), want.size());
  const double d = relative_difference(got, want);
  return d <= 1e-5 ? "" : fmt::format("rank {}'s {}: off the dense layer's by {:.2g} (relative; at most 1e-5 passes)",
                                      r, what, d);
}

// The dense layer's forward and backward on (N, in): what each rank's slice must equal.
struct DenseLinear {
  std::vector<float> x, weight, bias, y, dy, dx, dweight, dbias;
  DenseLinear(int N, int in, int out)
      : x(normal_floats(std::size_t(N) * in, 11)), weight(normal_floats(std::size_t(out) * in, 12)),
        bias(normal_floats(out, 13)), y(std::size_t(N) * out), dy(normal_floats(std::size_t(N) * out, 14)),
        dx(x.size(), 0.0f), dweight(weight.size(), 0.0f), dbias(bias.size(), 0.0f) {
    ops::matmul_forward(y.data(), x.data(), weight.data(), bias.data(), N, in, out);
    ops::matmul_backward(dx.data(), dweight.data(), dbias.data(), dy.data(), x.data(), weight.data(), N, in, out);
  }
};

}  // namespace

// ---- 7.1 column_parallel_forward and column_parallel_backward --------------------

TEST(column_parallel_linear, EachRankComputesItsOutputFeaturesAndSumsTheInputGradient) {
  Sweep sweep("column_parallel_linear");
  const int B = 2, T = 12, C = 5, OC = 12, N = B * T;
  const DenseLinear dense(N, C, OC);
  const std::uint64_t activations = std::uint64_t(N) * C * sizeof(float);
  for (const bool sp : {false, true})
    for (int t : {1, 2, 3, 4})
      sweep.check({t, std::size_t(N) * C, fmt::format("t={}{}", t, sp ? ", sequence parallel" : "")},
                  [&]() -> std::string {
                    const auto [run, problem] = run_checked(t, [&](Comm& c) -> std::string {
                      const int r = c.rank(), features = OC / t;
                      HostLinear mine(column_shard(dense.weight, OC, C, t, r),
                                      {dense.bias.begin() + r * features, dense.bias.begin() + (r + 1) * features}, C,
                                      features);
                      std::vector<float> scratch(std::size_t(N) * C), whole = dense.x, out(std::size_t(N) * features);
                      std::vector<float> rows = sp ? rows_of(dense.x, B, T, C, t, r) : whole;
                      if (sp) std::fill(whole.begin(), whole.end(), -1.0f);
                      const TensorParallelGroup g{c, device(DeviceKind::cpu), B, T, sp, view_of(scratch)};
                      column_parallel_forward(g, mine.layer, out.data(), sp ? rows.data() : whole.data(), whole.data());
                      std::vector<float> dout = columns_of(dense.dy, OC, r * features, features);
                      std::vector<float> dwhole(std::size_t(N) * C, 0.0f), drows(sp ? dwhole.size() / t : 0);
                      // Sequence parallel: whole is a scratch buffer that other layers used in between.
                      if (sp) std::fill(whole.begin(), whole.end(), -1.0f);
                      column_parallel_backward(g, mine.layer, dwhole.data(), sp ? drows.data() : dwhole.data(),
                                               dout.data(), sp ? rows.data() : whole.data(), whole.data());
                      for (const std::string& w :
                           {compare("output features", r, out, columns_of(dense.y, OC, r * features, features)),
                            compare("weight gradient", r, mine.weight_grad(), column_shard(dense.dweight, OC, C, t, r)),
                            compare("bias gradient", r, mine.bias_grad(),
                                    {dense.dbias.begin() + r * features, dense.dbias.begin() + (r + 1) * features}),
                            compare(sp ? "rows of the input gradient" : "input gradient", r, sp ? drows : dwhole,
                                    sp ? rows_of(dense.dx, B, T, C, t, r) : dense.dx)})
                        if (!w.empty()) return w;
                      return "";
                    });
                    if (!problem.empty()) return problem;
                    return collectives_were(run, t, sp ? std::vector<std::pair<std::string, std::uint64_t>>{
                                                             {"all_gather", activations}, {"all_gather", activations},
                                                             {"reduce_scatter", activations}}
                                                       : std::vector<std::pair<std::string, std::uint64_t>>{
                                                             {"all_reduce", activations}});
                  });
  sweep.report("forward needs no collective (with sequence parallelism, the all-gather of the rows first); backward, "
               "dwhole = dout W_r holds only this rank's features' share of x's gradient: one allreduce (sum) of it, "
               "or with sequence parallelism the rows gathered into whole again first and reduce_scatter_rows "
               "into the rows after.");
}

TEST(column_parallel_linear, TheTinyGptEqualsTheDenseModel) {
  sweep_tiny_gpt("column_parallel_linear", {false, true},
                 "the model's QKV and fc are your column-parallel layers; every gradient depends on their backward's sum.");
}

// ---- 7.2 row_parallel_forward ------------------------------------------------------

TEST(row_parallel_linear, ThePartialSumsAddUpToTheDenseOutputWithTheBiasOnce) {
  Sweep sweep("row_parallel_linear");
  const int B = 2, T = 12, IC = 12, OC = 5, N = B * T;
  const DenseLinear dense(N, IC, OC);
  const std::uint64_t activations = std::uint64_t(N) * OC * sizeof(float);
  for (const bool sp : {false, true})
    for (int t : {1, 2, 3, 4})
      sweep.check({t, std::size_t(N) * OC, fmt::format("t={}{}", t, sp ? ", sequence parallel" : "")},
                  [&]() -> std::string {
                    const auto [run, problem] = run_checked(t, [&](Comm& c) -> std::string {
                      const int r = c.rank(), features = IC / t;
                      HostLinear mine(row_shard(dense.weight, OC, IC, t, r), dense.bias, features, OC);
                      const std::vector<float> input = columns_of(dense.x, IC, r * features, features);
                      std::vector<float> scratch(std::size_t(N) * OC), partial(std::size_t(N) * OC),
                          rows(sp ? partial.size() / t : 0);
                      const TensorParallelGroup g{c, device(DeviceKind::cpu), B, T, sp, view_of(scratch)};
                      row_parallel_forward(g, mine.layer, partial.data(), sp ? rows.data() : partial.data(),
                                           input.data());
                      return compare(sp ? "rows of the output" : "output", r, sp ? rows : partial,
                                     sp ? rows_of(dense.y, B, T, OC, t, r) : dense.y);
                    });
                    if (!problem.empty())
                      return problem + (t > 1 && run.error.empty() ? " (is the bias added on one rank only?)" : "");
                    return collectives_were(run, t, {{sp ? "reduce_scatter" : "all_reduce", activations}});
                  });
  sweep.report("partial = input_r W_r^T with the bias on rank 0 alone, then one allreduce (sum) of it, or "
               "reduce_scatter_rows into the rows.");
}

TEST(row_parallel_linear, TheTinyGptEqualsTheDenseModel) {
  sweep_tiny_gpt("row_parallel_linear", {false, true},
                 "the model's attention projection and MLP proj are your row-parallel layers.");
}

// ---- 7.3 all_gather_sequence and reduce_scatter_sequence ------------------------

namespace {

// Element c of position p of sequence b, as rank r holds it: distinct everywhere.
float element(int r, int b, int p, int c) { return float(r * 100000 + b * 1000 + p * 10 + c % 10); }

}  // namespace

TEST(sequence_parallel_collectives, AllGatherPutsEveryRanksRowsInPlace) {
  Sweep sweep("sequence_parallel_collectives");
  for (int t : {1, 2, 3, 4, 8})
    for (int B : {1, 3})
      for (int C : {1, 5}) {
        const int T = 2 * t;
        sweep.check({t, std::size_t(B) * T * C, fmt::format("t={}, B={}, T={}, C={}", t, B, T, C)},
                    [&]() -> std::string {
                      Buffers whole(t);
                      const Observed run = run_ranks(t, [&](Comm& c) {
                        const int r = c.rank(), shard = T / t;
                        std::vector<float> rows;
                        for (int b = 0; b < B; ++b)
                          for (int p = r * shard; p < (r + 1) * shard; ++p)
                            for (int ch = 0; ch < C; ++ch) rows.push_back(element(0, b, p, ch));
                        std::vector<float> scratch(std::size_t(B) * T * C);
                        whole[r].assign(scratch.size(), -1.0f);
                        all_gather_sequence(c, view_of(rows), view_of(whole[r]), view_of(scratch), B, T, C);
                      });
                      if (!run.error.empty()) return run.error;
                      for (int r = 0; r < t; ++r)
                        for (int b = 0; b < B; ++b)
                          for (int p = 0; p < T; ++p)
                            for (int ch = 0; ch < C; ++ch) {
                              const float got = whole[r][(std::size_t(b) * T + p) * C + ch];
                              if (got != element(0, b, p, ch))
                                return fmt::format("rank {}: sequence {}, position {}, channel {}: expected {} "
                                                   "(from rank {}), got {}", r, b, p, ch, element(0, b, p, ch),
                                                   p / (T / t), got);
                            }
                      return collectives_were(run, t, {{"all_gather", std::uint64_t(B) * T * C * sizeof(float)}});
                    });
      }
  sweep.report("after the all-gather, scratch holds rank r's (B, T/t, C) at r x B T/t C; rank r's run of sequence b "
               "goes to sequence b's positions [r T/t, (r+1) T/t).");
}

TEST(sequence_parallel_collectives, ReduceScatterSumsEachRanksRows) {
  Sweep sweep("sequence_parallel_collectives");
  for (int t : {1, 2, 3, 4, 8})
    for (int B : {1, 3})
      for (int C : {1, 5}) {
        const int T = 2 * t;
        sweep.check({t, std::size_t(B) * T * C, fmt::format("t={}, B={}, T={}, C={}", t, B, T, C)},
                    [&]() -> std::string {
                      Buffers rows(t);
                      const Observed run = run_ranks(t, [&](Comm& c) {
                        const int r = c.rank();
                        std::vector<float> whole, scratch(std::size_t(B) * T * C);
                        for (int b = 0; b < B; ++b)
                          for (int p = 0; p < T; ++p)
                            for (int ch = 0; ch < C; ++ch) whole.push_back(element(r, b, p, ch));
                        rows[r].assign(whole.size() / t, -1.0f);
                        reduce_scatter_sequence(c, view_of(whole), view_of(rows[r]), view_of(scratch), B, T, C);
                      });
                      if (!run.error.empty()) return run.error;
                      const int shard = T / t;
                      for (int r = 0; r < t; ++r)
                        for (int b = 0; b < B; ++b)
                          for (int i = 0; i < shard; ++i)
                            for (int ch = 0; ch < C; ++ch) {
                              float want = 0;
                              for (int from = 0; from < t; ++from) want += element(from, b, r * shard + i, ch);
                              const float got = rows[r][(std::size_t(b) * shard + i) * C + ch];
                              if (got != want)
                                return fmt::format("rank {}: its row {} of sequence {} (position {}), channel {}: "
                                                   "expected the ranks' sum {}, got {}", r, i, b, r * shard + i, ch,
                                                   want, got);
                            }
                      return collectives_were(run, t, {{"reduce_scatter", std::uint64_t(B) * T * C * sizeof(float)}});
                    });
      }
  sweep.report("put sequence b's positions [r T/t, (r+1) T/t) at r x B T/t C + b T/t C in scratch, for every r; "
               "then one reduce-scatter (sum) of scratch into rows.");
}

TEST(sequence_parallel_collectives, TheTinyGptWithSequenceParallelismEqualsTheDenseModel) {
  sweep_tiny_gpt("sequence_parallel_collectives", {true},
                 "the model calls your pair at every f and g: forward all_gather_sequence before each column-parallel "
                 "layer and reduce_scatter_sequence after each row-parallel one, and the reverse in backward.");
}

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
