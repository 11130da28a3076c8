#include "labkit/parallel/data_parallel.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace labkit {

std::string_view name_of(DdpMode mode) {
  switch (mode) {
    case DdpMode::naive: return "naive";
    case DdpMode::bucketed: return "bucketed";
    case DdpMode::overlap: return "overlap";
  }
  return "?";
}

DdpMode parse_ddp_mode(std::string_view name) {
  for (DdpMode m : kDdpModes)
    if (name == name_of(m)) return m;
  throw std::invalid_argument("unknown DDP mode '" + std::string(name) + "' (naive, bucketed, overlap)");
}

DataParallel::DataParallel(Comm& comm, Gpt& model, DdpMode mode, BucketCaps caps)
    : comm_(comm), model_(model), mode_(mode) {
  if (mode != DdpMode::naive) {
    Tensor& grads = model.gradients();
    reducer_.emplace(comm, View{grads.data(), grads.size(), DType::f32}, model.backward_order(), caps);
  }
}

float DataParallel::forward_backward(const std::vector<int>& tokens, const std::vector<int>& targets, int B, int T,
                                     int micro_step, int micro_steps) {
  const bool first = micro_step == 0, last = micro_step == micro_steps - 1;
  // Each piece of work is timed as it is done: really, on a real backend; on
  // the simulator, its FLOPs at the device's rate.
  double started = comm_.now();
  const float loss = model_.forward(tokens, targets, B, T);
  comm_.computed("forward", started, model_.config().layers * model_.block_flops(B, T) + model_.head_flops(B, T));
  if (first) model_.zero_grad();  // later micro-steps add to the gradients (backward accumulates)
  // backward_order: the final norm (after the head's backward), the blocks from
  // the last, the embeddings (whose table is the head's: done with the head).
  int piece = 0;
  const int blocks = model_.config().layers;
  started = comm_.now();
  model_.backward([&](ParameterRange) {
    const double forward_flops = piece == 0 ? model_.head_flops(B, T) : piece <= blocks ? model_.block_flops(B, T) : 0;
    comm_.computed("backward", started, 2 * forward_flops);  // a backward costs two forwards
    if (last && mode_ == DdpMode::overlap) reducer_->ready(piece);  // its bucket starts once all of it is ready
    ++piece;
    started = comm_.now();
  });
  if (!last) return loss;  // no_sync: nothing to average until the last micro-step
  Tensor& grads = model_.gradients();
  switch (mode_) {
    case DdpMode::naive: comm_.all_reduce(View{grads.data(), grads.size(), DType::f32}, ReduceOp::avg); break;
    case DdpMode::bucketed:
      for (int p = 0; p < piece; ++p) reducer_->ready(p);  // every bucket starts now, after backward
      reducer_->wait_all();
      break;
    case DdpMode::overlap: reducer_->wait_all(); break;
  }
  // The micro-steps' gradients are a sum of their mean-loss gradients: the mean
  // over all of their tokens is that over the micro-step count.
  if (micro_steps > 1) model_.device().divide(DType::f32, grads.data(), grads.size(), micro_steps);
  return loss;
}

std::vector<GradientReducer::Bucket> DataParallel::buckets() const {
  return reducer_ ? reducer_->buckets() : std::vector<GradientReducer::Bucket>{};
}

StepTimes step_times(const TraceTrack& track, double from, double to) {
  StepTimes t;
  t.step = to - from;
  std::vector<std::pair<double, double>> comm;  // collective spans (nested ones, as a hierarchical algorithm's, counted once)
  for (const TraceEvent& e : track.events) {
    if (e.start < from || e.end > to) continue;
    if (e.kind == TraceEvent::Kind::collective) comm.emplace_back(e.start, e.end);
    if (e.kind != TraceEvent::Kind::compute) continue;
    if (e.name == "forward") t.forward += e.end - e.start;
    if (e.name == "backward") t.backward += e.end - e.start;
    if (e.name == "optimizer") t.optimizer += e.end - e.start;
  }
  std::sort(comm.begin(), comm.end());
  double covered_to = from;
  for (auto [start, end] : comm) {
    t.comm += std::max(0.0, end - std::max(start, covered_to));
    covered_to = std::max(covered_to, end);
  }
  return t;
}

}  // namespace labkit
