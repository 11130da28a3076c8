// labkit::DataParallel — one training step of the tiny GPT on every rank of a
// data-parallel group, the gradients averaged over the ranks before the
// optimizer, in one of three ways (the DDP lab compares them):
//
//   naive     forward | backward ........... | allreduce(all gradients) | optimizer
//   bucketed  forward | backward ........... | bucket 0 | bucket 1 | ... | optimizer
//   overlap   forward | backward ........... | wait | optimizer
//                          | bucket 0 | bucket 1 |      (on the comm stream)
//
// Every rank starts from the same weights (same seed) and applies the same
// averaged gradient, so the weights stay equal on every rank, and equal to one
// rank training on the whole global batch: the mean of the ranks' mean losses
// over equal shards is the mean loss over the batch, and so are its gradients.
//
// The virtual clock is charged as the device would take the work, piece by
// piece as backward finishes it (the head, then each block), so that on the
// simulator a bucket's allreduce really runs under the backward of the blocks
// before it.
#pragma once

#include <optional>
#include <string_view>
#include <vector>

#include "labkit/comm.h"
#include "labkit/gpt.h"
#include "labkit/parallel/gradient_reducer.h"
#include "labkit/trace.h"

namespace labkit {

enum class DdpMode { naive, bucketed, overlap };
inline constexpr DdpMode kDdpModes[] = {DdpMode::naive, DdpMode::bucketed, DdpMode::overlap};
std::string_view name_of(DdpMode mode);
DdpMode parse_ddp_mode(std::string_view name);  // throws naming the modes

class DataParallel {
 public:
  DataParallel(Comm& comm, Gpt& model, DdpMode mode, BucketCaps caps = {});

  // Forward and backward on this rank's B x T tokens, and the gradients
  // averaged over the ranks: every rank then holds the same gradients, those of
  // the global batch, for its optimizer. Returns this rank's loss.
  // Gradient accumulation: micro-step m of `micro_steps` adds its gradients to
  // the ones before it, and only the last one communicates (PyTorch's no_sync),
  // so K micro-steps of B equal one step of K x B at one allreduce's cost.
  float forward_backward(const std::vector<int>& tokens, const std::vector<int>& targets, int B, int T,
                         int micro_step = 0, int micro_steps = 1);

  // The buckets (bucketed and overlap modes; none in naive).
  std::vector<GradientReducer::Bucket> buckets() const;

 private:
  Comm& comm_;
  Gpt& model_;
  DdpMode mode_;
  std::optional<GradientReducer> reducer_;
};

// Where a step's time went on one rank, from its trace between `from` and `to`
// (seconds): compute by region name (forward, backward, optimizer), the
// communication (every collective's span, on the rank's track or its comm
// stream), and the exposed communication: the step's time not spent computing,
// which is what overlapping communication with backward is meant to shrink.
struct StepTimes {
  double forward = 0, backward = 0, optimizer = 0, comm = 0, step = 0;
  double compute() const { return forward + backward + optimizer; }
  double exposed() const { return step - compute(); }
};
StepTimes step_times(const TraceTrack& track, double from, double to);

}  // namespace labkit
