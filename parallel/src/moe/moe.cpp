#include "labkit/parallel/moe.h"

#include <algorithm>
#include <charconv>
#include <numeric>
#include <string>

#include <fmt/format.h>

#include "labkit/device.h"
#include "labkit/error.h"
#include "labkit/ops.h"
#include "labkit/tensor.h"

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

void add_rows(float* y, const float* rows, std::span<const int> to, std::span<const float> weights, int C) {
  if (to.size() != weights.size())
    throw Error(fmt::format("add_rows: {} rows to add into and {} weights: one weight a row", to.size(),
                            weights.size()));
  if (to.empty()) return;
  const Device& d = device_of(y, rows);
  const IndexTensor index = IndexTensor::from_host(to, {to.size()}, d.kind);
  const Tensor scale = Tensor::from_host(weights, {weights.size()}, d.kind);
  d.scatter_add_rows(y, rows, index.data(), scale.data(), long(to.size()), C);
}

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
  device_ = &device_of(x, y);
  const std::vector<std::int64_t> kept = route(ep, x);
  dispatch(ep, x, kept);
  const Tensor outputs = run_experts(ep);
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

// Each token's probabilities (the router, a softmax, on the device) and its
// top k by them, plus DeepSeek-V3's bias with Balance::bias (for choosing
// only). Choosing is the host's: the N x E probabilities come over, a copy
// of a small tensor, and stay there for backward's bookkeeping.
void MoeLayer::choose_experts(const float* x) {
  const Device& d = *device_;
  const std::size_t E = config_.experts;
  Tensor logits({N_ * E}, d.kind);
  router.forward(d, logits.data(), x, N_);
  device_probs_ = Tensor({N_ * E}, d.kind);
  d.softmax_forward(device_probs_.data(), logits.data(), N_, E);
  probs_ = device_probs_.to_host();
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
    for (std::size_t e = 0; e < E; ++e) mean[e] += probs_[t * E + e];
  ep.all_reduce(view_of(mean), ReduceOp::sum);
  double loss = 0;
  for (std::size_t e = 0; e < E; ++e)
    loss += double(stats_.chosen[e]) / double(config_.top_k * group_tokens) * mean[e] / double(group_tokens);
  return loss * (config_.aux_weight * config_.experts);
}

// Dispatch: the kept assignments' tokens to their experts' ranks, by the plan
// (exercise 9.2's), checked first. The plan's rows cross to the device as
// indices: which token each sent row is, and (for the experts) which received
// row each of their inputs is.
void MoeLayer::dispatch(Comm& ep, const float* x, const std::vector<std::int64_t>& kept) {
  const Device& d = *device_;
  plan_ = plan_dispatch(routing_, kept, rank_, ep_size_);
  check_plan(plan_, routing_, ep_size_, experts.size(), ep.who());
  send_counts_ = floats_of(plan_.send_rows, C_);
  recv_counts_ = floats_of(plan_.recv_rows, C_);
  std::vector<int> tokens;
  std::vector<float> gates;
  for (const int a : plan_.send_order) tokens.push_back(a / config_.top_k), gates.push_back(routing_.gate[a]);
  sent_tokens_ = IndexTensor::from_host(tokens, {tokens.size()}, d.kind);
  sent_gates_ = Tensor::from_host(gates, {gates.size()}, d.kind);
  expert_rows_ = IndexTensor::from_host(plan_.expert_rows, {plan_.expert_rows.size()}, d.kind);
  Tensor rows({tokens.size() * C_}, d.kind);
  if (!tokens.empty())
    d.gather_rows(rows.data(), x, sent_tokens_.data(), nullptr, long(tokens.size()), int(C_));
  received_ = Tensor({sum(recv_counts_)}, d.kind);
  const double started = ep.now();
  exchange(ep, rows.data(), received_.data(), true);
  phases_.dispatch += ep.now() - started;
}

// The experts, each on its rows from every rank, in rank order.
Tensor MoeLayer::run_experts(Comm& ep) {
  const Device& d = *device_;
  const double started = ep.now();
  const std::size_t n = plan_.expert_rows.size();
  expert_in_ = Tensor({n * C_}, d.kind);
  if (n) d.gather_rows(expert_in_.data(), received_.data(), expert_rows_.data(), nullptr, long(n), int(C_));
  expert_acts_ = Tensor({n * mlp_acts_per_row(C_)}, d.kind);
  expert_grads_ = Tensor({expert_acts_.size()}, d.kind);
  Tensor outputs({received_.size()}, d.kind);  // zeros: each row is added into once
  Arena acts(expert_acts_.data(), expert_grads_.data());
  for (std::size_t i = 0; i < experts.size(); ++i) {
    const int first = plan_.expert_offsets[i], rows = plan_.expert_offsets[i + 1] - first;
    const Mlp::Acts a(acts, rows, C_);
    if (rows == 0) continue;  // an expert no token reached (its buffers, empty, point past the others')
    experts[i].forward(d, a, expert_in_.data() + std::size_t(first) * C_, rows);
    d.scatter_add_rows(outputs.data(), a.out.value, expert_rows_.data() + first, nullptr, rows, int(C_));
  }
  ep.record_compute("experts", started, mlp_flops(n, C_));
  phases_.experts += ep.now() - started;
  return outputs;
}

// Combine: the outputs back to their tokens' ranks, weighted by the gates
// (exercise 9.3's), and the shared experts' added.
void MoeLayer::combine(Comm& ep, float* y, const float* x, const Tensor& outputs) {
  const double started = ep.now();
  returned_ = Tensor({plan_.send_order.size() * C_}, device_->kind);
  exchange(ep, outputs.data(), returned_.data(), false);
  const double summed = ep.now();
  combine_with_gates(routing_, plan_.send_order, returned_.data(), C_, y);
  add_shared_experts(y, x);
  ep.record_compute("combine", summed, mlp_flops(N_, C_) * double(shared.size()));
  phases_.combine += ep.now() - started;
}

// The shared experts (DeepSeek-MoE) on every token of this rank, added to y.
void MoeLayer::add_shared_experts(float* y, const float* x) {
  const Device& d = *device_;
  shared_acts_ = Tensor({shared.size() * N_ * mlp_acts_per_row(C_)}, d.kind);
  shared_grads_ = Tensor({shared_acts_.size()}, d.kind);
  Arena acts(shared_acts_.data(), shared_grads_.data());
  for (const Mlp& s : shared) {
    const Mlp::Acts a(acts, N_, C_);
    s.forward(d, a, x, N_);
    d.axpy(y, 1.0f, a.out.value, long(N_ * C_));
  }
}

// forward's phases in reverse; dgate, the gates' gradient, from combine to the router.
void MoeLayer::backward(Comm& ep, float* dx, const float* dy, const float* x) {
  std::vector<float> dgate(routing_.expert.size(), 0.0f);
  const Tensor output_grads = combine_backward(ep, dx, dgate, dy, x);
  const Tensor input_grads = experts_backward(ep, output_grads);
  dispatch_backward(ep, dx, input_grads);
  route_backward(ep, dx, dgate, x);
}

// Combine's backward: the shared experts', each gate's gradient (dy . its
// expert's output, a dot per sent row, brought to the host), and each kept
// assignment's output gradient, gate x dy, sent to its expert; returns those
// gradients as the experts' ranks received them.
Tensor MoeLayer::combine_backward(Comm& ep, float* dx, std::vector<float>& dgate, const float* dy, const float* x) {
  const Device& d = *device_;
  const double started = ep.now();
  shared_experts_backward(dx, dy, x);
  const long sent = long(plan_.send_order.size());
  Tensor rows({std::size_t(sent) * C_}, d.kind), dots({std::size_t(sent)}, d.kind);
  if (sent) {
    d.row_dots(dots.data(), dy, sent_tokens_.data(), returned_.data(), sent, int(C_));
    d.gather_rows(rows.data(), dy, sent_tokens_.data(), sent_gates_.data(), sent, int(C_));
  }
  const std::vector<float> gate_grads = dots.to_host();
  for (std::size_t p = 0; p < gate_grads.size(); ++p) dgate[plan_.send_order[p]] += gate_grads[p];
  ep.record_compute("combine backward", started, 2 * mlp_flops(N_, C_) * double(shared.size()));
  Tensor output_grads({received_.size()}, d.kind);
  exchange(ep, rows.data(), output_grads.data(), true);
  phases_.combine += ep.now() - started;
  return output_grads;
}

// The shared experts' backward, each on dy, into dx.
void MoeLayer::shared_experts_backward(float* dx, const float* dy, const float* x) {
  const Device& d = *device_;
  Arena acts(shared_acts_.data(), shared_grads_.data());
  for (const Mlp& s : shared) {
    const Mlp::Acts a(acts, N_, C_);
    d.copy(a.out.grad, dy, N_ * C_ * sizeof(float));
    s.backward(d, dx, a, x, N_);
  }
}

// The experts' backward, on the rows as the forward grouped them; returns their
// inputs' gradients in the received rows' order, to go back.
Tensor MoeLayer::experts_backward(Comm& ep, const Tensor& output_grads) {
  const Device& d = *device_;
  const double started = ep.now();
  const std::size_t n = plan_.expert_rows.size();
  Tensor din_expert({expert_in_.size()}, d.kind);
  float* din = din_expert.data();
  Arena acts(expert_acts_.data(), expert_grads_.data());
  for (std::size_t i = 0; i < experts.size(); ++i) {
    const int first = plan_.expert_offsets[i], rows = plan_.expert_offsets[i + 1] - first;
    const Mlp::Acts a(acts, rows, C_);
    if (rows == 0) continue;
    d.gather_rows(a.out.grad, output_grads.data(), expert_rows_.data() + first, nullptr, rows, int(C_));
    experts[i].backward(d, din + std::size_t(first) * C_, a, expert_in_.data() + std::size_t(first) * C_, rows);
  }
  Tensor input_grads({output_grads.size()}, d.kind);
  if (n) d.scatter_add_rows(input_grads.data(), din, expert_rows_.data(), nullptr, long(n), int(C_));
  ep.record_compute("experts backward", started, 2 * mlp_flops(n, C_));
  phases_.experts += ep.now() - started;
  return input_grads;
}

// Dispatch's backward: the inputs' gradients back to the tokens' ranks, each
// added to its token's.
void MoeLayer::dispatch_backward(Comm& ep, float* dx, const Tensor& input_grads) {
  const Device& d = *device_;
  const double started = ep.now();
  const long sent = long(plan_.send_order.size());
  Tensor back({std::size_t(sent) * C_}, d.kind);
  exchange(ep, input_grads.data(), back.data(), false);
  if (sent) d.scatter_add_rows(dx, back.data(), sent_tokens_.data(), nullptr, sent, int(C_));
  phases_.dispatch += ep.now() - started;
}

// The router: the gates' gradient to the probabilities' (on the host, where
// the choice was made), the balance loss's, then the softmax's and the
// router's on the device.
void MoeLayer::route_backward(Comm& ep, float* dx, const std::vector<float>& dgate, const float* x) {
  const Device& d = *device_;
  const double started = ep.now();
  std::vector<float> dprobs = probs_gradient(dgate);
  if (config_.balance == Balance::aux) add_balance_gradient(dprobs);
  const Tensor device_dprobs = Tensor::from_host(dprobs, {dprobs.size()}, d.kind);
  Tensor dlogits({dprobs.size()}, d.kind);
  d.softmax_backward(dlogits.data(), device_probs_.data(), device_dprobs.data(), N_,
                     config_.experts);
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
    const float* p = probs_.data() + t * E;
    float* dp = dprobs.data() + t * E;
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
    for (std::size_t t = 0; t < N_; ++t) dprobs[t * E + e] += g;
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
