// labkit::MoeLayer — a mixture-of-experts feed-forward layer with expert
// parallelism (Shazeer et al. 2017; GShard, Lepikhin et al. 2020; Switch,
// Fedus et al. 2021), in place of a block's MLP.
//
//   route     a router (linear, no bias) and a softmax give each token E
//             probabilities; it goes to its top k experts, with gates: the
//             chosen probabilities renormalized to sum to 1 (Mixtral's)
//   capacity  an expert takes at most ceil(capacity_factor x tokens x k / E)
//             of the step's tokens; the rest of its assignments are dropped:
//             that token's share of the layer is zero and the block's residual
//             carries it on (Switch's "dropped tokens")
//   dispatch  each rank sends every kept assignment's token to its expert's
//             rank: one all-to-all with counts per peer (all_to_allv)
//   experts   each rank runs its E / ep experts (GPT-2 MLPs) on what it received
//   combine   the outputs travel back by the reverse all-to-all, and each
//             token's are summed, weighted by their gates; shared experts
//             (DeepSeek-MoE) run on every token, on its own rank, and add in
//
// Capacity counts the whole group's tokens, and an expert keeps assignments
// in the order of the group's tokens (rank by rank, each rank's in order, a
// token's choices best first). Ranks hold consecutive shares of the batch, so
// that order is the batch's: the same assignments are kept whatever ep is,
// and one rank with the whole batch drops exactly what ep ranks drop. Every
// rank learns every rank's count per expert (one small all_gather), so a
// dropped assignment is never sent.
//
// Load balancing, three ways:
//   none  nothing keeps the router from sending most tokens to a few experts
//   aux   Switch's auxiliary loss, alpha x E x sum_e f_e P_e, f_e the share of the
//         assignments that chose expert e, P_e its mean probability, added to the
//         training loss (its gradient flows through P; f counts)
//   bias  DeepSeek-V3's auxiliary-loss-free balancing: a per-expert bias added to
//         the probabilities for choosing only (the gates stay the probabilities),
//         after each step lowered by gamma for an expert above the mean load and
//         raised by gamma for one below
//
// On any device: x, y and the layer's weights on one (the host, a GPU, or
// the fenced device). The routing decisions are the host's: the router's N x E
// probabilities come over (a copy of a small tensor), the top k, capacity and
// the plan are chosen there, and go back as indices and gates for the device
// ops that move the rows (labkit/ops.h's gather_rows, scatter_add_rows).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "labkit/comm.h"
#include "labkit/modules.h"
#include "labkit/tensor.h"

namespace labkit {

enum class Balance { none, aux, bias };
std::string_view name_of(Balance b);
Balance parse_balance(std::string_view name);  // "none", "aux" or "bias"; throws naming them

struct MoeConfig {
  int experts = 8, top_k = 2;
  double capacity_factor = 1.25;
  Balance balance = Balance::aux;
  double aux_weight = 0.01;  // alpha (Switch: 1e-2)
  double bias_rate = 0.001;  // gamma (DeepSeek-V3: 1e-3)
  int shared_experts = 0;
};
// Throws naming what is wrong: experts < 1, top_k outside [1, experts], a
// capacity factor <= 0, an ep group whose size does not divide the experts.
void check(const MoeConfig& c, int ep);

// ceil(factor x tokens x k / experts): how many assignments an expert takes,
// exactly, the factor read as the decimal it prints as (1.1 x 800 x 2 / 8 is
// 220, where the product of doubles rounds to just above and takes 221).
std::int64_t expert_capacity(double factor, std::int64_t tokens, int k, int experts);

// One rank's tokens' assignments: token t's j-th choice is entry t k + j.
struct Routing {
  int k = 0;
  std::vector<int> expert;         // best first
  std::vector<float> gate;         // the chosen probabilities over their sum
  std::vector<std::uint8_t> kept;  // 0: dropped, past its expert's capacity
  int tokens() const { return k ? int(expert.size()) / k : 0; }
};

// Exercise 9.1 (solutions/parallel/top_k_routing.cpp): each token's k highest scores
// (N x E; ties to the lower expert), its gates from probs (N x E), all kept;
// then the assignments walked in order, each kept while its expert has room
// (room[e] left of its capacity, taken as it goes), else dropped.
Routing select_top_k(std::span<const float> scores, std::span<const float> probs, int experts, int k);
void drop_over_capacity(Routing& r, std::vector<std::int64_t> room);

// Exercise 9.2 (solutions/parallel/plan_dispatch.cpp): where this rank's kept
// assignments travel, and where every rank's land. kept (ep x E) holds each
// rank's kept assignments per expert; rank q holds experts [q E/ep, (q+1) E/ep).
struct DispatchPlan {
  // The send buffer's rows: this rank's kept assignments (t k + j) by expert
  // (so by the rank that holds it), each expert's in token order.
  std::vector<int> send_order;
  std::vector<std::int64_t> send_rows, recv_rows;  // by peer
  // The received buffer (each rank's rows in turn, each rank's by expert)
  // regrouped by expert: this rank's expert i runs on the received rows
  // expert_rows[expert_offsets[i]] .. expert_rows[expert_offsets[i + 1] - 1].
  std::vector<int> expert_rows, expert_offsets;
};
DispatchPlan plan_dispatch(const Routing& r, std::span<const std::int64_t> kept, int rank, int ranks);

// Exercise 9.3 (solutions/parallel/combine_with_gates.cpp): y (N x C) = each token's
// kept assignments' outputs weighted by their gates; returned holds one row
// per entry of send_order, in its order. y and returned on one device.
void combine_with_gates(const Routing& r, std::span<const int> send_order, const float* returned, int C, float* y);
// y row to[i] += weights[i] x row i of rows, for every i, where y and rows
// live: the device op scatter_add_rows, its indices and weights copied there.
void add_rows(float* y, const float* rows, std::span<const int> to, std::span<const float> weights, int C);

// What the step's routing did, across the ep group.
struct RoutingStats {
  std::vector<std::int64_t> chosen, kept;  // by expert: assignments before and after capacity
  std::int64_t capacity = 0;
  double balance_loss = 0;  // alpha E sum f_e P_e (aux), else 0
  double drop_rate() const;
};

class MoeLayer {
 public:
  // The router and the shared experts are carved from `dense` (the same on
  // every rank), rank ep_rank's E / ep_size experts from `experts`.
  MoeLayer(Arena& dense, Arena& experts, int channels, const MoeConfig& config, int ep_size, int ep_rank);

  // y (N, C) = the layer on x (N, C), this rank's N tokens; collective over ep.
  void forward(Comm& ep, float* y, const float* x, int N);
  // From dy, the gradient of y: dx (+=) and every gradient of this rank's
  // weights (+=), the balance loss's included, for a loss that is the mean
  // over this rank's N tokens. Collective over ep.
  void backward(Comm& ep, float* dx, const float* dy, const float* x);
  // DeepSeek-V3's bias, after the step's update (with Balance::bias; else
  // nothing): lowered by gamma where the last forward's load was above the
  // mean, raised where below.
  void update_bias();

  const RoutingStats& stats() const { return stats_; }
  const Routing& routing() const { return routing_; }
  std::span<const float> bias() const { return bias_; }
  // Bytes this rank sent to the other ranks in the last forward and backward:
  // toward the experts (dispatch forward, the outputs' gradients backward) and
  // back from them (combine forward, the inputs' gradients backward).
  struct Traffic {
    std::int64_t to_experts = 0, from_experts = 0;
  };
  const Traffic& traffic() const { return traffic_; }
  // Where the last forward and backward spent their time (now() readings):
  // routing (the router, the counts' all_gather), dispatch, the experts, combine.
  struct Phases {
    double route = 0, dispatch = 0, experts = 0, combine = 0;
  };
  const Phases& phases() const { return phases_; }

  Linear router;
  std::vector<Mlp> shared, experts;  // experts: this rank's, global ids first_expert() + i
  int first_expert() const;

 private:
  // forward's phases, in order, each named as its span in the trace.
  std::vector<std::int64_t> route(Comm& ep, const float* x);  // returns every rank's kept assignments per expert
  void choose_experts(const float* x);
  std::vector<std::int64_t> keep_within_capacity(const std::vector<std::int64_t>& chosen, std::int64_t group_tokens);
  double balance_loss(Comm& ep, std::int64_t group_tokens) const;
  void dispatch(Comm& ep, const float* x, const std::vector<std::int64_t>& kept);
  Tensor run_experts(Comm& ep);  // returns their outputs, in the received rows' order
  void combine(Comm& ep, float* y, const float* x, const Tensor& outputs);
  void add_shared_experts(float* y, const float* x);
  // backward's, in reverse.
  Tensor combine_backward(Comm& ep, float* dx, std::vector<float>& dgate, const float* dy, const float* x);
  void shared_experts_backward(float* dx, const float* dy, const float* x);
  Tensor experts_backward(Comm& ep, const Tensor& output_grads);
  void dispatch_backward(Comm& ep, float* dx, const Tensor& input_grads);
  void route_backward(Comm& ep, float* dx, const std::vector<float>& dgate, const float* x);
  std::vector<float> probs_gradient(const std::vector<float>& dgate) const;
  void add_balance_gradient(std::vector<float>& dprobs) const;
  // Sends rows, in this rank's send order, to the experts' ranks; or the
  // experts' rows back: the two directions of one all_to_allv.
  void exchange(Comm& ep, const float* rows, float* received, bool to_experts);

  MoeConfig config_;
  int ep_size_, rank_;
  std::size_t C_, N_ = 0;  // channels, and the last forward's tokens: the rows of x and y
  std::vector<float> bias_;  // by expert, for choosing only
  // The last forward's, for backward.
  const Device* device_ = nullptr;  // where x, y and the weights are
  std::vector<float> probs_;        // N x E, on the host, where the experts are chosen
  Tensor device_probs_;             // the same on the device, for the softmax's backward
  Routing routing_;
  RoutingStats stats_;
  DispatchPlan plan_;
  std::vector<std::size_t> send_counts_, recv_counts_;  // the plan's rows, in floats
  IndexTensor sent_tokens_, expert_rows_;  // the plan on the device: each sent row's token; each expert row's received row
  Tensor sent_gates_;                      // each sent row's gate
  Tensor received_, expert_in_, expert_acts_, expert_grads_, returned_;
  Tensor shared_acts_, shared_grads_;
  Traffic traffic_;
  Phases phases_;
};

}  // namespace labkit
