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
#include "labkit/parallel/training_loop.h"

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

// The shards' shape on rank 0: its shard and the padding of every unit
// (units(): the embeddings, the blocks, the final norm).
void describe_shards(const Comm& comm, const FullyShardedGpt& sharded, const Gpt& model, StageRun& out) {
  out.ranks = comm.size();
  out.shard_group = sharded.shard_group();
  out.nodes = comm.nodes_spanned();
  out.parameters = model.parameter_count();
  out.shard = sharded.shard_parameters().size();
  const auto& units = sharded.units();
  for (const FullyShardedGpt::Unit& u : units) out.padding += u.layout.padding();
  out.memory = comm.memory();
}

// ZeRO's volume for this run, in parameters' worth per step (Rajbhandari et
// al. 2020, section 7): 2N below stage 3; at stage 3 a gather for forward, a
// reduce-scatter, and a second gather of each block for backward, unless it
// keeps them whole from forward to backward; that second time from hpZ's
// secondary shards, padded for its group. HSDP adds the shards' allreduce
// across the groups. qwZ: the forward's gathers send the shard of every rank
// of the group as int8 blocks and their scales. qgZ: each reduce-scatter is
// two all-to-alls of int4 blocks, the node's G ranks n shards each, then the n
// nodes a shard each (Wang et al. 2023).
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
    if (qwz) forward += double(quantized_bytes(s, 8) * std::size_t(r.shard_group)) / sizeof(float);
    if (qgz) reduced += double(g * quantized_bytes(n * s, 4) + (n > 1 ? n * quantized_bytes(s, 4) : 0)) / sizeof(float);
  }
  double formula = r.stage == 0 ? 2.0 * double(r.parameters) : forward + reduced + regathered;
  if (r.shard_group < r.ranks) formula += 2.0 * double(r.shard);
  return formula;
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

// The sharded optimizer step after step s's backward: a compute region of 12
// FLOPs per parameter this rank updates; its state is sized at the first.
void optimizer_step(Comm& comm, FullyShardedGpt& sharded, const Gpt& model, Optimizer& optimizer, int s) {
  const double started = comm.now();
  sharded.step([&](View w, View g) { optimizer.update(w, g); });
  if (s == 0) comm.track_memory(MemoryUse::optimizer, std::int64_t(optimizer.state_bytes()));
  comm.record_compute("optimizer", started, 12.0 * double(sharded.stage() == 0 ? model.parameter_count()
                                                                               : sharded.shard_parameters().size()));
}

}  // namespace

StageRun train(const Options& o, RunOptions run_options, int stage, const Sequences& data, const GptConfig& config,
               bool quantized) {
  StageRun out;
  out.stage = stage;
  out.quantized = quantized;
  out.name = fmt::format("{}{}{}", stage, quantized && o.qwz ? " qwZ" : "", quantized && o.qgz ? " qgZ" : "");
  run_options.keep_trace = true;
  const TrainingRun run = run_training(run_options, [&](Comm& comm, RankTraining& training) {
    if (o.batch % comm.size() != 0)
      fail(comm.who(), "fsdp", "--batch {} does not split over {} ranks: each rank takes batch / ranks sequences",
           o.batch, comm.size());
    // The same seed: every rank starts from the same weights, and keeps its shard.
    Gpt model(config, o.seed, parse_device(o.device));
    FullyShardedGpt sharded(comm, model, stage, sharding_at(o, stage, quantized));
    Optimizer optimizer(o);
    // This rank's part of each global batch, forward and backward, then its optimizer step.
    const int b = o.batch / comm.size();
    const DistributedSampler sampler(data.count, comm.size(), comm.rank(), o.seed);
    std::vector<int> x, y;
    training.steps(o.steps, [&](int s) {
      fill_batch(data, batch_of(sampler, s, b), x, y);
      const float loss = sharded.forward_backward(x, y, b, config.max_seq);
      optimizer_step(comm, sharded, model, optimizer, s);
      return loss;
    });
    std::vector<float> weights = sharded.gather_parameters();
    training.replicated(weights);
    if (comm.rank() != 0) return;
    describe_shards(comm, sharded, model, out);
    out.formula = zero_formula(sharded, o, quantized, out);
    out.weights = std::move(weights);
  });
  if (!run.on_rank_zero()) return out;
  out.ranks_agree = run.ranks_agree;
  out.losses = run.mean_losses();
  read_trace(*run.trace, run.start, run.end, o.steps, out);
  return out;
}

std::vector<float> train_one_rank(const Options& o, const Sequences& data, const GptConfig& config, bool reversed) {
  Gpt model(config, o.seed, parse_device(o.device));  // on the ranks' device: the same kernels
  Optimizer optimizer(o);
  const auto step = [&](Gpt& m) { optimizer.update(view_of(m.parameters()), view_of(m.gradients())); };
  return labkit::train_one_rank(model, data, o.seed, o.steps, o.batch, step, reversed).weights;
}

}  // namespace fsdp_lab
