// sharded_meta_step (fully_sharded.h): FullyShardedGpt's step on a meta model,
// known by its shapes alone, payload-free, so that what-ifs run real models
// over hundreds of ranks. The same units (the root, a unit per layer), the same
// collectives in the same order, each on meta views (view.h), with compute
// charged as meta_model spreads it.
#include <memory>
#include <vector>

#include "labkit/parallel/data_parallel.h"
#include "labkit/parallel/fully_sharded.h"
#include "labkit/parallel/quantize.h"
#include "ranks_per_node.h"

namespace labkit {

namespace {

// A unit by its shapes: its parameters and its backward's seconds (a forward costs half).
struct MetaUnit {
  std::size_t count = 0;
  double backward = 0;
};

// The units from meta_model's pieces (the head and norm, each layer's tensors
// from the last layer, the embeddings): the root, first and last piece
// together, and each layer's tensors as one unit.
struct MetaUnits {
  MetaUnit root;
  std::vector<MetaUnit> layers;  // in forward order
};

MetaUnits units_of(const memory::Architecture& arch, const MetaModel& model) {
  const MetaModel::Piece &head_and_norm = model.pieces.front(), &embeddings = model.pieces.back();
  MetaUnits units{{head_and_norm.count + embeddings.count,
                     head_and_norm.backward_seconds + embeddings.backward_seconds},
                    std::vector<MetaUnit>(arch.layers)};
  std::size_t piece = 1;
  for (int l = arch.layers - 1; l >= 0; --l)
    for (std::size_t t = 0; t < memory::layer_tensors(arch, l).size(); ++t, ++piece) {
      units.layers[l].count += model.pieces[piece].count;
      units.layers[l].backward += model.pieces[piece].backward_seconds;
    }
  return units;
}

// `world` as a mesh of (outer, world.size() / inner) x (inner, inner):
// groups of `inner` neighbouring ranks.
std::unique_ptr<Mesh> grouped(Comm& world, int inner, const char* outer_name, const char* inner_name) {
  return std::make_unique<Mesh>(world, std::vector<MeshDim>{{outer_name, world.size() / inner}, {inner_name, inner}});
}

// One pass over the layers (FullyShardedGpt's Pass, by shapes).
struct Walk {
  std::vector<const MetaUnit*> order;
  bool gathers = false;     // each layer all-gathered over `group` before it computes (stage 3)
  bool prefetched = false;  // the next layer's all-gather issued before this one computes
  Comm& group;
  bool quantized = false;   // qwZ's int8 blocks
  const char* what;         // the compute's name
  double share;             // of each layer's backward seconds
  bool reduces = false;     // each layer's gradients reduce-scattered after its compute
};

// One rank's step at stages 1-3: the groups it shards, gathers and reduces
// over, and its reduce-scatters in flight on the communication stream.
class ShardedMetaStep {
 public:
  ShardedMetaStep(Comm& world, const memory::Architecture& arch, const MetaModel& model, int stage,
                  const ShardingOptions& options);
  void run();

 private:
  Request gather(std::size_t count, Comm& group, bool quantized);
  void walk(const Walk& how);
  void reduce_scatter(std::size_t count);
  void plain_reduce_scatter(std::size_t count);
  void send_landed_partial_sums(bool wait);

  const MetaModel& model_;
  const int stage_;
  const ShardingOptions& options_;
  std::unique_ptr<Mesh> hsdp_;  // HSDP: ("replicate", "shard"), the state sharded within neighbouring ranks (a node's)
  Comm& comm_;                  // the ranks that share the state: HSDP's shard group, or all
  std::unique_ptr<Mesh> hpz_;   // hpZ: ("across", "node"), backward's gathers inside "node"
  std::unique_ptr<Mesh> nodes_;  // qgZ: ("across", "node"), its two hops
  const MetaUnits units_;
  // A unit's reduce-scatter in flight: qgZ's first hop, whose second waits
  // for it, or what is only waited for.
  struct Reducing {
    Request request;
    std::size_t shard = 0;
    bool across = false;  // the second hop, or a plain reduce-scatter: only waited for
  };
  std::vector<Reducing> reducing_;
};

ShardedMetaStep::ShardedMetaStep(Comm& world, const memory::Architecture& arch, const MetaModel& model,
                                 int stage, const ShardingOptions& options)
    : model_(model), stage_(stage), options_(options),
      hsdp_(options.shard_group > 0 && options.shard_group < world.size()
                ? grouped(world, options.shard_group, "replicate", "shard")
                : nullptr),
      comm_(hsdp_ ? hsdp_->group("shard") : world),
      hpz_(options.hpz_group > 0 ? grouped(world, options.hpz_group, "across", "node") : nullptr),
      nodes_(options.quantize_gradients
                 ? grouped(world, ranks_per_node(world, "sharded_meta_step"), "across", "node")
                 : nullptr),
      units_(units_of(arch, model)) {}

void ShardedMetaStep::run() {
  const bool three = stage_ == 3;
  const MetaUnit& root = units_.root;
  if (three) gather(root.count, comm_, options_.quantize_weights).wait();  // the root stays gathered through the step
  std::vector<const MetaUnit*> forward;
  for (const MetaUnit& u : units_.layers) forward.push_back(&u);
  walk({.order = forward, .gathers = three, .prefetched = prefetches_forward(options_.prefetch), .group = comm_,
        .quantized = options_.quantize_weights, .what = "forward", .share = 0.5});
  comm_.compute_seconds("forward", root.backward / 2);
  comm_.compute_seconds("backward", root.backward);
  walk({.order = {forward.rbegin(), forward.rend()}, .gathers = three && options_.reshard_after_forward,
        .prefetched = prefetches_backward(options_.prefetch), .group = hpz_ ? hpz_->group("node") : comm_,
        .what = "backward", .share = 1, .reduces = stage_ >= 2});
  const std::size_t all = model_.parameters();
  if (stage_ >= 2) {
    reduce_scatter(root.count);
  } else {  // stage 1: the whole model's gradients after backward
    plain_reduce_scatter(all);
  }
  if (nodes_) send_landed_partial_sums(true);
  for (Reducing& r : reducing_) r.request.wait();
  // HSDP: each shard averaged with the same shard of every other group (here
  // after backward, in one call; PyTorch overlaps it unit by unit).
  if (hsdp_)
    hsdp_->group("replicate").all_reduce(meta_view(shard_layout(all, comm_.size()).shard, model_.grad_dtype),
                                         ReduceOp::avg);
  if (stage_ < 3) gather(all, comm_, false).wait();  // the updated shards, back to every rank for the next forward
}

// A unit's all-gather over `group`: shards in the gradients' dtype (bf16), or qwZ's int8 blocks.
Request ShardedMetaStep::gather(std::size_t count, Comm& group, bool quantized) {
  const std::size_t s = shard_layout(count, group.size()).shard, p = std::size_t(group.size());
  if (quantized)
    return group.i_all_gather(meta_view(quantized_bytes(s, 8), DType::u8),
                              meta_view(quantized_bytes(s, 8) * p, DType::u8));
  return group.i_all_gather(meta_view(s, model_.grad_dtype), meta_view(s * p, model_.grad_dtype));
}

// Stage 3 walks the layers (forward, then backward in reverse) gathering each
// before it computes. Prefetched, the next layer's all-gather is issued before
// the current layer computes, so it runs under that compute; else it is
// issued, and waited for, right in front of its own compute.
void ShardedMetaStep::walk(const Walk& how) {
  const std::vector<const MetaUnit*>& order = how.order;
  Request next;
  if (how.gathers && how.prefetched && !order.empty()) next = gather(order.front()->count, how.group, how.quantized);
  for (std::size_t i = 0; i < order.size(); ++i) {
    if (how.gathers) {
      if (!how.prefetched) next = gather(order[i]->count, how.group, how.quantized);
      next.wait();
      if (how.prefetched && i + 1 < order.size()) next = gather(order[i + 1]->count, how.group, how.quantized);
    }
    if (nodes_) send_landed_partial_sums(false);
    comm_.compute_seconds(how.what, order[i]->backward * how.share);
    if (how.reduces) reduce_scatter(order[i]->count);
  }
}

// A unit's gradients, reduce-scattered (avg) on the communication stream:
// plainly, or as qgZ's first hop, an all-to-all of int4 blocks inside the node.
void ShardedMetaStep::reduce_scatter(std::size_t count) {
  if (!nodes_) return plain_reduce_scatter(count);
  const std::size_t s = shard_layout(count, comm_.size()).shard;
  Comm& node = nodes_->group("node");
  const std::size_t bytes = quantized_bytes(s * std::size_t(nodes_->group("across").size()), 4) * node.size();
  reducing_.push_back({node.i_all_to_all(meta_view(bytes, DType::u8), meta_view(bytes, DType::u8)), s, false});
}

void ShardedMetaStep::plain_reduce_scatter(std::size_t count) {
  const std::size_t s = shard_layout(count, comm_.size()).shard;
  const DType dtype = model_.grad_dtype;
  reducing_.push_back({comm_.i_reduce_scatter(meta_view(s * comm_.size(), dtype), meta_view(s, dtype), ReduceOp::avg),
                       s, true});
}

// qgZ: each first hop that has landed (all of them, when `wait`) sends its
// node's partial sums across the nodes.
void ShardedMetaStep::send_landed_partial_sums(bool wait) {
  for (Reducing& r : reducing_) {
    if (r.across) continue;
    if (wait) {
      r.request.wait();
    } else if (!r.request.test()) {
      continue;
    }
    Comm& across = nodes_->group("across");
    const std::size_t bytes = quantized_bytes(r.shard, 4) * across.size();
    r = {across.i_all_to_all(meta_view(bytes, DType::u8), meta_view(bytes, DType::u8)), r.shard, true};
  }
}

}  // namespace

void sharded_meta_step(Comm& world, const memory::Architecture& arch, double step_seconds, int stage,
                       const ShardingOptions& options) {
  const MetaModel model = meta_model(arch, step_seconds);
  if (stage == 0) return meta_step(world, model, DdpMode::overlap);
  ShardedMetaStep(world, arch, model, stage, options).run();
}

}  // namespace labkit
