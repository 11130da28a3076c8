#include "labkit/parallel/data_parallel.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "labkit/parallel/gradient_compression.h"

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

GradientAveraging::GradientAveraging(Comm& comm, View grads, std::vector<ParameterRange> backward_order,
                                     DdpMode mode, BucketCaps caps, GradientCompressor* compressor)
    : comm_(comm), grads_(grads), pieces_(int(backward_order.size())), mode_(mode), compressor_(compressor) {
  if (mode != DdpMode::naive && !compressor) reducer_.emplace(comm, grads, std::move(backward_order), caps);
}

void GradientAveraging::ready(int piece) {
  if (mode_ == DdpMode::overlap && !compressor_) reducer_->ready(piece);
}

void GradientAveraging::finish() {
  if (compressor_) {
    // The compressors compute on the host (a GPU's gradients go there and
    // back), on the whole gradient at once: PyTorch's comm hooks run per
    // bucket, to overlap with backward, for the same bytes.
    const Device& device = device_of(grads_.data);
    if (device.kind == DeviceKind::cpu) return compressor_->average(grads_);
    std::vector<std::byte> host(grads_.bytes());
    device.copy_to_host(host.data(), grads_.data, host.size());
    compressor_->average({host.data(), grads_.count, grads_.dtype});
    return device.copy_from_host(grads_.data, host.data(), host.size());
  }
  switch (mode_) {
    case DdpMode::naive: average_gradients(comm_, grads_); break;
    case DdpMode::bucketed:
      for (int p = 0; p < pieces_; ++p) reducer_->ready(p);  // every bucket starts now, after backward
      reducer_->wait_all();
      break;
    case DdpMode::overlap: reducer_->wait_all(); break;
  }
}

std::vector<GradientReducer::Bucket> GradientAveraging::buckets() const {
  return reducer_ ? reducer_->buckets() : std::vector<GradientReducer::Bucket>{};
}

DataParallel::DataParallel(Comm& comm, Gpt& model, DdpMode mode, BucketCaps caps, GradientCompressor* compressor)
    : comm_(comm), model_(model),
      averaging_(comm, View{model.gradients().data(), model.gradients().size(), DType::f32}, model.backward_order(),
                 mode, caps, compressor) {}

float DataParallel::forward_backward(const std::vector<int>& tokens, const std::vector<int>& targets, int B, int T,
                                     int micro_step, int micro_steps) {
  const bool first = micro_step == 0, last = micro_step == micro_steps - 1;
  // Each piece of work is timed as it is done: really, on a real backend; on
  // the simulator, its FLOPs at the device's rate.
  double started = comm_.now();
  model_.queue_forward(tokens, targets, B, T);  // the loss is read at the end, once the step is queued
  comm_.record_compute("forward", started, model_.config().layers * model_.block_flops(B, T) + model_.head_flops(B, T));
  if (first) model_.zero_grad();  // later micro-steps add to the gradients (backward accumulates)
  // backward_order: the final norm (after the head's backward), the blocks from
  // the last, the embeddings (whose table is the head's: done with the head).
  int piece = 0;
  const int blocks = model_.config().layers;
  started = comm_.now();
  model_.backward([&](ParameterRange) {
    const double forward_flops = piece == 0 ? model_.head_flops(B, T) : piece <= blocks ? model_.block_flops(B, T) : 0;
    comm_.record_compute("backward", started, 2 * forward_flops);  // a backward costs two forwards
    if (last) averaging_.ready(piece);
    ++piece;
    started = comm_.now();
  });
  if (!last) return model_.loss();  // no_sync: nothing to average until the last micro-step
  averaging_.finish();
  Tensor& grads = model_.gradients();
  // The micro-steps' gradients are a sum of their mean-loss gradients: the mean
  // over all of their tokens is that over the micro-step count.
  if (micro_steps > 1) model_.device().divide(DType::f32, grads.data(), grads.size(), micro_steps);
  return model_.loss();
}

std::size_t MetaModel::parameters() const {
  std::size_t n = 0;
  for (const Piece& p : pieces) n += p.count;
  return n;
}

namespace {
// The parameters a token's forward computes with: a tied table computes as the
// head and the embedding both, and a routed expert's tensor sees active_experts
// / experts of the tokens (count_parameters' active).
double computing_parameters(const memory::Architecture& arch) {
  return memory::count_parameters(arch).active + (arch.tied_embeddings ? double(arch.vocab) * arch.hidden : 0);
}
}  // namespace

double step_seconds_for(const memory::Architecture& arch, double tokens, double flops_per_second) {
  return 6 * tokens * computing_parameters(arch) / flops_per_second;
}

MetaModel meta_model(const memory::Architecture& arch, double step_seconds) {
  memory::Architecture no_layers = arch;
  no_layers.layers = 0;
  const double outside = memory::count_parameters(no_layers).total;  // embeddings, head, final norm
  const double embedding = double(arch.vocab + arch.positions) * arch.hidden;
  const double head_and_norm = outside - embedding;  // the untied head (if any) and the final norm
  // 6N FLOPs per token: the forward a third of the step, the backward two
  // thirds, each piece's share that of the parameters it computes with.
  const double tied_head = arch.tied_embeddings ? double(arch.vocab) * arch.hidden : 0;
  const double computing = computing_parameters(arch);
  auto backward_seconds = [&](double computed_with) { return step_seconds * 2 / 3 * computed_with / computing; };
  MetaModel m;
  m.forward_seconds = step_seconds / 3;
  m.pieces.push_back({std::size_t(head_and_norm), backward_seconds(head_and_norm + tied_head)});
  for (int l = arch.layers - 1; l >= 0; --l) {
    const std::vector<memory::WeightTensor> tensors = memory::layer_tensors(arch, l);
    for (auto t = tensors.rbegin(); t != tensors.rend(); ++t)
      m.pieces.push_back({std::size_t(t->count),
                          backward_seconds(t->routed ? t->count * arch.active_experts / arch.experts : t->count)});
  }
  m.pieces.push_back({std::size_t(embedding), backward_seconds(embedding)});
  return m;
}

void meta_step(Comm& comm, const MetaModel& model, DdpMode mode, BucketCaps caps) {
  // The pieces laid out as backward finishes them, from the buffer's end.
  std::vector<ParameterRange> order;
  std::size_t end = model.parameters();
  for (const MetaModel::Piece& p : model.pieces) {
    end -= p.count;
    order.push_back({end, p.count});
  }
  GradientAveraging averaging(comm, meta_view(model.parameters(), model.grad_dtype), std::move(order), mode, caps);
  comm.compute_seconds("forward", model.forward_seconds);
  for (int p = 0; p < int(model.pieces.size()); ++p) {
    comm.compute_seconds("backward", model.pieces[p].backward_seconds);
    averaging.ready(p);
  }
  averaging.finish();
}

double exposed_communication(double buckets, double backward_seconds, double gradient_bytes, AllReduceLine line) {
  const double k = buckets, T = backward_seconds, c = line.a + gradient_bytes / k * line.b;
  return std::max(c, T / k + k * c - T);
}

double best_bucket_count(double backward_seconds, double gradient_bytes, AllReduceLine line) {
  const double T = backward_seconds;
  return std::max({1.0, (T - gradient_bytes * line.b) / line.a, std::sqrt(T / line.a)});
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
