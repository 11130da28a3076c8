#include "labkit/parallel/pipeline_schedule.h"

#include <algorithm>
#include <deque>

#include <fmt/format.h>

#include "labkit/error.h"

namespace labkit {

std::string_view name_of(PipeOp op) {
  switch (op) {
    case PipeOp::forward: return "forward";
    case PipeOp::backward: return "backward";
    case PipeOp::send_activation: return "send activation";
    case PipeOp::receive_activation: return "receive activation";
    case PipeOp::send_gradient: return "send gradient";
    case PipeOp::receive_gradient: return "receive gradient";
  }
  return "?";
}

namespace {

Schedule empty(std::string name, int stages, int microbatches) {
  if (stages < 1 || microbatches < 1)
    throw Error(fmt::format("{} schedule: {} stages and {} micro-batches (each at least 1)", name, stages,
                            microbatches));
  return {std::move(name), stages, microbatches, std::vector<std::vector<PipeAction>>(std::size_t(stages))};
}

// A forward with its activation received from the previous stage first and
// sent to the next after; a backward likewise with the gradient, the other way.
void add_forward(Schedule& s, int stage, int m) {
  auto& a = s.actions[std::size_t(stage)];
  if (stage > 0) a.push_back({PipeOp::receive_activation, m});
  a.push_back({PipeOp::forward, m});
  if (stage < s.stages - 1) a.push_back({PipeOp::send_activation, m});
}

void add_backward(Schedule& s, int stage, int m) {
  auto& a = s.actions[std::size_t(stage)];
  if (stage < s.stages - 1) a.push_back({PipeOp::receive_gradient, m});
  a.push_back({PipeOp::backward, m});
  if (stage > 0) a.push_back({PipeOp::send_gradient, m});
}

}  // namespace

Schedule naive_schedule(int stages, int microbatches) {
  Schedule s = empty("naive", stages, microbatches);
  for (int stage = 0; stage < stages; ++stage)
    for (int m = 0; m < microbatches; ++m) add_forward(s, stage, m), add_backward(s, stage, m);
  return s;
}

Schedule gpipe_schedule(int stages, int microbatches) {
  Schedule s = empty("gpipe", stages, microbatches);
  for (int stage = 0; stage < stages; ++stage) {
    for (int m = 0; m < microbatches; ++m) add_forward(s, stage, m);
    for (int m = 0; m < microbatches; ++m) add_backward(s, stage, m);
  }
  return s;
}

// Stage s runs P - s - 1 forwards before its first backward (the pipe fills
// behind it), then alternates, then drains: the last stage alternates from
// the start, the first holds P micro-batches at most.
Schedule one_f_one_b_schedule(int stages, int microbatches) {
  Schedule s = empty("1f1b", stages, microbatches);
  for (int stage = 0; stage < stages; ++stage) {
    const int warmup = std::min(stages - stage - 1, microbatches);
    for (int m = 0; m < warmup; ++m) add_forward(s, stage, m);
    for (int m = warmup; m < microbatches; ++m) add_forward(s, stage, m), add_backward(s, stage, m - warmup);
    for (int m = microbatches - warmup; m < microbatches; ++m) add_backward(s, stage, m);
  }
  return s;
}

Schedule make_schedule(std::string_view name, int stages, int microbatches) {
  if (name == "naive") return naive_schedule(stages, microbatches);
  if (name == "gpipe") return gpipe_schedule(stages, microbatches);
  if (name == "1f1b") return one_f_one_b_schedule(stages, microbatches);
  throw Error(fmt::format("schedule '{}': naive, gpipe or 1f1b", name));
}

namespace {

// What travels between two neighbouring stages one way: each send's
// micro-batch and when it is ready, in the order sent.
struct Channel {
  struct Message {
    int microbatch;
    double ready;
  };
  std::vector<Message> sent;
  std::size_t received = 0;
};

struct StageState {
  std::size_t next = 0;  // the next action
  double clock = 0;
  std::vector<bool> forwarded, backwarded, activation_in, gradient_in;
  int in_flight = 0;
};

}  // namespace

ScheduleRun validate(const Schedule& s, double forward, double backward) {
  const int P = s.stages, M = s.microbatches;
  if (P < 1 || M < 1 || s.actions.size() != std::size_t(P))
    throw Error(fmt::format("{} schedule: {} stages, {} micro-batches, actions for {} stages", s.name, P, M,
                            s.actions.size()));
  const std::size_t stages = s.actions.size();
  std::vector<Channel> activations(stages), gradients(stages);  // [p]: between stages p and p + 1
  std::vector<StageState> state(stages);
  for (StageState& st : state)
    st.forwarded = st.backwarded = st.activation_in = st.gradient_in = std::vector<bool>(std::size_t(M), false);
  ScheduleRun run;
  run.peak_in_flight.assign(stages, 0);
  run.slots.resize(stages);

  // Runs stage p's next action if it can: false when it waits on a receive.
  const auto step = [&](int p) {
    StageState& st = state[std::size_t(p)];
    const PipeAction a = s.actions[std::size_t(p)][st.next];
    const auto fail = [&](std::string_view what) {
      throw Error(fmt::format("{} schedule: stage {}, action {} ({} of micro-batch {}): {}", s.name, p, st.next,
                              name_of(a.op), a.microbatch, what));
    };
    if (a.microbatch < 0 || a.microbatch >= M) fail(fmt::format("there are micro-batches 0 to {}", M - 1));
    const std::size_t m = std::size_t(a.microbatch);
    const auto work = [&](double seconds) {
      run.slots[std::size_t(p)].push_back({a.op, a.microbatch, st.clock, st.clock + seconds});
      st.clock += seconds;
    };
    const auto receive = [&](Channel& c, std::vector<bool>& arrived, bool exists, const char* from) {
      if (!exists) fail(fmt::format("there is no {} stage to receive from", from));
      if (c.received == c.sent.size()) return false;  // waits
      const Channel::Message& message = c.sent[c.received];
      if (message.microbatch != a.microbatch)
        fail(fmt::format("the {} stage's next message is micro-batch {}: receives must match sends in order", from,
                         message.microbatch));
      ++c.received;
      arrived[m] = true;
      st.clock = std::max(st.clock, message.ready);
      return true;
    };
    switch (a.op) {
      case PipeOp::forward:
        if (p > 0 && !st.activation_in[m]) fail("its activation has not been received");
        if (st.forwarded[m]) fail("forwarded twice");
        work(forward);
        st.forwarded[m] = true;
        run.peak_in_flight[std::size_t(p)] = std::max(run.peak_in_flight[std::size_t(p)], ++st.in_flight);
        break;
      case PipeOp::backward:
        if (!st.forwarded[m]) fail("before its forward");
        if (p < P - 1 && !st.gradient_in[m]) fail("its gradient has not been received");
        if (st.backwarded[m]) fail("backwarded twice");
        work(backward);
        st.backwarded[m] = true;
        --st.in_flight;
        break;
      case PipeOp::send_activation:
        if (p == P - 1) fail("the last stage has no next stage");
        if (!st.forwarded[m]) fail("before the forward that makes it");
        activations[std::size_t(p)].sent.push_back({a.microbatch, st.clock});
        break;
      case PipeOp::send_gradient:
        if (p == 0) fail("the first stage has no previous stage");
        if (!st.backwarded[m]) fail("before the backward that makes it");
        gradients[std::size_t(p - 1)].sent.push_back({a.microbatch, st.clock});
        break;
      case PipeOp::receive_activation:
        if (!receive(activations[std::size_t(std::max(p - 1, 0))], st.activation_in, p > 0, "previous")) return false;
        break;
      case PipeOp::receive_gradient:
        if (!receive(gradients[std::size_t(p)], st.gradient_in, p < P - 1, "next")) return false;
        break;
    }
    ++st.next;
    return true;
  };

  for (bool progress = true; progress;) {
    progress = false;
    for (int p = 0; p < P; ++p)
      while (state[std::size_t(p)].next < s.actions[std::size_t(p)].size() && step(p)) progress = true;
  }
  std::string waiting;
  for (int p = 0; p < P; ++p)
    if (const StageState& st = state[std::size_t(p)]; st.next < s.actions[std::size_t(p)].size()) {
      const PipeAction& a = s.actions[std::size_t(p)][st.next];
      waiting += fmt::format("{}stage {} at action {} ({} of micro-batch {})", waiting.empty() ? "" : ", ", p, st.next,
                             name_of(a.op), a.microbatch);
    }
  if (!waiting.empty())
    throw Error(fmt::format("{} schedule: deadlock: every unfinished stage waits on a receive: {}", s.name, waiting));
  for (int p = 0; p < P; ++p)
    for (int m = 0; m < M; ++m) {
      const StageState& st = state[std::size_t(p)];
      if (!st.forwarded[std::size_t(m)] || !st.backwarded[std::size_t(m)])
        throw Error(fmt::format("{} schedule: stage {} never runs the {} of micro-batch {}", s.name, p,
                                st.forwarded[std::size_t(m)] ? "backward" : "forward", m));
    }
  for (int p = 0; p + 1 < P; ++p)
    for (const auto& [c, what] : {std::pair{&activations[std::size_t(p)], "activation"},
                                   std::pair{&gradients[std::size_t(p)], "gradient"}})
      if (c->received < c->sent.size())
        throw Error(fmt::format("{} schedule: the {} of micro-batch {} sent between stages {} and {} is never "
                                "received", s.name, what, c->sent[c->received].microbatch, p, p + 1));

  double busy = 0;
  for (const StageState& st : state) run.makespan = std::max(run.makespan, st.clock);
  for (const auto& slots : run.slots)
    for (const ScheduleRun::Slot& slot : slots) busy += slot.end - slot.start;
  run.bubble = run.makespan > 0 ? 1 - busy / (double(P) * run.makespan) : 0;
  return run;
}

}  // namespace labkit
