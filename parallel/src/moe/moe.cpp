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

// The elements of v added up (counts, sizes).
template <class T> T sum(const std::vector<T>& v) { return std::accumulate(v.begin(), v.end(), T(0)); }

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
  const std::int64_t all = sum(chosen), in = sum(kept);
  return all ? 1 - double(in) / double(all) : 0;
}

namespace {

std::vector<Mlp> mlps(Arena& params, int count, int C) {
  std::vector<Mlp> out;
  for (int i = 0; i < count; ++i) out.emplace_back(params, C);
  return out;
}

// Row r of a row-major buffer whose rows are `width` wide: the one place a row
// index becomes an offset, in std::size_t, so that no product overflows an int.
template <class T> T* row(T* rows, std::size_t r, std::size_t width) { return rows + r * width; }

// Row i of dst = row order[i] of src, rows `width` floats wide.
void gather_rows(float* dst, const float* src, std::span<const int> order, std::size_t width) {
  for (std::size_t i = 0; i < order.size(); ++i) std::copy_n(row(src, order[i], width), width, row(dst, i, width));
}

// Row order[i] of dst = row i of src: gather_rows' inverse.
void scatter_rows(float* dst, const float* src, std::span<const int> order, std::size_t width) {
  for (std::size_t i = 0; i < order.size(); ++i) std::copy_n(row(src, i, width), width, row(dst, order[i], width));
}

// The floats of each peer's rows, rows[q] x width: all_to_allv counts elements.
std::vector<std::size_t> floats_of(const std::vector<std::int64_t>& rows, std::size_t width) {
  std::vector<std::size_t> floats;
  for (std::int64_t n : rows) floats.push_back(n * width);
  return floats;
}

// Every rank's kept assignments per expert (ep x E), from every rank's chosen
// ones: an expert keeps capacity in rank order, each rank's as they come.
std::vector<std::int64_t> kept_by_rank(const std::vector<std::int64_t>& chosen, std::int64_t capacity, std::size_t E) {
  std::vector<std::int64_t> kept(chosen.size());
  for (std::size_t e = 0; e < E; ++e) {
    std::int64_t before = 0;
    for (std::size_t i = e; i < chosen.size(); i += E) {
      kept[i] = std::clamp<std::int64_t>(capacity - before, 0, chosen[i]);
      before += chosen[i];
    }
  }
  return kept;
}

// A plan the layer can run (exercise 9.2's, say): its sizes agree and every
// index is in range, else an error that says which.
void check_plan(const DispatchPlan& p, const Routing& r, std::size_t ranks, std::size_t local, const std::string& who) {
  const auto fail = [&](const std::string& what) { throw Error(fmt::format("{}: moe dispatch plan: {}", who, what)); };
  if (p.send_rows.size() != ranks || p.recv_rows.size() != ranks)
    fail(fmt::format("send_rows and recv_rows hold {} and {} counts, one a rank: {}", p.send_rows.size(),
                     p.recv_rows.size(), ranks));
  if (std::ssize(p.send_order) != sum(p.send_rows))
    fail(fmt::format("send_order holds {} assignments, send_rows add up to {}", p.send_order.size(), sum(p.send_rows)));
  for (int a : p.send_order)
    if (a < 0 || a >= std::ssize(r.expert))
      fail(fmt::format("send_order names assignment {}; there are {}", a, r.expert.size()));
  if (p.expert_offsets.size() != local + 1 || p.expert_offsets.front() != 0 ||
      p.expert_offsets.back() != std::ssize(p.expert_rows) ||
      !std::is_sorted(p.expert_offsets.begin(), p.expert_offsets.end()))
    fail(fmt::format("expert_offsets must run from 0 to expert_rows' {} in {} steps, one an expert",
                     p.expert_rows.size(), local));
  if (std::ssize(p.expert_rows) != sum(p.recv_rows))
    fail(fmt::format("expert_rows holds {} rows, recv_rows add up to {}", p.expert_rows.size(), sum(p.recv_rows)));
  for (int received : p.expert_rows)
    if (received < 0 || received >= std::ssize(p.expert_rows))
      fail(fmt::format("expert_rows names received row {}; there are {}", received, p.expert_rows.size()));
}

// The floats of an MLP's activations on one row (and as many of their gradients).
std::size_t mlp_acts_per_row(int C) {
  Arena count(nullptr, nullptr);
  Mlp::Acts(count, 1, C);
  return count.allocated();
}

// An MLP's forward FLOPs on n rows: two matmuls of C x 4C (a backward costs twice).
double mlp_flops(int n, int C) { return 2 * ops::matmul_flops(n, C, 4 * C); }

}  // namespace

MoeLayer::MoeLayer(Arena& dense, Arena& expert_params, int channels, const MoeConfig& config, int ep_size,
                   int ep_rank)
    : router(dense, channels, config.experts, false),
      shared(mlps(dense, config.shared_experts, channels)),
      experts(mlps(expert_params, config.experts / ep_size, channels)),
      config_(config),
      ep_size_(ep_size),
      rank_(ep_rank),
      C_(channels),
      bias_(config.experts, 0.0f) {}

int MoeLayer::first_expert() const { return rank_ * int(experts.size()); }

void MoeLayer::exchange(Comm& ep, const float* rows, float* received, bool to_experts) {
  const auto& send = to_experts ? send_counts_ : recv_counts_;
  const auto& recv = to_experts ? recv_counts_ : send_counts_;
  ep.all_to_allv({const_cast<float*>(rows), sum(send), DType::f32}, send, {received, sum(recv), DType::f32}, recv);
  std::int64_t& sent = to_experts ? traffic_.to_experts : traffic_.from_experts;
  const std::size_t me = ep.rank();
  for (std::size_t q = 0; q < send.size(); ++q)
    if (q != me) sent += send[q] * sizeof(float);
}

void MoeLayer::forward(Comm& ep, float* y, const float* x, int N) {
  if (ep.size() != ep_size_ || ep.rank() != rank_)
    throw Error(fmt::format("rank {}: moe forward: built as rank {} of an ep group of {}, called on rank {} of {}",
                            ep.rank(), rank_, ep_size_, ep.rank(), ep.size()));
  N_ = N, traffic_ = {}, phases_ = {};
  const std::vector<std::int64_t> kept = route(ep, x);
  dispatch(ep, x, kept);
  const std::vector<float> outputs = run_experts(ep);
  combine(ep, y, x, outputs);
}

// Route: each token's probabilities, its top k, and every rank's count per
// expert (one small all_gather); then the capacity, and the balance loss.
std::vector<std::int64_t> MoeLayer::route(Comm& ep, const float* x) {
  const double started = ep.now();
  choose_experts(x);
  ep.record_compute("route", started, ops::matmul_flops(N_, C_, config_.experts));
  std::vector<std::int64_t> mine(config_.experts, 0), chosen(ep_size_ * mine.size());
  for (int e : routing_.expert) ++mine[e];
  ep.all_gather(view_of(mine), view_of(chosen));
  const std::int64_t group_tokens = sum(chosen) / config_.top_k;
  const std::vector<std::int64_t> kept = keep_within_capacity(chosen, group_tokens);
  if (config_.balance == Balance::aux) stats_.balance_loss = balance_loss(ep, group_tokens);
  phases_.route += ep.now() - started;
  return kept;
}

// Each token's probabilities (the router, a softmax) and its top k by them,
// plus DeepSeek-V3's bias with Balance::bias (for choosing only); all kept for now.
void MoeLayer::choose_experts(const float* x) {
  const Device& d = device(DeviceKind::cpu);
  const std::size_t E = config_.experts;
  std::vector<float> logits(N_ * E);
  router.forward(d, logits.data(), x, N_);
  probs_.resize(logits.size());
  ops::softmax_forward(probs_.data(), logits.data(), N_, E);
  std::vector<float> scores = probs_;
  if (config_.balance == Balance::bias)
    for (std::size_t i = 0; i < scores.size(); ++i) scores[i] += bias_[i % E];
  routing_ = select_top_k(scores, probs_, E, config_.top_k);
}

// Capacity over the group's tokens; what this rank's assignments keep of it
// follows from the counts of the ranks before it. Fills stats_ (but the
// balance loss) and drops this rank's assignments past it.
std::vector<std::int64_t> MoeLayer::keep_within_capacity(const std::vector<std::int64_t>& chosen,
                                                         std::int64_t group_tokens) {
  const std::size_t E = config_.experts;
  stats_ = {std::vector<std::int64_t>(E, 0), std::vector<std::int64_t>(E, 0),
            expert_capacity(config_.capacity_factor, group_tokens, config_.top_k, config_.experts), 0};
  const std::vector<std::int64_t> kept = kept_by_rank(chosen, stats_.capacity, E);
  std::vector<std::int64_t> room(E, stats_.capacity);
  for (std::size_t i = 0; i < chosen.size(); ++i) {  // i = q E + e: rank q's count for expert e
    stats_.chosen[i % E] += chosen[i];
    stats_.kept[i % E] += kept[i];
    if (i < rank_ * E) room[i % E] -= chosen[i];
  }
  for (std::int64_t& left : room) left = std::max<std::int64_t>(left, 0);
  drop_over_capacity(routing_, room);
  return kept;
}

// Switch's auxiliary loss, alpha E sum_e f_e P_e: f_e the share of the group's
// assignments that chose e, P_e its mean probability over the group's tokens
// (each rank's sum of probabilities, summed).
double MoeLayer::balance_loss(Comm& ep, std::int64_t group_tokens) const {
  const std::size_t E = config_.experts;
  std::vector<double> mean(E, 0);
  for (std::size_t t = 0; t < N_; ++t)
    for (std::size_t e = 0; e < E; ++e) mean[e] += row(probs_.data(), t, E)[e];
  ep.all_reduce(view_of(mean), ReduceOp::sum);
  double loss = 0;
  for (std::size_t e = 0; e < E; ++e)
    loss += double(stats_.chosen[e]) / double(config_.top_k * group_tokens) * mean[e] / double(group_tokens);
  return loss * (config_.aux_weight * config_.experts);
}

// Dispatch: the kept assignments' tokens to their experts' ranks, by the plan
// (exercise 9.2's), checked first.
void MoeLayer::dispatch(Comm& ep, const float* x, const std::vector<std::int64_t>& kept) {
  plan_ = plan_dispatch(routing_, kept, rank_, ep_size_);
  check_plan(plan_, routing_, ep_size_, experts.size(), ep.who());
  send_counts_ = floats_of(plan_.send_rows, C_);
  recv_counts_ = floats_of(plan_.recv_rows, C_);
  std::vector<float> rows(plan_.send_order.size() * C_);
  for (std::size_t p = 0; p < plan_.send_order.size(); ++p)
    std::copy_n(row(x, plan_.send_order[p] / config_.top_k, C_), C_, row(rows.data(), p, C_));
  received_.assign(sum(recv_counts_), 0.0f);
  const double started = ep.now();
  exchange(ep, rows.data(), received_.data(), true);
  phases_.dispatch += ep.now() - started;
}

// The experts, each on its rows from every rank, in rank order.
std::vector<float> MoeLayer::run_experts(Comm& ep) {
  const Device& d = device(DeviceKind::cpu);
  const double started = ep.now();
  const std::span<const int> rows = plan_.expert_rows;
  expert_in_.resize(rows.size() * C_);
  gather_rows(expert_in_.data(), received_.data(), rows, C_);
  expert_acts_.assign(rows.size() * mlp_acts_per_row(C_), 0.0f);
  expert_grads_.assign(expert_acts_.size(), 0.0f);
  std::vector<float> outputs(received_.size());
  Arena acts(expert_acts_.data(), expert_grads_.data());
  for (std::size_t i = 0; i < experts.size(); ++i) {
    const int first = plan_.expert_offsets[i], n = plan_.expert_offsets[i + 1] - first;
    const Mlp::Acts a(acts, n, C_);
    experts[i].forward(d, a, row(expert_in_.data(), first, C_), n);
    scatter_rows(outputs.data(), a.out.value, rows.subspan(first, n), C_);
  }
  ep.record_compute("experts", started, mlp_flops(rows.size(), C_));
  phases_.experts += ep.now() - started;
  return outputs;
}

// Combine: the outputs back to their tokens' ranks, weighted by the gates,
// and the shared experts' added.
void MoeLayer::combine(Comm& ep, float* y, const float* x, const std::vector<float>& outputs) {
  const double started = ep.now();
  returned_.assign(plan_.send_order.size() * C_, 0.0f);
  exchange(ep, outputs.data(), returned_.data(), false);
  const double summed = ep.now();
  combine_with_gates(routing_, plan_.send_order, returned_.data(), C_, y);
  add_shared_experts(y, x);
  ep.record_compute("combine", summed, mlp_flops(N_, C_) * double(shared.size()));
  phases_.combine += ep.now() - started;
}

// The shared experts (DeepSeek-MoE) on every token of this rank, added to y.
void MoeLayer::add_shared_experts(float* y, const float* x) {
  const Device& d = device(DeviceKind::cpu);
  shared_acts_.assign(shared.size() * N_ * mlp_acts_per_row(C_), 0.0f);
  shared_grads_.assign(shared_acts_.size(), 0.0f);
  Arena acts(shared_acts_.data(), shared_grads_.data());
  for (const Mlp& s : shared) {
    const Mlp::Acts a(acts, N_, C_);
    s.forward(d, a, x, N_);
    for (std::size_t i = 0; i < N_ * C_; ++i) y[i] += a.out.value[i];
  }
}

// forward's phases in reverse; dgate, the gates' gradient, from combine to the router.
void MoeLayer::backward(Comm& ep, float* dx, const float* dy, const float* x) {
  std::vector<float> dgate(routing_.expert.size(), 0.0f);
  const std::vector<float> output_grads = combine_backward(ep, dx, dgate, dy, x);
  const std::vector<float> input_grads = experts_backward(ep, output_grads);
  dispatch_backward(ep, dx, input_grads);
  route_backward(ep, dx, dgate, x);
}

// Combine's backward: the shared experts', each gate's gradient (dy . its
// expert's output), and each kept assignment's output gradient, gate x dy, sent
// to its expert; returns those gradients as the experts' ranks received them.
std::vector<float> MoeLayer::combine_backward(Comm& ep, float* dx, std::vector<float>& dgate, const float* dy,
                                              const float* x) {
  const double started = ep.now();
  shared_experts_backward(dx, dy, x);
  std::vector<float> rows(plan_.send_order.size() * C_);
  for (std::size_t p = 0; p < plan_.send_order.size(); ++p) {
    const int a = plan_.send_order[p];
    const float *g = row(dy, a / config_.top_k, C_), *out = row(returned_.data(), p, C_);
    float* sent = row(rows.data(), p, C_);
    for (std::size_t c = 0; c < C_; ++c) {
      dgate[a] += g[c] * out[c];
      sent[c] = routing_.gate[a] * g[c];
    }
  }
  ep.record_compute("combine backward", started, 2 * mlp_flops(N_, C_) * double(shared.size()));
  std::vector<float> output_grads(received_.size());
  exchange(ep, rows.data(), output_grads.data(), true);
  phases_.combine += ep.now() - started;
  return output_grads;
}

// The shared experts' backward, each on dy, into dx.
void MoeLayer::shared_experts_backward(float* dx, const float* dy, const float* x) {
  const Device& d = device(DeviceKind::cpu);
  Arena acts(shared_acts_.data(), shared_grads_.data());
  for (const Mlp& s : shared) {
    const Mlp::Acts a(acts, N_, C_);
    std::copy_n(dy, N_ * C_, a.out.grad);
    s.backward(d, dx, a, x, N_);
  }
}

// The experts' backward, on the rows as the forward grouped them; returns their
// inputs' gradients in the received rows' order, to go back.
std::vector<float> MoeLayer::experts_backward(Comm& ep, const std::vector<float>& output_grads) {
  const Device& d = device(DeviceKind::cpu);
  const double started = ep.now();
  const std::span<const int> rows = plan_.expert_rows;
  std::vector<float> din_expert(expert_in_.size(), 0.0f);
  Arena acts(expert_acts_.data(), expert_grads_.data());
  for (std::size_t i = 0; i < experts.size(); ++i) {
    const int first = plan_.expert_offsets[i], n = plan_.expert_offsets[i + 1] - first;
    const Mlp::Acts a(acts, n, C_);
    gather_rows(a.out.grad, output_grads.data(), rows.subspan(first, n), C_);
    experts[i].backward(d, row(din_expert.data(), first, C_), a, row(expert_in_.data(), first, C_), n);
  }
  std::vector<float> input_grads(output_grads.size(), 0.0f);
  scatter_rows(input_grads.data(), din_expert.data(), rows, C_);
  ep.record_compute("experts backward", started, 2 * mlp_flops(rows.size(), C_));
  phases_.experts += ep.now() - started;
  return input_grads;
}

// Dispatch's backward: the inputs' gradients back to the tokens' ranks, each
// added to its token's.
void MoeLayer::dispatch_backward(Comm& ep, float* dx, const std::vector<float>& input_grads) {
  const double started = ep.now();
  std::vector<float> back(plan_.send_order.size() * C_);
  exchange(ep, input_grads.data(), back.data(), false);
  for (std::size_t p = 0; p < plan_.send_order.size(); ++p) {
    float* g = row(dx, plan_.send_order[p] / config_.top_k, C_);
    const float* b = row(back.data(), p, C_);
    for (std::size_t c = 0; c < C_; ++c) g[c] += b[c];
  }
  phases_.dispatch += ep.now() - started;
}

// The router: the gates' gradient to the probabilities', the balance loss's,
// then the softmax's.
void MoeLayer::route_backward(Comm& ep, float* dx, const std::vector<float>& dgate, const float* x) {
  const Device& d = device(DeviceKind::cpu);
  const double started = ep.now();
  std::vector<float> dprobs = probs_gradient(dgate);
  if (config_.balance == Balance::aux) add_balance_gradient(dprobs);
  std::vector<float> dlogits(probs_.size(), 0.0f);
  ops::softmax_backward(dlogits.data(), probs_.data(), dprobs.data(), N_, config_.experts);
  router.backward(d, dx, dlogits.data(), x, N_);
  ep.record_compute("route backward", started, 2 * ops::matmul_flops(N_, C_, config_.experts));
  phases_.route += ep.now() - started;
}

// The gates' gradient through their renormalization, g_j = p_j / S:
// dp_j = (dg_j - sum_i dg_i g_i) / S.
std::vector<float> MoeLayer::probs_gradient(const std::vector<float>& dgate) const {
  const std::size_t E = config_.experts, k = config_.top_k;
  std::vector<float> dprobs(probs_.size(), 0.0f);
  for (std::size_t t = 0; t < N_; ++t) {
    const float* p = row(probs_.data(), t, E);
    float* dp = row(dprobs.data(), t, E);
    float sum = 0, dot = 0;
    for (std::size_t j = t * k; j < (t + 1) * k; ++j) {
      sum += p[routing_.expert[j]];
      dot += dgate[j] * routing_.gate[j];
    }
    for (std::size_t j = t * k; j < (t + 1) * k; ++j) dp[routing_.expert[j]] += (dgate[j] - dot) / sum;
  }
  return dprobs;
}

// d/dp_te of alpha E sum_e f_e P_e, P_e a mean over the group's tokens: alpha E f_e
// over them, taken here over this rank's N as the rest of the loss is (the
// ranks' gradients are averaged).
void MoeLayer::add_balance_gradient(std::vector<float>& dprobs) const {
  const std::size_t E = config_.experts;
  const std::int64_t assignments = sum(stats_.chosen);
  for (std::size_t e = 0; e < E; ++e) {
    const float g = float(config_.aux_weight * config_.experts * double(stats_.chosen[e]) / double(assignments) / N_);
    for (std::size_t t = 0; t < N_; ++t) row(dprobs.data(), t, E)[e] += g;
  }
}

void MoeLayer::update_bias() {
  if (config_.balance != Balance::bias) return;
  const double mean = double(sum(stats_.chosen)) / config_.experts;
  for (int e = 0; e < config_.experts; ++e) {
    const double load = double(stats_.chosen[e]);
    bias_[e] += float(load > mean ? -config_.bias_rate : load < mean ? config_.bias_rate : 0);
  }
}

}  // namespace labkit
