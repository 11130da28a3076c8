// The memory estimator against its sources: published parameter counts, the
// course readings' tables (16N, quick reference, optimizers, ZeRO stages, the 7B
// step timeline; book/99-references.md), the ZeRO paper's Figure 1, and
// Korthikanti et al.'s activation formulas.
#include <algorithm>
#include <cmath>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "labkit/error.h"
#include "labkit/memory.h"

using namespace labkit::memory;

namespace {
constexpr double GB = 1e9;
double total(std::string_view model) { return count_parameters(model_preset(model)).total; }
const Optimizer& adam = find_optimizer("adam");
}  // namespace

TEST(Parameters, MatchThePublishedCounts) {
  // Exact: the models' released checkpoints (Hugging Face) hold these many.
  EXPECT_EQ(total("gpt2"), 124439808);
  EXPECT_EQ(total("gpt2-medium"), 354823168);
  EXPECT_EQ(total("gpt2-large"), 774030080);
  EXPECT_EQ(total("gpt2-xl"), 1557611200);
  EXPECT_EQ(total("llama2-7b"), 6738415616);
  EXPECT_EQ(total("llama2-13b"), 13015864320);
  EXPECT_EQ(total("llama2-70b"), 68976648192);
  // Rounded in their papers: 175B; 46.7B total and 12.9B active; 671B and 37B.
  EXPECT_NEAR(total("gpt3-175b") / 175e9, 1, 0.005);
  EXPECT_NEAR(total("mixtral-8x7b") / 46.7e9, 1, 0.001);
  EXPECT_NEAR(count_parameters(model_preset("mixtral-8x7b")).active / 12.9e9, 1, 0.002);
  EXPECT_NEAR(total("deepseek-v3") / 671e9, 1, 0.001);
  EXPECT_NEAR(count_parameters(model_preset("deepseek-v3")).active / 37e9, 1, 0.02);
  EXPECT_THROW(model_preset("llama9"), std::invalid_argument);
}

TEST(Parameters, LayerTensorsAreTheLayersWeights) {
  auto counts = [](std::string_view model, int layer) {
    std::vector<std::pair<std::string_view, double>> out;
    for (const WeightTensor& t : layer_tensors(model_preset(model), layer)) out.emplace_back(t.name, t.count);
    return out;
  };
  using Counts = std::vector<std::pair<std::string_view, double>>;
  // LLaMA-2 7B: RMSNorm gains, q k v o of 4096 x 4096, SwiGLU's 4096 x 11008 three.
  EXPECT_EQ(counts("llama2-7b", 0), (Counts{{"norm.attention", 4096}, {"q", 4096.0 * 4096}, {"k", 4096.0 * 4096},
                                            {"v", 4096.0 * 4096}, {"o", 4096.0 * 4096}, {"norm.ffn", 4096},
                                            {"ffn.gate", 4096.0 * 11008}, {"ffn.up", 4096.0 * 11008},
                                            {"ffn.down", 11008.0 * 4096}}));
  // LLaMA-2 70B's GQA: 8 KV heads of 128, so k and v are 8192 x 1024.
  EXPECT_EQ(counts("llama2-70b", 0)[2], (std::pair<std::string_view, double>{"k", 8192.0 * 1024}));
  // GPT-2: LayerNorm weight and bias, biases on every projection.
  EXPECT_EQ(counts("gpt2", 0)[1], (std::pair<std::string_view, double>{"q", 768.0 * 768 + 768}));
  // Mixtral: a router and 8 experts of three matrices each, all routed.
  const std::vector<WeightTensor> mixtral = layer_tensors(model_preset("mixtral-8x7b"), 0);
  EXPECT_EQ(mixtral.size(), 6u + 1 + 8 * 3);
  EXPECT_EQ(std::count_if(mixtral.begin(), mixtral.end(), [](const WeightTensor& t) { return t.routed; }), 24);
}

TEST(Precision, BytesPerElementAsTheReadingsTable) {
  EXPECT_EQ(bytes_per_element(parse_precision("fp32")), 4);
  EXPECT_EQ(bytes_per_element(parse_precision("bf16")), 2);
  EXPECT_EQ(bytes_per_element(parse_precision("fp16")), 2);
  EXPECT_EQ(bytes_per_element(parse_precision("fp8-e4m3")), 1);
  EXPECT_EQ(bytes_per_element(parse_precision("fp8-e5m2")), 1);
  EXPECT_EQ(bytes_per_element(parse_precision("int8")), 1);
  EXPECT_EQ(bytes_per_element(parse_precision("int4")), 0.5);
  // "For a 7B parameter model, that's 28GB in FP32, 14GB in BF16, 7GB in Int8, and 3.5GB in Int4."
  EXPECT_EQ(7e9 * bytes_per_element(Precision::int4) / GB, 3.5);
}

TEST(ModelState, SixteenBytesPerParameterFallsOutOfMixedPrecisionAdam) {
  const ModelStateBytes s = model_state_bytes(1, {}, adam, 0, 1);
  EXPECT_EQ(s.weights, 2);
  EXPECT_EQ(s.grads, 2);
  EXPECT_EQ(s.master, 4);
  EXPECT_EQ(s.optimizer, 8);
  EXPECT_EQ(s.total(), 16);
}

TEST(ModelState, TheReadingsSixteenNTable) {
  // Model, 16N in GB, A100 80GB GPUs needed (the long guide, section 1.2 "The Memory Wall").
  const struct { double params, gb; int gpus; } rows[] = {
      {7e9, 112, 2}, {13e9, 208, 3}, {65e9, 1040, 13}, {175e9, 2800, 35}, {540e9, 8640, 108}};
  for (auto row : rows) {
    const double bytes = model_state_bytes(row.params, {}, adam, 0, 1).total();
    EXPECT_DOUBLE_EQ(bytes / GB, row.gb);
    EXPECT_EQ(int(std::ceil(bytes / (80 * GB))), row.gpus);
  }
}

TEST(ModelState, TheOptimizerTable) {
  const struct { const char* name; double states; } rows[] = {
      {"sgd", 0},  {"momentum", 1}, {"nesterov", 1}, {"adagrad", 1}, {"rmsprop", 1},
      {"adam", 2}, {"adamw", 2},    {"adafactor", 0.5}, {"lamb", 2}, {"lion", 1}, {"nadam", 2},
      {"amsgrad", 3},  // m, v and max(v): "Chapter 1" lists three tensors but prints 2x
      {"adabelief", 2}};
  for (auto row : rows) EXPECT_EQ(find_optimizer(row.name).states, row.states) << row.name;
  EXPECT_THROW(find_optimizer("adamax9"), std::invalid_argument);
}

TEST(ModelState, ZeroStagesFor7BOnEightRanks) {
  // (2 + 2 + 12) Psi sharded stage by stage, Psi = 7B, 8 ranks. The long
  // guide (section 8.2) prints 140, 42, 30 and 18 GB: it counts 20 bytes per
  // parameter and shards 16N, not 12N, of optimizer state. The formulas it also gives
  // (4N + 12N/P, 2N + 14N/P, 16N/P) yield these:
  const double psi = 7e9;
  EXPECT_DOUBLE_EQ(model_state_bytes(psi, {}, adam, 0, 8).total() / GB, 112);
  EXPECT_DOUBLE_EQ(model_state_bytes(psi, {}, adam, 1, 8).total() / GB, 4 * 7 + 12 * 7.0 / 8);
  EXPECT_DOUBLE_EQ(model_state_bytes(psi, {}, adam, 2, 8).total() / GB, 2 * 7 + 14 * 7.0 / 8);
  EXPECT_DOUBLE_EQ(model_state_bytes(psi, {}, adam, 3, 8).total() / GB, 16 * 7.0 / 8);
}

TEST(ModelState, ZeroPaperFigureOne) {
  // Rajbhandari et al. 2020, Figure 1: Psi = 7.5B, Nd = 64, K = 12.
  const double psi = 7.5e9;
  const double expected[] = {120, 31.4, 16.6, 1.9};
  for (int stage = 0; stage <= 3; ++stage)
    EXPECT_NEAR(model_state_bytes(psi, {}, adam, stage, 64).total() / GB, expected[stage], 0.05) << "stage " << stage;
}

TEST(Activations, KorthikantiFormulas) {
  // GPT-3 175B, s = 2048, b = 1: sbh(34 + 5as/h) per layer; x 96 layers is the
  // long guide's "~275 GB per sample" (section 1.2).
  ActivationShape gpt3{2048, 1, 12288, 96};
  const double sbh = 2048.0 * 12288;
  EXPECT_DOUBLE_EQ(activation_bytes_per_layer(gpt3), sbh * (34 + 5.0 * 96 * 2048 / 12288));
  EXPECT_NEAR(96 * activation_bytes_per_layer(gpt3) / GB, 275, 1);
  gpt3.tp = 8;
  EXPECT_DOUBLE_EQ(activation_bytes_per_layer(gpt3), sbh * (10 + 24.0 / 8 + 5.0 * 96 * 2048 / (12288 * 8)));
  gpt3.sequence_parallel = true;
  EXPECT_DOUBLE_EQ(activation_bytes_per_layer(gpt3), sbh * (34.0 / 8 + 5.0 * 96 * 2048 / (12288 * 8)));
  gpt3.recompute = Recompute::selective;
  EXPECT_DOUBLE_EQ(activation_bytes_per_layer(gpt3), sbh * 34 / 8);
  gpt3.recompute = Recompute::full;
  EXPECT_DOUBLE_EQ(activation_bytes_per_layer(gpt3), 2 * sbh / 8);
  // Their configurations (Table 3: 22B, 175B, 530B, 1T, all t = 8): sequence
  // parallelism with selective recomputation needs about 5x less than TP alone
  // (their abstract: "by 5x").
  const struct { double h, a, b; } configs[] = {{6144, 64, 4}, {12288, 96, 1}, {20480, 128, 1}, {25600, 160, 1}};
  for (auto c : configs) {
    const double tp_only = activation_bytes_per_layer({2048, c.b, c.h, c.a, 8});
    const double sp_selective = activation_bytes_per_layer({2048, c.b, c.h, c.a, 8, true, Recompute::selective});
    EXPECT_GT(tp_only / sp_selective, 4.9) << "h " << c.h;
    EXPECT_LT(tp_only / sp_selective, 7) << "h " << c.h;
  }
}

TEST(KvCache, GroupedQueryAttentionOnLlama2_70B) {
  // "Chapter 1": 70B, batch 32, 2048 tokens: "the KV cache adds 20-40 GB".
  const Architecture m = model_preset("llama2-70b");
  const double bytes = kv_cache_bytes({32, 2048, double(m.layers), double(m.kv_heads), double(m.head_dim())});
  EXPECT_DOUBLE_EQ(bytes, 2.0 * 32 * 2048 * 80 * 8 * 128 * 2);
  EXPECT_GT(bytes / GB, 20);
  EXPECT_LT(bytes / GB, 40);
}

TEST(Estimate, TheReadingsQuickReferenceTableFor1B) {
  // 1B: FP32 weights 4 GB, BF16 2 GB, training with BF16 + Adam "~8 GB" (2 + 2 + 4 bytes).
  const ModelStatePrecision bf16_adam{Precision::bf16, Precision::bf16, Precision::bf16, false};
  EXPECT_EQ(1e9 * bytes_per_element(Precision::fp32) / GB, 4);
  EXPECT_EQ(1e9 * bytes_per_element(Precision::bf16) / GB, 2);
  EXPECT_EQ(model_state_bytes(1e9, bf16_adam, adam, 0, 1).total() / GB, 8);
}

TEST(Estimate, TheReadingsQuickReferenceTable) {
  // Training with BF16 + Adam, no fp32 copies (2 + 2 + 4 bytes), one 2048-token
  // sequence with selective recomputation; inference in BF16 with a few sequences.
  const struct { const char* model; double lo, hi, infer_lo, infer_hi, batch; } rows[] = {
      {"llama2-7b", 60, 70, 14, 20, 4}, {"llama2-13b", 110, 130, 26, 35, 4}, {"llama2-70b", 600, 700, 140, 180, 32}};
  for (auto row : rows) {
    Plan train;
    train.state = {Precision::bf16, Precision::bf16, Precision::bf16, false};
    train.optimizer = "adam";
    train.recompute = Recompute::selective;
    const Breakdown b = estimate(model_preset(row.model), train, gpu_preset("h100-80g"));
    double base = 0;
    for (const Line& l : b.lines) base += l.overhead ? 0 : l.bytes;
    EXPECT_GE(base / GB, row.lo * 0.99) << row.model;  // "70B" rounds 69.0B up
    EXPECT_LE(base / GB, row.hi) << row.model;
    Plan serve;
    serve.training = false;
    serve.batch = row.batch;
    const Breakdown i = estimate(model_preset(row.model), serve, gpu_preset("h100-80g"));
    EXPECT_GE((i.lines[0].bytes + i.lines[1].bytes) / GB, row.infer_lo) << row.model;
    EXPECT_LE((i.lines[0].bytes + i.lines[1].bytes) / GB, row.infer_hi) << row.model;
  }
}

TEST(Estimate, TheReadings7BStepTimelineInTheOrderAStepAllocates) {
  // A round 7B: weights 14 GB, Adam states 28 GB (bf16 m and v, no fp32 copy),
  // activations 12 GB, gradients 14 GB (the training step timeline of
  // "Chapter 1: Introduction to Modern Distributed AI", which draws 54, 68 and
  // 56 GB: the gradients on top of every activation). With nothing to keep
  // them between steps, PyTorch frees the gradients and backward makes them as
  // the activations go: the peak is where backward ends.
  Plan p;
  p.params = 7e9;
  p.state = {Precision::bf16, Precision::bf16, Precision::bf16, false};
  p.optimizer = "adam";
  p.activations = 12 * GB;
  const std::vector<Phase> t = step_timeline(model_preset("llama2-7b"), p);
  ASSERT_EQ(t.size(), 4u);
  EXPECT_DOUBLE_EQ(t[0].bytes / GB, 42);  // start of step
  EXPECT_DOUBLE_EQ(t[1].bytes / GB, 54);  // forward
  EXPECT_DOUBLE_EQ(t[2].bytes / GB, 56);  // backward ends: the peak
  EXPECT_DOUBLE_EQ(t[3].bytes / GB, 56);  // optimizer step
  EXPECT_DOUBLE_EQ(peak_of(t) / GB, 56);
  // DDP's buckets keep the gradients from the start: the peak is the end of forward, the reading's 68.
  p.dp = 8;
  EXPECT_DOUBLE_EQ(peak_of(step_timeline(model_preset("llama2-7b"), p)) / GB, 68);
}

TEST(Estimate, TheLossPeaksAtTheStartOfBackward) {
  // GPT-2 at batch 8 x 1024 in fp32 with the loss's buffers: two more b s V fp32 buffers at backward's start.
  Plan p;
  p.precision = Precision::fp32;
  p.state = {Precision::fp32, Precision::fp32, Precision::fp32, false};
  p.activation_precision = ActivationPrecision::fp32;
  p.dropout = false;
  p.micro_batch = 8;
  p.seq = 1024;
  p.loss_buffers = true;
  const std::vector<Phase> t = step_timeline(model_preset("gpt2"), p);
  ASSERT_EQ(t[2].name, "backward starts");
  EXPECT_DOUBLE_EQ(t[2].bytes - t[1].bytes, 2.0 * 8 * 1024 * 50257 * 4);
  EXPECT_DOUBLE_EQ(peak_of(t), t[2].bytes);
}

TEST(Activations, PyTorchsGpt2BlockByPrecision) {
  // What autograd keeps for a GPT-2 block without dropout: 64 sbh bytes in fp32 with eager attention's
  // fp32 softmax (4 a s^2 b), 36 sbh under autocast with FlashAttention (and its logsumexp).
  Architecture m = model_preset("gpt2");
  m.dropout = false;
  const double s = 1024, b = 8, h = 768, a = 12;
  ActivationShape x{s, b, h, a};
  x.precision = ActivationPrecision::fp32;
  EXPECT_DOUBLE_EQ(layer_activations(m, x, AttentionKernel::eager, false).total(), 64 * s * b * h + 4 * a * s * s * b);
  x.precision = ActivationPrecision::autocast;
  EXPECT_DOUBLE_EQ(layer_activations(m, x, AttentionKernel::flash, false).total(), 36 * s * b * h + 4 * a * s * b);
}

TEST(Estimate, OverheadsAreSeparateLinesAndShardingHelps) {
  Plan p;
  p.dp = 64;
  const Architecture m = model_preset("llama2-7b");
  const Gpu h100 = gpu_preset("h100-80g");
  int overheads = 0;
  for (const Line& l : estimate(m, p, h100).lines) overheads += l.overhead;
  EXPECT_EQ(overheads, 3);  // framework, communication buffers, safety margin
  double previous = 1e30;
  for (p.zero = 0; p.zero <= 3; ++p.zero) {
    const double now = estimate(m, p, h100).total;
    EXPECT_LT(now, previous) << "ZeRO-" << p.zero;
    previous = now;
  }
  EXPECT_FALSE(estimate(m, Plan{}, h100).fits());
  p.zero = 3;
  EXPECT_TRUE(estimate(m, p, h100).fits());
}

// Each rule of check_plan refuses naming the memory lab's option and its value.
TEST(Plan, WhatTheModelsShapeRefusesNamesTheOption) {
  const Architecture llama7 = model_preset("llama2-7b"), llama70 = model_preset("llama2-70b");
  const auto refused = [](const Architecture& m, int dp, int tp, int pp, int shard_group, bool sp) {
    Plan p;
    p.dp = dp, p.tp = tp, p.pp = pp, p.shard_group = shard_group, p.sequence_parallel = sp, p.zero = 3;
    try {
      check_plan(m, p);
    } catch (const labkit::Error& e) {
      return std::string(e.what());
    }
    return std::string("(accepted)");
  };
  EXPECT_EQ(refused(llama7, 1, 3, 1, 0, false), "--tp 3: each rank takes whole attention heads, and llama2-7b has "
                                                "32: --tp must divide 32 (1, 2, 4, 8, 16, 32)");
  Architecture gqa = llama70;  // 48 heads over 8 KV heads: --tp 6 takes whole heads but splits no KV head evenly
  gqa.heads = 48;
  EXPECT_EQ(refused(gqa, 1, 6, 1, 0, false), "--tp 6: llama2-70b's 8 KV heads neither split evenly over 6 ranks nor "
                                             "copy evenly to them");
  EXPECT_EQ(refused(llama7, 1, 1, 64, 0, false), "--pp 64: llama2-7b has 32 layers, and each pipeline stage needs at "
                                                 "least one");
  EXPECT_EQ(refused(llama7, 6, 1, 1, 4, false), "--hsdp 4: shard groups must split --dp 6 evenly");
  EXPECT_EQ(refused(llama7, 1, 1, 1, 0, true).rfind("--sp: ", 0), 0u);
  EXPECT_EQ(refused(llama70, 4, 8, 4, 2, true), "(accepted)");
  // Megatron-LM's rule: the stages hold equal layers.
  EXPECT_EQ(refused(llama7, 1, 1, 7, 0, false), "--pp 7: llama2-7b's 32 layers do not cut into 7 equal stages");
}

// A what-if's sequence: the one given, else the learned context; a rotary model has none to fall back on.
TEST(Plan, AWhatIfOfARotaryModelNeedsItsSequence) {
  EXPECT_EQ(what_if_seq(model_preset("gpt3-175b"), 0), 2048);
  EXPECT_EQ(what_if_seq(model_preset("llama2-7b"), 4096), 4096);
  try {
    what_if_seq(model_preset("llama2-7b"), 0);
    ADD_FAILURE() << "llama2-7b without --seq accepted";
  } catch (const labkit::Error& e) {
    EXPECT_STREQ(e.what(), "--what-if llama2-7b: the model has rotary positions and no fixed context: give --seq");
  }
}

// GPT-2 and GPT-3 learn an embedding per place in their context (GPT-2:
// 1024): a longer sequence has no position to add, so no lab may model one.
TEST(Plan, ASequencePastTheLearnedPositionsIsRefused) {
  EXPECT_EQ(what_if_seq(model_preset("gpt2"), 1024), 1024);
  EXPECT_EQ(what_if_seq(model_preset("gpt2"), 0, 4096), 1024);
  EXPECT_EQ(what_if_seq(model_preset("llama2-7b"), 0, 4096), 4096);
  EXPECT_EQ(what_if_seq(model_preset("llama2-7b"), 32768, 4096), 32768);
  try {
    what_if_seq(model_preset("gpt2"), 2048);
    ADD_FAILURE() << "gpt2 at --seq 2048 accepted";
  } catch (const labkit::Error& e) {
    EXPECT_STREQ(e.what(), "--seq 2048: gpt2 learns 1024 positions, an embedding row for each place in a sequence, "
                           "and has none past them (give --seq 1024 or less)");
  }
}

// ZeRO-3 holds FSDP's root unit (LLaMA-2 7B: the embeddings and the untied
// head, 2 x 32000 x 4096, and the final norm) and one layer (4 x 4096^2 for
// attention, 3 x 4096 x 11008 for SwiGLU, two norms) whole while they compute,
// and their gradients until reduce-scattered; ZeRO-2 only the gradients.
TEST(Estimate, ZeroThreeHoldsTheRootAndOneLayerWhole) {
  const double root = 2.0 * 32000 * 4096 + 4096, layer = 4.0 * 4096 * 4096 + 3.0 * 4096 * 11008 + 2 * 4096;
  Plan p;
  p.dp = 8;
  auto line = [&](const Breakdown& b, std::string_view name) {
    for (const Line& l : b.lines)
      if (l.component == name) return l.bytes;
    return -1.0;
  };
  const Architecture m = model_preset("llama2-7b");
  const double N = count_parameters(m).total;
  for (p.zero = 0; p.zero <= 3; ++p.zero) {
    const Breakdown b = estimate(m, p, gpu_preset("h100-80g"));
    const double shard = p.zero >= 2 ? N / 8 : N;
    EXPECT_DOUBLE_EQ(line(b, "gradients"), 2 * (shard + (p.zero >= 2 ? root + layer : 0))) << "ZeRO-" << p.zero;
    EXPECT_DOUBLE_EQ(line(b, "gathered weights"), p.zero == 3 ? 2 * (root + layer) : -1) << "ZeRO-" << p.zero;
  }
  p.prefetch = true;
  EXPECT_DOUBLE_EQ(line(estimate(m, p, gpu_preset("h100-80g")), "gathered weights"), 2 * (root + layer));
  EXPECT_DOUBLE_EQ(line(estimate(m, p, gpu_preset("h100-80g")), "prefetched weights"), 2 * layer);
  p.reshard_after_forward = false;
  EXPECT_DOUBLE_EQ(line(estimate(m, p, gpu_preset("h100-80g")), "gathered weights"), 2 * N);
}

TEST(Recommend, FollowsTheDecisionFramework) {
  const Gpu h100 = gpu_preset("h100-80g");
  EXPECT_EQ(recommend(model_preset("gpt2"), Plan{}, h100, 8, 8).strategy, "DDP (data parallelism)");
  EXPECT_EQ(recommend(model_preset("llama2-7b"), Plan{}, h100, 8, 8).strategy, "DDP with ZeRO-1 over 8 GPUs");
  // 70B: even sharded 64 ways, 97 GB of activations per sequence (54 GB with FlashAttention) do not fit
  // without TP or recomputation.
  EXPECT_EQ(recommend(model_preset("llama2-70b"), Plan{}, h100, 64, 8).strategy, "TP 8 x FSDP 8");
  Plan flash;
  flash.attention = AttentionKernel::flash;
  EXPECT_EQ(recommend(model_preset("llama2-70b"), flash, h100, 64, 8).strategy, "TP 8 x FSDP 8");
  Plan recompute;
  recompute.recompute = Recompute::full;
  EXPECT_EQ(recommend(model_preset("llama2-70b"), recompute, h100, 64, 8).strategy, "FSDP / ZeRO-3 over 64 GPUs");
  Plan serve;
  serve.training = false;
  EXPECT_NE(recommend(model_preset("llama2-7b"), serve, h100, 8, 8).strategy.find("one GPU"), std::string::npos);
  EXPECT_NE(recommend(model_preset("llama2-70b"), serve, h100, 8, 8).strategy.find("tensor parallelism"),
            std::string::npos);
  EXPECT_EQ(gpus_needed(model_preset("llama2-70b"), Plan{}, h100), 0);  // activations alone exceed a GPU
  EXPECT_GT(gpus_needed(model_preset("llama2-70b"), recompute, h100), 8);
}

// Every recommendation uses the GPUs it is given: tp x pp x dp = GPUs for
// training (a whole number of replicas where they do not divide), at most
// them for inference, and the plan it names fits.
TEST(Recommend, TheLayoutUsesTheGpusGiven) {
  const Gpu h100 = gpu_preset("h100-80g");
  for (std::string_view name : model_presets()) {
    const Architecture m = model_preset(name);
    for (int gpus : {1, 2, 4, 8, 12, 16, 24, 64, 256, 1024}) {
      const Recommendation r = recommend(m, Plan{}, h100, gpus, 8);
      if (r.gpus() == 0) {
        EXPECT_NE(r.strategy.find("does not fit"), std::string::npos) << name << " on " << gpus;
        continue;
      }
      if (r.tp * r.pp == 1 || gpus % (r.tp * r.pp) == 0)
        EXPECT_EQ(r.gpus(), gpus) << name << " on " << gpus << ": " << r.strategy;
      else
        EXPECT_NE(r.strategy.find(fmt::format("({} of the {} GPUs)", r.gpus(), gpus)), std::string::npos) << r.strategy;
      Plan inference;
      inference.training = false;
      const Recommendation serve = recommend(m, inference, h100, gpus, 8);
      EXPECT_LE(serve.gpus(), gpus) << name << " served on " << gpus << ": " << serve.strategy;
    }
  }
  // GPT-3 on 64 GPUs: even TP 8 x PP 8 leaves 78 GB of model state and activations a GPU, 100 GB with
  // overheads; selective recomputation brings it within a layout of all 64.
  const Recommendation gpt3 = recommend(model_preset("gpt3-175b"), Plan{}, h100, 64, 8);
  EXPECT_EQ(gpt3.strategy, "does not fit on 64 GPUs");
  EXPECT_NE(gpt3.reasons.back().find("even TP 8 x PP 8 with ZeRO-3"), std::string::npos) << gpt3.reasons.back();
  Plan selective;
  selective.recompute = Recompute::selective;
  const Recommendation recomputed = recommend(model_preset("gpt3-175b"), selective, h100, 64, 8);
  EXPECT_EQ(recomputed.gpus(), 64) << recomputed.strategy;
}

// The architecture's own count: GPT with dropout and eager attention is
// Korthikanti's sbh(34 + 5as/h) in every parallel form; LLaMA-2 70B keeps
// no dropout masks, a gated MLP and GQA's narrow K and V, and with
// FlashAttention none of the 80 sbh of scores Korthikanti's count gives it.
TEST(Activations, FollowTheArchitecture) {
  const Architecture gpt3 = model_preset("gpt3-175b");
  for (int t : {1, 8})
    for (bool sp : {false, true})
      for (Recompute r : {Recompute::none, Recompute::selective, Recompute::full}) {
        const ActivationShape x{2048, 1, 12288, 96, t, sp, r};
        EXPECT_NEAR(layer_activations(gpt3, x, AttentionKernel::eager, false).total(), activation_bytes_per_layer(x),
                    1e-6 * activation_bytes_per_layer(x))
            << "t " << t << " sp " << sp << " recompute " << int(r);
      }
  const Architecture llama = model_preset("llama2-70b");
  const ActivationShape x{2048, 1, 8192, 64};
  const double sbh = 2048.0 * 8192;
  EXPECT_DOUBLE_EQ(activation_bytes_per_layer(x) / sbh, 34 + 80);  // Korthikanti's, scores 5as/h = 80
  const LayerActivations eager = layer_activations(llama, x, AttentionKernel::eager, false);
  EXPECT_DOUBLE_EQ(eager.scores / sbh, 32);  // softmax's output alone: 2as/h
  EXPECT_DOUBLE_EQ(eager.attention / sbh, 2 + 2 + 4.0 / 8 + 2);
  EXPECT_DOUBLE_EQ(eager.mlp / sbh, 2 + 8 * 28672.0 / 8192);
  EXPECT_DOUBLE_EQ(eager.total() / sbh, 72.5);
  const LayerActivations flash = layer_activations(llama, x, AttentionKernel::flash, false);
  EXPECT_EQ(flash.scores, 0);
  EXPECT_NEAR(flash.total() / sbh, 40.5, 0.05);
  EXPECT_DOUBLE_EQ(activation_bytes(llama, x, AttentionKernel::flash), 80 * flash.total());
  // An MoE layer keeps one MLP's tensors per expert a token visits.
  const Architecture mixtral = model_preset("mixtral-8x7b");
  const ActivationShape y{4096, 1, 4096, 32};
  EXPECT_DOUBLE_EQ(layer_activations(mixtral, y, AttentionKernel::flash, true).mlp,
                   2 * 4096.0 * 4096 + 2 * 8 * 4096.0 * 14336);
  EXPECT_THROW(parse_attention("sdpa"), std::invalid_argument);
}
