// Grade tests for lab 9 (mixture of experts). The router's choice: each
// token's top k and its renormalized gates, over many shapes, ties and
// biases; the drops, assignment by assignment. The dispatch plan: where each
// kept assignment goes and where every rank's land, against the grader's own
// count, and each rank's bytes in a real layer. The combine: each token's
// outputs weighted by its gates. Each exercise then runs a layer at ep = 1, 2
// and 4 against a naive MoE (each token's experts run on it alone), and
// trains the MoE GPT at ep = 2 and 4 to one rank's weights.
// Run: ./labkit grade moe
#include <cmath>
#include <numeric>
#include <random>
#include <string>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gtest/gtest.h>

#include "checks.h"
#include "labkit/parallel/equivalence.h"
#include "labkit/parallel/moe_gpt.h"

using namespace labkit;
using namespace labkit::grade;

namespace {

constexpr int kT = 16, kVocab = 15, kB = 8;

// N x E probabilities (each row sums to 1), seeded; with `ties`, rows of equal pairs.
std::vector<float> random_probs(int N, int E, unsigned seed, bool ties = false) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> u(0.05f, 1.0f);
  std::vector<float> p(std::size_t(N) * E);
  for (int t = 0; t < N; ++t) {
    float sum = 0;
    for (int e = 0; e < E; ++e) sum += p[std::size_t(t) * E + e] = ties ? float(1 + (e / 2 + t) % 3) : u(gen);
    for (int e = 0; e < E; ++e) p[std::size_t(t) * E + e] /= sum;
  }
  return p;
}

// A routing of N tokens over E experts, each token's k different experts, with some drops.
Routing random_routing(int N, int E, int k, unsigned seed) {
  std::mt19937 gen(seed);
  Routing r{k, {}, {}, {}};
  std::vector<int> order(static_cast<std::size_t>(E));
  for (int t = 0; t < N; ++t) {
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), gen);
    float sum = 0;
    for (int j = 0; j < k; ++j) sum += float(j + 1);
    for (int j = 0; j < k; ++j) {
      r.expert.push_back(order[std::size_t(j)]);
      r.gate.push_back(float(k - j) / sum);
      r.kept.push_back(gen() % 4 != 0);
    }
  }
  return r;
}

// Each rank's kept count per expert for `routings`, one a rank.
std::vector<std::int64_t> kept_counts(const std::vector<Routing>& routings, int E) {
  std::vector<std::int64_t> kept(routings.size() * std::size_t(E), 0);
  for (std::size_t q = 0; q < routings.size(); ++q)
    for (std::size_t a = 0; a < routings[q].expert.size(); ++a)
      if (routings[q].kept[a]) ++kept[q * std::size_t(E) + std::size_t(routings[q].expert[a])];
  return kept;
}

std::vector<int> tokens(int first, int count, int step) {
  std::vector<int> out;
  for (int i = first * kT; i < (first + count) * kT; ++i) out.push_back((i * 7 + step * 13 + i * i / 5) % kVocab);
  return out;
}

// Two steps of SGD of the MoE GPT (8 experts, top-2, capacity tight enough to
// drop) at ep ranks against one rank on the whole batch: what is wrong, or "".
std::string check_training(int ep, Balance balance) {
  GptConfig config = gpt_preset("tiny-gpt", kVocab);
  config.max_seq = kT;
  const MoeConfig moe{.experts = 8, .top_k = 2, .capacity_factor = 1.0, .balance = balance, .bias_rate = 0.01};
  const auto train = [&](Comm& c, MoeGpt& model, int first, int count) {
    const auto sgd = [](Tensor& w, Tensor& g) {
      for (std::size_t i = 0; i < w.size(); ++i) w[i] -= 0.05f * g[i];
    };
    for (int s = 0; s < 2; ++s)
      model.train_step(c, tokens(first, count, s), tokens(first, count, s + 1), count, kT, sgd, sgd);
  };
  std::vector<float> dense, experts;
  const Observed one = run_ranks(1, [&](Comm& c) {
    MoeGpt model(config, moe, 1, 0, 5);
    train(c, model, 0, kB);
    dense = model.dense().to_host(), experts = model.experts().to_host();
  });
  if (!one.error.empty()) return "one rank: " + one.error;
  std::vector<std::string> wrong(static_cast<std::size_t>(ep));
  const Observed run = run_ranks(ep, [&](Comm& c) {
    MoeGpt model(config, moe, ep, c.rank(), 5);
    train(c, model, c.rank() * kB / ep, kB / ep);
    const double d = relative_difference(model.dense().to_host(), dense),
                 x = relative_difference(model.experts().to_host(), model.experts_of(experts));
    if (!(d <= 1e-5) || !(x <= 1e-5))
      wrong[std::size_t(c.rank())] = fmt::format("rank {}'s weights are {:.1e} from one rank's, its experts {:.1e}",
                                                 c.rank(), d, x);
  });
  if (!run.error.empty()) return run.error;
  for (const std::string& w : wrong)
    if (!w.empty()) return w;
  return "";
}

// The layer on `ranks` ranks against a naive MoE: each token's kept choices'
// experts run on it alone and summed by their gates, the shared expert added
// (the routing is the layer's own, which 9.1's tests check).
std::string check_output(int ranks) {
  const int C = 8, N = 12, E = 8, local = E / ranks;
  const MoeConfig config{.experts = E, .top_k = 2, .capacity_factor = 0.75, .balance = Balance::none,
                         .shared_experts = 1};
  Arena dense_count(nullptr, nullptr), experts_count(nullptr, nullptr);
  MoeLayer(dense_count, experts_count, C, config, 1, 0);
  std::vector<float> dense(dense_count.allocated()), all(experts_count.allocated());
  for (std::size_t i = 0; i < dense.size(); ++i) dense[i] = 0.3f * float(std::sin(double(i) * 1.3));
  for (std::size_t i = 0; i < all.size(); ++i) all[i] = 0.3f * float(std::cos(double(i) * 0.7));
  Arena act_count(nullptr, nullptr);
  Mlp::Acts(act_count, 1, C);
  std::vector<std::string> wrong(static_cast<std::size_t>(ranks));
  const Observed run = run_ranks(ranks, [&](Comm& c) {
    std::vector<float> d = dense, dg(dense.size()), whole = all, wg(all.size());
    const std::size_t share = all.size() / std::size_t(ranks);
    std::vector<float> mine(all.begin() + std::ptrdiff_t(share * std::size_t(c.rank())),
                            all.begin() + std::ptrdiff_t(share * std::size_t(c.rank() + 1))),
        mg(mine.size()), x(std::size_t(N) * C), y(x.size());
    for (std::size_t i = 0; i < x.size(); ++i) x[i] = float(std::cos(double(i + std::size_t(c.rank()) * 131)));
    Arena dp(d.data(), dg.data()), ep(mine.data(), mg.data());
    MoeLayer layer(dp, ep, C, config, ranks, c.rank());
    layer.forward(c, y.data(), x.data(), N);
    std::vector<float> d2 = dense, dg2(dense.size());
    Arena dp2(d2.data(), dg2.data()), wp(whole.data(), wg.data());
    const MoeLayer naive(dp2, wp, C, config, 1, 0);  // every expert, to run them one token at a time
    std::vector<float> acts(act_count.allocated()), grads(acts.size());
    const auto run_mlp = [&](const Mlp& m, const float* row) {
      Arena a(acts.data(), grads.data());
      const Mlp::Acts out(a, 1, C);
      m.forward(device(DeviceKind::cpu), out, row, 1);
      return std::vector<float>(out.out.value, out.out.value + C);
    };
    const Routing& r = layer.routing();
    for (int t = 0; t < N && wrong[std::size_t(c.rank())].empty(); ++t) {
      std::vector<float> want = run_mlp(naive.shared[0], &x[std::size_t(t) * C]);
      for (int j = 0; j < r.k; ++j) {
        const std::size_t a = std::size_t(t) * r.k + j;
        if (!r.kept[a]) continue;
        const std::vector<float> out = run_mlp(naive.experts[std::size_t(r.expert[a])], &x[std::size_t(t) * C]);
        for (int ch = 0; ch < C; ++ch) want[std::size_t(ch)] += r.gate[a] * out[std::size_t(ch)];
      }
      for (int ch = 0; ch < C; ++ch) {
        const float got = y[std::size_t(t) * C + ch], expected = want[std::size_t(ch)];
        if (std::abs(got - expected) > 1e-4f * (1 + std::abs(expected))) {
          wrong[std::size_t(c.rank())] = fmt::format(
              "rank {}, token {}, channel {}: the layer gives {}, its kept experts ({}) weighted by their gates and "
              "the shared expert give {} (experts {}..{} are on this rank)", c.rank(), t, ch, got, r.k, expected,
              c.rank() * local, (c.rank() + 1) * local - 1);
          break;
        }
      }
    }
  });
  if (!run.error.empty()) return run.error;
  for (const std::string& w : wrong)
    if (!w.empty()) return w;
  return "";
}

void trains_like_one_rank(const char* exercise, const std::string& hint) {
  Sweep sweep(exercise);
  for (int ep : {1, 2, 4})
    sweep.check({.p = ep, .label = fmt::format("ep={}, one layer against a naive MoE", ep)},
                [&] { return check_output(ep); });
  for (int ep : {2, 4})
    for (Balance balance : {Balance::none, Balance::aux, Balance::bias})
      sweep.check({.p = ep, .label = fmt::format("ep={}, balance {}", ep, name_of(balance))},
                  [&] { return check_training(ep, balance); });
  sweep.report(hint);
}

}  // namespace

// ---- 9.1 top_k_routing ------------------------------------------------------------

TEST(top_k_routing, EachTokenGoesToItsKHighestScoresWithRenormalizedGates) {
  Sweep sweep("top_k_routing");
  for (int E : {2, 4, 8, 16})
    for (int k : {1, 2, E})
      for (bool ties : {false, true})
        for (bool biased : {false, true})
          sweep.check({.label = fmt::format("E={}, k={}{}{}", E, k, ties ? ", ties" : "", biased ? ", biased" : "")},
                      [&]() -> std::string {
            const int N = 7;
            const std::vector<float> probs = random_probs(N, E, unsigned(E * 31 + k), ties);
            std::vector<float> scores = probs;
            for (std::size_t i = 0; biased && i < scores.size(); ++i) scores[i] += 0.2f * float(i % 3);
            const Routing r = select_top_k(scores, probs, E, k);
            const std::size_t n = std::size_t(N) * k;
            if (r.k != k || r.expert.size() != n || r.gate.size() != n || r.kept.size() != n)
              return fmt::format("a routing of k = {} with {}, {} and {} entries; expected k = {} and N k = {} each",
                                 r.k, r.expert.size(), r.gate.size(), r.kept.size(), k, n);
            for (int t = 0; t < N; ++t) {
              const float* score = &scores[std::size_t(t) * E];
              std::vector<int> want(static_cast<std::size_t>(E));
              std::iota(want.begin(), want.end(), 0);
              std::stable_sort(want.begin(), want.end(), [&](int a, int b) { return score[a] > score[b]; });
              float sum = 0;
              for (int j = 0; j < k; ++j) sum += probs[std::size_t(t) * E + std::size_t(want[std::size_t(j)])];
              for (int j = 0; j < k; ++j) {
                const std::size_t a = std::size_t(t) * k + j;
                if (r.expert[a] != want[std::size_t(j)])
                  return fmt::format("token {}, choice {}: expert {}, expected {} (the {} highest score{}, best first, "
                                     "a tie to the lower expert)", t, j, r.expert[a], want[std::size_t(j)], k,
                                     k == 1 ? "" : "s");
                const float gate = probs[std::size_t(t) * E + std::size_t(want[std::size_t(j)])] / sum;
                if (std::abs(r.gate[a] - gate) > 1e-6f)
                  return fmt::format("token {}, choice {}: gate {}, expected {} (its probability over the sum of the "
                                     "{} chosen{})", t, j, r.gate[a], gate, k, biased ? "; the bias picks, the "
                                     "probabilities weigh" : "");
                if (!r.kept[a]) return fmt::format("token {}, choice {} is marked dropped before capacity", t, j);
              }
            }
            return "";
          });
  sweep.report("sort each token's experts by score, highest first, a tie to the lower index; the gates are the "
               "chosen experts' probs (not scores) divided by their sum.");
}

TEST(top_k_routing, AnExpertDropsWhatComesPastItsRoom) {
  Sweep sweep("top_k_routing");
  for (int E : {2, 4, 8})
    for (int k : {1, 2})
      for (std::int64_t room : {0, 1, 3, 100})
        sweep.check({.label = fmt::format("E={}, k={}, room {}", E, k, room)}, [&]() -> std::string {
          Routing r = random_routing(20, E, k, unsigned(E * 7 + k + room));
          std::fill(r.kept.begin(), r.kept.end(), 1);
          std::vector<std::int64_t> rooms(static_cast<std::size_t>(E), room);
          rooms[0] = room + 1;  // expert 0 a little roomier
          drop_over_capacity(r, rooms);
          std::vector<std::int64_t> left = rooms;
          for (std::size_t a = 0; a < r.expert.size(); ++a) {
            std::int64_t& l = left[std::size_t(r.expert[a])];
            const bool want = l > 0;
            if (want) --l;
            if (bool(r.kept[a]) != want)
              return fmt::format("token {}, choice {} (expert {}): {}, expected {} (the expert's room {} when it "
                                 "comes)", a / std::size_t(k), a % std::size_t(k), r.expert[a],
                                 r.kept[a] ? "kept" : "dropped", want ? "kept" : "dropped", l + (want ? 1 : 0));
          }
          return "";
        });
  sweep.report("walk the assignments in order, token by token and each token's choices best first: kept while its "
               "expert's room is above 0 (take one), else dropped.");
}

TEST(top_k_routing, TheLayerIsANaiveMoeAndTrainsToOneRanksWeights) {
  trains_like_one_rank("top_k_routing", "each rank routes its tokens with your functions; one rank on the whole batch "
                                        "must drop the same assignments as ep ranks on their shares.");
}

// ---- 9.2 plan_dispatch ------------------------------------------------------------

TEST(plan_dispatch, EachKeptAssignmentGoesToItsExpertsRankAndLandsByExpert) {
  Sweep sweep("plan_dispatch");
  for (int ranks : {1, 2, 4})
    for (int E : {4, 8})
      for (int k : {1, 2})
        sweep.check({.p = ranks, .label = fmt::format("ep={}, E={}, k={}", ranks, E, k)}, [&]() -> std::string {
          std::vector<Routing> routings;
          for (int q = 0; q < ranks; ++q) routings.push_back(random_routing(12, E, k, unsigned(q * 101 + E + k)));
          const std::vector<std::int64_t> kept = kept_counts(routings, E);
          const int local = E / ranks;
          for (int rank = 0; rank < ranks; ++rank) {
            const DispatchPlan p = plan_dispatch(routings[std::size_t(rank)], kept, rank, ranks);
            const Routing& r = routings[std::size_t(rank)];
            std::vector<int> order;
            for (int e = 0; e < E; ++e)
              for (std::size_t a = 0; a < r.expert.size(); ++a)
                if (r.expert[a] == e && r.kept[a]) order.push_back(int(a));
            if (p.send_order != order)
              return fmt::format("rank {}'s send_order has {} entries{}; expected its {} kept assignments by expert, "
                                 "each expert's in token order", rank, p.send_order.size(),
                                 p.send_order.size() == order.size() ? " in another order" : "", order.size());
            for (int q = 0; q < ranks; ++q) {
              std::int64_t send = 0, recv = 0;
              for (int i = 0; i < local; ++i) {
                send += kept[std::size_t(rank) * E + q * local + i];
                recv += kept[std::size_t(q) * E + rank * local + i];
              }
              if (p.send_rows.size() != std::size_t(ranks) || p.send_rows[std::size_t(q)] != send)
                return fmt::format("rank {} sends rank {} {} rows; expected {} (its kept assignments to experts "
                                   "{}..{})", rank, q, p.send_rows.size() == std::size_t(ranks) ?
                                   p.send_rows[std::size_t(q)] : -1, send, q * local, (q + 1) * local - 1);
              if (p.recv_rows.size() != std::size_t(ranks) || p.recv_rows[std::size_t(q)] != recv)
                return fmt::format("rank {} receives {} rows from rank {}; expected {}", rank,
                                   p.recv_rows.size() == std::size_t(ranks) ? p.recv_rows[std::size_t(q)] : -1, q,
                                   recv);
            }
            // Expert i's rows: from each rank q in turn, where q's rows for expert i sit in the received buffer.
            std::vector<int> rows, offsets = {0};
            for (int i = 0; i < local; ++i) {
              std::int64_t at = 0;
              for (int q = 0; q < ranks; ++q) {
                const std::int64_t* from = &kept[std::size_t(q) * E + rank * local];
                const std::int64_t first = at + std::accumulate(from, from + i, std::int64_t(0));
                for (std::int64_t n = 0; n < from[i]; ++n) rows.push_back(int(first + n));
                at += std::accumulate(from, from + local, std::int64_t(0));
              }
              offsets.push_back(int(rows.size()));
            }
            if (p.expert_offsets != offsets)
              return fmt::format("rank {}'s expert_offsets: {}; expected {} (expert i's rows begin after the rows "
                                 "of the experts before it, and the last entry is their total)", rank,
                                 fmt::join(p.expert_offsets, " "), fmt::join(offsets, " "));
            for (std::size_t j = 0; j < rows.size(); ++j)
              if (p.expert_rows[j] != rows[j])
                return fmt::format("rank {}'s expert_rows[{}] is received row {}; expected {} (each expert's rows from "
                                   "rank 0 first, then rank 1, ...)", rank, j, p.expert_rows[j], rows[j]);
          }
          return "";
        });
  sweep.report("send_order: for each expert in turn, this rank's kept assignments to it in token order; the received "
               "buffer holds rank 0's rows, then rank 1's, each by expert.");
}

TEST(plan_dispatch, EachRankSendsTheBytesItsKeptAssignmentsNeed) {
  Sweep sweep("plan_dispatch");
  for (int ranks : {2, 4})
    sweep.check({.p = ranks, .label = fmt::format("ep={}", ranks)}, [&]() -> std::string {
      const int C = 8, N = 16;
      const MoeConfig config{.experts = 8, .top_k = 2, .capacity_factor = 0.75, .balance = Balance::none};
      std::vector<std::string> wrong(static_cast<std::size_t>(ranks));
      const Observed run = run_ranks(ranks, [&](Comm& c) {
        Arena dense_count(nullptr, nullptr), expert_count(nullptr, nullptr);
        MoeLayer(dense_count, expert_count, C, config, ranks, c.rank());
        std::vector<float> dense(dense_count.allocated(), 0.1f), dense_grad(dense.size()),
            experts(expert_count.allocated()), expert_grad(experts.size()), x(std::size_t(N) * C), y(x.size());
        for (std::size_t i = 0; i < dense.size(); ++i) dense[i] = float(std::sin(double(i)));
        for (std::size_t i = 0; i < x.size(); ++i) x[i] = float(std::cos(double(i + std::size_t(c.rank()) * 977)));
        Arena d(dense.data(), dense_grad.data()), e(experts.data(), expert_grad.data());
        MoeLayer layer(d, e, C, config, ranks, c.rank());
        layer.forward(c, y.data(), x.data(), N);
        std::int64_t off_rank = 0;
        const int local = 8 / ranks;
        for (std::size_t a = 0; a < layer.routing().expert.size(); ++a)
          off_rank += layer.routing().kept[a] && layer.routing().expert[a] / local != c.rank();
        const std::int64_t want = off_rank * C * std::int64_t(sizeof(float)), got = layer.traffic().to_experts;
        if (got != want)
          wrong[std::size_t(c.rank())] = fmt::format("rank {} sent {} bytes to the experts on other ranks; its {} "
                                                     "kept assignments to them are {} bytes", c.rank(), got, off_rank,
                                                     want);
      });
      if (!run.error.empty()) return run.error;
      for (const std::string& w : wrong)
        if (!w.empty()) return w;
      return "";
    });
  sweep.report("a dropped assignment is not sent, and one to an expert on this rank stays here.");
}

TEST(plan_dispatch, TheLayerIsANaiveMoeAndTrainsToOneRanksWeights) {
  trains_like_one_rank("plan_dispatch", "the experts must see every rank's tokens for them, in the batch's order.");
}

// ---- 9.3 combine_with_gates ---------------------------------------------------------

TEST(combine_with_gates, EachTokenSumsItsOutputsWeightedByItsGates) {
  Sweep sweep("combine_with_gates");
  for (int k : {1, 2, 4})
    for (int C : {1, 8})
      sweep.check({.label = fmt::format("k={}, C={}", k, C)}, [&]() -> std::string {
        const int N = 10;
        const Routing r = random_routing(N, 8, k, unsigned(k * 13 + C));
        std::vector<int> order;
        for (std::size_t a = r.expert.size(); a-- > 0;)  // any order: the plan's is by expert
          if (r.kept[a]) order.push_back(int(a));
        std::vector<float> returned(order.size() * std::size_t(C)), y(std::size_t(N) * C, 99.0f);
        for (std::size_t i = 0; i < returned.size(); ++i) returned[i] = float(i % 17) - 8;
        combine_with_gates(r, order, returned.data(), C, y.data());
        for (int t = 0; t < N; ++t)
          for (int c = 0; c < C; ++c) {
            double want = 0;
            for (std::size_t p = 0; p < order.size(); ++p)
              if (order[p] / k == t) want += double(r.gate[std::size_t(order[p])]) * returned[p * std::size_t(C) + c];
            const float got = y[std::size_t(t) * C + c];
            if (std::abs(got - want) > 1e-4 * (1 + std::abs(want)))
              return fmt::format("token {}, channel {}: got {:g}, expected {:g} (the sum of its kept outputs times "
                                 "their gates{})", t, c, got, want, want == 0 ? "; none kept: 0" : "");
          }
        return "";
      });
  sweep.report("send_order[p] is assignment a = t k + j; returned row p is its expert's output: add gate[a] times it "
               "to token t's row.");
}

// On a GPU y and returned are device memory: the fenced device (memory the
// host cannot touch) stops any host read or write of them.
TEST(combine_with_gates, CombinesWhereTheRowsLiveOnTheFencedDevice) {
  Sweep sweep("combine_with_gates");
  sweep.check({.label = "k=2, C=8, fenced"}, [&]() -> std::string {
    const int N = 10, C = 8;
    const Routing r = random_routing(N, 8, 2, 29u);
    std::vector<int> order;
    for (std::size_t a = 0; a < r.expert.size(); ++a)
      if (r.kept[a]) order.push_back(int(a));
    std::vector<float> returned(order.size() * std::size_t(C)), on_host(std::size_t(N) * C);
    for (std::size_t i = 0; i < returned.size(); ++i) returned[i] = float(i % 13) - 6;
    for (std::size_t p = 0; p < order.size(); ++p)  // the weighted sum, as the first test checks it
      for (int c = 0; c < C; ++c)
        on_host[std::size_t(order[p] / r.k) * C + c] += r.gate[std::size_t(order[p])] * returned[p * C + c];
    const Tensor fenced_returned = Tensor::from_host(returned, {returned.size()}, DeviceKind::fenced);
    Tensor fenced_y({on_host.size()}, DeviceKind::fenced);
    try {
      combine_with_gates(r, order, fenced_returned.data(), C, fenced_y.data());
    } catch (const std::exception& e) {
      return e.what();
    }
    const std::vector<float> got = fenced_y.to_host();
    for (std::size_t i = 0; i < got.size(); ++i)
      if (std::abs(got[i] - on_host[i]) > 1e-5f * (1 + std::abs(on_host[i])))
        return fmt::format("y[{}] is {} on the fenced device, expected {}", i, got[i], on_host[i]);
    return "";
  });
  sweep.report("y and returned may be a GPU's memory: decide tokens and gates on the host, then add_rows.");
}

TEST(combine_with_gates, TheLayerIsANaiveMoeAndTrainsToOneRanksWeights) {
  trains_like_one_rank("combine_with_gates", "every rank combines its tokens' outputs with your function.");
}
