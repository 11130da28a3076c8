// labkit::PipelineExecutor — runs a pipeline Schedule (pipeline_schedule.h)
// on one rank's stage of the tiny GPT, over the pipeline group's point-to-point.
//
// The model's layers are cut into schedule.chunks() chunks of equal size, in
// order; the first chunk also embeds the tokens, the last applies the final
// norm and the head and takes the loss. Each rank keeps a whole Gpt (llm.c's
// one flat buffer) but runs and updates only its chunks' layers, and the
// embeddings where it holds the first chunk or the last: the head shares the
// token embeddings, so those two stages sum that gradient between them before
// the update, as Megatron-LM's embedding group does.
//
// One step runs the stage's actions in order, on micro-batch m's rows of the
// batch (B / M sequences each):
//   receive   a blocking receive from the neighbour's stage, tagged with the
//             micro-batch and chunk, into the micro-batch's activations
//   forward   Gpt::forward_layers over the chunk (embed first, head last)
//   backward  Gpt::backward_layers, whole or in its input's and weights' parts
//   send      a non-blocking send of the chunk's output or input gradient,
//             waited for before its activations are reused
// Each micro-batch a stage holds has its own activation set (Gpt::prepare),
// from its first forward here until its last backward here; the gradients
// accumulate over the micro-batches and are divided by M, the mean over the batch.
#pragma once

#include <cstddef>
#include <memory>
#include <utility>
#include <vector>

#include "labkit/comm.h"
#include "labkit/gpt.h"
#include "labkit/parallel/pipeline_schedule.h"

namespace labkit {

// One step as this stage ran it.
struct PipelineStep {
  float loss = 0;  // the mean over the batch, on the stage of the last chunk (0 elsewhere)
  double start = 0, end = 0;
  std::vector<ScheduleRun::Slot> slots;  // the stage's forwards and backwards, timed by the Comm's clock
  int activation_sets = 0;               // micro-batches held at once, at most
  std::size_t sent_bytes = 0;            // activations and gradients this stage sent to others
};

class PipelineExecutor {
 public:
  // Every rank of `pp` (its rank is the stage) builds one with the same
  // schedule, which is validated first; model.config().layers must split into
  // schedule.chunks() equal chunks. Throws labkit::Error naming the rank.
  PipelineExecutor(Comm& pp, Gpt& model, Schedule schedule);

  // One step's forwards and backwards on tokens and targets (B x T, the same
  // batch on every stage): leaves the mean gradient of the batch in the
  // model's gradients, for the ranges owned() lists.
  PipelineStep step(const std::vector<int>& tokens, const std::vector<int>& targets, int B, int T);

  // The parameter ranges this stage updates, in buffer order.
  const std::vector<ParameterRange>& owned() const { return owned_; }
  std::pair<int, int> layers_of(int chunk) const;  // [first, last)
  // FLOPs of one chunk's forward, its backward for the input and for the
  // weights (a whole backward is the two: twice the forward) on B x T tokens.
  PipeTimes chunk_flops(int chunk, int B, int T) const;
  // Bytes of activations (and their gradients) one micro-batch keeps on `chunk`.
  std::size_t chunk_activation_bytes(int chunk, int B, int T) const;

 private:
  class MicroBatches;  // one step's: their rows of the batch, and the activation sets they hold
  int stage() const { return pp_.rank(); }
  bool holds(int chunk) const { return schedule_.stage_of_chunk[std::size_t(chunk)] == stage(); }
  // step()'s phases: its batch checked, each action a send or receive (exchange) or a forward or
  // backward (compute, run_layers), and the gradients averaged over the micro-batches.
  void check_batch(const std::vector<int>& tokens, const std::vector<int>& targets, int B, int T) const;
  void exchange(MicroBatches& batch, const PipeAction& a, PipelineStep& out);
  double compute(const MicroBatches& batch, const PipeAction& a, PipelineStep& out);
  double run_layers(const MicroBatches& batch, const PipeAction& a);
  void finish_gradients();  // the tied embedding's two halves summed, then the mean over the micro-batches

  Comm& pp_;
  Gpt& model_;
  Schedule schedule_;
  std::vector<std::size_t> last_action_;  // by micro-batch: its last action on this stage
  int sets_ = 0;                          // activation sets the stage's schedule needs
  std::vector<ParameterRange> owned_;
  std::unique_ptr<Comm> embedding_group_;  // the stages of the first and last chunk
};

// Exercise 8.2 (solutions/parallel/pipeline_exchange.cpp): one of a schedule's sends
// or receives, between the model's current activation set and the
// neighbour's, for a chunk of layers [first, last): a receive returns once its
// message is in place (an empty Request), a send at once with its Request.
Request pipeline_exchange(Comm& pp, const Schedule& s, const PipeAction& a, Gpt& model, int first, int last);

// The same walk payload-free, for what-if runs at scale on the simulator:
// each chunk's work advances the stage's clock by its FLOPs (`flops`, as
// Comm::compute_flops charges them), each message carries only its size. Every
// rank of `pp` calls it with the same schedule (validated by the caller).
PipelineStep play_payload_free(Comm& pp, const Schedule& s, const PipeTimes& flops, std::size_t message_bytes);

}  // namespace labkit
