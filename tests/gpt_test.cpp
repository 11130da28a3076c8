// The tiny GPT: its gradient points downhill, it learns the synthetic corpus,
// and a run is reproducible to the bit.
#include <algorithm>
#include <cmath>
#include <fstream>
#include <iterator>

#include <gtest/gtest.h>

#include "labkit/error.h"
#include "labkit/gpt.h"
#include "labkit/memory.h"
#include "labkit/optim.h"

using namespace labkit;

namespace {

// Batch `step`: B windows of T tokens and the tokens that follow them.
void batch(const Tokens& d, int step, int B, int T, std::vector<int>& x, std::vector<int>& y) {
  x.resize(B * T);
  y.resize(B * T);
  for (int b = 0; b < B; ++b) {
    const std::size_t start = (std::size_t(step) * B + b) * 97 % (d.ids.size() - T - 1);
    for (int t = 0; t < T; ++t) {
      x[b * T + t] = d.ids[start + t];
      y[b * T + t] = d.ids[start + t + 1];
    }
  }
}

std::vector<float> train(const Tokens& d, int steps, std::vector<float>* final_params = nullptr) {
  Gpt model({.max_seq = 16, .vocab = d.vocab, .layers = 2, .heads = 4, .channels = 32}, 42);
  std::vector<int> x, y;
  std::vector<float> losses;
  AdamW adamw;
  for (int s = 0; s < steps; ++s) {
    batch(d, s, 4, 16, x, y);
    losses.push_back(model.forward(x, y, 4, 16));
    model.zero_grad();
    model.backward();
    adamw.update(model.parameters(), model.gradients());
  }
  if (final_params) *final_params = model.parameters().to_host();
  return losses;
}
}  // namespace

TEST(Gpt, TheGradientPointsDownhill) {
  const Tokens d = character_tokens(synthetic_corpus(5000, 7));
  Gpt model({.max_seq = 16, .vocab = d.vocab, .layers = 2, .heads = 4, .channels = 32}, 1);
  std::vector<int> x, y;
  batch(d, 0, 4, 16, x, y);
  const float before = model.forward(x, y, 4, 16);
  model.zero_grad();
  model.backward();
  // A small step against the gradient lowers the loss by about lr |g|^2.
  const std::vector<float> params = model.parameters().to_host();
  double norm2 = 0;
  for (float g : model.gradients()) norm2 += double(g) * g;
  ASSERT_GT(norm2, 0);
  Gpt stepped = model;
  Tensor& p = stepped.parameters();
  const float lr = 1e-2f;
  for (std::size_t i = 0; i < p.size(); ++i) p[i] = params[i] - lr * model.gradients()[i];
  const float after = stepped.forward(x, y, 4, 16);
  EXPECT_LT(after, before);
  EXPECT_NEAR(before - after, lr * norm2, 0.2 * lr * norm2);  // first-order Taylor
  EXPECT_NEAR(before, std::log(float(d.vocab)), 0.3) << "an untrained model is near uniform";
}

TEST(Gpt, LearnsTheCorpusAndIsReproducibleToTheBit) {
  const Tokens d = character_tokens(synthetic_corpus(20000, 3));
  std::vector<float> params_a, params_b;
  const std::vector<float> a = train(d, 80, &params_a), b = train(d, 80, &params_b);
  EXPECT_LT(a.back(), a.front() - 1.0f) << "loss from " << a.front() << " to " << a.back();
  EXPECT_EQ(a, b);
  EXPECT_EQ(params_a, params_b);
}

TEST(Gpt, ReportsEachRangeOfGradientsOnceInBackwardOrder) {
  const Tokens d = character_tokens(synthetic_corpus(5000, 7));
  Gpt model({.max_seq = 16, .vocab = d.vocab, .layers = 3, .heads = 4, .channels = 32}, 1);
  std::vector<int> x, y;
  batch(d, 0, 2, 16, x, y);
  model.forward(x, y, 2, 16);
  model.zero_grad();
  std::vector<ParameterRange> ready;
  std::vector<float> snapshot;
  model.backward([&](ParameterRange r) {
    ready.push_back(r);
    // Final means final: the rest of backward must not touch this range again.
    if (ready.size() == 2) snapshot.assign(model.gradients().begin() + r.offset, model.gradients().begin() + r.offset + r.count);
  });
  ASSERT_EQ(ready.size(), 1u + 3 + 1);  // final norm, layers 2, 1, 0, embeddings
  EXPECT_EQ(ready[1].offset, model.layer_range(2).offset);
  EXPECT_EQ(ready[3].offset, model.layer_range(0).offset);
  EXPECT_EQ(ready[4].offset, 0u);
  std::size_t covered = 0;
  for (ParameterRange r : ready) covered += r.count;
  EXPECT_EQ(covered, model.parameter_count());
  const ParameterRange last_layer = ready[1];
  EXPECT_TRUE(std::equal(snapshot.begin(), snapshot.end(), model.gradients().begin() + last_layer.offset));
}

// forward reads the loss at once, a copy to the host that waits for the
// device; queue_forward leaves it there until loss() is asked, after backward.
TEST(Gpt, QueueForwardCopiesNothingToTheHostUntilTheLossIsRead) {
  const Tokens d = character_tokens(synthetic_corpus(5000, 9));
  const GptConfig config{.max_seq = 16, .vocab = d.vocab, .layers = 2, .heads = 4, .channels = 32};
  std::vector<int> x, y;
  batch(d, 0, 2, 16, x, y);
  Gpt read_at_once(config, 5, DeviceKind::fenced), queued(config, 5, DeviceKind::fenced);
  const float loss = read_at_once.forward(x, y, 2, 16);
  std::size_t to_host = 0;
  observe_host_copies([](std::size_t bytes, bool to, void* count) { *static_cast<std::size_t*>(count) += to ? bytes : 0; },
                      &to_host);
  queued.queue_forward(x, y, 2, 16);
  queued.zero_grad();
  queued.backward();
  EXPECT_EQ(to_host, 0u) << "a forward and a backward, queued, read nothing back";
  EXPECT_EQ(queued.loss(), loss);
  EXPECT_EQ(to_host, 2 * 16 * sizeof(float)) << "the per-token losses, once";
  observe_host_copies(nullptr, nullptr);
}

TEST(Optimizers, OneStepByHand) {
  std::vector<float> w = {1.0f, -2.0f}, g = {0.5f, 0.25f};
  SgdMomentum sgd{.lr = 0.1f, .momentum = 0.9f};
  sgd.update(w, g);
  sgd.update(w, g);  // v = 0.9 g + g = 1.9 g
  EXPECT_FLOAT_EQ(w[0], 1.0f - 0.1f * 0.5f - 0.1f * 1.9f * 0.5f);
  std::vector<float> a = {1.0f};
  AdamW adamw{.lr = 0.01f, .weight_decay = 0.1f};
  adamw.update(a, std::vector<float>{2.0f});
  // Step 1: m/(1-b1) = g, v/(1-b2) = g^2, so the step is lr (g/|g| + wd w).
  EXPECT_NEAR(a[0], 1.0f - 0.01f * (1.0f + 0.1f * 1.0f), 1e-6);
  std::vector<float> wrong(3);
  EXPECT_THROW(adamw.update(wrong, std::vector<float>(3)), std::invalid_argument);
}

TEST(Optimizers, LarsGivesEachLayerItsTrustRatioByHand) {
  // Layer 0: w = (3, 4), ||w|| = 5; g = (0, 1), ||g|| = 1: local lr = 0.001 x 5 / 1.
  // Layer 1: w = (0), a layer of zeros: local lr 1.
  std::vector<float> w = {3.0f, 4.0f, 0.0f}, g = {0.0f, 1.0f, 2.0f};
  const std::vector<ParameterRange> layers = {{0, 2}, {2, 1}};
  Lars lars{.lr = 0.1f, .momentum = 0.9f};
  lars.update(w, g, layers);
  EXPECT_FLOAT_EQ(w[1], 4.0f - 0.1f * 0.005f * 1.0f);
  EXPECT_FLOAT_EQ(w[2], 0.0f - 0.1f * 1.0f * 2.0f);
  lars.update(w, g, layers);  // v = 0.9 v + local_lr g, with layer 0's ratio from its new norm
  const float local = 0.001f * std::sqrt(9.0f + w[1] * w[1]) / 1.0f;
  EXPECT_NEAR(w[1], 4.0f - 0.1f * 0.005f - 0.1f * (0.9f * 0.005f + local), 1e-7);
}

TEST(Optimizers, LambScalesAdamsStepToTheLayersNormByHand) {
  // Step 1: Adam's direction is g / |g| elementwise = (1, -1), ||r|| = sqrt 2;
  // ||w|| = 5, so the step is lr x 5 / sqrt 2 x (1, -1) (eps aside).
  std::vector<float> w = {3.0f, 4.0f};
  Lamb lamb{.lr = 0.01f, .eps = 0.0f};
  const std::vector<ParameterRange> whole = {{0, 2}};
  lamb.update(w, std::vector<float>{0.5f, -2.0f}, whole);
  EXPECT_NEAR(w[0], 3.0f - 0.01f * 5.0f / std::sqrt(2.0f), 1e-6);
  EXPECT_NEAR(w[1], 4.0f + 0.01f * 5.0f / std::sqrt(2.0f), 1e-6);
  EXPECT_THROW(lamb.update(w, std::vector<float>{1.0f, 1.0f}, std::vector<ParameterRange>{{1, 2}}),
               std::invalid_argument);
}

TEST(Optimizers, WarmupScalingAndClippingByHand) {
  EXPECT_FLOAT_EQ(linear_scaled_lr(0.1f, 256, 8192), 3.2f);  // Goyal et al.: batch x 32, rate x 32
  EXPECT_FLOAT_EQ(warmup_lr(3.2f, 1, 5), 0.64f);
  EXPECT_FLOAT_EQ(warmup_lr(3.2f, 5, 5), 3.2f);
  EXPECT_FLOAT_EQ(warmup_lr(3.2f, 50, 5), 3.2f);
  std::vector<float> g = {3.0f, 4.0f};
  EXPECT_DOUBLE_EQ(clip_by_global_norm(g, 10.0), 5.0);  // under the limit: untouched
  EXPECT_EQ(g, (std::vector<float>{3.0f, 4.0f}));
  EXPECT_DOUBLE_EQ(clip_by_global_norm(g, 1.0), 5.0);
  EXPECT_FLOAT_EQ(g[0], 0.6f);
  EXPECT_FLOAT_EQ(g[1], 0.8f);
  // Sharded: this rank's (3, 4) is half of a gradient whose other half has the
  // same norm, so the global norm is sqrt(25 + 25), and every shard scales by it.
  std::vector<float> shard = {3.0f, 4.0f};
  EXPECT_DOUBLE_EQ(clip_by_global_norm(shard, 1.0, [](double mine) { return 2 * mine; }), std::sqrt(50.0));
  EXPECT_FLOAT_EQ(shard[0], float(3.0 / std::sqrt(50.0)));
}

TEST(Gpt, TwoPipelineStagesComputeWhatOneModelDoes) {
  // Stage 0 runs the embeddings and layer 0, stage 1 layers 1..2 and the head;
  // the residual stream goes forward, its gradient comes back. The embeddings
  // are tied to the head, so their gradient is the sum of both stages' (the
  // all-reduce between first and last stage that Megatron-LM does).
  const Tokens d = character_tokens(synthetic_corpus(5000, 9));
  const GptConfig config{.max_seq = 16, .vocab = d.vocab, .layers = 3, .heads = 4, .channels = 32};
  std::vector<int> x, y;
  batch(d, 0, 2, 16, x, y);
  Gpt whole(config, 5), first(config, 5), second(config, 5);
  const float loss = whole.forward(x, y, 2, 16);
  whole.zero_grad();
  whole.backward();

  first.prepare(2, 16);
  first.embed(x);
  first.forward_layers(0, 1);
  second.prepare(2, 16);
  std::copy(first.stream(0).begin(), first.stream(0).end(), second.stream(0).begin());  // send the stream
  second.forward_layers(1, 3);
  second.head(y);
  EXPECT_EQ(second.loss(), loss);
  first.zero_grad();
  second.zero_grad();
  second.backward_head();
  second.backward_layers(1, 3);
  std::copy(second.stream_grad(0).begin(), second.stream_grad(0).end(), first.stream_grad(0).begin());  // and back
  first.backward_layers(0, 1);
  first.backward_embed();

  const ParameterRange layer1 = whole.layer_range(1), layer0 = whole.layer_range(0);
  for (std::size_t i = 0; i < whole.parameter_count(); ++i) {
    const float want = whole.gradients()[i];
    if (i < layer0.offset)  // tied embeddings: summed, in another order than one model adds them
      ASSERT_NEAR(first.gradients()[i] + second.gradients()[i], want, 1e-6f * std::max(1.0f, std::abs(want))) << i;
    else  // each layer's gradient is computed by one stage exactly as the whole model does
      ASSERT_EQ(i < layer1.offset ? first.gradients()[i] : second.gradients()[i], want) << "parameter " << i;
  }
}

// What the GPT really allocates, against the memory lab's formulas: the model
// state to the byte, and the activations term by term from Korthikanti et al.
TEST(Gpt, HoldsWhatTheMemoryLabEstimates) {
  using namespace memory;
  const int B = 4, T = 16, C = 32, NH = 4;
  auto model = [&](int layers) { return Gpt({.max_seq = T, .vocab = 40, .layers = layers, .heads = NH, .channels = C}, 1); };
  Gpt gpt = model(2);
  const double N = double(gpt.parameter_count());
  std::vector<int> x(B * T, 1);
  gpt.forward(x, x, B, T);
  gpt.backward();
  AdamW fp32_adam, mixed_adam{.bf16_weights = true};
  fp32_adam.update(gpt.parameters(), gpt.gradients());
  Gpt copy(gpt);
  mixed_adam.update(copy.parameters(), copy.gradients());

  const Optimizer& adam = find_optimizer("adam");
  const ModelStateBytes fp32 = model_state_bytes(N, {Precision::fp32, Precision::fp32, Precision::fp32, false}, adam, 0, 1);
  EXPECT_EQ(gpt.parameters().bytes(), fp32.weights);
  EXPECT_EQ(gpt.gradients().bytes(), fp32.grads);
  EXPECT_EQ(fp32_adam.state_bytes(), fp32.optimizer);
  const ModelStateBytes mixed = model_state_bytes(N, {Precision::bf16, Precision::fp32, Precision::fp32, true}, adam, 0, 1);
  EXPECT_EQ(mixed_adam.state_bytes(), mixed.master + mixed.optimizer);

  // One layer's activations: the difference between 3 layers and 2 (activation_bytes
  // counts the activations and their gradients, hence / 2).
  Gpt three = model(3);
  three.forward(x, x, B, T);
  const double per_layer = double(three.activation_bytes() - gpt.activation_bytes()) / 2;
  // Korthikanti's 16-bit count, sbh(34 + 5as/h), less what dropout keeps (two
  // sbh-byte masks after the projections, the as^2b-byte mask and 2as^2b-byte
  // output of attention dropout): 32 sbh + 2 as^2 b bytes = 16 sbh + as^2 b values.
  const double s = T, b = B, h = C, a = NH, sbh = s * b * h;
  const double korthikanti = activation_bytes_per_layer({.seq = s, .micro_batch = b, .hidden = h, .heads = a});
  const double values = (korthikanti - 2 * sbh - 3 * a * s * s * b) / 2;
  EXPECT_EQ(values, 16 * sbh + a * s * s * b);
  // llm.c's layout keeps, in fp32, those values plus the two projection outputs
  // before each residual add (2 sbh, unfused), the scores before softmax
  // (as^2b), and each layer norm's mean and 1/std (4 sb).
  EXPECT_EQ(per_layer, 4 * (values + 2 * sbh + a * s * s * b + 4 * s * b));
  // And the memory lab's llm.c layout counts every buffer, to the byte.
  EXPECT_EQ(llmc_activation_bytes(architecture_of(gpt.config()), T, B), gpt.activation_bytes());
  EXPECT_EQ(llmc_activation_bytes(architecture_of(three.config()), T, B), three.activation_bytes());
}

// A batch is refused by name before anything is allocated: train --batch 100000
// ended in std::bad_alloc, --batch 100000000 in "cannot create std::vector larger
// than max_size()" (B x T overflowed an int).
TEST(Gpt, ABatchBeyondThisMachinesMemoryIsRefusedByName) {
  const GptConfig tiny = gpt_preset("tiny-gpt", 64);
  EXPECT_NO_THROW(check_batch_fits(tiny, 8, tiny.max_seq));
  try {
    check_batch_fits(tiny, 100000000, tiny.max_seq);
    ADD_FAILURE() << "a batch of 1e8 sequences was not refused";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_EQ(what.rfind("--batch 100000000: its activations and their gradients need ", 0), 0u) << what;
    EXPECT_NE(what.find(" a sequence of 32 tokens), more than this machine's "), std::string::npos) << what;
  }
}

// A run saved after 3 steps and loaded into a fresh model and optimizer takes
// the next 2 steps exactly as the run that never stopped; what cannot be
// resumed is refused with the file and the reason.
TEST(Checkpoint, ResumesToTheBitAndRefusesWhatItCannotResume) {
  const Tokens d = character_tokens(synthetic_corpus(5000, 7));
  const GptConfig config{.max_seq = 16, .vocab = d.vocab, .layers = 2, .heads = 4, .channels = 32};
  const DataOrder order{.seed = 42, .batch = 4};
  const std::string path = ::testing::TempDir() + "/gpt.ckpt";
  std::vector<int> x, y;
  auto step = [&](Gpt& model, AdamW& adamw) {
    batch(d, adamw.step, 4, 16, x, y);
    model.forward(x, y, 4, 16);
    model.zero_grad();
    model.backward();
    adamw.update(model.parameters(), model.gradients());
  };
  Gpt unbroken(config, 42);
  AdamW adamw;
  for (int s = 0; s < 3; ++s) step(unbroken, adamw);
  save_checkpoint(path, unbroken, adamw, order);
  for (int s = 0; s < 2; ++s) step(unbroken, adamw);

  Gpt resumed(config, 7);  // other first weights: the checkpoint replaces them
  AdamW resumed_adamw;
  load_checkpoint(path, resumed, resumed_adamw, order);
  EXPECT_EQ(resumed_adamw.step, 3);
  for (int s = 0; s < 2; ++s) step(resumed, resumed_adamw);
  EXPECT_EQ(resumed.parameters().to_host(), unbroken.parameters().to_host());
  EXPECT_EQ(resumed_adamw.v.to_host(), adamw.v.to_host());

  auto refusal = [&](const std::string& file, const GptConfig& c, const DataOrder& o) {
    Gpt model(c, 1);
    AdamW fresh;
    try {
      load_checkpoint(file, model, fresh, o);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("loaded");
  };
  auto bytes = [](const std::string& file) {
    std::ifstream in(file, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  auto write = [](const std::string& file, const std::string& text) { std::ofstream(file, std::ios::binary) << text; };
  const std::string good = bytes(path), other = path + ".other";
  EXPECT_EQ(refusal(path + ".missing", config, order), "checkpoint '" + path + ".missing': cannot open it");
  write(other, "step 3\n");
  EXPECT_NE(refusal(other, config, order).find("not a labkit checkpoint"), std::string::npos);
  write(other, good.substr(0, good.size() / 2));
  EXPECT_NE(refusal(other, config, order).find("corrupt or cut short"), std::string::npos);
  std::string flipped = good;
  flipped[good.size() / 2] ^= 1;
  write(other, flipped);
  EXPECT_NE(refusal(other, config, order).find("corrupt or cut short"), std::string::npos);
  GptConfig wider = config;
  wider.channels = 64;
  EXPECT_NE(refusal(path, wider, order).find("a model of 2 layers, 4 heads, 32 channels, context 16, vocabulary " +
                                             std::to_string(d.vocab) + ", but this run's has 2 layers, 4 heads, 64 channels"),
            std::string::npos);
  EXPECT_NE(refusal(path, config, {.seed = 42, .batch = 8}).find("trained with seed 42 and batch 4, but this run has "
                                                                  "seed 42 and batch 8"),
            std::string::npos);
}
