// Gradient checks for the modules and the whole GPT, as they run (in float, on
// the CPU Device): each backward against central finite differences of
// loss = sum(out * G) for a fixed random G. In float the differences are good
// to about 1e-3, so the tolerance is looser than the ops' double-precision
// checks (ops_test.cpp); a wrong gradient is off by far more.
#include <cmath>
#include <functional>
#include <random>

#include <gtest/gtest.h>

#include "labkit/gpt.h"
#include "labkit/modules.h"
#include "labkit/optim.h"

using namespace labkit;

namespace {
const Device& cpu = device(DeviceKind::cpu);

void fill_random(float* p, std::size_t n, std::uint32_t seed, float lo = -1, float hi = 1) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  for (std::size_t i = 0; i < n; ++i) p[i] = u(gen);
}

double dot(const float* a, const std::vector<float>& b) {
  double s = 0;
  for (std::size_t i = 0; i < b.size(); ++i) s += double(a[i]) * b[i];
  return s;
}

// A flat buffer and its gradient twin, sized by carving once with null bases.
struct Buffers {
  std::vector<float> values, grads;
  template <class Make> explicit Buffers(Make make) {
    Arena counter(nullptr, nullptr);
    make(counter);
    values.assign(counter.allocated(), 0.0f);
    grads.assign(counter.allocated(), 0.0f);
  }
  Arena arena() { return Arena(values.data(), grads.data()); }
  void zero_grads() { std::fill(grads.begin(), grads.end(), 0.0f); }
};

struct Checked {
  float* value;
  const float* grad;
  std::size_t n;
  const char* what;
};

// loss() runs forward and returns the loss; backward() recomputes every gradient.
void check(const std::vector<Checked>& tensors, const std::function<double()>& loss,
           const std::function<void()>& backward) {
  constexpr float eps = 1e-3f;
  loss();
  backward();
  for (const Checked& t : tensors) {
    const std::vector<float> analytic(t.grad, t.grad + t.n);
    for (std::size_t i = 0; i < t.n; ++i) {
      const float saved = t.value[i];
      t.value[i] = saved + eps;
      const double up = loss();
      t.value[i] = saved - eps;
      const double down = loss();
      t.value[i] = saved;
      const double numeric = (up - down) / (2 * eps);
      EXPECT_NEAR(analytic[i], numeric, 2e-3 + 1e-2 * std::abs(numeric)) << t.what << ", element " << i;
    }
  }
}
}  // namespace

TEST(ModuleGradients, Linear) {
  const int N = 3, in = 4, out = 5;
  Buffers p([&](Arena& c) { Linear(c, in, out); });
  Arena arena = p.arena();
  const Linear linear(arena, in, out);
  fill_random(p.values.data(), p.values.size(), 1);
  std::vector<float> x(N * in), y(N * out), dx(N * in), G(N * out);
  fill_random(x.data(), x.size(), 2);
  fill_random(G.data(), G.size(), 3);
  check({{x.data(), dx.data(), x.size(), "dx"}, {linear.weight.value, linear.weight.grad, std::size_t(in * out), "dW"},
         {linear.bias.value, linear.bias.grad, std::size_t(out), "db"}},
        [&] {
          linear.forward(cpu, y.data(), x.data(), N);
          return dot(y.data(), G);
        },
        [&] {
          p.zero_grads();
          std::fill(dx.begin(), dx.end(), 0.0f);
          linear.backward(cpu, dx.data(), G.data(), x.data(), N);
        });
}

TEST(ModuleGradients, LayerNormAndMlp) {
  const int N = 3, C = 4;
  Buffers p([&](Arena& c) {
    LayerNorm(c, C);
    Mlp(c, C);
  });
  Arena arena = p.arena();
  const LayerNorm norm(arena, C);
  const Mlp mlp(arena, C);
  fill_random(p.values.data(), p.values.size(), 4, -0.5f, 0.5f);
  Buffers a([&](Arena& c) {
    LayerNorm::Acts(c, N, C);
    Mlp::Acts(c, N, C);
  });
  Arena acts = a.arena();
  const LayerNorm::Acts norm_acts(acts, N, C);
  const Mlp::Acts mlp_acts(acts, N, C);
  std::vector<float> x(N * C), dx(N * C), G(N * C);
  fill_random(x.data(), x.size(), 5);
  fill_random(G.data(), G.size(), 6);
  check({{x.data(), dx.data(), x.size(), "dx"},
         {norm.weight.value, norm.weight.grad, std::size_t(C), "ln gain"},
         {mlp.fc.weight.value, mlp.fc.weight.grad, std::size_t(4 * C * C), "fc W"},
         {mlp.proj.bias.value, mlp.proj.bias.grad, std::size_t(C), "proj b"}},
        [&] {
          norm.forward(cpu, norm_acts, x.data(), N);
          mlp.forward(cpu, mlp_acts, norm_acts.out.value, N);
          return dot(mlp_acts.out.value, G);
        },
        [&] {
          p.zero_grads();
          a.zero_grads();
          std::fill(dx.begin(), dx.end(), 0.0f);
          std::copy(G.begin(), G.end(), mlp_acts.out.grad);
          mlp.backward(cpu, norm_acts.out.grad, mlp_acts, norm_acts.out.value, N);
          norm.backward(cpu, dx.data(), norm_acts, x.data(), N);
        });
}

TEST(ModuleGradients, CausalSelfAttentionAndBlock) {
  const int B = 2, T = 3, C = 8, NH = 2;
  Buffers p([&](Arena& c) { Block(c, C, NH); });
  Arena arena = p.arena();
  const Block block(arena, C, NH);
  fill_random(p.values.data(), p.values.size(), 7, -0.5f, 0.5f);
  Buffers a([&](Arena& c) { Block::Acts(c, B, T, C, NH); });
  Arena acts = a.arena();
  const Block::Acts block_acts(acts, B, T, C, NH);
  std::vector<float> x(B * T * C), dx(x.size()), G(x.size());
  fill_random(x.data(), x.size(), 8);
  fill_random(G.data(), G.size(), 9);
  check({{x.data(), dx.data(), x.size(), "dx"},
         {block.attn.qkv.weight.value, block.attn.qkv.weight.grad, std::size_t(3 * C * C), "qkv W"},
         {block.attn.proj.weight.value, block.attn.proj.weight.grad, std::size_t(C * C), "attention proj W"},
         {block.ln2.bias.value, block.ln2.bias.grad, std::size_t(C), "ln2 bias"},
         {block.mlp.proj.weight.value, block.mlp.proj.weight.grad, std::size_t(4 * C * C), "mlp proj W"}},
        [&] {
          block.forward(cpu, block_acts, x.data(), B, T);
          return dot(block_acts.out.value, G);
        },
        [&] {
          p.zero_grads();
          a.zero_grads();
          std::fill(dx.begin(), dx.end(), 0.0f);
          std::copy(G.begin(), G.end(), block_acts.out.grad);
          block.backward(cpu, dx.data(), block_acts, x.data(), B, T);
        });
}

TEST(ModuleGradients, WholeGpt) {
  const int B = 2, T = 4;
  Gpt model({.max_seq = T, .vocab = 5, .layers = 2, .heads = 2, .channels = 8}, 3);
  for (float& w : model.parameters()) w *= 5;  // GPT-2's 0.02 init gives a flat loss; a steeper one is a sharper check
  const std::vector<int> x = {0, 1, 2, 3, 4, 3, 2, 1}, y = {1, 2, 3, 4, 3, 2, 1, 0};
  check({{model.parameters().data(), model.gradients().data(), model.parameter_count(), "parameter"}},
        [&] { return model.forward(x, y, B, T); },
        [&] {
          model.zero_grad();
          model.backward();
        });
}

TEST(MixedPrecision, MasterWeightsKeepUpdatesThatBf16WeightsLose) {
  // 1 + 1e-3 is not a bf16 number (bf16 steps near 1 are 2^-7 = 0.0078), so an
  // update of 1e-3 rounds away unless an fp32 master copy accumulates it.
  const std::vector<float> grads(4, 1.0f);
  auto train = [&](bool master) {
    Tensor w = Tensor::from_host(std::vector<float>(4, 1.0f), {4}, DeviceKind::cpu);
    AdamW adamw{.lr = 1e-3f, .bf16_weights = true, .master_weights = master};
    for (int s = 0; s < 10; ++s) adamw.update(w, Tensor::from_host(grads, {4}, DeviceKind::cpu));
    return std::pair(w[0], adamw);
  };
  const auto [without, plain] = train(false);
  const auto [with, mixed] = train(true);
  EXPECT_EQ(without, 1.0f) << "each 1e-3 step rounds back to 1 in bf16";
  EXPECT_EQ(with, ops::round_to_bf16(mixed.master[0]));
  EXPECT_NEAR(mixed.master[0], 1.0f - 10 * 1e-3f, 1e-5f) << "Adam's first steps move by lr each";
  EXPECT_EQ(with, 0.98828125f) << "0.99 rounds to the nearest bf16 number, 253/256";
  EXPECT_EQ(mixed.state_bytes(), 3 * 4 * sizeof(float));  // m, v and the master copy
  EXPECT_EQ(plain.state_bytes(), 2 * 4 * sizeof(float));
}

TEST(MixedPrecision, Bf16RoundsToNearestEven) {
  EXPECT_EQ(ops::round_to_bf16(1.0f), 1.0f);
  EXPECT_EQ(ops::round_to_bf16(1.0f + 1.0f / 256), 1.0f) << "halfway: ties to the even neighbour";
  EXPECT_EQ(ops::round_to_bf16(1.0f + 3.0f / 256), 1.0f + 4.0f / 256) << "halfway: ties to the even neighbour";
  EXPECT_EQ(ops::round_to_bf16(1.0f + 1.5f / 256), 1.0f + 2.0f / 256);
  EXPECT_TRUE(std::isinf(ops::round_to_bf16(INFINITY)));
}
