// labkit::Schedule — a pipeline schedule as data (PyTorch's
// torch.distributed.pipelining and Megatron-LM keep theirs the same way): for
// each stage, the list of actions it runs in order, each on one micro-batch.
//
//   forward            the stage's layers on micro-batch m's activation
//   backward           its gradient through the stage's layers (input and weights)
//   send / receive     the activation to the next stage, the gradient to the previous
//
// One function generates each schedule; one executor will run any of them;
// validate() checks one before it runs. The schedules (Huang et al. 2019,
// GPipe; Narayanan et al. 2019, PipeDream's 1F1B, as Megatron-LM flushes it):
//
//   naive   one micro-batch through every stage and back before the next
//   gpipe   every forward, then every backward: M activations in flight
//   1f1b    P - s - 1 forwards to fill the pipe, then one forward one
//           backward: at most P - s in flight on stage s, the same bubble
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace labkit {

enum class PipeOp { forward, backward, send_activation, receive_activation, send_gradient, receive_gradient };
std::string_view name_of(PipeOp op);

struct PipeAction {
  PipeOp op;
  int microbatch;
  bool operator==(const PipeAction&) const = default;
};

struct Schedule {
  std::string name;
  int stages = 0, microbatches = 0;
  std::vector<std::vector<PipeAction>> actions;  // by stage, in the order the stage runs them
};

Schedule naive_schedule(int stages, int microbatches);
Schedule gpipe_schedule(int stages, int microbatches);
Schedule one_f_one_b_schedule(int stages, int microbatches);
// By name: "naive", "gpipe", "1f1b"; throws naming the choices.
Schedule make_schedule(std::string_view name, int stages, int microbatches);

// A schedule played out with a forward taking `forward` and a backward
// `backward` seconds on every stage, messages free and sends never blocking:
// when each stage's work ends, and what each holds.
struct ScheduleRun {
  double makespan = 0;                  // the last action's end
  double bubble = 0;                    // 1 - (each stage's busy time) / makespan, the mean over stages
  std::vector<int> peak_in_flight;      // by stage: micro-batches forwarded and not yet backwarded, at most
  struct Slot {
    PipeOp op;  // forward or backward
    int microbatch;
    double start, end;
  };
  std::vector<std::vector<Slot>> slots;  // by stage
};

// Checks that `s` can run and plays it out: every micro-batch forwarded and
// backwarded once on every stage; a forward after its activation arrives and
// a backward after its own forward and its gradient; each send after the
// work that makes what it sends, matched by the neighbour's receive of the
// same micro-batch, in the same order; and no point where every unfinished
// stage waits on a receive (a deadlock). Throws labkit::Error naming the
// stage, its action and what breaks.
ScheduleRun validate(const Schedule& s, double forward = 1, double backward = 2);

}  // namespace labkit
