// labkit::Schedule — a pipeline schedule as data (PyTorch's
// torch.distributed.pipelining and Megatron-LM keep theirs the same way): for
// each stage (a rank of the pipeline), the list of actions it runs in order,
// each on one micro-batch and one chunk of the model's layers.
//
//   forward            the chunk's layers on micro-batch m's activation
//   backward           its gradient through the chunk (input and weights at once)
//   backward_input     only the gradient of the chunk's input: what the previous chunk waits for
//   backward_weight    only the weights' gradients, which nobody waits for (zero-bubble schedules)
//   send / receive     the activation to the next chunk, the gradient to the previous
//
// The model is cut into stages x virtual_stages chunks, in layer order; each
// stage holds virtual_stages of them (stage_of_chunk). Sends and receives name
// the chunk whose output (activation) or input gradient travels: send_activation
// {m, c} goes to the stage of chunk c + 1, which runs receive_activation {m, c + 1};
// send_gradient {m, c} goes to the stage of chunk c - 1, which runs
// receive_gradient {m, c - 1}. Between two chunks on one stage nothing travels.
//
// One function generates each schedule; one executor (pipeline_executor.h)
// runs any of them; validate() checks one before it runs. The schedules:
//
//   naive        one micro-batch through every stage and back before the next
//   gpipe        every forward, then every backward: M activations in flight (Huang et al. 2019)
//   1f1b         P - s - 1 forwards to fill the pipe, then one forward one backward: at most
//                P - s in flight on stage s, the same bubble (PipeDream-Flush, Narayanan et al. 2021)
//   interleaved  1F1B over V chunks per stage, stage s holding chunks s, s + P, ...: the bubble
//                shrinks V times (Megatron-LM, Narayanan et al. 2021)
//   zb-h1        1F1B with each backward split, the weights' part filling the bubble, no more
//                memory than 1F1B (Qi et al. 2024, "Zero Bubble Pipeline Parallelism")
//   zbv          two chunks per stage in a V (stage s holds chunks s and 2P - 1 - s), backward
//                split: no bubble but the pipe's fill, at 1F1B's peak memory (Qi et al. 2024)
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace labkit {

enum class PipeOp {
  forward,
  backward,
  backward_input,
  backward_weight,
  send_activation,
  receive_activation,
  send_gradient,
  receive_gradient
};
std::string_view name_of(PipeOp op);
struct PipeAction;
struct Schedule;
// How the executors name an action's compute in the trace: "forward 3", "backward
// for the input 3'" (micro-batch 3 on a stage's later chunk), which the
// visualizer's pipeline grid reads back.
std::string trace_name(const Schedule& s, const PipeAction& a);
bool is_compute(PipeOp op);  // forward or one of the backwards

struct PipeAction {
  PipeOp op;
  int microbatch;
  int chunk = 0;
  bool operator==(const PipeAction&) const = default;
};

struct Schedule {
  std::string name;
  int stages = 0, microbatches = 0, virtual_stages = 1;
  std::vector<int> stage_of_chunk;               // chunk c's stage, for c in [0, stages x virtual_stages)
  std::vector<std::vector<PipeAction>> actions;  // by stage, in the order the stage runs them
  int chunks() const { return int(stage_of_chunk.size()); }
  bool splits_backward() const;  // some backward runs as its input's and weights' parts
};

// A send's or receive's message: the stage at its other end, and its tag,
// which names what travels (activation or gradient), the chunk that receives
// it and the micro-batch, so that the executors match messages as validate() does.
int peer_of(const Schedule& s, const PipeAction& a);
int tag_of(const Schedule& s, const PipeAction& a);

// How long one chunk's work takes, in any unit (the lab passes measured
// seconds): its forward, its backward for the input and for the weights (a
// whole backward is the two), and one message between stages.
struct PipeTimes {
  double forward = 1, backward_input = 1, backward_weight = 1, message = 0;
};

// What the generators build with: a schedule with no actions yet, each chunk
// on its stage (Megatron's looped placement: chunk c on stage c mod P), and an
// action with the messages it needs: a forward with its input received first
// and its output sent after, a backward (or its input's part) with its output's
// gradient received first and its input's gradient sent after. Nothing
// travels between two chunks on one stage.
std::vector<int> looped_placement(int stages, int virtual_stages);
Schedule empty_schedule(std::string name, int stages, int microbatches, int virtual_stages,
                        std::vector<int> stage_of_chunk);
void add_forward(Schedule& s, int microbatch, int chunk);
void add_backward(Schedule& s, int microbatch, int chunk, PipeOp op = PipeOp::backward);

Schedule naive_schedule(int stages, int microbatches);
Schedule gpipe_schedule(int stages, int microbatches);
Schedule one_f_one_b_schedule(int stages, int microbatches);  // exercise 8.1 (solutions/parallel/)
Schedule interleaved_schedule(int stages, int microbatches, int virtual_stages);  // M a multiple of P
Schedule zb_h1_schedule(int stages, int microbatches);
// ZB-V is the paper's order for equal times, or a greedy placement of each
// weight gradient where the stage would otherwise wait, as the paper's
// heuristic does, whichever ends first at the given times (equal by default;
// the paper profiles them).
Schedule zbv_schedule(int stages, int microbatches, const PipeTimes& times = {});
// By name: the names above; virtual_stages for "interleaved" (2 or more), 2
// for "zbv", 1 otherwise; times for zbv's placement (a chunk's). Throws naming
// the choices and what the schedule needs.
Schedule make_schedule(std::string_view name, int stages, int microbatches, int virtual_stages = 1,
                       const PipeTimes& times = {});
inline constexpr std::string_view kScheduleNames[] = {"naive", "gpipe", "1f1b", "interleaved", "zb-h1", "zbv"};
// Chunks per stage a schedule runs unless told otherwise: interleaved's 2, zbv's 2 (its V), the others' 1.
int default_virtual(std::string_view schedule);
// Whether make_schedule runs `schedule` at its default_virtual chunks per
// stage on a model of `layers` over P stages and M micro-batches: the layers
// cut into P x V equal chunks, and interleaved's M a multiple of P. The studies
// that run every schedule skip the others.
bool schedule_fits(std::string_view schedule, int layers, int P, int M);

// The bubble's formula, as a share of the step, at chunk times t (a whole
// backward is t.backward_input + t.backward_weight):
//   naive        (P-1)/P
//   gpipe, 1f1b  (P-1)/(M+P-1)
//   interleaved  (P-1)/(VM+P-1): the bubble's time is 1F1B's over V (Narayanan et al. 2021)
//   zb-h1        (P-1)(F + max(B-W, 0)) idle against M(F+B+W) of work: 1F1B's waits of
//                (P-1)(F+B) less the weights' parts, which fill the (P-1)B of waiting for
//                gradients (all of it when W >= B) but not the last stage's (P-1)F wait for
//                its first input; Qi et al. 2024's (P-1)(F+B-W) holds for W <= B
//   zbv          (P-1)F idle against 2M(F+B+W) of work: the fill alone, the last stage
//                waiting for its first input, which no schedule of one step avoids. Met
//                when F = B = W and M >= 3P/2. The paper's "zero bubble" counts from each
//                stage's first forward: the steady state when one step's fill overlaps
//                the last one's end (Qi et al. 2024, bypassing the optimizer's sync)
//   by hand      none (nullopt): a schedule from a file follows no formula
// With M < P the zero-bubble schedules have too few W's to fill the waits, and
// their formulas say nothing (nullopt): at P = 4, M = 2, equal times, ZB-H1
// plays a 45.5% bubble where its formula gives 33.3%.
std::optional<double> bubble_formula(const Schedule& s, const PipeTimes& t);
// The same formula in words, for a table's notes: "(P-1)/(M+P-1)".
std::string_view bubble_formula_in_words(const Schedule& s);

// A schedule played out with `times`, sends never blocking and each receive
// waiting for its message (matched by kind, chunk and micro-batch, as tagged
// messages are): when each stage's work runs, and what each holds.
struct ScheduleRun {
  double makespan = 0;              // the last action's end
  double bubble = 0;                // 1 - (the stages' busy time) / (P x makespan)
  // By stage: the chunk activations it keeps at most (forwarded, their weights' gradient not yet done).
  std::vector<int> peak_in_flight;
  struct Slot {
    PipeOp op;  // forward or one of the backwards
    int microbatch, chunk;
    double start, end;
  };
  std::vector<std::vector<Slot>> slots;  // by stage
};

// Checks that `s` can run and plays it out: every chunk's forward and backward
// (whole, or input then weights) of every micro-batch once, on the chunk's
// stage; a forward after its input (received, or made by the chunk before on
// the same stage) and a backward after its forward and its output's gradient;
// each send after the work that makes what it sends, and received exactly
// once by the stage it goes to; and no point where every unfinished stage
// waits on a receive (a deadlock). Throws labkit::Error naming the stage, its
// action and what breaks.
ScheduleRun validate(const Schedule& s, const PipeTimes& times = {});

}  // namespace labkit
