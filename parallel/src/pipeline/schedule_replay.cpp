// validate(): a schedule replayed as the executors run it, each rule that
// pipeline_schedule.h lists checked where an action could break it.
//
// Each stage runs its actions in order until one is a receive whose message
// has not been sent, or until, after a micro-batch's last action there, the
// messages it sent from that micro-batch are not yet received (the executor
// frees its activations only then); the stages take turns until none can go on. A stage's
// clock advances by each action's time (PipeTimes), a send's message arrives
// PipeTimes::message after it, and a receive waits for its message: the
// clocks and the work between them are the timeline a ScheduleRun reports.
// Messages are matched by kind, receiving chunk and micro-batch, as the
// executors' tags match them (tag_of).
#include <algorithm>
#include <compare>
#include <iterator>
#include <map>
#include <span>
#include <string>
#include <string_view>

#include <fmt/format.h>

#include "labkit/error.h"
#include "schedule_internals.h"

namespace labkit {

namespace {

// A chunk's micro-batch's backward so far: none, the input's part, or done.
enum class Backward { none, input, done };

// What one chunk has done with one micro-batch, and what has arrived for it.
struct Progress {
  bool forwarded = false;
  bool activation_in = false;  // its input, received from the stage of the chunk before
  bool gradient_in = false;    // its output's gradient, received from the stage of the chunk after
  Backward backward = Backward::none;
};

// A message, named as its tag names it: what travels, the chunk that receives it and the micro-batch.
struct MessageKey {
  bool gradient;
  int to_chunk, microbatch;
  auto operator<=>(const MessageKey&) const = default;
};

struct Message {
  double arrives;  // its send's time and PipeTimes::message
  bool received = false;
};

// Every chunk's forward and backward (whole, or input then weights) of every
// micro-batch is in the lists, checked before they play: work left out would
// otherwise show only as the deadlock it causes, its stages waiting for a
// message it makes. (Once they play to the end without a deadlock, each ran.)
void check_all_work_listed(const Schedule& s) {
  Grid<Progress> listed(s.chunks(), s.microbatches);
  for (int p = 0; p < s.stages; ++p)
    for (const PipeAction& a : s.actions[std::size_t(p)]) {
      if (a.chunk < 0 || a.chunk >= s.chunks() || a.microbatch < 0 || a.microbatch >= s.microbatches ||
          (is_compute(a.op) && stage_of(s, a.chunk) != p))
        return;  // an action out of place: the replay names it where it plays
      Progress& progress = listed(a.chunk, a.microbatch);
      if (a.op == PipeOp::forward) progress.forwarded = true;
      if (a.op == PipeOp::backward || a.op == PipeOp::backward_weight) progress.backward = Backward::done;
      if (a.op == PipeOp::backward_input && progress.backward == Backward::none) progress.backward = Backward::input;
    }
  for (int c = 0; c < s.chunks(); ++c)
    for (int m = 0; m < s.microbatches; ++m)
      if (const Progress& progress = listed(c, m); !progress.forwarded || progress.backward != Backward::done)
        throw Error(fmt::format("{} schedule: stage {} never runs the {} of micro-batch {}{}", s.name, stage_of(s, c),
                                !progress.forwarded                      ? "forward"
                                : progress.backward == Backward::none ? "backward"
                                                                      : "backward for the weights",
                                m, s.chunks() > s.stages ? fmt::format(" on chunk {}", c) : ""));
}

// One stage as far as the replay has run it.
struct StageReplay {
  std::span<const PipeAction> actions;
  std::vector<std::size_t> last_action;  // by micro-batch
  std::size_t next = 0;  // the action it runs next
  int leaving = -1;      // the micro-batch whose last action it ran, until what it sent is received
  double clock = 0;
  int kept = 0, peak_kept = 0;  // chunk activations: forwarded, and their weights' gradient not yet done
  std::vector<ScheduleRun::Slot> slots;
  bool finished() const { return next == actions.size(); }
};

class ScheduleReplay {
 public:
  ScheduleReplay(const Schedule& s, const PipeTimes& t);
  ScheduleRun run();

 private:
  bool step(int p);
  bool sends_received(int p, int microbatch) const;
  void check_placement(int p, const PipeAction& a) const;
  void forward(int p, const PipeAction& a);
  void backward(int p, const PipeAction& a);
  void backward_weight(int p, const PipeAction& a);
  void send(int p, const PipeAction& a, bool gradient, int to);
  bool receive(int p, const PipeAction& a, bool gradient, int from);
  bool has_input(const PipeAction& a) const;
  bool has_gradient(const PipeAction& a) const;
  void work(StageReplay& stage, const PipeAction& a, double seconds);
  void check_no_deadlock() const;
  void check_all_messages_received() const;
  ScheduleRun timeline() const;
  [[noreturn]] void fail(int p, std::string_view what) const;
  std::string describe(const PipeAction& a) const;

  const Schedule& s_;
  const PipeTimes& t_;
  Grid<Progress> progress_;
  std::map<MessageKey, Message> messages_;  // sent so far, in the order their "never received" is reported
  IntVector<StageReplay> stages_;
};

ScheduleReplay::ScheduleReplay(const Schedule& s, const PipeTimes& t)
    : s_(s), t_(t), progress_(s.chunks(), s.microbatches), stages_(s.stages) {
  int p = 0;
  for (const std::vector<PipeAction>& actions : s.actions) {
    stages_[p].actions = actions;
    stages_[p++].last_action = last_actions(actions, s.microbatches);
  }
}

std::string ScheduleReplay::describe(const PipeAction& a) const {
  return fmt::format("{} of micro-batch {}{}", name_of(a.op), a.microbatch,
                     s_.chunks() > s_.stages ? fmt::format(", chunk {}", a.chunk) : "");
}

// Stage p's next action breaks a rule.
void ScheduleReplay::fail(int p, std::string_view what) const {
  const StageReplay& stage = stages_[p];
  throw Error(fmt::format("{} schedule: stage {}, action {} ({}): {}", s_.name, p, stage.next,
                          describe(stage.actions[stage.next]), what));
}

// Whether every message stage p sent from micro-batch `microbatch` is received.
bool ScheduleReplay::sends_received(int p, int microbatch) const {
  for (const auto& [key, message] : messages_) {
    // An activation comes from the chunk before its receiver, a gradient from the chunk after.
    const int from_chunk = key.gradient ? key.to_chunk + 1 : key.to_chunk - 1;
    if (key.microbatch == microbatch && stage_of(s_, from_chunk) == p && !message.received) return false;
  }
  return true;
}

// Runs stage p's next action if it can: false when it waits on a receive, its
// own or (leaving a micro-batch) its peer's of what it sent.
bool ScheduleReplay::step(int p) {
  StageReplay& stage = stages_[p];
  if (stage.leaving >= 0) {
    if (!sends_received(p, stage.leaving)) return false;
    stage.leaving = -1;
  }
  const PipeAction& a = stage.actions[stage.next];
  check_placement(p, a);
  switch (a.op) {
    case PipeOp::forward: forward(p, a); break;
    case PipeOp::backward:
    case PipeOp::backward_input: backward(p, a); break;
    case PipeOp::backward_weight: backward_weight(p, a); break;
    case PipeOp::send_activation:
      if (!progress_(a.chunk, a.microbatch).forwarded) fail(p, "before the forward that makes it");
      send(p, a, false, a.chunk + 1);
      break;
    case PipeOp::send_gradient:
      if (progress_(a.chunk, a.microbatch).backward == Backward::none) fail(p, "before the backward that makes it");
      send(p, a, true, a.chunk - 1);
      break;
    case PipeOp::receive_activation:
      if (!receive(p, a, false, a.chunk - 1)) return false;
      break;
    case PipeOp::receive_gradient:
      if (!receive(p, a, true, a.chunk + 1)) return false;
      break;
  }
  if (stage.last_action[std::size_t(a.microbatch)] == stage.next) stage.leaving = a.microbatch;
  ++stage.next;
  return true;
}

// An action names a micro-batch and a chunk that exist, and computes only on the chunk's stage.
void ScheduleReplay::check_placement(int p, const PipeAction& a) const {
  if (a.microbatch < 0 || a.microbatch >= s_.microbatches)
    fail(p, fmt::format("there are micro-batches 0 to {}", s_.microbatches - 1));
  if (a.chunk < 0 || a.chunk >= s_.chunks()) fail(p, fmt::format("there are chunks 0 to {}", s_.chunks() - 1));
  if (stage_of(s_, a.chunk) != p && is_compute(a.op))
    fail(p, fmt::format("chunk {} runs on stage {}", a.chunk, stage_of(s_, a.chunk)));
}

// The input a forward needs: received from another stage, or made by the chunk before on this one.
bool ScheduleReplay::has_input(const PipeAction& a) const {
  if (a.chunk == 0) return true;
  return crosses(s_, a.chunk - 1, a.chunk) ? progress_(a.chunk, a.microbatch).activation_in
                                           : progress_(a.chunk - 1, a.microbatch).forwarded;
}

// The output gradient a backward needs: received, or made by the chunk after on this stage.
bool ScheduleReplay::has_gradient(const PipeAction& a) const {
  if (a.chunk == s_.chunks() - 1) return true;
  return crosses(s_, a.chunk, a.chunk + 1) ? progress_(a.chunk, a.microbatch).gradient_in
                                           : progress_(a.chunk + 1, a.microbatch).backward != Backward::none;
}

void ScheduleReplay::work(StageReplay& stage, const PipeAction& a, double seconds) {
  stage.slots.push_back({a.op, a.microbatch, a.chunk, stage.clock, stage.clock + seconds});
  stage.clock += seconds;
}

void ScheduleReplay::forward(int p, const PipeAction& a) {
  if (!has_input(a))
    fail(p, crosses(s_, a.chunk - 1, a.chunk) ? "its activation has not been received"
                                              : "the chunk before has not forwarded it");
  Progress& progress = progress_(a.chunk, a.microbatch);
  if (progress.forwarded) fail(p, "forwarded twice");
  StageReplay& stage = stages_[p];
  work(stage, a, t_.forward);
  progress.forwarded = true;
  stage.peak_kept = std::max(stage.peak_kept, ++stage.kept);
}

// A whole backward, or its input's part.
void ScheduleReplay::backward(int p, const PipeAction& a) {
  Progress& progress = progress_(a.chunk, a.microbatch);
  if (!progress.forwarded) fail(p, "before its forward");
  if (!has_gradient(a))
    fail(p, crosses(s_, a.chunk, a.chunk + 1) ? "its gradient has not been received"
                                              : "the chunk after has not backwarded it");
  if (progress.backward != Backward::none) fail(p, "backwarded twice");
  const bool whole = a.op == PipeOp::backward;
  StageReplay& stage = stages_[p];
  work(stage, a, whole ? t_.backward_input + t_.backward_weight : t_.backward_input);
  progress.backward = whole ? Backward::done : Backward::input;
  if (whole) --stage.kept;
}

void ScheduleReplay::backward_weight(int p, const PipeAction& a) {
  Progress& progress = progress_(a.chunk, a.microbatch);
  if (progress.backward != Backward::input) fail(p, "not right after a backward for the input alone");
  StageReplay& stage = stages_[p];
  work(stage, a, t_.backward_weight);
  progress.backward = Backward::done;
  --stage.kept;
}

// Sends never block: the message is ready for chunk `to`'s stage once it arrives.
void ScheduleReplay::send(int p, const PipeAction& a, bool gradient, int to) {
  if (to < 0 || to >= s_.chunks()) fail(p, fmt::format("there is no chunk {} to send to", to));
  if (!crosses(s_, a.chunk, to)) fail(p, fmt::format("chunk {} is on this stage: nothing travels", to));
  const Message message{stages_[p].clock + t_.message};
  if (!messages_.try_emplace({gradient, to, a.microbatch}, message).second) fail(p, "sent twice");
}

// False while the message from chunk `from` has not been sent: the stage waits.
bool ScheduleReplay::receive(int p, const PipeAction& a, bool gradient, int from) {
  if (from < 0 || from >= s_.chunks()) fail(p, fmt::format("there is no chunk {} to receive from", from));
  if (!crosses(s_, from, a.chunk)) fail(p, fmt::format("chunk {} is on this stage: nothing travels", from));
  const auto sent = messages_.find({gradient, a.chunk, a.microbatch});
  if (sent == messages_.end()) return false;
  Message& message = sent->second;
  if (message.received) fail(p, "received twice");
  message.received = true;
  Progress& progress = progress_(a.chunk, a.microbatch);
  (gradient ? progress.gradient_in : progress.activation_in) = true;
  StageReplay& stage = stages_[p];
  stage.clock = std::max(stage.clock, message.arrives);
  return true;
}

// No point where every unfinished stage waits on a receive.
void ScheduleReplay::check_no_deadlock() const {
  std::string waiting;
  for (int p = 0; p < s_.stages; ++p) {
    const StageReplay& stage = stages_[p];
    if (stage.finished()) continue;
    waiting += waiting.empty() ? "" : ", ";
    if (stage.leaving >= 0)
      waiting += fmt::format("stage {} after action {} ({}), until what it sent of micro-batch {} is received (its "
                             "activations are freed only then)",
                             p, stage.next - 1, describe(stage.actions[stage.next - 1]), stage.leaving);
    else
      waiting += fmt::format("stage {} at action {} ({})", p, stage.next, describe(stage.actions[stage.next]));
  }
  if (!waiting.empty())
    throw Error(fmt::format("{} schedule: deadlock: every unfinished stage waits on a receive: {}", s_.name, waiting));
}

void ScheduleReplay::check_all_messages_received() const {
  for (const auto& [key, message] : messages_)
    if (!message.received)
      throw Error(fmt::format("{} schedule: the {} of micro-batch {} sent to chunk {} is never received", s_.name,
                              key.gradient ? "gradient" : "activation", key.microbatch, key.to_chunk));
}

// The stages' clocks and work: the step's span, its bubble, what each stage held.
ScheduleRun ScheduleReplay::timeline() const {
  ScheduleRun run;
  double busy = 0;
  for (const StageReplay& stage : stages_) {
    run.makespan = std::max(run.makespan, stage.clock);
    run.peak_in_flight.push_back(stage.peak_kept);
    run.slots.push_back(stage.slots);
    for (const ScheduleRun::Slot& slot : stage.slots) busy += slot.end - slot.start;
  }
  run.bubble = run.makespan > 0 ? 1 - busy / (s_.stages * run.makespan) : 0;
  return run;
}

ScheduleRun ScheduleReplay::run() {
  check_all_work_listed(s_);
  // Each stage runs until it finishes or waits on a receive, in turns, until none can go on.
  for (bool progress = true; progress;) {
    progress = false;
    for (int p = 0; p < s_.stages; ++p)
      while (!stages_[p].finished() && step(p)) progress = true;
  }
  check_no_deadlock();
  check_all_messages_received();
  return timeline();
}

}  // namespace

ScheduleRun validate(const Schedule& s, const PipeTimes& times) {
  if (s.stages < 1 || s.microbatches < 1 || std::ssize(s.actions) != s.stages || s.chunks() < s.stages)
    throw Error(fmt::format("{} schedule: {} stages, {} micro-batches, {} chunks, actions for {} stages", s.name,
                            s.stages, s.microbatches, s.chunks(), s.actions.size()));
  return ScheduleReplay(s, times).run();
}

}  // namespace labkit
