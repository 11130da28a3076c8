#include "labkit/parallel/gradient_reducer.h"

#include <fmt/format.h>

#include "labkit/error.h"

namespace labkit {

GradientReducer::GradientReducer(Comm& comm, View grads, std::vector<ParameterRange> params, BucketCaps caps)
    : comm_(comm), params_(std::move(params)), bucket_of_(params_.size()) {
  const std::string who = fmt::format("rank {}", comm.rank());
  for (std::size_t p = 0; p < params_.size(); ++p) {
    const ParameterRange& r = params_[p];
    if (r.offset + r.count > grads.count)
      fail(who, "gradient reducer", "parameter {}'s gradients [{}, {}) pass the end of the buffer ({} elements)", p,
           r.offset, r.offset + r.count, grads.count);
    if (p > 0 && r.offset + r.count != params_[p - 1].offset)
      fail(who, "gradient reducer", "parameter {}'s gradients [{}, {}) do not end where parameter {}'s begin ({}): "
           "buckets are views of the buffer, so each range must end where the one before it begins", p, r.offset,
           r.offset + r.count, p - 1, params_[p - 1].offset);
  }
  // PyTorch's compute_bucket_assignment_by_size: take gradients in the order
  // they become ready; a bucket closes once it holds at least its cap (so one
  // large gradient makes a bucket of its own); the first cap is the small one.
  std::size_t bucket_bytes = 0;
  for (int p = 0; p < int(params_.size()); ++p) {
    if (bucket_bytes == 0) buckets_.push_back({p, p, {}});
    Bucket& b = buckets_.back();
    b.last = p;
    bucket_of_[p] = int(buckets_.size()) - 1;
    bucket_bytes += params_[p].count * size_of(grads.dtype);
    if (bucket_bytes >= (buckets_.size() == 1 ? caps.first_bytes : caps.bytes)) bucket_bytes = 0;
  }
  for (Bucket& b : buckets_) {
    const std::size_t begin = params_[b.last].offset, end = params_[b.first].offset + params_[b.first].count;
    b.grads = grads.slice(begin, end - begin);
  }
  start_step();
}

void GradientReducer::start_step() {
  is_ready_.assign(params_.size(), false);
  waiting_for_.clear();
  for (const Bucket& b : buckets_) waiting_for_.push_back(b.last - b.first + 1);
}

void GradientReducer::ready(int param) {
  if (param < 0 || param >= int(params_.size()))
    fail(fmt::format("rank {}", comm_.rank()), "gradient reducer ready", "param={} is out of range for {} parameters",
         param, params_.size());
  if (is_ready_[param])
    fail(fmt::format("rank {}", comm_.rank()), "gradient reducer ready",
         "param={} is already ready this step (wait_all ends a step)", param);
  is_ready_[param] = true;
  if (--waiting_for_[bucket_of_[param]] == 0) start_ready_buckets();
}

// Buckets start in order, as DDP's Reducer launches them: every rank must issue
// the same collectives in the same order, whatever order its gradients became
// ready in, so a bucket ready before the one ahead of it waits for it.
void GradientReducer::start_ready_buckets() {
  while (in_flight_.size() < buckets_.size() && waiting_for_[in_flight_.size()] == 0)
    in_flight_.push_back(comm_.i_all_reduce(buckets_[in_flight_.size()].grads, ReduceOp::avg));
}

void GradientReducer::wait_all() {
  for (std::size_t p = 0; p < params_.size(); ++p)
    if (!is_ready_[p])
      fail(fmt::format("rank {}", comm_.rank()), "gradient reducer wait_all",
           "parameter {} was never ready this step: its bucket's allreduce cannot start", p);
  for (Request& r : in_flight_) r.wait();
  in_flight_.clear();
  start_step();
}

}  // namespace labkit
