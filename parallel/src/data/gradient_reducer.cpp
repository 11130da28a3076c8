#include "labkit/parallel/gradient_reducer.h"

#include "labkit/error.h"

namespace labkit {

GradientReducer::GradientReducer(Comm& comm, View grads, std::vector<ParameterRange> params, BucketCaps caps)
    : comm_(comm), params_(std::move(params)), bucket_of_(params_.size()) {
  const std::string who = comm.who();
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
  // The buckets (assign_buckets: PyTorch's rule), each a view of the buffer.
  std::vector<std::size_t> grad_bytes;
  for (const ParameterRange& r : params_) grad_bytes.push_back(r.count * size_of(grads.dtype));
  const std::vector<int> firsts = assign_buckets(grad_bytes, caps);
  for (std::size_t b = 0; b < firsts.size(); ++b) {
    const int first = firsts[b], next = b + 1 < firsts.size() ? firsts[b + 1] : int(params_.size());
    if (first != (b == 0 ? 0 : buckets_.back().last + 1) || next <= first || next > int(params_.size()))
      fail(who, "gradient reducer", "assign_buckets gave bucket {} first gradient {}: the first bucket starts at "
           "gradient 0, each later one right after the bucket before it, and each holds at least one of the {} "
           "gradients", b, first, params_.size());
    const std::size_t begin = params_[next - 1].offset, end = params_[first].offset + params_[first].count;
    buckets_.push_back({first, next - 1, grads.slice(begin, end - begin)});
    for (int p = first; p < next; ++p) bucket_of_[p] = int(b);
  }
  if (buckets_.empty() && !params_.empty())
    fail(who, "gradient reducer", "assign_buckets put none of the {} gradients in a bucket", params_.size());
  start_step();
}

void GradientReducer::start_step() {
  is_ready_.assign(params_.size(), false);
  waiting_for_.clear();
  for (const Bucket& b : buckets_) waiting_for_.push_back(b.last - b.first + 1);
}

void GradientReducer::ready(int param) {
  if (param < 0 || param >= int(params_.size()))
    fail(comm_.who(), "gradient reducer ready", "param={} is out of range for {} parameters",
         param, params_.size());
  if (is_ready_[param])
    fail(comm_.who(), "gradient reducer ready",
         "param={} is already ready this step (wait_all ends a step)", param);
  is_ready_[param] = true;
  if (--waiting_for_[bucket_of_[param]] == 0) launch_ready_buckets(comm_, buckets_, waiting_for_, in_flight_);
}

void GradientReducer::wait_all() {
  const std::string who = comm_.who();
  for (std::size_t p = 0; p < params_.size(); ++p)
    if (!is_ready_[p])
      fail(who, "gradient reducer wait_all", "parameter {} was never ready this step: its bucket's allreduce cannot "
           "start", p);
  if (in_flight_.size() != buckets_.size())
    fail(who, "gradient reducer wait_all", "{} of {} buckets were started: launch_ready_buckets must start each "
         "bucket once all of its gradients are ready", in_flight_.size(), buckets_.size());
  wait_for_buckets(in_flight_);
  if (!in_flight_.empty())
    fail(who, "gradient reducer wait_all", "wait_for_buckets left {} requests in in_flight: the next step starts "
         "with none", in_flight_.size());
  start_step();
}

}  // namespace labkit
