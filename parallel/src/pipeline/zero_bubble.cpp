// The zero-bubble schedules' heuristic (Qi et al. 2024, section 3), played out
// with the chunks' times: each stage, whenever it is free, runs the first it can of
//   an input gradient whose output gradient has arrived (the stage before waits for it),
//   a forward whose input has arrived, while it keeps fewer than `limit` chunk
//     activations (a slot left for each of its later chunks, so that a micro-batch
//     coming back up the V always finds room),
//   a weight gradient it still owes (nobody waits for one: it fills what would be idle),
// and otherwise waits for the next arrival. Each chunk takes its micro-batches in order.
//
// The stages are played in the order of their clocks: the one that is free
// earliest chooses next, and what it runs goes into its action list with the
// messages it needs (add_forward, add_backward).
#include <algorithm>
#include <optional>
#include <tuple>

#include <fmt/format.h>

#include "labkit/error.h"
#include "schedule_internals.h"

namespace labkit {

namespace {

// Work a stage could run next: its kind, its chunk, and when what it needs is ready.
struct Choice {
  PipeOp op;
  int chunk;
  double ready;
};

// A stage's candidates of each kind, each the earliest to be ready (kNever: none known yet).
struct Candidates {
  std::optional<Choice> input, forward, weight;
};

// Keeps `c` where it is ready before `best`, or as soon and `later_first` (a
// forward on a later chunk goes first: it is a micro-batch coming back up the V).
void consider(std::optional<Choice>& best, const Choice& c, bool later_first) {
  if (!best || c.ready < best->ready || (c.ready == best->ready && later_first)) best = c;
}

// A chunk's next micro-batch of each kind of work.
struct ChunkQueue {
  int forwards = 0, inputs = 0, weights = 0;
  int later_on_stage = 0;  // chunks after it on its stage, each keeping a slot for its activations
};

struct StageClock {
  std::vector<int> chunks;  // in model order
  double clock = 0;
  int kept = 0;        // chunk activations: forwarded, and their weights' gradient not yet done
  bool stuck = false;  // found nothing to do at its clock
};

class ZeroBubble {
 public:
  ZeroBubble(Schedule empty, int limit, const PipeTimes& t);
  Schedule place();

 private:
  bool finished(const StageClock& stage) const;
  int earliest_stage() const;
  double arrival(double done, int from, int to) const;
  Candidates candidates(const StageClock& stage) const;
  std::optional<Choice> ready_now(const StageClock& stage) const;
  void run(StageClock& stage, const Choice& choice);
  void wait_for_the_next_event(int p);

  Schedule s_;
  int limit_;
  const PipeTimes& t_;
  IntVector<ChunkQueue> chunks_;
  IntVector<StageClock> stages_;
  Grid<double> forward_ends_, input_ends_;  // when each chunk's micro-batch's forward and input gradient ended
};

ZeroBubble::ZeroBubble(Schedule empty, int limit, const PipeTimes& t)
    : s_(std::move(empty)),
      limit_(limit),
      t_(t),
      chunks_(s_.chunks()),
      stages_(s_.stages),
      forward_ends_(s_.chunks(), s_.microbatches, kNever),
      input_ends_(s_.chunks(), s_.microbatches, kNever) {
  for (int c = 0; c < s_.chunks(); ++c) {
    StageClock& stage = stages_[stage_of(s_, c)];
    for (int earlier : stage.chunks) ++chunks_[earlier].later_on_stage;
    stage.chunks.push_back(c);
  }
}

bool ZeroBubble::finished(const StageClock& stage) const {
  return std::all_of(stage.chunks.begin(), stage.chunks.end(),
                     [&](int c) { return chunks_[c].weights == s_.microbatches; });
}

// The unfinished stage that is free earliest, one that is not stuck first; -1 once all are finished.
int ZeroBubble::earliest_stage() const {
  int p = -1;
  for (int q = 0; q < s_.stages; ++q)
    if (!finished(stages_[q]) &&
        (p < 0 || std::tuple(stages_[q].clock, stages_[q].stuck) < std::tuple(stages_[p].clock, stages_[p].stuck)))
      p = q;
  return p;
}

// When what chunk `from` made at `done` is on chunk `to`'s stage.
double ZeroBubble::arrival(double done, int from, int to) const {
  return done + (crosses(s_, from, to) ? t_.message : 0);
}

Candidates ZeroBubble::candidates(const StageClock& stage) const {
  Candidates best;
  const int last = s_.chunks() - 1;
  for (int c : stage.chunks) {
    const ChunkQueue& queue = chunks_[c];
    if (const int m = queue.forwards; m < s_.microbatches && stage.kept < limit_ - queue.later_on_stage)
      consider(best.forward, {PipeOp::forward, c, c == 0 ? 0.0 : arrival(forward_ends_(c - 1, m), c - 1, c)}, true);
    if (const int m = queue.inputs; m < queue.forwards)
      consider(best.input,
               {PipeOp::backward_input, c,
                std::max(forward_ends_(c, m), c == last ? 0.0 : arrival(input_ends_(c + 1, m), c + 1, c))},
               false);
    if (const int m = queue.weights; m < queue.inputs)
      consider(best.weight, {PipeOp::backward_weight, c, input_ends_(c, m)}, false);
  }
  return best;
}

// The first of an input gradient, a forward and a weight gradient that can run at the stage's clock.
std::optional<Choice> ZeroBubble::ready_now(const StageClock& stage) const {
  const auto [input, forward, weight] = candidates(stage);
  for (const std::optional<Choice>& c : {input, forward, weight})
    if (c && c->ready <= stage.clock) return c;
  return std::nullopt;
}

void ZeroBubble::run(StageClock& stage, const Choice& choice) {
  const int c = choice.chunk;
  ChunkQueue& queue = chunks_[c];
  const double now = stage.clock;
  switch (choice.op) {
    case PipeOp::forward: {
      const int m = queue.forwards++;
      add_forward(s_, m, c);
      stage.clock = now + t_.forward;
      forward_ends_(c, m) = stage.clock;
      ++stage.kept;
      break;
    }
    case PipeOp::backward_input: {
      const int m = queue.inputs++;
      add_backward(s_, m, c, PipeOp::backward_input);
      stage.clock = now + t_.backward_input;
      input_ends_(c, m) = stage.clock;
      break;
    }
    default:
      actions_of(s_, c).push_back({PipeOp::backward_weight, queue.weights++, c});
      stage.clock = now + t_.backward_weight;
      --stage.kept;
  }
}

// Every stage at stage p's clock is stuck: they all wait for the next arrival
// anywhere, or for the next stage to come free.
void ZeroBubble::wait_for_the_next_event(int p) {
  const double now = stages_[p].clock;
  double next = kNever;
  for (const StageClock& stage : stages_) {
    if (finished(stage)) continue;
    if (stage.clock > now) next = std::min(next, stage.clock);
    const auto [input, forward, weight] = candidates(stage);
    for (const std::optional<Choice>& c : {input, forward})
      if (c && c->ready > now) next = std::min(next, c->ready);
  }
  if (next == kNever)
    throw Error(fmt::format("{} schedule: stage {} can never go on (a bug in the generator)", s_.name, p));
  for (StageClock& stage : stages_)
    if (stage.clock == now) stage.clock = next, stage.stuck = false;
}

Schedule ZeroBubble::place() {
  for (int p = earliest_stage(); p >= 0; p = earliest_stage()) {
    StageClock& stage = stages_[p];
    if (const std::optional<Choice> choice = ready_now(stage)) {
      for (StageClock& each : stages_) each.stuck = false;
      run(stage, *choice);
    } else if (!stage.stuck) {
      stage.stuck = true;  // another stage at this clock may yet make something ready
    } else {
      wait_for_the_next_event(p);
    }
  }
  return std::move(s_);
}

}  // namespace

Schedule zero_bubble(Schedule empty, int limit, const PipeTimes& t) {
  return ZeroBubble(std::move(empty), limit, t).place();
}

}  // namespace labkit
