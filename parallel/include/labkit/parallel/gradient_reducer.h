// labkit::GradientReducer — data parallelism's gradient averaging in buckets,
// overlapped with backward, as PyTorch's DistributedDataParallel does it
// (torch/csrc/distributed/c10d/reducer.cpp; Li et al., "PyTorch Distributed",
// VLDB 2020).
//
//   flat gradient buffer (parameter order):  [ emb | layer 0 | layer 1 | ... | layer L-1 | norm ]
//   backward finishes them:                     last  <-----------------------------------  first
//   buckets (in that order):                  [ bucket 2 ][   bucket 1   ][  bucket 0 (1 MiB) ]
//
// Backward produces gradients from the last parameter to the first. Instead of
// one allreduce of everything after backward, the gradients are grouped into
// buckets in that order, and a bucket's allreduce starts (non-blocking) the
// moment its last gradient is ready, while backward computes the layers
// before it: only the last bucket's allreduce is left exposed. The first bucket
// is small (1 MiB) so communication starts early; the rest are 25 MiB, few
// enough calls to amortize each collective's latency (DDP's bucket_cap_mb).
//
// A bucket is a view of the flat buffer, reduced in place: the gradients are
// already laid out contiguously, in the order the buckets take them, which is
// the layout DDP's gradient_as_bucket_view=True arranges to avoid copying each
// gradient into a bucket and back. So the ranges must be adjacent.
#pragma once

#include <cstddef>
#include <span>
#include <vector>

#include "labkit/comm.h"
#include "labkit/gpt.h"  // ParameterRange

namespace labkit {

struct BucketCaps {
  std::size_t first_bytes = std::size_t(1) << 20;  // torch.distributed's _DEFAULT_FIRST_BUCKET_BYTES
  std::size_t bytes = std::size_t(25) << 20;       // DDP's bucket_cap_mb = 25
};

class GradientReducer {
 public:
  // A bucket: parameters [first, last] (indices into the constructor's list) and
  // their gradients, one contiguous run of the flat buffer.
  struct Bucket {
    int first, last;
    View grads;
  };

  // `params` are the gradients' ranges in `grads` in the order backward
  // finishes them, so each ends where the previous one begins (reverse
  // parameter order). Every rank of `comm` builds the same reducer.
  GradientReducer(Comm& comm, View grads, std::vector<ParameterRange> params, BucketCaps caps = {});

  // Parameter `param`'s gradient is final. When its bucket's last gradient is,
  // that bucket's allreduce starts, without waiting for it to finish.
  void ready(int param);
  // Waits for every bucket's allreduce: the gradients are then averaged over the
  // ranks (ReduceOp::avg). Every parameter must have been ready; the reducer is
  // then ready for the next step.
  void wait_all();

  const std::vector<Bucket>& buckets() const { return buckets_; }

 private:
  void start_step();  // no parameter ready, no bucket started

  Comm& comm_;
  std::vector<ParameterRange> params_;
  std::vector<Bucket> buckets_;
  std::vector<int> bucket_of_;       // parameter -> its bucket
  std::vector<bool> is_ready_;       // parameter -> ready this step
  std::vector<int> waiting_for_;     // bucket -> parameters not yet ready
  std::vector<Request> in_flight_;   // one per started bucket, in bucket order
};

// ---- lab 5's exercises (solutions/parallel/NAME.cpp; the reducer and DataParallel call them) ----

// 5.1 The gradients' mean over the ranks, in place, blocking: every rank ends
// with the gradient of the whole global batch (naive DDP's one allreduce).
void average_gradients(Comm& comm, View grads);

// 5.2 PyTorch's bucket assignment: `grad_bytes` are the gradients' sizes in the
// order backward finishes them; returns the index of each bucket's first
// gradient (a bucket runs to the next one's first), 0 first.
std::vector<int> assign_buckets(std::span<const std::size_t> grad_bytes, BucketCaps caps);

// 5.3 Overlap. launch_ready_buckets: `unready[b]` counts bucket b's gradients
// not yet final, and `in_flight` holds a request per bucket already started, in
// bucket order; starts, without waiting, the allreduce (avg) of each following
// bucket whose gradients are all final. wait_for_buckets: waits for every
// request, so the gradients are averaged before the optimizer, and leaves
// `in_flight` empty for the next step.
void launch_ready_buckets(Comm& comm, std::span<const GradientReducer::Bucket> buckets, std::span<const int> unready,
                          std::vector<Request>& in_flight);
void wait_for_buckets(std::vector<Request>& in_flight);

}  // namespace labkit
