// labkit::FullyShardedGpt — ZeRO's three stages over the tiny GPT (Rajbhandari
// et al. 2020, "ZeRO: Memory Optimizations Toward Training Trillion Parameter
// Models"), stage 3 as PyTorch's FSDP runs it (Zhao et al. 2023): data
// parallelism in which the model state is split over the ranks instead of
// copied to each.
//
//   stage  each rank keeps                        per step, each rank sends (N parameters)
//   0      everything (DDP)                       allreduce of the gradients           2N
//   1      1/P of the optimizer state              reduce-scatter the gradients, update   2N
//                                                  the shard, all-gather the parameters
//   2      1/P of the optimizer state and of       the same, each unit's gradients        2N
//          the gradients                           reduce-scattered as backward ends it
//   3      1/P of everything                       all-gather each unit before its        3N
//                                                  forward and again before its backward,
//                                                  reduce-scatter its gradients
//
// (An allreduce is a reduce-scatter and an all-gather, so 2N counts both halves,
// each (P-1)/P N on a ring; stage 3 gathers twice, hence 1.5x, less the second
// gathers of the units it keeps whole through the step.)
//
// The model is cut into units that gather and free together, FSDP's wrapping of
// a transformer: each block is a unit, and so are the embeddings (whose table
// is also the output head) and the final norm, which stay gathered for the
// whole step, as FSDP keeps its root. A unit is a contiguous run of the model's
// flat buffer, padded to a multiple of P so that every rank's shard is the same
// size: rank r keeps elements [r S, (r+1) S) of it, and gathers into the
// model's own storage.
//
// HSDP, hybrid sharding (PyTorch's HYBRID_SHARD; ZeRO++'s hpZ is its
// parameter half): the model state is sharded within groups of G ranks and
// replicated across the P/G groups, a mesh of ("replicate", P/G) x ("shard",
// G) with the shard groups on neighbouring ranks, so inside a node. Gathers
// stay in the group; each gradient shard is reduce-scattered in the group,
// then allreduced with the same shard of every other group. Per step a rank
// sends the same 2N or 3N in its group plus 2N/G across groups, and keeps
// 1/G of the state instead of 1/P.
//
// Stage 3's options (ShardingOptions): prefetch the next block under the
// current one's compute; ZeRO++ (Wang et al. 2023) cuts what crosses nodes:
// hpZ keeps a secondary shard of each block within a node so that backward
// gathers there, qwZ sends the forward's gathers as int8 blocks, and qgZ
// reduces the gradients as int4 blocks, node first (quantized_reduce_scatter.h).
//
// What a rank does not keep, it does not have: the model's buffers outside
// what this rank holds are filled with NaN (mark_freed), so computing with a
// parameter or gradient that was freed and not gathered again poisons the
// loss. And what it holds it tells the rank's memory tracker
// (Comm::track_memory) as it allocates and frees: the weights and gradients it
// keeps, each unit's whole gradients from its backward to its reduce-scatter
// (stages 2 and 3), each unit's parameters from its all-gather to its free
// (stage 3: gathered), and the activations. The optimizer's state is the
// caller's to count.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "labkit/comm.h"
#include "labkit/gpt.h"
#include "labkit/memory.h"
#include "labkit/parallel/mesh.h"

namespace labkit {

// How a flat run of `count` elements splits over `ranks`: each rank's shard is
// ceil(count / ranks) elements, the run padded with zeros to ranks x shard.
struct ShardLayout {
  std::size_t count = 0, shard = 0;
  int ranks = 1;
  std::size_t padded() const { return shard * std::size_t(ranks); }
  std::size_t padding() const { return padded() - count; }
};
ShardLayout shard_layout(std::size_t count, int ranks);

// What an optimizer does to the parameters a rank updates, given their
// gradients: f32 views of the same length, where the model lives (host or
// device memory; the optimizers' View overloads, optim.h).
using ShardUpdate = std::function<void(View params, View grads)>;

// Stage 3's prefetch (FSDP's forward_prefetch, backward_prefetch=BACKWARD_PRE):
// in the forward pass, the backward, or both, the next unit's all-gather is
// issued before the current unit computes, so that it runs under that compute.
enum class Prefetch { none, forward, backward, both };
inline constexpr std::string_view kPrefetchNames[] = {"none", "forward", "backward", "both"};  // by Prefetch
Prefetch parse_prefetch(std::string_view name);  // one of kPrefetchNames; throws naming them
bool prefetches_forward(Prefetch p);
bool prefetches_backward(Prefetch p);

// How FullyShardedGpt shards, beyond its stage.
struct ShardingOptions {
  int shard_group = 0;  // HSDP: shard within groups of this many ranks (0, or the rank count: over all ranks)
  // Stage 3: free each block's parameters after its forward and gather them
  // again for its backward (FSDP's default); false keeps every block whole from
  // its forward to its backward, gathering once: 2N per step instead of 3N, for
  // the memory of the whole model at the turn of the step. Below stage 3
  // nothing is gathered, and false is refused.
  bool reshard_after_forward = true;
  // Stage 3: gather the next block while this one computes, into a buffer of
  // its own (MemoryUse::prefetched until it computes).
  Prefetch prefetch = Prefetch::none;
  // Stage 3, ZeRO++'s hierarchical partitioning (hpZ; Wang et al. 2023,
  // DeepSpeed's zero_hpz_partition_size): once a block is gathered for its
  // forward, each rank keeps a secondary shard of it over its group of this
  // many neighbouring ranks (a node's), and backward gathers the block from
  // those, inside the group: N/G more weights held from forward to backward,
  // and backward's gathers off the network. 0: none.
  int hpz_group = 0;
  // Stage 3, ZeRO++'s quantized weights (qwZ): every forward all-gather sends
  // int8 blocks (quantize.h) instead of fp32, a quarter of the bytes and some
  // precision; backward's gathers stay exact (or come from hpZ's shards, which
  // keep what the forward gathered).
  bool quantize_weights = false;
  // Stage 3, ZeRO++'s quantized gradients (qgZ): every reduce-scatter runs as
  // quantized_reduce_scatter, int4 blocks in an all-to-all inside each node
  // and one across the nodes. The ranks must fill their nodes evenly.
  bool quantize_gradients = false;
};

// Where the ranks run, as far as is known when the options are checked: on the
// simulator the lab knows it before any rank starts; under mpirun it knows
// their number (-np), and only the ranks themselves know their nodes.
struct ShardingPlacement {
  int ranks = 0;              // the ranks that share the model; 0: not known
  std::string_view ranks_option = "--ranks";  // what set them, named in the message: --ranks, or mpirun's -np
  int per_node = 0;           // ranks to a node by `topology`; 0: not known
  std::string_view topology;  // what puts them so, named in the message
};

// The rules for combining ZeRO's stages with ShardingOptions, each refused
// with its reason in the words of the fsdp lab's options (--stage, --hsdp,
// --qwz, --qgz, --hpz, --prefetch, --reshard-after-forward) and their values:
// the lab checks them before any rank starts, with every stage it trains, and
// the constructor checks the same rules with its own stage. Prefetching and
// keeping blocks whole need stage 3 among `stages`; hpZ, qwZ and qgZ need it
// alone. In this order, so that options breaking two rules are told the same
// first one every time.
void check_sharding(std::span<const int> stages, const ShardingOptions& options, const ShardingPlacement& placement);

class FullyShardedGpt {
 public:
  // A unit: the run of the model's buffer that gathers and frees together, and
  // where this rank's shard of it lies in shard_parameters().
  struct Unit {
    ParameterRange range;
    ShardLayout layout;
    std::size_t shard_offset;
    ShardLayout secondary = {};  // hpZ: over the group (blocks only)
    std::size_t secondary_offset = 0;
  };

  // Every rank's `model` starts from the same weights (the same seed); each
  // keeps its shard of them, and at stage 3 nothing else.
  FullyShardedGpt(Comm& comm, Gpt& model, int stage, ShardingOptions options = {});

  // Forward and backward on this rank's B x T tokens, the gradients averaged
  // over the ranks: at stage 0 the model's gradients hold the global batch's
  // mean, at stages 2 and 3 this rank's shard of it; stage 1 reduce-scatters in
  // step(). Returns this rank's loss.
  float forward_backward(const std::vector<int>& tokens, const std::vector<int>& targets, int B, int T);

  // The optimizer applied to what this rank owns: `update(params, grads)` over
  // the whole model at stage 0, over this rank's shard at stages 1-3 (so its
  // state is a shard's); then stages 1 and 2 all-gather the updated parameters
  // for the next forward, and stage 3 keeps only its shard. Stage 1 is ZeRO's
  // step over the model as one flat run (zero_step).
  void step(const ShardUpdate& update);

  // Every parameter, gathered on every rank (one all-gather per unit): what
  // the ranks hold together.
  std::vector<float> gather_parameters();

  int stage() const { return stage_; }
  int shard_group() const { return shard_comm_->size(); }
  // units()[0] the embeddings, [1 + l] block l, the last the final norm; at
  // stage 1 one unit, the whole model as one flat run.
  const std::vector<Unit>& units() const { return units_; }
  const Tensor& shard_parameters() const { return param_shard_; }

 private:
  // The constructor's steps, in order, between its checks of the options.
  void make_groups(const ShardingOptions& options);  // HSDP's or hpZ's mesh
  void lay_out_shards();
  void allocate_staging(const ShardingOptions& options);
  void keep_starting_shards();
  View shard_of_unit(Tensor& shards, const Unit& unit);
  void gather(const Unit& unit, Tensor& into);  // this unit's parameters, whole, into its run of `into`
  // A unit's all-gather from `shard` over `group` into prefetch_, fp32 or
  // (quantized) int8 blocks; land() puts it, dequantized, into its run of the parameters.
  Request start_gather(Comm& group, View shard, bool quantized);
  void land(Comm& group, const Unit& unit, std::size_t shard, bool quantized);
  View padded_gradients(const Unit& unit);  // the unit's gradients in flat_, padded with zeros to P S
  void reduce_scatter_gradients(const Unit& unit);
  void free_gradients(const Unit& unit);  // after the reduce-scatter: the whole gradients freed
  float forward_backward_sharded_parameters(const std::vector<int>& tokens, const std::vector<int>& targets, int B,
                                            int T);
  void track(MemoryUse use, const Unit& unit, int sign);  // +1: the unit's whole tensor allocated, -1: freed
  // How stage 3 passes over the blocks: gather each (else it is whole since
  // forward), prefetched or not, from the primary shards or hpZ's secondary,
  // and free each after it computes (else it stays whole for backward).
  struct Pass {
    bool gather = true, prefetch = false, from_secondary = false, free = true, quantized = false;
  };
  // Each block in order whole while compute(l) runs, then after(l).
  void pass(const std::vector<int>& blocks, Pass how, const std::function<void(int)>& compute,
            const std::function<void(int)>& after);
  void keep_secondary(const Unit& unit);  // hpZ: this rank's slice of a whole block, over its group

  Comm& comm_;
  Gpt& model_;
  int stage_;
  bool reshard_after_forward_;
  bool quantize_weights_;
  Prefetch prefetch_policy_;
  std::unique_ptr<Mesh> mesh_;     // HSDP's ("replicate", "shard") groups; null when sharding over all ranks
  Comm* shard_comm_ = nullptr;     // the ranks that share the state: the group, or all
  Comm* replicate_comm_ = nullptr;  // HSDP: the same shard in every other group
  Comm* hpz_comm_ = nullptr;        // hpZ: the group a block's secondary shards are spread over
  std::unique_ptr<Mesh> node_mesh_;  // qgZ: ("across", nodes) x ("node", ranks per node)
  std::vector<Unit> units_;
  // On the model's device:
  Tensor param_shard_, grad_shard_;  // this rank's shard of every unit, unit after unit
  Tensor secondary_;                 // hpZ: this rank's secondary shard of every block
  Tensor flat_;                      // one padded unit's gradients: what a reduce-scatter sends
  Tensor prefetch_;                  // the next block's parameters, padded, as its all-gather lands
  TensorOf<std::uint8_t> quantized_shard_, quantized_gathered_;  // qwZ's wire format, on the model's device
  std::int64_t activation_bytes_ = 0;            // told the tracker so far
};

// What a rank frees of a whole tensor it does not keep: its values become NaN
// (fill_local, where it lives), so that a use without gathering again poisons
// the result. Nothing happens to a payload-free view. f32 only.
void mark_freed(View v);

// ---- lab 6's exercises (solutions/parallel/NAME.cpp; FullyShardedGpt calls them) ----

// 6.1 A flat run of `full.count` elements sharded over the ranks as
// shard_layout splits it: shards of S = shard.count elements, the run padded
// with zeros to P S. shard_of: this rank's shard, elements [rank S, (rank+1) S)
// of the padded run. unshard: every rank's shard gathered (one all_gather)
// back into `full`, the padding dropped.
void shard_of(View full, View shard, int rank);
void unshard(Comm& comm, View shard, View full);

// 6.2 ZeRO's step over one flat run: `grads` (P S elements, padded) reduce-
// scattered (avg) into this rank's `grad_shard` (S), `update` run once on
// this rank's `param_shard` and `grad_shard`, and the updated shards gathered
// back into `params` (unshard).
void zero_step(Comm& comm, View grads, View grad_shard, View param_shard, View params, const ShardUpdate& update);

// 6.3 Stage 3 around one unit's computation: its parameters gathered whole
// into `full` (unshard), `compute` run, and `full` freed (mark_freed), the
// rank's memory tracker told of both (MemoryUse::gathered, full's bytes).
void gather_compute_free(Comm& comm, View shard, View full, const std::function<void()>& compute);

// A ZeRO step of a meta model, known by its shapes alone (payload-free: meta
// views, view.h), for what-ifs at the scale of real runs; `step_seconds` of compute
// spread over the units as meta_model spreads it (data_parallel.h). Units:
// the root (embeddings, head, final norm) and each layer. Stage 0 is DDP's
// overlapped step. Gradients are reduce-scattered on the communication stream
// while backward goes on, as FSDP and DeepSpeed do, and waited for before the
// optimizer; stage 1 reduce-scatters after backward. Without prefetch, a stage-3
// unit's all-gather waits in front of its compute; prefetched (FSDP's
// forward_prefetch, backward_prefetch=BACKWARD_PRE) in the forward or the
// backward pass (or both), the next unit's all-gather is issued before the
// current unit computes and runs under it, two units whole at a time.
//
// The options as FullyShardedGpt takes them. shard_group G: HSDP, the state
// sharded within groups of G neighbouring ranks and each gradient shard
// allreduced across the groups after backward. Stage 3's ZeRO++: hpZ's
// backward gathers within its groups; qwZ's forward gathers as int8 blocks
// (quantize.h, half the bytes of bf16); qgZ's reduce as two all-to-all hops
// of int4 blocks, the second (across the nodes) issued at the first layer
// boundary after the first (inside the node) is done, as a launch waiting on
// an event would. The quantization kernels themselves are taken as free.
void sharded_meta_step(Comm& comm, const memory::Architecture& arch, double step_seconds, int stage,
                       const ShardingOptions& options = {});

}  // namespace labkit
