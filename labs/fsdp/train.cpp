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
    const int b = o.batch / comm.size();
    Gpt model(config, o.seed);  // the same seed: every rank starts from the same weights, and keeps its shard
    FullyShardedGpt sharded(comm, model, stage,
                            {.shard_group = o.hsdp,
                             .reshard_after_forward = stage != 3 || o.reshard_after_forward,
                             .prefetch = stage == 3 ? parse_prefetch(o.prefetch) : Prefetch::none,
                             .hpz_group = stage == 3 ? o.hpz : 0,
                             .quantize_weights = quantized && o.qwz,
                             .quantize_gradients = quantized && o.qgz});
    Optimizer optimizer(o);
    const DistributedSampler sampler(data.count, comm.size(), comm.rank(), o.seed);
    std::vector<int> x, y;
    std::vector<float> losses;
    const double start = comm.now();
    for (int s = 0; s < o.steps; ++s) {
      fill_batch(data, batch_of(sampler, s, b), x, y);
      losses.push_back(sharded.forward_backward(x, y, b, config.max_seq));
      const double started = comm.now();
      sharded.step([&](std::span<float> w, std::span<const float> g) { optimizer.update(w, g); });
      if (s == 0) comm.track_memory(MemoryUse::optimizer, std::int64_t(optimizer.state_bytes()));  // sized now
      comm.computed("optimizer", started, 12.0 * double(sharded.stage() == 0 ? model.parameter_count()
                                                                             : sharded.shard_parameters().size()));
    }
    const double end = comm.now();
    std::vector<float> weights = sharded.gather_parameters();
    // Instruments (untraced, free of virtual time): every rank's losses and weights on rank 0.
    const auto all_losses = comm.inspect(view_of(losses));
    const auto all_weights = comm.inspect(view_of(weights));
    if (comm.rank() != 0) return;
    first = start, last = end;
    out.ranks = comm.size();
    out.shard_group = sharded.shard_group();
    out.nodes = comm.nodes_spanned();
    out.parameters = model.parameter_count();
    out.shard = sharded.shard_parameters().size();
    for (const FullyShardedGpt::Unit& u : sharded.units()) out.padding += u.layout.padding();
    // units(): the embeddings, the blocks, the final norm.
    const auto& units = sharded.units();
    for (std::size_t u = 1; u + 1 < units.size(); ++u)
      out.largest_block = std::max(out.largest_block, units[u].layout.count);
    out.kept = units.front().layout.count + units.back().layout.count;
    out.memory = comm.memory();
    const double padded = double(out.parameters + out.padding);
    // Stage 3 gathers each block twice, unless it keeps them whole from forward
    // to backward; the second time from hpZ's secondary shards, padded for its group.
    double regathered = 0;
    if (stage == 3 && o.reshard_after_forward)
      for (std::size_t u = 1; u + 1 < units.size(); ++u)
        regathered += double(o.hpz > 0 ? units[u].secondary.padded() : units[u].layout.padded());
    // qwZ: the forward's gathers send every rank's shard as int8 blocks and
    // their scales. qgZ: each reduce-scatter is two all-to-alls of int4 blocks,
    // the node's G ranks n shards each, then the n nodes a shard each.
    const auto p = std::size_t(out.ranks), n = std::size_t(out.nodes), g = p / n;
    double forward = padded, reduced = padded;
    if (quantized && o.qwz) forward = 0;
    if (quantized && o.qgz) reduced = 0;
    for (const FullyShardedGpt::Unit& u : units) {
      const std::size_t s = u.layout.shard;
      if (quantized && o.qwz) forward += double(quantized_bytes(s, 8) * p) / sizeof(float);
      if (quantized && o.qgz)
        reduced += double(g * quantized_bytes(n * s, 4) + (n > 1 ? n * quantized_bytes(s, 4) : 0)) / sizeof(float);
    }
    out.formula = stage == 0 ? 2.0 * double(out.parameters) : forward + reduced + regathered;
    if (out.shard_group < out.ranks) out.formula += 2.0 * double(out.shard);  // HSDP: the shards' allreduce across groups
    out.weights = std::move(weights);
    out.ranks_agree = std::all_of(all_weights.begin(), all_weights.end(),
                                  [&](const auto& w) { return std::equal(w.begin(), w.end(), out.weights.begin()); });
    for (int s = 0; s < o.steps; ++s) {
      double sum = 0;
      for (const auto& rank_losses : all_losses) sum += rank_losses[s];
      out.losses.push_back(float(sum / all_losses.size()));
    }
  });
  if (result.trace && !out.weights.empty()) {
    for (const TraceEvent& e : result.trace->tracks()[0].events)
      if (e.kind == TraceEvent::Kind::collective && e.start >= first && e.start < last) {  // not the final gather
        out.volume += parameters_moved(e);
      }
    out.volume /= o.steps;
    out.off_node = off_node_bytes(*result.trace, "optimizer") / sizeof(float) / out.nodes / o.steps;
    out.step_seconds = (last - first) / o.steps;
    find_peak(result.trace->tracks()[0].events, out);
  }
  return out;
}

std::vector<float> train_one_rank(const Options& o, const Sequences& data, const GptConfig& config, bool reversed) {
  Optimizer optimizer(o);
  return labkit::train_one_rank(config, data, o.seed, o.steps, o.batch,
                                [&](std::span<float> w, std::span<const float> g) { optimizer.update(w, g); },
                                reversed);
}

}  // namespace fsdp_lab
