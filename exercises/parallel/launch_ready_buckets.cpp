// EXERCISE 5.3
// Overlapping communication with backward: each bucket's allreduce starts the
// moment its last gradient is final, and runs while backward computes the
// gradients of the layers before it (Li et al., "PyTorch Distributed", VLDB
// 2020, section 3.2.3). Only what is still in flight when backward ends is
// exposed: T_step ~ T_fwd + max(T_bwd, T_comm) + T_opt.
//
//   backward   | head | layer 3 | layer 2 | layer 1 | layer 0 |
//   comm               | bucket 0 |   bucket 1   |   bucket 2   |   wait
//
// The reducer calls launch_ready_buckets each time a bucket's last gradient
// becomes final (unready[b] drops to 0), and wait_for_buckets after backward,
// before the optimizer.
//
// Buckets start in bucket order, never out of it. Collectives match across
// ranks by their order, so every rank must issue the same allreduces in the
// same sequence; if bucket 1 is ready before bucket 0 (a rank's backward may
// finish its gradients in another order), it waits for bucket 0 to start first.
// DDP's Reducer keeps the same rule (next_bucket_).
//
// You have comm.i_all_reduce(view, ReduceOp::avg), which returns a Request
// at once, and Request::wait().
// Grade it: ./labkit grade ddp; run the lab on it: ./labkit mine ddp
#include "labkit/parallel/gradient_reducer.h"

namespace labkit {

void launch_ready_buckets(Comm& comm, std::span<const GradientReducer::Bucket> buckets, std::span<const int> unready,
                          std::vector<Request>& in_flight) {
  // TODO: buckets 0 .. in_flight.size() - 1 have started. While the next bucket exists and
  //       none of its gradients is unready, start its allreduce (avg) and append the request to in_flight.
  (void)comm, (void)buckets, (void)unready, (void)in_flight;
}

void wait_for_buckets(std::vector<Request>& in_flight) {
  // TODO: wait for every request in in_flight, then empty it for the next step.
  (void)in_flight;
}

}  // namespace labkit
