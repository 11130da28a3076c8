// The tiny GPT: its gradient points downhill, it learns the synthetic corpus,
// and a run is reproducible to the bit.
#include <algorithm>
#include <cmath>
#include <set>

#include <gtest/gtest.h>

#include "labkit/gpt.h"

using namespace labkit;

namespace {
struct Data {
  std::vector<int> ids;
  int vocab;
};

Data encode(const std::string& text) {
  std::set<char> chars(text.begin(), text.end());
  std::vector<char> table(chars.begin(), chars.end());
  Data d{{}, int(table.size())};
  for (char c : text) d.ids.push_back(int(std::lower_bound(table.begin(), table.end(), c) - table.begin()));
  return d;
}

// Batch `step`: B windows of T tokens and the tokens that follow them.
void batch(const Data& d, int step, int B, int T, std::vector<int>& x, std::vector<int>& y) {
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

std::vector<float> train(const Data& d, int steps, std::vector<float>* final_params = nullptr) {
  Gpt model({.max_seq = 16, .vocab = d.vocab, .layers = 2, .heads = 4, .channels = 32}, 42);
  std::vector<int> x, y;
  std::vector<float> losses;
  for (int s = 0; s < steps; ++s) {
    batch(d, s, 4, 16, x, y);
    losses.push_back(model.forward(x, y, 4, 16));
    model.zero_grad();
    model.backward();
    model.adamw_update(3e-3f, 0.9f, 0.999f, 1e-8f, 0.0f);
  }
  if (final_params) *final_params = model.parameters();
  return losses;
}
}  // namespace

TEST(Gpt, TheGradientPointsDownhill) {
  const Data d = encode(synthetic_corpus(5000, 7));
  Gpt model({.max_seq = 16, .vocab = d.vocab, .layers = 2, .heads = 4, .channels = 32}, 1);
  std::vector<int> x, y;
  batch(d, 0, 4, 16, x, y);
  const float before = model.forward(x, y, 4, 16);
  model.zero_grad();
  model.backward();
  // A small step against the gradient lowers the loss by about lr |g|^2.
  std::vector<float> params = model.parameters();
  double norm2 = 0;
  for (float g : model.gradients()) norm2 += double(g) * g;
  ASSERT_GT(norm2, 0);
  Gpt stepped = model;
  std::vector<float>& p = stepped.parameters();
  const float lr = 1e-2f;
  for (std::size_t i = 0; i < p.size(); ++i) p[i] = params[i] - lr * model.gradients()[i];
  const float after = stepped.forward(x, y, 4, 16);
  EXPECT_LT(after, before);
  EXPECT_NEAR(before - after, lr * norm2, 0.2 * lr * norm2);  // first-order Taylor
  EXPECT_NEAR(before, std::log(float(d.vocab)), 0.3) << "an untrained model is near uniform";
}

TEST(Gpt, LearnsTheCorpusAndIsReproducibleToTheBit) {
  const Data d = encode(synthetic_corpus(20000, 3));
  std::vector<float> params_a, params_b;
  const std::vector<float> a = train(d, 80, &params_a), b = train(d, 80, &params_b);
  EXPECT_LT(a.back(), a.front() - 1.0f) << "loss from " << a.front() << " to " << a.back();
  EXPECT_EQ(a, b);
  EXPECT_EQ(params_a, params_b);
}

TEST(Gpt, ReportsEachRangeOfGradientsOnceInBackwardOrder) {
  const Data d = encode(synthetic_corpus(5000, 7));
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
