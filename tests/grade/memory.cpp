// Grade tests for lab 3 (memory). Each checks the formula on the cases the
// reading and the papers publish, and says which term is off.
// Run: ./labkit grade memory
#include <cmath>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "checks.h"
#include "labkit/memory.h"

using namespace labkit::memory;
using labkit::grade::Sweep;

namespace {
constexpr double GB = 1e9;
bool close(double got, double want) { return std::abs(got - want) <= 1e-9 * std::max(1.0, std::abs(want)); }
}  // namespace

// ---- 3.1 model_state_bytes --------------------------------------------------------

TEST(model_state_bytes, SixteenBytesPerParameterForMixedPrecisionAdam) {
  Sweep sweep("model_state_bytes");
  const char* parts[] = {"weights (bf16)", "gradients (bf16)", "master weights (fp32 copy)",
                         "optimizer states (Adam: m and v in fp32)"};
  const double want[] = {2, 2, 4, 8};
  for (int i = 0; i < 4; ++i)
    sweep.check({0, 0, fmt::format("one parameter, Adam, no sharding, {}", parts[i])}, [&] {
      const ModelStateBytes s = model_state_bytes(1, {}, find_optimizer("adam"), 0, 1);
      const double got[] = {s.weights, s.grads, s.master, s.optimizer};
      return close(got[i], want[i]) ? "" : fmt::format("expected {} bytes, got {}", want[i], got[i]);
    });
  sweep.report("");
}

TEST(model_state_bytes, EveryOptimizerAndPrecision) {
  Sweep sweep("model_state_bytes");
  const ModelStatePrecision pure_bf16{Precision::bf16, Precision::bf16, Precision::bf16, false};
  for (const Optimizer& o : optimizers())
    sweep.check({0, 0, fmt::format("7B, {} with bf16 states and no master copy", o.name)}, [&] {
      const ModelStateBytes s = model_state_bytes(7e9, pure_bf16, o, 0, 1);
      const double want = 7e9 * o.states * 2;
      if (close(s.optimizer, want) && close(s.master, 0)) return std::string();
      return fmt::format("optimizer states should be {} x 7B x 2 B = {:.1f} GB and master 0, got {:.1f} GB and "
                         "{:.1f} GB", o.states, want / GB, s.optimizer / GB, s.master / GB);
    });
  sweep.report("each optimizer keeps `states` values per parameter, in the optimizer-state precision.");
}

TEST(model_state_bytes, ZeroStagesShardWhatTheyShould) {
  // The ZeRO paper's Figure 1: 7.5B parameters on 64 GPUs.
  Sweep sweep("model_state_bytes");
  const double want[] = {120, 31.4, 16.6, 1.9};
  const char* shards[] = {"stage 0 shards nothing", "stage 1 shards the optimizer states and the master weights",
                          "stage 2 also shards the gradients", "stage 3 also shards the weights"};
  for (int stage = 0; stage <= 3; ++stage)
    sweep.check({0, 0, fmt::format("7.5B, Adam, ZeRO-{} over 64 GPUs", stage)}, [&] {
      const double got = model_state_bytes(7.5e9, {}, find_optimizer("adam"), stage, 64).total() / GB;
      if (std::abs(got - want[stage]) <= 0.05) return std::string();
      return fmt::format("expected {} GB per GPU, got {:.2f} GB ({})", want[stage], got, shards[stage]);
    });
  sweep.report("a sharded part is divided by the number of GPUs; the rest is held whole by every GPU.");
}

// ---- 3.2 activation_bytes_per_layer -----------------------------------------------

TEST(activation_bytes_per_layer, GPT3WithoutParallelism) {
  // s 2048, b 1, h 12288, a 96: sbh(34 + 5as/h) per layer; 96 layers make the long guide's ~275 GB.
  Sweep sweep("activation_bytes_per_layer");
  sweep.check({0, 0, "GPT-3 layer, s 2048, b 1"}, [&] {
    const double got = activation_bytes_per_layer({2048, 1, 12288, 96});
    const double want = 2048.0 * 12288 * (34 + 5.0 * 96 * 2048 / 12288);
    return close(got, want) ? "" : fmt::format("expected {:.3f} GB, got {:.3f} GB", want / GB, got / GB);
  });
  sweep.report("sbh x (34 + 5as/h), bytes with 16-bit activations.");
}

TEST(activation_bytes_per_layer, TensorSequenceParallelAndRecomputation) {
  Sweep sweep("activation_bytes_per_layer");
  const double sbh = 2048.0 * 12288, scores = 5.0 * 96 * 2048 / (12288 * 8);
  const struct { bool sp; Recompute r; double want; const char* name; } cases[] = {
      {false, Recompute::none, sbh * (10 + 3 + scores), "TP 8: sbh(10 + 24/t + 5as/(ht))"},
      {true, Recompute::none, sbh * (34.0 / 8 + scores), "TP 8 + SP: sbh(34/t + 5as/(ht))"},
      {false, Recompute::selective, sbh * 13, "TP 8, selective: sbh(10 + 24/t)"},
      {true, Recompute::selective, sbh * 34 / 8, "TP 8 + SP, selective: sbh 34/t"},
      {false, Recompute::full, 2 * sbh, "TP 8, full recomputation: 2sbh"},
      {true, Recompute::full, 2 * sbh / 8, "TP 8 + SP, full recomputation: 2sbh/t"}};
  for (auto c : cases)
    sweep.check({0, 0, fmt::format("GPT-3 layer, {}", c.name)}, [&] {
      const double got = activation_bytes_per_layer({2048, 1, 12288, 96, 8, c.sp, c.r});
      return close(got, c.want) ? "" : fmt::format("expected {:.3f} GB, got {:.3f} GB", c.want / GB, got / GB);
    });
  sweep.report("tensor parallelism divides the 24 sbh of the matmul inputs and the scores by t; sequence "
               "parallelism also divides the remaining 10 sbh.");
}

// ---- 3.3 kv_cache_bytes -----------------------------------------------------------

TEST(kv_cache_bytes, GroupedQueryAndMultiHeadAttention) {
  Sweep sweep("kv_cache_bytes");
  const struct { const char* name; KvShape shape; double want; } cases[] = {
      {"LLaMA-2 70B (8 KV heads), batch 32, 2048 tokens, bf16", {32, 2048, 80, 8, 128}, 2.0 * 32 * 2048 * 80 * 8 * 128 * 2},
      {"LLaMA-2 7B (32 heads), batch 1, 4096 tokens, bf16", {1, 4096, 32, 32, 128}, 2.0 * 4096 * 32 * 32 * 128 * 2},
      {"LLaMA-2 7B, batch 8, 1024 tokens, int8", {8, 1024, 32, 32, 128, Precision::int8}, 2.0 * 8 * 1024 * 32 * 32 * 128}};
  for (auto c : cases)
    sweep.check({0, 0, c.name}, [&] {
      const double got = kv_cache_bytes(c.shape);
      return close(got, c.want) ? "" : fmt::format("expected {:.3f} GB, got {:.3f} GB", c.want / GB, got / GB);
    });
  sweep.report("2 (K and V) x batch x seq x layers x kv_heads x head_dim x bytes per element.");
}
