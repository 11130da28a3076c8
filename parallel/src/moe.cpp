#include "labkit/parallel/moe.h"

#include <algorithm>
#include <charconv>
#include <numeric>
#include <string>

#include <fmt/format.h>

#include "labkit/error.h"
#include "labkit/ops.h"

namespace labkit {

std::string_view name_of(Balance b) {
  switch (b) {
    case Balance::none: return "none";
    case Balance::aux: return "aux";
    case Balance::bias: return "bias";
  }
  return "?";
}

Balance parse_balance(std::string_view name) {
  for (Balance b : {Balance::none, Balance::aux, Balance::bias})
    if (name == name_of(b)) return b;
  throw Error(
      fmt::format("balance '{}': none, aux (Switch's auxiliary loss) or bias (DeepSeek-V3's, loss-free)", name));
}

void check(const MoeConfig& c, int ep) {
  if (c.experts < 1) throw Error(fmt::format("moe: {} experts (at least 1)", c.experts));
  if (c.top_k < 1 || c.top_k > c.experts)
    throw Error(fmt::format("moe: top-k {}: each token goes to 1 to {} experts (there are {})", c.top_k, c.experts,
                            c.experts));
  if (!(c.capacity_factor > 0))
    throw Error(fmt::format("moe: capacity factor {}: it must be above 0 (1 is the tokens' fair share of each expert)",
                            c.capacity_factor));
  if (ep < 1 || c.experts % ep)
    throw Error(fmt::format("moe: ep {} does not divide the {} experts (each rank holds experts / ep of them)", ep,
                            c.experts));
  if (c.shared_experts < 0) throw Error(fmt::format("moe: {} shared experts (0 or more)", c.shared_experts));
}

namespace {

// The factor as the decimal it was written as, digits x 10^exponent: the
// shortest digits that read back as the same double (1.1 is 11 x 10^-1, not the
// binary fraction just above it that the double holds).
struct Decimal {
  std::int64_t digits = 0;
  int exponent = 0;
};

Decimal decimal_of(double x) {
  char text[32];  // "1.1e+00": at most 17 digits, a sign, a point and "e-308"
  const char* const begin = text;
  const char* const end = std::to_chars(text, text + sizeof text, x, std::chars_format::scientific).ptr;
  const char* const e = std::find(begin, end, 'e');
  Decimal d;
  int fraction_digits = 0;
  for (const char* c = begin; c != e; ++c) {
    if (*c == '.') fraction_digits = int(e - c - 1);
    else d.digits = d.digits * 10 + (*c - '0');
  }
  std::from_chars(e + 1 + (e[1] == '+'), end, d.exponent);
  d.exponent -= fraction_digits;
  return d;
}

}  // namespace

std::int64_t expert_capacity(double factor, std::int64_t tokens, int k, int experts) {
  // ceil(digits x 10^exponent x tokens x k / experts) in integers: the
  // product of doubles is off by one ulp where it is not exact (1.1 x 800 x 2
  // / 8 is 220.00000000000003, and its ceil 221). A ceil of a ceil over
  // positive integers is the ceil of the whole quotient, so each power of 10
  // below 1 divides in turn: 128 bits hold the rest for any factor up to 1e15.
  const Decimal d = decimal_of(factor);
  using Wide = __int128;
  Wide numerator = Wide(d.digits) * tokens * k;
  for (int e = 0; e < d.exponent; ++e) numerator *= 10;
  const auto ceil_div = [](Wide a, Wide b) { return (a + b - 1) / b; };
  Wide capacity = ceil_div(numerator, experts);
  for (int e = d.exponent; e < 0 && capacity > 1; ++e) capacity = ceil_div(capacity, 10);
  return std::int64_t(capacity);
}

double RoutingStats::drop_rate() const {
  const std::int64_t all = std::accumulate(chosen.begin(), chosen.end(), std::int64_t(0));
  const std::int64_t in = std::accumulate(kept.begin(), kept.end(), std::int64_t(0));
  return all ? 1 - double(in) / double(all) : 0;
}

namespace {

std::vector<Mlp> mlps(Carver& params, int count, int C) {
  std::vector<Mlp> out;
  for (int i = 0; i < count; ++i) out.emplace_back(params, C);
  return out;
}

std::size_t total(const std::vector<std::size_t>& counts) {
  return std::accumulate(counts.begin(), counts.end(), std::size_t(0));
}

// Every rank's kept assignments per expert (ep x E), from every rank's chosen
// ones: an expert keeps capacity in rank order, each rank's as they come.
std::vector<std::int64_t> kept_by_rank(const std::vector<std::int64_t>& chosen, std::int64_t capacity, int E) {
  std::vector<std::int64_t> kept(chosen.size());
  for (int e = 0; e < E; ++e) {
    std::int64_t before = 0;
    for (std::size_t i = std::size_t(e); i < chosen.size(); i += std::size_t(E)) {
      kept[i] = std::clamp<std::int64_t>(capacity - before, 0, chosen[i]);
      before += chosen[i];
    }
  }
  return kept;
}

// A plan the layer can run (exercise 9.2's, say): its sizes agree and every
// index is in range, else an error that says which.
void check_plan(const DispatchPlan& p, const Routing& r, int ranks, int local, const std::string& who) {
  const auto sum = [](const std::vector<std::int64_t>& v) {
    return std::accumulate(v.begin(), v.end(), std::int64_t(0));
  };
  const auto fail = [&](const std::string& what) { throw Error(fmt::format("{}: moe dispatch plan: {}", who, what)); };
  if (p.send_rows.size() != std::size_t(ranks) || p.recv_rows.size() != std::size_t(ranks))
    fail(fmt::format("send_rows and recv_rows hold {} and {} counts, one a rank: {}", p.send_rows.size(),
                     p.recv_rows.size(), ranks));
  if (std::int64_t(p.send_order.size()) != sum(p.send_rows))
    fail(fmt::format("send_order holds {} assignments, send_rows add up to {}", p.send_order.size(), sum(p.send_rows)));
  for (int a : p.send_order)
    if (a < 0 || std::size_t(a) >= r.expert.size())
      fail(fmt::format("send_order names assignment {}; there are {}", a, r.expert.size()));
  if (p.expert_offsets.size() != std::size_t(local) + 1 || p.expert_offsets.front() != 0 ||
      p.expert_offsets.back() != int(p.expert_rows.size()) ||
      !std::is_sorted(p.expert_offsets.begin(), p.expert_offsets.end()))
    fail(fmt::format("expert_offsets must run from 0 to expert_rows' {} in {} steps, one an expert",
                     p.expert_rows.size(), local));
  if (std::int64_t(p.expert_rows.size()) != sum(p.recv_rows))
    fail(fmt::format("expert_rows holds {} rows, recv_rows add up to {}", p.expert_rows.size(), sum(p.recv_rows)));
  for (int row : p.expert_rows)
    if (row < 0 || row >= int(p.expert_rows.size()))
      fail(fmt::format("expert_rows names received row {}; there are {}", row, p.expert_rows.size()));
}

// The floats of an MLP's activations on one row (and as many of their gradients).
std::size_t mlp_acts_per_row(int C) {
  Carver count(nullptr, nullptr);
  Mlp::Acts(count, 1, C);
  return count.taken();
}

// An MLP's forward FLOPs on n rows: two matmuls of C x 4C (a backward costs twice).
double mlp_flops(int n, int C) { return 2 * ops::matmul_flops(n, C, 4 * C); }

}  // namespace

MoeLayer::MoeLayer(Carver& dense, Carver& expert_params, int channels, const MoeConfig& config, int ep_size,
                   int ep_rank)
    : router(dense, channels, config.experts, false),
      shared(mlps(dense, config.shared_experts, channels)),
      experts(mlps(expert_params, config.experts / ep_size, channels)),
      config_(config),
      C_(channels),
      ep_size_(ep_size),
      rank_(ep_rank),
      bias_(std::size_t(config.experts), 0.0f) {}

int MoeLayer::first_expert() const { return rank_ * int(experts.size()); }

void MoeLayer::exchange(Comm& ep, const float* rows, float* received, bool to_experts) {
  const auto& send = to_experts ? send_counts_ : recv_counts_;
  const auto& recv = to_experts ? recv_counts_ : send_counts_;
  ep.all_to_allv({const_cast<float*>(rows), total(send), DType::f32}, send, {received, total(recv), DType::f32}, recv);
  std::int64_t& sent = to_experts ? traffic_.to_experts : traffic_.from_experts;
  for (std::size_t q = 0; q < send.size(); ++q)
    if (int(q) != ep.rank()) sent += std::int64_t(send[q] * sizeof(float));
}

void MoeLayer::forward(Comm& ep, float* y, const float* x, int N) {
  const Device& d = device(DeviceKind::cpu);
  const int E = config_.experts, k = config_.top_k, G = ep_size_, C = C_, local = int(experts.size());
  if (ep.size() != G || ep.rank() != rank_)
    throw Error(fmt::format("rank {}: moe forward: built as rank {} of an ep group of {}, called on rank {} of {}",
                            ep.rank(), rank_, G, ep.rank(), ep.size()));
  N_ = N, traffic_ = {}, phases_ = {};

  // Route: each token's probabilities, its top k, and every rank's count per expert.
  const double route_started = ep.now();
  std::vector<float> logits(std::size_t(N) * E);
  router.forward(d, logits.data(), x, N);
  probs_.resize(logits.size());
  ops::softmax_forward(probs_.data(), logits.data(), N, E);
  std::vector<float> scores = probs_;
  if (config_.balance == Balance::bias)
    for (std::size_t i = 0; i < scores.size(); ++i) scores[i] += bias_[i % std::size_t(E)];
  routing_ = select_top_k(scores, probs_, E, k);
  ep.computed("route", route_started, ops::matmul_flops(N, C, E));
  std::vector<std::int64_t> mine(std::size_t(E), 0), chosen(std::size_t(G) * E);
  for (int e : routing_.expert) ++mine[std::size_t(e)];
  ep.all_gather(view_of(mine), view_of(chosen));

  // Capacity over the group's tokens; what each rank's assignments keep of it
  // follows from the counts of the ranks before it.
  const std::int64_t group_tokens = std::accumulate(chosen.begin(), chosen.end(), std::int64_t(0)) / k;
  stats_ = {std::vector<std::int64_t>(std::size_t(E), 0), std::vector<std::int64_t>(std::size_t(E), 0),
            expert_capacity(config_.capacity_factor, group_tokens, k, E), 0};
  const std::vector<std::int64_t> kept = kept_by_rank(chosen, stats_.capacity, E);
  std::vector<std::int64_t> room(static_cast<std::size_t>(E), stats_.capacity);
  for (std::size_t i = 0; i < chosen.size(); ++i) {
    stats_.chosen[i % std::size_t(E)] += chosen[i];
    stats_.kept[i % std::size_t(E)] += kept[i];
    if (int(i) / E < rank_) room[i % std::size_t(E)] -= chosen[i];
  }
  for (std::int64_t& left : room) left = std::max<std::int64_t>(left, 0);
  drop_over_capacity(routing_, room);
  if (config_.balance == Balance::aux) {
    // P_e over the group's tokens: each rank's sum of probabilities, summed.
    std::vector<double> mean(std::size_t(E), 0);
    for (int t = 0; t < N; ++t)
      for (int e = 0; e < E; ++e) mean[std::size_t(e)] += probs_[std::size_t(t) * E + e];
    ep.all_reduce(view_of(mean), ReduceOp::sum);
    for (int e = 0; e < E; ++e)
      stats_.balance_loss += double(stats_.chosen[std::size_t(e)]) / double(k * group_tokens) *
                             mean[std::size_t(e)] / double(group_tokens);
    stats_.balance_loss *= config_.aux_weight * E;
  }
  phases_.route += ep.now() - route_started;

  // Dispatch: the kept assignments' tokens to their experts' ranks.
  plan_ = plan_dispatch(routing_, kept, rank_, G);
  check_plan(plan_, routing_, G, local, ep.who());
  send_counts_.assign(std::size_t(G), 0);
  recv_counts_.assign(std::size_t(G), 0);
  for (int q = 0; q < G; ++q) {
    send_counts_[std::size_t(q)] = std::size_t(plan_.send_rows[std::size_t(q)]) * C;
    recv_counts_[std::size_t(q)] = std::size_t(plan_.recv_rows[std::size_t(q)]) * C;
  }
  std::vector<float> rows(plan_.send_order.size() * C);
  for (std::size_t p = 0; p < plan_.send_order.size(); ++p)
    std::copy_n(x + std::size_t(plan_.send_order[p] / k) * C, C, rows.data() + p * C);
  received_.assign(total(recv_counts_), 0.0f);
  double started = ep.now();
  exchange(ep, rows.data(), received_.data(), true);
  phases_.dispatch += ep.now() - started;

  // The experts, each on its rows from every rank, in rank order.
  started = ep.now();
  const int rows_in = int(plan_.expert_rows.size());
  expert_in_.resize(std::size_t(rows_in) * C);
  for (int r = 0; r < rows_in; ++r)
    std::copy_n(received_.data() + std::size_t(plan_.expert_rows[std::size_t(r)]) * C, C,
                expert_in_.data() + std::size_t(r) * C);
  expert_acts_.assign(std::size_t(rows_in) * mlp_acts_per_row(C), 0.0f);
  expert_grads_.assign(expert_acts_.size(), 0.0f);
  std::vector<float> out_rows(received_.size());
  {
    Carver acts(expert_acts_.data(), expert_grads_.data());
    for (int i = 0; i < local; ++i) {
      const int first = plan_.expert_offsets[std::size_t(i)], n = plan_.expert_offsets[std::size_t(i) + 1] - first;
      const Mlp::Acts a(acts, n, C);
      experts[std::size_t(i)].forward(d, a, expert_in_.data() + std::size_t(first) * C, n);
      for (int r = 0; r < n; ++r)
        std::copy_n(a.out.value + std::size_t(r) * C, C,
                    out_rows.data() + std::size_t(plan_.expert_rows[std::size_t(first + r)]) * C);
    }
  }
  ep.computed("experts", started, mlp_flops(rows_in, C));
  phases_.experts += ep.now() - started;

  // Combine: the outputs back to their tokens' ranks, weighted by the gates.
  started = ep.now();
  returned_.assign(rows.size(), 0.0f);
  exchange(ep, out_rows.data(), returned_.data(), false);
  const double summed = ep.now();
  combine_with_gates(routing_, plan_.send_order, returned_.data(), C, y);
  shared_acts_.assign(shared.size() * std::size_t(N) * mlp_acts_per_row(C), 0.0f);
  shared_grads_.assign(shared_acts_.size(), 0.0f);
  Carver acts(shared_acts_.data(), shared_grads_.data());
  for (const Mlp& s : shared) {
    const Mlp::Acts a(acts, N, C);
    s.forward(d, a, x, N);
    for (std::size_t i = 0; i < std::size_t(N) * C; ++i) y[i] += a.out.value[i];
  }
  ep.computed("combine", summed, mlp_flops(N, C) * double(shared.size()));
  phases_.combine += ep.now() - started;
}

void MoeLayer::backward(Comm& ep, float* dx, const float* dy, const float* x) {
  const Device& d = device(DeviceKind::cpu);
  const int E = config_.experts, k = config_.top_k, C = C_, N = N_, local = int(experts.size());

  // Combine's backward: the shared experts, each gate's gradient, and each
  // kept assignment's output gradient, gate x dy, sent to its expert.
  double started = ep.now();
  {
    Carver acts(shared_acts_.data(), shared_grads_.data());
    for (const Mlp& s : shared) {
      const Mlp::Acts a(acts, N, C);
      std::copy_n(dy, std::size_t(N) * C, a.out.grad);
      s.backward(d, dx, a, x, N);
    }
  }
  std::vector<float> dgate(routing_.expert.size(), 0.0f), rows(plan_.send_order.size() * C);
  for (std::size_t p = 0; p < plan_.send_order.size(); ++p) {
    const int a = plan_.send_order[p];
    const float* g = dy + std::size_t(a / k) * C;
    for (int c = 0; c < C; ++c) {
      dgate[std::size_t(a)] += g[c] * returned_[p * C + std::size_t(c)];
      rows[p * C + std::size_t(c)] = routing_.gate[std::size_t(a)] * g[c];
    }
  }
  ep.computed("combine backward", started, 2 * mlp_flops(N, C) * double(shared.size()));
  std::vector<float> received(received_.size());
  exchange(ep, rows.data(), received.data(), true);
  phases_.combine += ep.now() - started;

  // The experts' backward, on the rows as the forward grouped them.
  started = ep.now();
  std::vector<float> din(received.size(), 0.0f), din_expert(expert_in_.size(), 0.0f);
  {
    Carver acts(expert_acts_.data(), expert_grads_.data());
    for (int i = 0; i < local; ++i) {
      const int first = plan_.expert_offsets[std::size_t(i)], n = plan_.expert_offsets[std::size_t(i) + 1] - first;
      const Mlp::Acts a(acts, n, C);
      for (int r = 0; r < n; ++r)
        std::copy_n(received.data() + std::size_t(plan_.expert_rows[std::size_t(first + r)]) * C, C,
                    a.out.grad + std::size_t(r) * C);
      experts[std::size_t(i)].backward(d, din_expert.data() + std::size_t(first) * C, a,
                                       expert_in_.data() + std::size_t(first) * C, n);
    }
  }
  for (std::size_t r = 0; r < plan_.expert_rows.size(); ++r)
    std::copy_n(din_expert.data() + r * C, C, din.data() + std::size_t(plan_.expert_rows[r]) * C);
  ep.computed("experts backward", started, 2 * mlp_flops(int(plan_.expert_rows.size()), C));
  phases_.experts += ep.now() - started;

  // Dispatch's backward: the input gradients back to the tokens' ranks.
  started = ep.now();
  std::vector<float> back(rows.size());
  exchange(ep, din.data(), back.data(), false);
  for (std::size_t p = 0; p < plan_.send_order.size(); ++p) {
    float* g = dx + std::size_t(plan_.send_order[p] / k) * C;
    for (int c = 0; c < C; ++c) g[c] += back[p * C + std::size_t(c)];
  }
  phases_.dispatch += ep.now() - started;

  // The router: the gates' gradient through their renormalization, g_j = p_j / S
  // (dp_j = (dg_j - sum_i dg_i g_i) / S), the balance loss's, then the softmax's.
  started = ep.now();
  std::vector<float> dprobs(probs_.size(), 0.0f);
  for (int t = 0; t < N; ++t) {
    const std::size_t first = std::size_t(t) * k;
    float sum = 0, dot = 0;
    for (int j = 0; j < k; ++j) {
      sum += probs_[std::size_t(t) * E + std::size_t(routing_.expert[first + j])];
      dot += dgate[first + j] * routing_.gate[first + j];
    }
    for (int j = 0; j < k; ++j)
      dprobs[std::size_t(t) * E + std::size_t(routing_.expert[first + j])] += (dgate[first + j] - dot) / sum;
  }
  if (config_.balance == Balance::aux) {
    // d/dp_te of alpha E sum_e f_e P_e, P_e a mean over the group's tokens: alpha E f_e
    // over them, taken here over this rank's N as the rest of the loss is (the
    // ranks' gradients are averaged).
    const std::int64_t assignments = std::accumulate(stats_.chosen.begin(), stats_.chosen.end(), std::int64_t(0));
    for (int e = 0; e < E; ++e) {
      const float g = float(config_.aux_weight * E * double(stats_.chosen[std::size_t(e)]) / double(assignments) / N);
      for (int t = 0; t < N; ++t) dprobs[std::size_t(t) * E + e] += g;
    }
  }
  std::vector<float> dlogits(probs_.size(), 0.0f);
  ops::softmax_backward(dlogits.data(), probs_.data(), dprobs.data(), N, E);
  router.backward(d, dx, dlogits.data(), x, N);
  ep.computed("route backward", started, 2 * ops::matmul_flops(N, C, E));
  phases_.route += ep.now() - started;
}

void MoeLayer::update_bias() {
  if (config_.balance != Balance::bias) return;
  const double mean =
      double(std::accumulate(stats_.chosen.begin(), stats_.chosen.end(), std::int64_t(0))) / config_.experts;
  for (int e = 0; e < config_.experts; ++e) {
    const double load = double(stats_.chosen[std::size_t(e)]);
    bias_[std::size_t(e)] += float(load > mean ? -config_.bias_rate : load < mean ? config_.bias_rate : 0);
  }
}

}  // namespace labkit
