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

#include <algorithm>
#include <optional>
#include <string_view>
#include <vector>

#include "labkit/comm.h"
#include "labkit/gpt.h"
#include "labkit/memory.h"
#include "labkit/parallel/gradient_reducer.h"
#include "labkit/trace.h"

namespace labkit {

class GradientCompressor;  // gradient_compression.h

enum class DdpMode { naive, bucketed, overlap };
inline constexpr DdpMode kDdpModes[] = {DdpMode::naive, DdpMode::bucketed, DdpMode::overlap};
std::string_view name_of(DdpMode mode);
DdpMode parse_ddp_mode(std::string_view name);  // throws naming the modes

// The averaging itself, over any flat gradient buffer: backward reports each
// piece of `backward_order` as it finishes it (ready), and finish() returns
// once the whole buffer is averaged over the ranks. Given a compressor, finish()
// averages through it instead, once, after backward, whatever the mode.
class GradientAveraging {
 public:
  GradientAveraging(Comm& comm, View grads, std::vector<ParameterRange> backward_order, DdpMode mode,
                    BucketCaps caps, GradientCompressor* compressor = nullptr);
  void ready(int piece);  // overlap: the piece's bucket starts once all of it is ready
  void finish();          // naive: one allreduce; bucketed: every bucket now; overlap: wait for them
  std::vector<GradientReducer::Bucket> buckets() const;  // none in naive mode

 private:
  Comm& comm_;
  View grads_;
  int pieces_;
  DdpMode mode_;
  std::optional<GradientReducer> reducer_;
  GradientCompressor* compressor_;
};

class DataParallel {
 public:
  DataParallel(Comm& comm, Gpt& model, DdpMode mode, BucketCaps caps = {}, GradientCompressor* compressor = nullptr);

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

// A data-parallel step of a meta model, known by its shapes alone (payload-free:
// meta views, view.h), for what-ifs at the scale of real runs: a 7B model's
// step over a thousand ranks simulates in seconds. The pieces are the weight
// tensors in the order backward finishes them (the head and final norm, each
// layer's tensors from the last layer's last, the embeddings), each with its
// gradient count and backward seconds: a bucket holds whole tensors, so their
// sizes decide what a bucket cap can do.
struct MetaModel {
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
// backward, each piece's share in proportion to the parameters it computes with
// (6N FLOPs per token: Kaplan et al. 2020).
MetaModel meta_model(const memory::Architecture& arch, double step_seconds);
// The step_seconds that give `tokens` per step at `flops_per_second`, in the
// same 6N accounting: each layer's forward then takes 2 x tokens x its
// parameters / flops_per_second.
double step_seconds_for(const memory::Architecture& arch, double tokens, double flops_per_second);
void meta_step(Comm& comm, const MetaModel& model, DdpMode mode, BucketCaps caps = {});

// The overhead model of overlapped buckets (chapter 5 derives it). One
// allreduce of n bytes takes a + n b: a the per-call cost (2 (P-1) alpha on a
// ring), b the time per byte (2 (P-1) / P over the bandwidth). k buckets of
// G/k bytes become ready evenly through a backward of T seconds, and their
// allreduces, c = a + (G/k) b each, run one after another: bucket i is ready at
// iT/k, so the last ends at max over i of (iT/k + (k - i + 1) c), which is
// max(T + c, T/k + k c). The exposed communication is that minus T.
struct AllReduceLine {
  double a, b;
};
double exposed_communication(double buckets, double backward_seconds, double gradient_bytes, AllReduceLine line);
// Its minimum over k: the two terms meet at k = (T - G b) / a, where
// communication just keeps up with backward; past it the second term,
// k a + G b + T/k - T, is least at k = sqrt(T / a). So
// k* = max((T - G b) / a, sqrt(T / a)), and at least 1.
double best_bucket_count(double backward_seconds, double gradient_bytes, AllReduceLine line);

// Where a step's time went on one rank, from its trace between `from` and `to`
// (seconds): compute by region name (forward, backward, optimizer), the
// communication (every collective's span, on the rank's track or its comm
// stream), and the exposed communication: the step's time not spent computing,
// which is what overlapping communication with backward is meant to shrink.
struct StepTimes {
  double forward = 0, backward = 0, optimizer = 0, comm = 0, step = 0;
  double compute() const { return forward + backward + optimizer; }
  double exposed() const { return std::max(0.0, step - compute()); }  // not below 0 by the sums' rounding
};
StepTimes step_times(const TraceTrack& track, double from, double to);

}  // namespace labkit
