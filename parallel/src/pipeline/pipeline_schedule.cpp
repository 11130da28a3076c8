#include "labkit/parallel/pipeline_schedule.h"

#include <algorithm>

#include <fmt/format.h>

#include "labkit/error.h"
#include "schedule_internals.h"

namespace labkit {

std::string_view name_of(PipeOp op) {
  switch (op) {
    case PipeOp::forward: return "forward";
    case PipeOp::backward: return "backward";
    case PipeOp::backward_input: return "backward for the input";
    case PipeOp::backward_weight: return "backward for the weights";
    case PipeOp::send_activation: return "send activation";
    case PipeOp::receive_activation: return "receive activation";
    case PipeOp::send_gradient: return "send gradient";
    case PipeOp::receive_gradient: return "receive gradient";
  }
  return "?";
}

std::string trace_name(const Schedule& s, const PipeAction& a) {
  return fmt::format("{} {}{}", name_of(a.op), a.microbatch, a.chunk >= s.stages ? "'" : "");
}

bool Schedule::splits_backward() const {
  for (const auto& stage : actions)
    for (const PipeAction& a : stage)
      if (a.op == PipeOp::backward_weight) return true;
  return false;
}

bool is_compute(PipeOp op) {
  return op == PipeOp::forward || op == PipeOp::backward || op == PipeOp::backward_input ||
         op == PipeOp::backward_weight;
}

namespace {

// The chunk at a message's other end, and the chunk that receives it.
int other_chunk(const PipeAction& a) {
  return a.op == PipeOp::send_activation || a.op == PipeOp::receive_gradient ? a.chunk + 1 : a.chunk - 1;
}
int receiving_chunk(const PipeAction& a) {
  return a.op == PipeOp::send_activation || a.op == PipeOp::send_gradient ? other_chunk(a) : a.chunk;
}

}  // namespace

int peer_of(const Schedule& s, const PipeAction& a) { return stage_of(s, other_chunk(a)); }

int tag_of(const Schedule& s, const PipeAction& a) {
  const bool gradient = a.op == PipeOp::send_gradient || a.op == PipeOp::receive_gradient;
  return (int(gradient) * s.chunks() + receiving_chunk(a)) * s.microbatches + a.microbatch;
}

namespace {

// ZB-V's: down the stages and back up, so stage s holds chunks s and 2P - 1 - s
// and the first stage holds both ends (the loss is computed where the data enters).
std::vector<int> v_shaped(int stages) {
  std::vector<int> stage_of_chunk;
  for (int stage = 0; stage < stages; ++stage) stage_of_chunk.push_back(stage);
  for (int stage = stages - 1; stage >= 0; --stage) stage_of_chunk.push_back(stage);
  return stage_of_chunk;
}

}  // namespace

std::vector<int> looped_placement(int stages, int virtual_stages) {
  std::vector<int> stage_of_chunk;
  for (int loop = 0; loop < virtual_stages; ++loop)
    for (int stage = 0; stage < stages; ++stage) stage_of_chunk.push_back(stage);
  return stage_of_chunk;
}

Schedule empty_schedule(std::string name, int stages, int microbatches, int virtual_stages,
                        std::vector<int> stage_of_chunk) {
  if (stages < 1 || microbatches < 1)
    throw Error(fmt::format("{} schedule: {} stages and {} micro-batches (each at least 1)", name, stages,
                            microbatches));
  Schedule s{std::move(name), stages, microbatches, virtual_stages, std::move(stage_of_chunk), {}};
  for (int stage = 0; stage < stages; ++stage) s.actions.emplace_back();  // one action list per stage
  return s;
}

void add_forward(Schedule& s, int m, int c) {
  auto& a = actions_of(s, c);
  if (c > 0 && crosses(s, c - 1, c)) a.push_back({PipeOp::receive_activation, m, c});
  a.push_back({PipeOp::forward, m, c});
  if (c + 1 < s.chunks() && crosses(s, c, c + 1)) a.push_back({PipeOp::send_activation, m, c});
}

void add_backward(Schedule& s, int m, int c, PipeOp op) {
  auto& a = actions_of(s, c);
  if (c + 1 < s.chunks() && crosses(s, c, c + 1)) a.push_back({PipeOp::receive_gradient, m, c});
  a.push_back({op, m, c});
  if (c > 0 && crosses(s, c - 1, c)) a.push_back({PipeOp::send_gradient, m, c});
}

Schedule naive_schedule(int stages, int microbatches) {
  Schedule s = empty_schedule("naive", stages, microbatches, 1, looped_placement(stages, 1));
  for (int m = 0; m < microbatches; ++m) {
    for (int c = 0; c < stages; ++c) add_forward(s, m, c);
    for (int c = stages - 1; c >= 0; --c) add_backward(s, m, c);
  }
  return s;
}

Schedule gpipe_schedule(int stages, int microbatches) {
  Schedule s = empty_schedule("gpipe", stages, microbatches, 1, looped_placement(stages, 1));
  for (int m = 0; m < microbatches; ++m)
    for (int c = 0; c < stages; ++c) add_forward(s, m, c);
  for (int m = 0; m < microbatches; ++m)
    for (int c = stages - 1; c >= 0; --c) add_backward(s, m, c);
  return s;
}

// Megatron-LM's order (forward_backward_pipelining_with_interleaving): a
// stage's k-th forward runs micro-batch (k / PV) P + k mod P on its chunk
// number (k mod PV) / P, so micro-batches go through each chunk in groups of P;
// its backwards take the chunks the other way round. Stage s warms up with
// 2 (P - s - 1) + (V - 1) P forwards (Megatron's num_warmup_microbatches),
// against 1F1B's P - s - 1: the (V - 1) P fill the chunks after the first.
Schedule interleaved_schedule(int stages, int microbatches, int virtual_stages) {
  const int P = stages, M = microbatches, V = virtual_stages;
  if (V < 1) throw Error(fmt::format("interleaved schedule: {} virtual stages (at least 1)", V));
  if (M % P != 0)
    throw Error(fmt::format("interleaved schedule: {} micro-batches do not make groups of {} (one per stage): M must "
                            "be a multiple of P", M, P));
  Schedule s = empty_schedule("interleaved", P, M, V, looped_placement(P, V));
  const int total = M * V;
  for (int stage = 0; stage < P; ++stage) {
    const auto microbatch = [&](int k) { return k / (P * V) * P + k % P; };
    const auto chunk = [&](int k, bool forward) {
      const int v = k % (P * V) / P;
      return (forward ? v : V - 1 - v) * P + stage;
    };
    const int warmup = std::min((P - stage - 1) * 2 + (V - 1) * P, total);
    for (int k = 0; k < warmup; ++k) add_forward(s, microbatch(k), chunk(k, true));
    for (int k = 0; k < total - warmup; ++k) {
      add_forward(s, microbatch(k + warmup), chunk(k + warmup, true));
      add_backward(s, microbatch(k), chunk(k, false));
    }
    for (int k = total - warmup; k < total; ++k) add_backward(s, microbatch(k), chunk(k, false));
  }
  return s;
}

// ZB-H1 (Qi et al. 2024, figure 3) is 1F1B with each backward split and the
// weights' part held back: stage s runs its weight gradients s backwards late,
// so the input gradients the stages before wait for go first, and the held-back
// ones fill the drain at the end. Every stage then keeps P micro-batches'
// activations at most (until their weights' gradient), 1F1B's first stage's peak.
Schedule zb_h1_schedule(int stages, int microbatches) {
  Schedule s = empty_schedule("zb-h1", stages, microbatches, 1, looped_placement(stages, 1));
  for (int stage = 0; stage < stages; ++stage) {
    const int warmup = std::min(stages - stage - 1, microbatches);
    int inputs = 0, weights = 0;
    const auto backward = [&] {
      add_backward(s, inputs++, stage, PipeOp::backward_input);
      if (inputs - weights > stage) actions_of(s, stage).push_back({PipeOp::backward_weight, weights++, stage});
    };
    for (int m = 0; m < warmup; ++m) add_forward(s, m, stage);
    for (int m = warmup; m < microbatches; ++m) add_forward(s, m, stage), backward();
    while (inputs < microbatches) backward();
    while (weights < microbatches) actions_of(s, stage).push_back({PipeOp::backward_weight, weights++, stage});
  }
  return s;
}

namespace {

// ZB-V's order as the paper draws it for F = B = W (Qi et al. 2024; PyTorch's
// ScheduleZBVZeroBubble runs the same), stage s holding the chunk down the V,
// d = s, and the chunk back up, u = 2P - 1 - s:
//   fill     2(P - s) - 1 forwards of d, then s pairs (F u, F d): the last stage
//            starts its turn of the V at once, the first keeps the pipe fed
//   turn     P - s triples (F u, I u, W u): the first backwards come back up
//   steady   (F d, I d, W d, F u, I u, W u) while forwards remain
//   drain    s pairs (I d, I u) with the W's held back, then P - s pairs
//            (I d, W d), then the W's held back fill the end
// With unit times and M >= 2P - 1 every stage works without a gap from its
// first forward to its last W: the step is the work and the fill, (P - 1) F,
// as it is from M >= 3P/2. With fewer than 2P - 1 micro-batches it is the same
// order without the ones that do not exist.
Schedule zbv_as_drawn(int P, int M) {
  Schedule s = empty_schedule("zbv", P, M, 2, v_shaped(P));
  const int drawn = std::max(M, 2 * P - 1);
  for (int stage = 0; stage < P; ++stage) {
    const int chunk[2] = {stage, 2 * P - 1 - stage};  // d, u
    int forwards[2] = {0, 0}, inputs[2] = {0, 0}, weights[2] = {0, 0};
    const auto F = [&](int v) {
      if (const int m = forwards[v]++; m < M) add_forward(s, m, chunk[v]);
    };
    const auto I = [&](int v) {
      if (const int m = inputs[v]++; m < M) add_backward(s, m, chunk[v], PipeOp::backward_input);
    };
    const auto W = [&](int v) {
      if (const int m = weights[v]++; m < M) actions_of(s, chunk[v]).push_back({PipeOp::backward_weight, m, chunk[v]});
    };
    constexpr int d = 0, u = 1;
    for (int i = 0; i < 2 * (P - stage) - 1; ++i) F(d);
    for (int i = 0; i < stage; ++i) F(u), F(d);
    for (int i = 0; i < P - stage; ++i) F(u), I(u), W(u);
    while (forwards[u] < forwards[d] || forwards[d] < drawn) {
      if (forwards[d] < drawn) F(d);
      I(d), W(d), F(u), I(u), W(u);
    }
    for (int i = 0; i < stage; ++i) I(d), I(u);
    for (int i = 0; i < P - stage; ++i) I(d), W(d);
    while (weights[u] < inputs[u]) W(u);
    while (weights[d] < inputs[d]) W(d);
  }
  return s;
}

}  // namespace

// The order as drawn fits equal times and many micro-batches; the greedy
// placement adapts to unequal times and few micro-batches. Like the paper's
// code, which tries several placements, labkit plays both out at `times` and
// keeps the one that ends first. Either keeps 1F1B's first stage's memory on
// every stage: P micro-batches of a stage's layers, 2P activations of its
// half-size chunks.
Schedule zbv_schedule(int stages, int microbatches, const PipeTimes& times) {
  Schedule drawn = zbv_as_drawn(stages, microbatches);
  Schedule greedy = zero_bubble(empty_schedule("zbv", stages, microbatches, 2, v_shaped(stages)), 2 * stages, times);
  return validate(drawn, times).makespan <= validate(greedy, times).makespan ? drawn : greedy;
}

Schedule make_schedule(std::string_view name, int stages, int microbatches, int virtual_stages,
                       const PipeTimes& times) {
  if (name == "interleaved") {
    if (virtual_stages < 2)
      throw Error(fmt::format("schedule 'interleaved': --virtual {}: it needs 2 or more chunks per stage",
                              virtual_stages));
    return interleaved_schedule(stages, microbatches, virtual_stages);
  }
  const int needs = name == "zbv" ? 2 : 1;
  if (std::find(std::begin(kScheduleNames), std::end(kScheduleNames), name) != std::end(kScheduleNames) &&
      virtual_stages != needs)
    throw Error(fmt::format("schedule '{}': --virtual {}: it runs {} chunk{} per stage", name, virtual_stages, needs,
                            needs == 1 ? "" : "s"));
  if (name == "naive") return naive_schedule(stages, microbatches);
  if (name == "gpipe") return gpipe_schedule(stages, microbatches);
  if (name == "1f1b") return one_f_one_b_schedule(stages, microbatches);
  if (name == "zb-h1") return zb_h1_schedule(stages, microbatches);
  if (name == "zbv") return zbv_schedule(stages, microbatches, times);
  throw Error(fmt::format("schedule '{}': naive, gpipe, 1f1b, interleaved, zb-h1 or zbv", name));
}

int default_virtual(std::string_view schedule) { return schedule == "interleaved" || schedule == "zbv" ? 2 : 1; }

bool schedule_fits(std::string_view schedule, int layers, int P, int M) {
  return layers % (P * default_virtual(schedule)) == 0 && !(schedule == "interleaved" && M % P != 0);
}

std::optional<double> bubble_formula(const Schedule& s, const PipeTimes& t) {
  const double P = s.stages, M = s.microbatches, V = s.virtual_stages;
  if (s.name == "by hand") return std::nullopt;
  if (s.name == "naive") return (P - 1) / P;
  if (s.name == "gpipe" || s.name == "1f1b") return (P - 1) / (M + P - 1);
  if (s.name == "interleaved") return (P - 1) / (V * M + P - 1);
  if (M < P) return std::nullopt;  // zb-h1 or zbv: too few weights' parts to fill the waits
  if (s.name == "zb-h1") {  // the weights' part fills what it can of the wait for the input's
    const double idle = (P - 1) * (t.forward + std::max(t.backward_input - t.backward_weight, 0.0));
    return idle / (M * (t.forward + t.backward_input + t.backward_weight) + idle);
  }
  if (s.name != "zbv") throw Error(fmt::format("bubble_formula: no formula for the schedule '{}'", s.name));
  const double fill = (P - 1) * t.forward;
  return fill / (V * M * (t.forward + t.backward_input + t.backward_weight) + fill);
}

std::string_view bubble_formula_in_words(const Schedule& s) {
  return s.name == "naive"         ? "(P-1)/P"
         : s.name == "interleaved" ? "(P-1)/(VM+P-1)"
         : s.name == "zb-h1"       ? "from M = P on, (P-1)(F+max(B-W,0)) / (M(F+B+W) + (P-1)(F+max(B-W,0)))"
         : s.name == "zbv"         ? "the fill alone from M = P on, (P-1)F / (2M(F+B+W) + (P-1)F)"
         : s.name == "by hand"     ? "none for a schedule written by hand"
                                   : "(P-1)/(M+P-1)";
}

}  // namespace labkit
