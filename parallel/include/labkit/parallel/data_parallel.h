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
#include "labkit/memory.h"
#include "labkit/parallel/gradient_reducer.h"
#include "labkit/trace.h"

namespace labkit {

enum class DdpMode { naive, bucketed, overlap };
inline constexpr DdpMode kDdpModes[] = {DdpMode::naive, DdpMode::bucketed, DdpMode::overlap};
std::string_view name_of(DdpMode mode);
DdpMode parse_ddp_mode(std::string_view name);  // throws naming the modes

// The averaging itself, over any flat gradient buffer: backward reports each
// piece of `backward_order` as it finishes it (ready), and finish() returns
// once the whole buffer is averaged over the ranks.
class GradientAveraging {
 public:
  GradientAveraging(Comm& comm, View grads, std::vector<ParameterRange> backward_order, DdpMode mode,
                    BucketCaps caps);
  void ready(int piece);  // overlap: the piece's bucket starts once all of it is ready
  void finish();          // naive: one allreduce; bucketed: every bucket now; overlap: wait for them
  std::vector<GradientReducer::Bucket> buckets() const;  // none in naive mode

 private:
  Comm& comm_;
  View grads_;
  int pieces_;
  DdpMode mode_;
  std::optional<GradientReducer> reducer_;
};

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

  std::vector<GradientReducer::Bucket> buckets() const { return averaging_.buckets(); }

 private:
  Comm& comm_;
  Gpt& model_;
  GradientAveraging averaging_;
};

// A data-parallel step of a model known by its shapes alone (payload-free:
// sizes-only buffers), for what-ifs at the scale of real runs: a 7B model's
// step over a thousand ranks simulates in seconds. The pieces are those
// backward finishes in order (the head and final norm, the layers from the
// last, the embeddings), each with its gradient count and backward seconds.
struct ShapedModel {
  struct Piece {
    std::size_t count;
    double backward_seconds;
  };
  double forward_seconds = 0;
  std::vector<Piece> pieces;
  DType grad_dtype = DType::bf16;
  std::size_t parameters() const;
};
// `arch`'s pieces with `step_seconds` of compute, a third forward and two thirds
// backward, each piece's share in proportion to its parameters (6N FLOPs per
// token: Kaplan et al. 2020).
ShapedModel shaped_model(const memory::Architecture& arch, double step_seconds);
void shaped_step(Comm& comm, const ShapedModel& model, DdpMode mode, BucketCaps caps = {});

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
