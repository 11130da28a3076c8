// Lab 6: FSDP and ZeRO. Data parallelism that splits the model state over the
// ranks instead of copying it to each (parallel/fully_sharded.h). One file per
// view of it:
//   main.cpp     the options, and which view runs
//   options.cpp  the sharding options, and the lab's rules for combining them
//   stages.cpp   each stage trains the tiny GPT, equal to one rank; what it keeps and sends
//   train.cpp    the training loop over FullyShardedGpt, and one rank's run to compare
//   memory.cpp   rank 0's memory by use, measured, beside the memory lab's estimate
//   what_if.cpp  --what-if, --sweep ranks: each stage's memory and a payload-free step of a real model
//   prefetch.cpp --sweep hidden: the layer size from which prefetching hides the all-gather
//   bench.cpp    --bench: what the sharded simulation costs in wall time
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "labkit/gpt.h"
#include "labkit/lab/sweep.h"
#include "labkit/lab/training_options.h"
#include "labkit/memory_tracker.h"
#include "labkit/optim.h"
#include "labkit/parallel/sequences.h"
#include "labkit/run.h"

namespace fsdp_lab {

using namespace labkit;

// Each optimizer's default learning rate for the tiny GPT: AdamW's step is about
// lr whatever the gradient's size, so it wants one far below SGD's.
inline constexpr float kSgdLr = 0.05f, kAdamwLr = 3e-3f;

struct Options : lab::TrainingOptions {
  Options() : TrainingOptions{.steps = 10, .batch = 16, .lr = kSgdLr} {}  // --lr: kAdamwLr with adamw
  std::vector<int> stages = {0, 1, 2, 3};
  int hsdp = 0;  // HSDP: shard within groups of this many ranks, replicate across them (0: shard over all)
  bool reshard_after_forward = true;  // stage 3: free each block after its forward (else keep it to its backward)
  int hpz = 0;  // stage 3, ZeRO++'s hpZ: a secondary shard of each block within groups of this many ranks (0: none)
  bool qwz = false;  // stage 3, ZeRO++'s qwZ: int8 forward gathers, run beside exact stage 3
  bool qgz = false;  // stage 3, ZeRO++'s qgZ: int4 gradient reduces in two all-to-all hops, likewise
  std::string optimizer = "sgd";
  std::string what_if;      // a model preset: its payload-free step per stage instead of the tiny GPT
  double step_seconds = 0;  // --what-if: compute per step; 0: one --seq sequence's 6N FLOPs at --efficiency
  std::string gpu;  // --what-if: empty for the topology's device's 80 GB
  int seq = 0;  // --what-if: tokens per sequence, one per GPU (0: the model's learned context, else kRotarySeq)
  std::string recompute = "selective";
  std::string prefetch = "none";  // stage 3: which pass gathers the next block under the current one
  cli::Sweep sweep;  // ranks=A..B: the what-if on A, 2A, ... B GPUs of every topology; hidden=A..B: prefetch's boundary
  std::string plot;               // each stage's memory at its peak, stacked by use
};

// A what-if's sequence where --seq is not given and the model's positions are
// rotary, with no learned context to take: the reading's 7B example's.
constexpr int kRotarySeq = 4096;

// --stage, --hsdp, --reshard-after-forward, --prefetch and ZeRO++'s --hpz, --qwz, --qgz.
void add_sharding_options(CLI::App& app, Options& o);
// The rules for combining them (FullyShardedGpt's check_sharding) and what the
// lab's views run, checked before any rank starts. Where `stage_given` is
// false, --hsdp makes stages 1-3 the default, and a technique for stage 3 alone
// (--hpz, --qwz, --qgz) stage 3; a study's --seq defaults to its model's.
void check_sharding_options(Options& o, const RunOptions& run_options, bool stage_given);
// What the tiny GPT's run needs of the backend and the batch.
void check_tiny_gpt_run(const Options& o, const RunOptions& run_options);
// The options the run asked for does not read, refused by name: the studies
// train nothing (and --sweep ranks picks the ranks and topologies itself);
// the tiny GPT's run charges no --step-seconds and fits no --gpu.
void refuse_what_the_run_does_not_read(const CLI::App& app, const Options& o);

// The optimizer over whatever this rank updates: the whole model, or its shard.
struct Optimizer {
  std::string name;
  SgdMomentum sgd;
  AdamW adamw;
  explicit Optimizer(const Options& o) : name(o.optimizer), sgd{.lr = o.lr}, adamw{.lr = o.lr} {}
  void update(View params, View grads) {  // where the model lives
    if (name == "sgd") return sgd.update(params, grads);
    adamw.update(params, grads);
  }
  std::size_t state_bytes() const { return name == "sgd" ? sgd.velocity.bytes() : adamw.state_bytes(); }
  const char* estimator_name() const { return name == "sgd" ? "momentum" : "adamw"; }  // memory::optimizers()
};

struct StageRun {
  int stage = 0, ranks = 0, shard_group = 0;  // shard_group: the ranks that share the state (HSDP's G, else P)
  int nodes = 1;                               // the nodes the ranks run on
  bool quantized = false;  // with ZeRO++'s quantization (--qwz, --qgz): not equal to one rank, by design
  std::string name;        // the row's: "3", "3 qwZ qgZ"
  std::size_t parameters = 0, shard = 0, padding = 0;  // elements: the model's, one rank's shard, all the padding
  double volume = 0;            // parameters' worth sent per step by rank 0, from its trace
  double off_node = 0;          // parameters' worth each node sent to other nodes per step, from every rank's trace
  double formula = 0;           // ZeRO's: 2N, or 3N less the second gathers of the units kept whole
  double step_seconds = 0;
  std::vector<float> losses;    // the global batch's mean loss per step
  std::vector<float> weights;   // rank 0's gathered weights at the end (on the process that ran rank 0)
  bool ranks_agree = false;     // every rank gathered the same weights, bit for bit
  MemoryTracker memory;         // rank 0's, current and peak by use
  std::string peak_during;      // the compute region running when rank 0's memory peaked: "backward block 1"
  std::vector<std::pair<std::string, double>> at_peak;  // rank 0's bytes by use at that moment
};

// Trains `o.steps` steps at ZeRO `stage` and measures them.
// quantized: with ZeRO++'s quantization that o.qwz and o.qgz ask for (stage 3).
StageRun train(const Options& o, RunOptions run_options, int stage, const Sequences& data, const GptConfig& config,
               bool quantized = false);

// Bytes every rank sent to ranks on other nodes (each collective's and
// message's off_node_bytes, comm.h), up to the end of its last compute region
// named `last_region` (empty: all of them), each track by its own clock.
double off_node_bytes(const Trace& trace, std::string_view last_region = {});

// One rank, no communication, on the whole global batch of every step: what
// every stage must equal. `reversed`: each batch's sequences in reverse order,
// to measure what rounding alone does over the run (labkit::rounding_limit).
std::vector<float> train_one_rank(const Options& o, const Sequences& data, const GptConfig& config,
                                  bool reversed = false);

// Prints rank 0's peak memory by use beside the memory lab's estimate; returns the rows.
nlohmann::json print_memory(const StageRun& r, const Options& o, const GptConfig& config);
// Each stage's memory at rank 0's peak, stacked by use, to an SVG or PNG (gnuplot).
void plot_memory(const std::vector<StageRun>& runs, const std::string& path);
// Where stage 3 peaks above stage 1 or 2, says so and why.
void explain_stage_three_peak(const std::vector<StageRun>& runs);

// Each --stage trains the tiny GPT: its table, memory and verdict (stages.cpp).
int train_stages(const Options& o, const RunOptions& run_options, const Sequences& data, const GptConfig& config);

// --what-if, --step-seconds, --gpu, --seq, --recompute and --sweep: the studies' options.
void add_what_if_options(CLI::App& app, Options& o);
// The model --what-if and --sweep study: --what-if's, llama2-7b by default.
std::string studied_model(const Options& o);
int what_if(const Options& o, RunOptions run_options);
// A what-if step's compute: --step-seconds, or else one --seq sequence's 6N
// FLOPs per token at --efficiency of the topology's device's peak.
double compute_seconds(const Options& o, const RunOptions& run_options, const memory::Architecture& arch);
int sweep(const Options& o, RunOptions run_options);
// --sweep hidden=A..B: where the prefetched all-gather hides under a layer's forward, measured and by alpha-beta.
int prefetch_sweep(const Options& o, RunOptions run_options);
int bench(const Options& o, const RunOptions& run_options, const Sequences& data, const GptConfig& config);

}  // namespace fsdp_lab
