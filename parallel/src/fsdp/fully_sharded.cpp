#include "labkit/parallel/fully_sharded.h"

#include <algorithm>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "labkit/error.h"
#include "labkit/parallel/quantize.h"
#include "labkit/parallel/quantized_reduce_scatter.h"
#include "labkit/scratch.h"
#include "ranks_per_node.h"

namespace labkit {

ShardLayout shard_layout(std::size_t count, int ranks) {
  return {.count = count, .shard = (count + std::size_t(ranks) - 1) / std::size_t(ranks), .ranks = ranks};
}

void mark_freed(View v) { fill_local(v, std::numeric_limits<float>::quiet_NaN()); }

namespace {

View run_of(Tensor& buffer, ParameterRange r) { return view_of(buffer).slice(r.offset, r.count); }

bool has(std::span<const int> stages, int stage) { return std::find(stages.begin(), stages.end(), stage) != stages.end(); }
bool only_stage_three(std::span<const int> stages) { return stages.size() == 1 && stages[0] == 3; }

// HSDP (Zhao et al. 2023, PyTorch FSDP's HYBRID_SHARD): groups of --hsdp ranks, at stages 1-3.
void check_hsdp(std::span<const int> stages, int group, const ShardingPlacement& at) {
  const int ranks = at.ranks;
  if (ranks > 0 && ranks % group != 0) {
    std::vector<int> divisors;
    for (int g = 1; g <= ranks; ++g)
      if (ranks % g == 0) divisors.push_back(g);
    throw Error(fmt::format("--hsdp {}: does not divide {} {} into equal groups ({} do)", group, at.ranks_option,
                            ranks, fmt::join(divisors, ", ")));
  }
  if (has(stages, 0))
    throw Error(fmt::format("--hsdp {} with --stage 0: nothing is sharded at stage 0 (DDP); HSDP shards stages 1-3",
                            group));
  if (group == 1)
    throw Error("--hsdp 1: a group of one rank shards nothing, and every rank holds everything: that is DDP "
                "(--stage 0)");
}

// ZeRO++'s techniques (Wang et al. 2023) shard stage 3's traffic, and only
// stage 3 runs with them. `what`: the technique in a few words.
void check_stage_three_technique(std::span<const int> stages, const std::string& flag, const std::string& what) {
  if (!only_stage_three(stages))
    throw Error(fmt::format("{}: a stage-3 technique{}; drop --stage or give --stage 3", flag, what));
}

// qgZ's all-to-all hops: within each node, then across the nodes, so every node full.
void check_qgz(const ShardingOptions& o, const ShardingPlacement& at) {
  if (o.shard_group > 0)
    throw Error(fmt::format("--qgz with --hsdp {}: qgZ reduces over all the ranks, node by node", o.shard_group));
  if (at.ranks > 0 && at.per_node > 0 && at.ranks > at.per_node && at.ranks % at.per_node != 0)
    throw Error(fmt::format("--qgz on {0} {1}: {2} puts {3} ranks on a node, so the last node holds {4}; qgZ's "
                            "all-to-all hops need every node full ({0} a multiple of {3})", at.ranks_option, at.ranks,
                            at.topology, at.per_node, at.ranks % at.per_node));
}

// hpZ: a secondary shard in groups of --hpz ranks, for backward's second gathers.
void check_hpz(std::span<const int> stages, const ShardingOptions& o, const ShardingPlacement& at) {
  const std::string flag = fmt::format("--hpz {}", o.hpz_group);
  if (at.ranks > 0 && at.ranks % o.hpz_group != 0)
    throw Error(fmt::format("{}: does not divide {} {} into equal groups", flag, at.ranks_option, at.ranks));
  if (o.hpz_group == at.ranks)
    throw Error(fmt::format("{} on {} {}: a secondary shard over every rank is the primary shard again; hpZ's "
                            "groups are smaller (a node's)", flag, at.ranks_option, at.ranks));
  if (o.shard_group > 0)
    throw Error(fmt::format("{} with --hsdp {}: HSDP already gathers within its groups", flag, o.shard_group));
  if (!o.reshard_after_forward)
    throw Error(fmt::format("{} with --reshard-after-forward off: nothing is gathered again for backward", flag));
  check_stage_three_technique(stages, flag, "");
}

// FSDP's wrapping: the embeddings, a unit per block, the final norm
// (backward_order's last, middle and first); stage 1, which reduces once after
// backward, the whole model as one run. Their shards are laid out later.
std::vector<FullyShardedGpt::Unit> units_of(const Gpt& model, int stage) {
  if (stage == 1) return {{{0, model.parameter_count()}, {}, 0}};
  const std::vector<ParameterRange> order = model.backward_order();
  std::vector<FullyShardedGpt::Unit> units{{order.back(), {}, 0}};
  for (int l = 0; l < model.config().layers; ++l) units.push_back({model.layer_range(l), {}, 0});
  units.push_back({order.front(), {}, 0});
  return units;
}

}  // namespace

// The rules and the group splits come in this order: the ranks leave a split
// in another order than they entered it, so a rule checked after one is
// reported by another rank than a rule checked before it. The nodes the ranks
// run on (qgZ's) are checked last, where they are known: ranks_per_node.
void check_sharding(std::span<const int> stages, const ShardingOptions& options, const ShardingPlacement& placement) {
  for (int stage : stages)
    if (stage < 0 || stage > 3) throw Error(fmt::format("--stage {}: ZeRO's stages are 0, 1, 2 and 3", stage));
  if (options.shard_group < 0 || options.hpz_group < 0)
    throw Error(fmt::format("--hsdp {} --hpz {}: a group holds at least 1 rank", options.shard_group,
                            options.hpz_group));
  if (options.shard_group > 0) check_hsdp(stages, options.shard_group, placement);
  if (options.quantize_weights) check_stage_three_technique(stages, "--qwz", " (int8 weight gathers)");
  if (options.quantize_gradients) check_stage_three_technique(stages, "--qgz", " (int4 gradient reduces)");
  if (options.quantize_gradients) check_qgz(options, placement);
  if (options.hpz_group > 0) check_hpz(stages, options, placement);
  if (options.prefetch != Prefetch::none && !has(stages, 3))
    throw Error(fmt::format("--prefetch {}: does nothing here: only stage 3 gathers parameters before they compute",
                            kPrefetchNames[int(options.prefetch)]));
  if (!options.reshard_after_forward && !has(stages, 3))
    throw Error("--reshard-after-forward off: does nothing here: only stage 3 gathers parameters, so only it can "
                "keep them whole from forward to backward");
  if (!options.reshard_after_forward && (options.prefetch == Prefetch::backward || options.prefetch == Prefetch::both))
    throw Error(fmt::format("--prefetch {} with --reshard-after-forward off: backward gathers nothing to prefetch "
                            "(the parameters stay whole from forward)", kPrefetchNames[int(options.prefetch)]));
}

FullyShardedGpt::FullyShardedGpt(Comm& comm, Gpt& model, int stage, ShardingOptions options)
    : comm_(comm), model_(model), stage_(stage), reshard_after_forward_(options.reshard_after_forward),
      quantize_weights_(options.quantize_weights), prefetch_policy_(options.prefetch), shard_comm_(&comm) {
  try {
    check_sharding(std::span(&stage, 1), options, {.ranks = comm.size(), .per_node = 0, .topology = {}});
  } catch (const Error& e) {
    fail(comm.who(), "FullyShardedGpt", "{}", e.what());
  }
  make_groups(options);
  if (options.quantize_gradients) {  // qgZ's two hops: inside each node, then across
    const int per_node = ranks_per_node(comm, "FullyShardedGpt");
    node_mesh_ = std::make_unique<Mesh>(comm, std::vector<MeshDim>{{"across", comm.size() / per_node},
                                                                   {"node", per_node}});
  }
  units_ = units_of(model, stage);
  lay_out_shards();
  allocate_staging(options);
  keep_starting_shards();
}

// HSDP's ("replicate", "shard") mesh, or hpZ's groups of neighbouring ranks.
void FullyShardedGpt::make_groups(const ShardingOptions& options) {
  const int size = comm_.size(), shard_group = options.shard_group, hpz = options.hpz_group;
  if (hpz > 0) {
    mesh_ = std::make_unique<Mesh>(comm_, std::vector<MeshDim>{{"across", size / hpz}, {"node", hpz}});
    hpz_comm_ = &mesh_->group("node");
  }
  if (shard_group > 0 && shard_group < size) {
    mesh_ = std::make_unique<Mesh>(comm_, std::vector<MeshDim>{{"replicate", size / shard_group},
                                                               {"shard", shard_group}});
    shard_comm_ = &mesh_->group("shard");
    replicate_comm_ = &mesh_->group("replicate");
  }
}

// Where each unit's shard lies in this rank's shards, unit after unit, and
// with hpZ each block's secondary shard in this rank's secondary shards.
void FullyShardedGpt::lay_out_shards() {
  std::size_t offset = 0, secondary = 0;
  for (std::size_t i = 0; i < units_.size(); ++i) {
    Unit& u = units_[i];
    u.layout = shard_layout(u.range.count, shard_comm_->size());
    u.shard_offset = offset;
    offset += u.layout.shard;
    if (hpz_comm_ && i > 0 && i + 1 < units_.size()) {  // a block
      u.secondary = shard_layout(u.range.count, hpz_comm_->size());
      u.secondary_offset = secondary;
      secondary += u.secondary.shard;
    }
  }
  const DeviceKind where = model_.device().kind;
  param_shard_ = Tensor({offset}, where);
  grad_shard_ = Tensor({offset}, where);
  secondary_ = Tensor({secondary}, where);
}

// What a unit passes through on its way between shards and whole: its padded
// gradients for a reduce-scatter; an all-gather's landing buffer, when it
// lands apart (prefetched or quantized); qwZ's int8 blocks.
void FullyShardedGpt::allocate_staging(const ShardingOptions& options) {
  std::size_t largest = 0, largest_shard = 0, largest_secondary = 0;
  for (const Unit& u : units_) {
    largest = std::max(largest, u.layout.padded());
    largest_shard = std::max(largest_shard, u.layout.shard);
    largest_secondary = std::max(largest_secondary, u.secondary.padded());
  }
  const DeviceKind where = model_.device().kind;
  flat_ = Tensor({largest}, where);
  if (options.prefetch != Prefetch::none || options.quantize_weights)
    prefetch_ = Tensor({std::max(largest, largest_secondary)}, where);
  if (options.quantize_weights) {
    quantized_shard_ = TensorOf<std::uint8_t>({quantized_bytes(largest_shard, 8)}, where);
    quantized_gathered_ = TensorOf<std::uint8_t>({quantized_shard_.size() * std::size_t(shard_comm_->size())}, where);
  }
}

// This rank's shard of the starting weights, the same on every rank; at stage
// 3 nothing else. What it keeps from now on, told to its memory tracker: whole
// weights below stage 3, whole gradients below stage 2, else its shards.
void FullyShardedGpt::keep_starting_shards() {
  for (const Unit& u : units_) {
    shard_of(run_of(model_.parameters(), u.range), shard_of_unit(param_shard_, u), shard_comm_->rank());
    if (stage_ == 3) mark_freed(run_of(model_.parameters(), u.range));
  }
  const auto whole = std::int64_t(model_.parameter_count() * sizeof(float));
  const auto shard = std::int64_t(param_shard_.bytes());
  comm_.track_memory(MemoryUse::weights, stage_ < 3 ? whole : shard);
  comm_.track_memory(MemoryUse::gradients, stage_ < 2 ? whole : shard);
}

View FullyShardedGpt::shard_of_unit(Tensor& shards, const Unit& unit) {
  return view_of(shards).slice(unit.shard_offset, unit.layout.shard);
}

void FullyShardedGpt::track(MemoryUse use, const Unit& unit, int sign) {
  comm_.track_memory(use, sign * std::int64_t(unit.range.count * sizeof(float)));
}

void FullyShardedGpt::gather(const Unit& unit, Tensor& into) {
  unshard(*shard_comm_, shard_of_unit(param_shard_, unit), run_of(into, unit.range));
}

// Reduce-scatter (avg): the unit's gradients, padded, averaged over the ranks
// that share the state; this rank keeps its shard of the mean. HSDP then
// averages that shard with the same shard of every other group.
void FullyShardedGpt::reduce_scatter_gradients(const Unit& unit) {
  const View shard = shard_of_unit(grad_shard_, unit);
  const View full = padded_gradients(unit);
  if (node_mesh_) {
    quantized_reduce_scatter(node_mesh_->group("node"), node_mesh_->group("across"), full, shard);
  } else {
    shard_comm_->reduce_scatter(full, shard, ReduceOp::avg);
  }
  if (replicate_comm_) replicate_comm_->all_reduce(shard, ReduceOp::avg);
}

View FullyShardedGpt::padded_gradients(const Unit& unit) {
  const View padded = view_of(flat_).slice(0, unit.layout.padded());
  copy_local(padded.slice(0, unit.range.count), run_of(model_.gradients(), unit.range));
  fill_local(padded.slice(unit.range.count, unit.layout.padding()), 0.0f);
  return padded;
}

void FullyShardedGpt::free_gradients(const Unit& unit) {
  mark_freed(run_of(model_.gradients(), unit.range));
  track(MemoryUse::gradients, unit, -1);
}

float FullyShardedGpt::forward_backward(const std::vector<int>& tokens, const std::vector<int>& targets, int B,
                                        int T) {
  model_.zero_grad();
  const int layers = model_.config().layers;
  const double block = model_.block_flops(B, T), head = model_.head_flops(B, T);
  // The activations (and their gradients) this batch shape needs: the model
  // keeps them from one step to the next, as llm.c does.
  model_.prepare(B, T);
  const auto activations = std::int64_t(model_.activation_bytes());
  comm_.track_memory(MemoryUse::activations, activations - activation_bytes_);
  activation_bytes_ = activations;
  if (stage_ == 3) return forward_backward_sharded_parameters(tokens, targets, B, T);
  const Unit &embeddings = units_.front(), &final_norm = units_.back();
  double started = comm_.now();
  model_.queue_forward(tokens, targets, B, T);  // the loss is read at the end, once the step is queued
  comm_.record_compute("forward", started, layers * block + head);
  // Stage 2 holds a unit's whole gradients only from its backward to its
  // reduce-scatter: the embeddings' and the final norm's (the head writes the
  // embedding table's first, the embedding layer last) through all of
  // backward, each block's in turn.
  if (stage_ == 2)
    for (const Unit* u : {&embeddings, &final_norm, static_cast<const Unit*>(&units_[layers])})
      track(MemoryUse::gradients, *u, +1);
  int piece = 0;  // backward_order: the final norm (after the head), the blocks from the last, the embeddings
  started = comm_.now();
  model_.backward([&](ParameterRange) {
    const std::string what = piece == 0        ? "backward head"
                             : piece <= layers ? fmt::format("backward block {}", layers - piece)
                                               : "backward embeddings";
    comm_.record_compute(what, started, 2 * (piece == 0 ? head : piece <= layers ? block : 0));
    if (stage_ == 2 && piece >= 1 && piece <= layers) {
      const int l = layers - piece;  // this block's backward is done: reduce-scatter, free, and on to the next
      reduce_scatter_gradients(units_[1 + l]);
      free_gradients(units_[1 + l]);
      if (l > 0) track(MemoryUse::gradients, units_[l], +1);
    }
    ++piece;
    started = comm_.now();
  });
  if (stage_ == 0) comm_.all_reduce(view_of(model_.gradients()), ReduceOp::avg);
  if (stage_ == 2)
    for (const Unit* u : {&embeddings, &final_norm}) {
      reduce_scatter_gradients(*u);
      free_gradients(*u);
    }
  return model_.loss();
}

// Stage 3: gather each block just before it computes, forward and again
// backward, and free it right after (gather_compute_free); the embeddings and
// the final norm stay gathered for the step. The options change how (pass):
// prefetched, quantized (qwZ), backward from secondary shards (hpZ), or kept
// whole from forward to backward.
float FullyShardedGpt::forward_backward_sharded_parameters(const std::vector<int>& tokens,
                                                           const std::vector<int>& targets, int B, int T) {
  const int layers = model_.config().layers;
  const double block = model_.block_flops(B, T), head = model_.head_flops(B, T);
  Tensor& params = model_.parameters();
  const Unit &embeddings = units_.front(), &final_norm = units_.back();
  for (const Unit* kept : {&embeddings, &final_norm}) {
    if (quantize_weights_) {
      start_gather(*shard_comm_, shard_of_unit(param_shard_, *kept), true).wait();
      land(*shard_comm_, *kept, kept->layout.shard, true);
    } else {
      gather(*kept, params);
    }
    track(MemoryUse::gathered, *kept, +1);
  }
  model_.embed(tokens);
  std::vector<int> blocks(layers);
  for (int l = 0; l < layers; ++l) blocks[l] = l;
  const auto nothing = [](int) {};
  pass(blocks,
       {.prefetch = prefetches_forward(prefetch_policy_), .free = reshard_after_forward_,
        .quantized = quantize_weights_},
       [&](int l) {
         const double started = comm_.now();
         model_.forward_layers(l, l + 1);
         comm_.record_compute(fmt::format("forward block {}", l), started, block);
         if (hpz_comm_) keep_secondary(units_[1 + l]);
       },
       nothing);
  double started = comm_.now();
  model_.head(targets);
  comm_.record_compute("forward head", started, head);
  for (const Unit* kept : {&embeddings, &final_norm}) track(MemoryUse::gradients, *kept, +1);
  started = comm_.now();
  model_.backward_head();
  comm_.record_compute("backward head", started, 2 * head);
  // Backward, from the last block: each block's gradients whole from its
  // backward to its reduce-scatter. Kept whole since forward, a block is not
  // gathered again; with hpZ, it is gathered from the secondary shards.
  pass({blocks.rbegin(), blocks.rend()},
       {.gather = reshard_after_forward_, .prefetch = prefetches_backward(prefetch_policy_),
        .from_secondary = hpz_comm_ != nullptr},
       [&](int l) {
         track(MemoryUse::gradients, units_[1 + l], +1);
         const double started = comm_.now();
         model_.backward_layers(l, l + 1);
         comm_.record_compute(fmt::format("backward block {}", l), started, 2 * block);
       },
       [&](int l) {
         reduce_scatter_gradients(units_[1 + l]);
         free_gradients(units_[1 + l]);
         if (hpz_comm_)
           comm_.track_memory(MemoryUse::weights, -std::int64_t(units_[1 + l].secondary.shard * sizeof(float)));
       });
  model_.backward_embed();
  for (const Unit* kept : {&embeddings, &final_norm}) {
    reduce_scatter_gradients(*kept);
    free_gradients(*kept);
    mark_freed(run_of(params, kept->range));
    track(MemoryUse::gathered, *kept, -1);
  }
  return model_.loss();
}

// Each block: gathered unless kept whole since forward, compute(l), freed
// unless kept for backward, then after(l). Without prefetch or quantization a
// gathered and freed block is exercise 6.3's gather_compute_free. Prefetched,
// block i + 1's all-gather is issued as block i starts and lands when block
// i + 1 is needed.
void FullyShardedGpt::pass(const std::vector<int>& blocks, Pass how, const std::function<void(int)>& compute,
                           const std::function<void(int)>& after) {
  Tensor& params = model_.parameters();
  Comm& group = how.from_secondary ? *hpz_comm_ : *shard_comm_;
  const auto shard = [&](const Unit& u) {
    return how.from_secondary ? view_of(secondary_).slice(u.secondary_offset, u.secondary.shard)
                              : shard_of_unit(param_shard_, u);
  };
  const bool prefetched = how.prefetch && how.gather;
  Request next;
  const auto prefetch = [&](int l) {
    track(MemoryUse::prefetched, units_[1 + l], +1);
    next = start_gather(group, shard(units_[1 + l]), how.quantized);
  };
  if (prefetched && !blocks.empty()) prefetch(blocks.front());
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    const int l = blocks[i];
    const Unit& unit = units_[1 + l];
    if (how.gather && how.free && !prefetched && !how.quantized) {
      int computed = 0;  // the exercise's contract: compute() once, between the gather and the free
      gather_compute_free(group, shard(unit), run_of(params, unit.range), [&] { compute(l), ++computed; });
      if (computed != 1)
        fail(comm_.who(), "gather_compute_free", "called compute() {} times for block {}, where it runs once, "
             "between the gather and the free", computed, l);
    } else {
      if (how.gather) {
        if (prefetched) {
          next.wait();
          track(MemoryUse::prefetched, unit, -1);
          land(group, unit, shard(unit).count, how.quantized);
        } else if (how.quantized) {
          start_gather(group, shard(unit), true).wait();
          land(group, unit, shard(unit).count, true);
        } else {
          unshard(group, shard(unit), run_of(params, unit.range));
        }
        track(MemoryUse::gathered, unit, +1);
        if (prefetched && i + 1 < blocks.size()) prefetch(blocks[i + 1]);
      }
      compute(l);
      if (how.free) {
        mark_freed(run_of(params, unit.range));
        track(MemoryUse::gathered, unit, -1);
      }
    }
    after(l);
  }
}

Request FullyShardedGpt::start_gather(Comm& group, View shard, bool quantized) {
  const auto p = std::size_t(group.size());
  if (!quantized) return group.i_all_gather(shard, view_of(prefetch_).slice(0, shard.count * p));
  const std::size_t bytes = quantized_bytes(shard.count, 8);
  quantize({static_cast<const float*>(shard.data), shard.count}, {quantized_shard_.data(), bytes}, 8);
  return group.i_all_gather({quantized_shard_.data(), bytes, DType::u8},
                            {quantized_gathered_.data(), bytes * p, DType::u8});
}

void FullyShardedGpt::land(Comm& group, const Unit& unit, std::size_t shard, bool quantized) {
  if (quantized) {
    const std::size_t bytes = quantized_bytes(shard, 8);
    for (std::size_t r = 0; r < std::size_t(group.size()); ++r)
      dequantize({quantized_gathered_.data() + r * bytes, bytes}, {prefetch_.data() + r * shard, shard}, 8);
  }
  copy_local(run_of(model_.parameters(), unit.range), view_of(prefetch_).slice(0, unit.range.count));
}

// hpZ: while a block is whole after its forward, this rank keeps its slice of
// it over the hpZ group; backward gathers the block from those slices.
void FullyShardedGpt::keep_secondary(const Unit& unit) {
  shard_of(run_of(model_.parameters(), unit.range),
           view_of(secondary_).slice(unit.secondary_offset, unit.secondary.shard), hpz_comm_->rank());
  comm_.track_memory(MemoryUse::weights, std::int64_t(unit.secondary.shard * sizeof(float)));
}

void FullyShardedGpt::step(const ShardUpdate& update) {
  if (stage_ == 0) return update(view_of(model_.parameters()), view_of(model_.gradients()));
  if (stage_ == 1) {
    // HSDP: the group's mean of each shard, averaged with the other groups' before the update.
    const ShardUpdate across_groups = [&](View params, View grads) {
      if (replicate_comm_) replicate_comm_->all_reduce(view_of(grad_shard_), ReduceOp::avg);
      update(params, grads);
    };
    const Unit& run = units_.front();
    zero_step(*shard_comm_, padded_gradients(run), shard_of_unit(grad_shard_, run), shard_of_unit(param_shard_, run),
              run_of(model_.parameters(), run.range), across_groups);
    return;
  }
  update(view_of(param_shard_), view_of(grad_shard_));
  if (stage_ == 3) return;  // the next forward gathers what it needs
  for (const Unit& unit : units_) gather(unit, model_.parameters());
}

std::vector<float> FullyShardedGpt::gather_parameters() {
  if (stage_ == 0) return model_.parameters().to_host();
  Tensor full({model_.parameter_count()}, model_.device().kind);
  for (const Unit& unit : units_) gather(unit, full);
  return full.to_host();
}

bool prefetches_forward(Prefetch p) { return p == Prefetch::forward || p == Prefetch::both; }
bool prefetches_backward(Prefetch p) { return p == Prefetch::backward || p == Prefetch::both; }

Prefetch parse_prefetch(std::string_view name) {
  for (int p = 0; p < int(std::size(kPrefetchNames)); ++p)
    if (name == kPrefetchNames[p]) return Prefetch(p);
  throw std::invalid_argument("unknown prefetch '" + std::string(name) + "' (none, forward, backward, both)");
}

}  // namespace labkit
