// The training loop of lab 6: every rank builds the same tiny GPT, keeps its
// shard through FullyShardedGpt, and trains on its part of each global batch.
#include <algorithm>
#include <limits>
#include <string>

#include <fmt/format.h>

#include "fsdp.h"
#include "labkit/error.h"
#include "labkit/parallel/equivalence.h"
#include "labkit/parallel/fully_sharded.h"
#include "labkit/parallel/quantize.h"
#include "labkit/parallel/sampler.h"

namespace fsdp_lab {

namespace {

// Parameters' worth a collective moves, from a trace event's bytes: an
// allreduce is a reduce-scatter and an all-gather of its buffer.
double parameters_moved(const TraceEvent& e) {
  return double(e.bytes) / sizeof(float) * (e.name == "all_reduce" ? 2 : 1);
}


// Rank 0's memory when it first reached its peak, by use, and the compute
// region running then (or the next to start, when the peak falls between
// regions): "backward block 1".
void find_peak(const std::vector<TraceEvent>& events, StageRun& out) {
  double peak = -1, at = 0;
  for (const TraceEvent& e : events) {
    if (e.kind != TraceEvent::Kind::memory) continue;
    double total = 0;
    for (const auto& [use, bytes] : e.counters) total += bytes;
    if (total > peak) peak = total, at = e.start, out.at_peak = e.counters;
  }
  const TraceEvent* during = nullptr;
  for (const TraceEvent& e : events)
    if (e.kind == TraceEvent::Kind::compute && e.end > at && (!during || e.start < during->start)) during = &e;
  if (during) out.peak_during = during->name;
}

}  // namespace

double off_node_bytes(const Trace& trace, std::string_view last_region) {
  double bytes = 0;
  for (const TraceTrack& track : trace.tracks()) {
    double until = last_region.empty() ? std::numeric_limits<double>::infinity() : 0;
    for (const TraceEvent& e : track.events)
      if (e.kind == TraceEvent::Kind::compute && e.name == last_region) until = std::max(until, e.end);
    for (const TraceEvent& e : track.events)
      if (e.end <= until)
        for (const auto& [key, value] : e.args)
          if (key == "off_node_bytes") bytes += std::stod(value);
  }
  return bytes;
}

namespace {

// What the options ask of FullyShardedGpt at `stage`: prefetch, hpZ and
// keeping blocks whole apply to stage 3 alone; ZeRO++'s quantization to the
// quantized row alone.
ShardingOptions sharding_at(const Options& o, int stage, bool quantized) {
  return {.shard_group = o.hsdp,
          .reshard_after_forward = stage != 3 || o.reshard_after_forward,
          .prefetch = stage == 3 ? parse_prefetch(o.prefetch) : Prefetch::none,
          .hpz_group = stage == 3 ? o.hpz : 0,
          .quantize_weights = quantized && o.qwz,
          .quantize_gradients = quantized && o.qgz};
}

// This rank's steps: its part of each global batch, forward and backward, the
// sharded optimizer step (a compute region of 12 FLOPs per parameter it
// updates); returns its loss per step.
std::vector<float> train_steps(Comm& comm, FullyShardedGpt& sharded, const Gpt& model, const Options& o,
                               const Sequences& data) {
  const int b = o.batch / comm.size();
  Optimizer optimizer(o);
  const DistributedSampler sampler(data.count, comm.size(), comm.rank(), o.seed);
  std::vector<int> x, y;
  std::vector<float> losses;
  for (int s = 0; s < o.steps; ++s) {
    fill_batch(data, batch_of(sampler, s, b), x, y);
    losses.push_back(sharded.forward_backward(x, y, b, model.config().max_seq));
    const double started = comm.now();
    sharded.step([&](std::span<float> w, std::span<const float> g) { optimizer.update(w, g); });
    if (s == 0) comm.track_memory(MemoryUse::optimizer, std::int64_t(optimizer.state_bytes()));  // sized now
    comm.computed("optimizer", started, 12.0 * double(sharded.stage() == 0 ? model.parameter_count()
                                                                           : sharded.shard_parameters().size()));
  }
  return losses;
}

// The shards' shape on rank 0: its shard, the padding, the largest block and
// what stage 3 keeps whole (units(): the embeddings, the blocks, the final norm).
void describe_shards(const Comm& comm, const FullyShardedGpt& sharded, const Gpt& model, StageRun& out) {
  out.ranks = comm.size();
  out.shard_group = sharded.shard_group();
  out.nodes = comm.nodes_spanned();
  out.parameters = model.parameter_count();
  out.shard = sharded.shard_parameters().size();
  const auto& units = sharded.units();
  for (const FullyShardedGpt::Unit& u : units) out.padding += u.layout.padding();
  for (std::size_t u = 1; u + 1 < units.size(); ++u)
    out.largest_block = std::max(out.largest_block, units[u].layout.count);
  out.kept = units.front().layout.count + units.back().layout.count;
  out.memory = comm.memory();
}

// ZeRO's volume for this run, in parameters' worth per step (Rajbhandari et
// al. 2020, section 7): 2N below stage 3; at stage 3 a gather for forward, a
// reduce-scatter, and a second gather of each block for backward, unless it
// keeps them whole from forward to backward; that second time from hpZ's
// secondary shards, padded for its group. HSDP adds the shards' allreduce
// across the groups. qwZ: the forward's gathers send every rank's shard as
// int8 blocks and their scales. qgZ: each reduce-scatter is two all-to-alls
// of int4 blocks, the node's G ranks n shards each, then the n nodes a shard
// each (Wang et al. 2023).
double zero_formula(const FullyShardedGpt& sharded, const Options& o, bool quantized, const StageRun& r) {
  const auto& units = sharded.units();
  const double padded = double(r.parameters + r.padding);
  double regathered = 0;
  if (r.stage == 3 && o.reshard_after_forward)
    for (std::size_t u = 1; u + 1 < units.size(); ++u)
      regathered += double(o.hpz > 0 ? units[u].secondary.padded() : units[u].layout.padded());
  const auto p = std::size_t(r.ranks), n = std::size_t(r.nodes), g = p / n;
  const bool qwz = quantized && o.qwz, qgz = quantized && o.qgz;
  double forward = qwz ? 0 : padded, reduced = qgz ? 0 : padded;
  for (const FullyShardedGpt::Unit& u : units) {
    const std::size_t s = u.layout.shard;
    if (qwz) forward += double(quantized_bytes(s, 8) * p) / sizeof(float);
    if (qgz) reduced += double(g * quantized_bytes(n * s, 4) + (n > 1 ? n * quantized_bytes(s, 4) : 0)) / sizeof(float);
  }
  double formula = r.stage == 0 ? 2.0 * double(r.parameters) : forward + reduced + regathered;
  if (r.shard_group < r.ranks) formula += 2.0 * double(r.shard);
  return formula;
}

// The global batch's mean loss per step, from every rank's.
std::vector<float> mean_losses(const std::vector<std::vector<float>>& all_losses, int steps) {
  std::vector<float> out;
  for (int s = 0; s < steps; ++s) {
    double sum = 0;
    for (const auto& rank_losses : all_losses) sum += rank_losses[s];
    out.push_back(float(sum / all_losses.size()));
  }
  return out;
}

// What the trace says of the steps between `first` and `last` (not the final
// gather): rank 0's volume and step time, what every node sent off it, and
// rank 0's memory peak.
void read_trace(const Trace& trace, double first, double last, int steps, StageRun& out) {
  for (const TraceEvent& e : trace.tracks()[0].events)
    if (e.kind == TraceEvent::Kind::collective && e.start >= first && e.start < last) out.volume += parameters_moved(e);
  out.volume /= steps;
  out.off_node = off_node_bytes(trace, "optimizer") / sizeof(float) / out.nodes / steps;
  out.step_seconds = (last - first) / steps;
  find_peak(trace.tracks()[0].events, out);
}

}  // namespace

StageRun train(const Options& o, RunOptions run_options, int stage, const Sequences& data, const GptConfig& config,
               bool quantized) {
  StageRun out;
  out.stage = stage;
  out.quantized = quantized;
  out.name = fmt::format("{}{}{}", stage, quantized && o.qwz ? " qwZ" : "", quantized && o.qgz ? " qgZ" : "");
  run_options.keep_trace = true;
  double first = 0, last = 0;
  const RunResult result = run(run_options, [&](Comm& comm) {
    if (o.batch % comm.size() != 0)
      fail(comm.who(), "fsdp", "--batch {} does not split over {} ranks: each rank takes batch / ranks sequences",
           o.batch, comm.size());
    Gpt model(config, o.seed);  // the same seed: every rank starts from the same weights, and keeps its shard
    FullyShardedGpt sharded(comm, model, stage, sharding_at(o, stage, quantized));
    const double start = comm.now();
    std::vector<float> losses = train_steps(comm, sharded, model, o, data);
    const double end = comm.now();
    std::vector<float> weights = sharded.gather_parameters();
    // Instruments (untraced, free of virtual time): every rank's losses and weights on rank 0.
    const std::vector<std::vector<float>> all_losses = comm.gather_objects(losses);
    const std::vector<std::vector<float>> all_weights = comm.gather_objects(weights);
    if (comm.rank() != 0) return;
    first = start, last = end;
    describe_shards(comm, sharded, model, out);
    out.formula = zero_formula(sharded, o, quantized, out);
    out.weights = std::move(weights);
    out.ranks_agree = std::all_of(all_weights.begin(), all_weights.end(),
                                  [&](const std::vector<float>& w) { return w == out.weights; });
    out.losses = mean_losses(all_losses, o.steps);
  });
  if (result.trace && !out.weights.empty()) read_trace(*result.trace, first, last, o.steps, out);
  return out;
}

std::vector<float> train_one_rank(const Options& o, const Sequences& data, const GptConfig& config, bool reversed) {
  Optimizer optimizer(o);
  return labkit::train_one_rank(config, data, o.seed, o.steps, o.batch,
                                [&](std::span<float> w, std::span<const float> g) { optimizer.update(w, g); },
                                reversed);
}

}  // namespace fsdp_lab
