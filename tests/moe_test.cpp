// The MoE layer and the MoE GPT: top-k routing with renormalized gates,
// capacity and drops in the group's token order, the backward against finite
// differences, and expert parallelism: ep ranks compute what one rank
// computes, drop the same assignments, and train to its weights.
#include <gtest/gtest.h>

#include <random>

#include "harness.h"
#include "labkit/error.h"
#include "labkit/parallel/equivalence.h"
#include "labkit/parallel/expert_dispatch.h"
#include "labkit/parallel/moe.h"
#include "labkit/parallel/moe_gpt.h"

using namespace labkit;
using labkit::test::simulate;

namespace {

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

}  // namespace

TEST(MoeRouting, TopKTakesTheHighestScoresAndRenormalizesTheirProbabilities) {
  const std::vector<float> probs = {0.1f, 0.4f, 0.2f, 0.3f,  // token 0
                                    0.25f, 0.25f, 0.25f, 0.25f};
  const Routing r = select_top_k(probs, probs, 4, 2);
  EXPECT_EQ(r.expert, (std::vector<int>{1, 3, 0, 1}));  // a tie goes to the lower expert
  EXPECT_FLOAT_EQ(r.gate[0], 0.4f / 0.7f);
  EXPECT_FLOAT_EQ(r.gate[1], 0.3f / 0.7f);
  EXPECT_FLOAT_EQ(r.gate[2], 0.5f);
  EXPECT_EQ(r.kept, (std::vector<std::uint8_t>(4, 1)));

  // DeepSeek-V3's bias moves the choice, not the gates: expert 0 chosen, weighted by its probability.
  std::vector<float> scores = probs;
  scores[0] += 0.3f;
  const Routing biased = select_top_k(scores, probs, 4, 2);
  EXPECT_EQ(biased.expert[0], 0);
  EXPECT_EQ(biased.expert[1], 1);
  EXPECT_FLOAT_EQ(biased.gate[0], 0.1f / 0.5f);
}

TEST(MoeRouting, AnExpertKeepsAssignmentsInOrderUpToItsCapacity) {
  EXPECT_EQ(expert_capacity(1.25, 64, 2, 8), 20);
  EXPECT_EQ(expert_capacity(1.0, 10, 1, 4), 3);  // ceil(2.5)
  // Exact where the product of doubles is not: 1.1 x 800 x 2 / 8 = 220 and
  // 1.1 x 50 / 5 = 11 (doubles give 220.00000000000003 and 11.000000000000002).
  EXPECT_EQ(expert_capacity(1.1, 800, 2, 8), 220);
  EXPECT_EQ(expert_capacity(1.1, 50, 1, 5), 11);
  EXPECT_EQ(expert_capacity(1.1, 51, 1, 5), 12);   // 11.22
  EXPECT_EQ(expert_capacity(2.5e-7, 8, 1, 2), 1);  // the smallest share still takes one
  EXPECT_EQ(expert_capacity(1e6, 3, 2, 7), 857143);  // 6e6 / 7 = 857142.86
  // Five tokens all choosing expert 0 first and expert 1 second; room for 2 and 4.
  const std::vector<float> probs = {0.6f, 0.3f, 0.1f, 0.6f, 0.3f, 0.1f, 0.6f, 0.3f, 0.1f,
                                    0.6f, 0.3f, 0.1f, 0.6f, 0.3f, 0.1f};
  Routing r = select_top_k(probs, probs, 3, 2);
  drop_over_capacity(r, {2, 4, 0});
  EXPECT_EQ(r.kept, (std::vector<std::uint8_t>{1, 1, 1, 1, 0, 1, 0, 1, 0, 0}));
}

TEST(MoeRouting, BadConfigurationsAreRefusedNamingTheValue) {
  EXPECT_NE(error_of([] { check(MoeConfig{.experts = 8}, 3); }).find("ep 3 does not divide the 8 experts"),
            std::string::npos);
  EXPECT_NE(error_of([] { check(MoeConfig{.experts = 4, .top_k = 5}, 1); }).find("top-k 5"), std::string::npos);
  EXPECT_NE(error_of([] { check(MoeConfig{.capacity_factor = 0}, 1); }).find("capacity factor 0"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_balance("fair"); }).find("balance 'fair': none, aux"), std::string::npos);
  EXPECT_EQ(parse_balance("bias"), Balance::bias);
}

// L = sum(w . y) + the balance loss, differentiated by backward and by central
// differences, for the router, a shared expert, the experts and the input, with
// capacity tight enough to drop (a dropped assignment has no gradient).
TEST(MoeLayer, BackwardMatchesFiniteDifferences) {
  const int C = 8, N = 24;
  const MoeConfig config{.experts = 4, .top_k = 2, .capacity_factor = 0.75, .balance = Balance::aux,
                         .aux_weight = 0.5, .shared_experts = 1};
  Arena dense_count(nullptr, nullptr), expert_count(nullptr, nullptr);
  MoeLayer(dense_count, expert_count, C, config, 1, 0);
  std::vector<float> dense(dense_count.allocated()), dense_grad(dense.size()), experts(expert_count.allocated()),
      expert_grad(experts.size()), x(std::size_t(N) * C), w(x.size());
  std::mt19937 gen(7);
  std::normal_distribution<float> normal(0.0f, 0.5f);
  for (auto* v : {&dense, &experts, &x, &w})
    for (float& f : *v) f = normal(gen);
  Arena dense_params(dense.data(), dense_grad.data()), expert_params(experts.data(), expert_grad.data());
  MoeLayer layer(dense_params, expert_params, C, config, 1, 0);

  simulate(1, [&](Comm& c) {
    std::vector<float> y(x.size()), dx(x.size(), 0.0f);
    const auto loss = [&] {
      layer.forward(c, y.data(), x.data(), N);
      double sum = layer.stats().balance_loss;
      for (std::size_t i = 0; i < y.size(); ++i) sum += double(w[i]) * y[i];
      return sum;
    };
    loss();
    ASSERT_GT(layer.stats().drop_rate(), 0.0);
    layer.backward(c, dx.data(), w.data(), x.data());
    const auto check = [&](std::vector<float>& values, const std::vector<float>& grads, std::size_t i,
                           const char* what) {
      const float kept = values[i], eps = 1e-3f;
      values[i] = kept + eps;
      const double up = loss();
      values[i] = kept - eps;
      const double down = loss();
      values[i] = kept;
      const double numeric = (up - down) / (2 * eps);
      EXPECT_NEAR(numeric, grads[i], 2e-3 + 2e-2 * std::abs(numeric)) << what << " " << i;
    };
    const std::size_t router = std::size_t(C) * config.experts;
    for (std::size_t i = 0; i < router; i += 3) check(dense, dense_grad, i, "router weight");
    for (std::size_t i = router; i < dense.size(); i += 97) check(dense, dense_grad, i, "shared expert");
    for (std::size_t i = 0; i < experts.size(); i += 61) check(experts, expert_grad, i, "expert");
    for (std::size_t i = 0; i < x.size(); i += 5) check(x, dx, i, "input");
  });
}

namespace {

constexpr int kT = 16, kVocab = 15, kB = 8;

GptConfig tiny() {
  GptConfig config = gpt_preset("tiny-gpt", kVocab);
  config.max_seq = kT;
  return config;
}

std::vector<int> tokens(int first, int count, int step) {
  std::vector<int> out;
  for (int i = first * kT; i < (first + count) * kT; ++i) out.push_back((i * 7 + step * 13 + i * i / 5) % kVocab);
  return out;
}

// `steps` of SGD on ep ranks, each on its consecutive share of the batch: every
// rank's dense weights and experts, and each step's kept assignments per expert.
struct Trained {
  std::vector<std::vector<float>> dense, experts;  // by rank
  std::vector<std::vector<std::int64_t>> kept;     // by step and layer
  double drop_rate = 0;                            // the steps' and layers' summed
};

Trained train(int ep, const MoeConfig& moe, int steps) {
  Trained out{std::vector<std::vector<float>>(std::size_t(ep)), std::vector<std::vector<float>>(std::size_t(ep)), {}};
  simulate(ep, [&](Comm& c) {
    MoeGpt model(tiny(), moe, ep, c.rank(), 5);
    const int share = kB / ep;
    for (int s = 0; s < steps; ++s) {
      const auto sgd = [](Tensor& w, Tensor& g) {
        for (std::size_t i = 0; i < w.size(); ++i) w[i] -= 0.1f * g[i];
      };
      model.train_step(c, tokens(c.rank() * share, share, s), tokens(c.rank() * share, share, s + 1), share, kT, sgd,
                       sgd);
      if (c.rank() == 0)
        for (int l = 0; l < model.config().layers; ++l) {
          out.kept.push_back(model.layer(l).stats().kept);
          out.drop_rate += model.layer(l).stats().drop_rate();
        }
    }
    out.dense[std::size_t(c.rank())] = model.dense().to_host();
    out.experts[std::size_t(c.rank())] = model.experts().to_host();
  });
  return out;
}

}  // namespace

// The equivalence: at ep = 2 and 4 the same assignments are dropped
// and every rank ends within 1e-5 of one rank's weights, with each way of
// balancing, with drops (capacity 1.0) and without (capacity 8).
TEST(MoeGpt, ExpertParallelRanksTrainToOneRanksWeights) {
  for (const Balance balance : {Balance::none, Balance::aux, Balance::bias})
    for (const double capacity : {1.0, 8.0}) {
      const MoeConfig moe{.experts = 8, .top_k = 2, .capacity_factor = capacity, .balance = balance,
                          .bias_rate = 0.01, .shared_experts = 1};
      const Trained one = train(1, moe, 3);
      EXPECT_EQ(one.drop_rate > 0, capacity == 1.0) << name_of(balance);
      for (const int ep : {2, 4}) {
        const Trained many = train(ep, moe, 3);
        EXPECT_EQ(many.kept, one.kept) << name_of(balance) << " ep " << ep << " capacity " << capacity;
        for (int r = 0; r < ep; ++r) {
          MoeGpt rank(tiny(), moe, ep, r, 5);
          EXPECT_LT(relative_difference(many.dense[std::size_t(r)], one.dense[0]), 1e-5)
              << name_of(balance) << " ep " << ep << " rank " << r;
          EXPECT_LT(relative_difference(many.experts[std::size_t(r)], rank.experts_of(one.experts[0])), 1e-5)
              << name_of(balance) << " ep " << ep << " rank " << r;
        }
      }
    }
}

// DeepSeek-V3's layer over 64 GPUs on 8 nodes: every token's k = 8 experts
// assigned, from at most M = 4 nodes when limited, and the copies crossing
// between nodes as the formulas expect.
TEST(ExpertDispatch, UniformRoutingAssignsKExpertsFromAtMostMNodes) {
  const ExpertLayout layout{.ep = 64, .experts = 256, .ranks_per_node = 8};
  const std::int64_t tokens = 2048;
  for (int limit : {0, 4}) {
    const UniformRouting r = route_uniformly(layout, 8, tokens, limit, 7);
    double crossing_assignments = 0, crossing_tokens = 0;
    for (int q = 0; q < layout.ep; ++q) {
      std::int64_t assigned = 0, touched = 0;
      for (int e = 0; e < layout.experts; ++e) {
        assigned += r.assigned(q, e, layout.experts);
        if (e / layout.experts_per_node() != q / 8) crossing_assignments += double(r.assigned(q, e, layout.experts));
      }
      for (int n = 0; n < r.nodes; ++n) {
        touched += r.node_tokens[std::size_t(q * r.nodes + n)];
        if (n != q / 8) crossing_tokens += double(r.node_tokens[std::size_t(q * r.nodes + n)]);
      }
      EXPECT_EQ(assigned, 8 * tokens) << "rank " << q;
      EXPECT_LE(touched, (limit ? limit : 8) * tokens) << "rank " << q << ": a token on more nodes than allowed";
    }
    const double all = double(layout.ep) * double(tokens);
    EXPECT_NEAR(crossing_assignments / all, crossings_per_token(layout, 8, limit, false), 0.01) << limit;
    EXPECT_NEAR(crossing_tokens / all, crossings_per_token(layout, 8, limit, true), 0.01) << limit;
  }
  EXPECT_DOUBLE_EQ(crossings_per_token(layout, 8, 4, false), 7.0);  // k (N-1)/N, whatever the limit
  EXPECT_NEAR(crossings_per_token(layout, 8, 0, true), 7 * 0.6618315, 1e-6);  // 7 (1 - C(224,8) / C(256,8))
  EXPECT_LT(crossings_per_token(layout, 8, 4, true), 3.5);  // at most M (N-1)/N
}

// Played on the simulator, a rank sends over IB what its routing says: every
// assignment to another node's expert (direct), or one copy a token per other
// node (two-stage), and never more than once per node; the two-stage
// dispatch of the node-limited routing is the fastest.
TEST(ExpertDispatch, TwoStageSendsOneCopyPerNodeAndIsFaster) {
  const ExpertLayout layout{.ep = 32, .experts = 64, .ranks_per_node = 8};
  const int h = 1024;
  double dispatch[2][2] = {};
  for (int limit : {0, 2})
    for (bool two_stage : {false, true}) {
      const UniformRouting r = route_uniformly(layout, 8, 512, limit, 3);
      std::vector<ExpertLayerCost> costs(std::size_t(layout.ep));
      simulate(
          layout.ep,
          [&](Comm& c) { costs[std::size_t(c.rank())] = play_expert_layer(c, layout, r, two_stage, h, 1e6); },
          "dgx-h100", false);
      for (int q = 0; q < layout.ep; ++q) {
        double across = 0;
        for (int n = 0; n < r.nodes; ++n)
          if (n != q / 8) {
            if (two_stage) across += double(r.node_tokens[std::size_t(q * r.nodes + n)]);
            for (int e = n * 16; e < (n + 1) * 16 && !two_stage; ++e)
              across += double(r.assigned(q, e, layout.experts));
          }
        EXPECT_DOUBLE_EQ(costs[std::size_t(q)].across, across * h * 2) << "rank " << q;
        dispatch[limit > 0][two_stage] = std::max(dispatch[limit > 0][two_stage], costs[std::size_t(q)].dispatch);
      }
    }
  EXPECT_LT(dispatch[1][1], dispatch[0][1]);
  EXPECT_LT(dispatch[0][1], dispatch[0][0]);
}
