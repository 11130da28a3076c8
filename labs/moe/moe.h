// Lab 9: mixture of experts. One file per view of it:
//   main.cpp     the options, and which view runs
//   train.cpp    the tiny GPT with an MoE layer in every block, trained on ep ranks beside one rank
//   report.cpp   the default view: what the routing did each step (tokens per expert, drops, the
//                balance loss or the bias), the all-to-all bytes per layer beside their formula, the
//                time per phase, and equal to one rank
//   heatmap.cpp  --plot: the routing heatmap, tokens per expert by step; --compare: none, aux and bias
//                side by side
//   sweep.cpp    --sweep capacity=A..B: the capacity factor against the drops and the time
//   what_if.cpp  --what-if: one MoE layer of a real model (Mixtral, DeepSeek-V3) payload-free, its
//                experts in one node or spread one a node
//   bench.cpp    --bench: what the simulation costs in wall time
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "labkit/gpt.h"
#include "labkit/lab/sweep.h"
#include "labkit/lab/training_options.h"
#include "labkit/parallel/moe.h"
#include "labkit/parallel/sequences.h"
#include "labkit/run.h"

namespace moe_lab {

using namespace labkit;

// lr below the other labs' 0.05: the router swings less from step to step.
// bench: the simulation's wall time (with --what-if, the layer's).
struct Options : lab::TrainingOptions {
  Options() : TrainingOptions{.steps = 10, .batch = 8, .lr = 0.01f} {}
  MoeConfig moe;
  std::string balance = "aux";
  int ep = 4, layers = 2;
  std::string what_if;  // a model preset with experts: one MoE layer at its scale, payload-free
  int seq = 0, micro_batch = 1;  // with --what-if: s (0: 4096) and b, the tokens a rank holds
  std::string plot;              // the routing heatmap (.png or .svg)
  bool compare = false;          // every way of balancing, side by side
  cli::Sweep sweep;              // capacity=A..B: the capacity factor against drops and time
};

inline constexpr double kCapacityStep = 0.25;  // --sweep capacity's step

// One MoE layer's routing in one step, across the ep group.
struct LayerStep {
  RoutingStats stats;
  std::vector<float> bias;  // DeepSeek-V3's, after the step's update
};

struct StepRun {
  double loss = 0;  // the mean cross-entropy over the batch
  std::vector<LayerStep> layers;
  double drop_rate() const;  // the assignments dropped, every layer's mean
  double imbalance() const;  // the busiest expert's assignments over the fair share k x tokens / E, the worst layer's
};

struct MoeRun {
  std::vector<StepRun> steps;
  // The last step, by layer, summed over the ranks: bytes sent toward the
  // experts and back from them, forward and backward together.
  std::vector<MoeLayer::Traffic> traffic;
  MoeLayer::Phases phases;  // the last step, every layer's, on the slowest rank of each phase
  double weights_vs_one_rank = 0;  // the largest over the ranks, dense and experts
  std::int64_t drops_unlike_one_rank = 0;  // assignments kept on one side and dropped on the other, every step
};

// Trains on run_options.ranks = ep ranks, each on its consecutive share of
// every step's batch; then, with `compare`, each rank trains ep = 1 on the
// whole batch beside it, alone (a group of its own), and compares its weights
// and drops.
MoeRun train(const Options& o, const RunOptions& run_options, const Sequences& data, const GptConfig& config,
             bool compare = true);

// A layer's assignments per expert as the tables print them: "21 89 100 ...".
std::string counts_text(const std::vector<std::int64_t>& counts);

// What the command line asks of the training views that cannot be, or that
// would do nothing, before any rank starts.
void check_options(const Options& o, const RunOptions& run_options, const CLI::App& app);

// report.cpp: the default view, one run's routing, all-to-all and phases, and equal to one rank.
int report(const Options& o, const RunOptions& run_options, const Sequences& data, const GptConfig& config);

// heatmap.cpp: runs' tokens per expert by step (layer 0), side by side; --compare.
struct HeatmapPanel {
  std::string title;
  const MoeRun* run;
};
void plot_heatmaps(const std::vector<HeatmapPanel>& panels, const std::string& path);
int compare_balance(Options o, const RunOptions& run_options, const Sequences& data, const GptConfig& config);

// bench.cpp: --bench, the MoE GPT's steps on ep simulated ranks against the dense tiny GPT's on one.
int bench(const Options& o, const RunOptions& run_options, const Sequences& data, const GptConfig& config);

// sweep.cpp: --sweep capacity=A..B, every kCapacityStep.
void add_sweep_option(CLI::App& app, Options& o);
int sweep(Options o, const RunOptions& run_options, const Sequences& data, const GptConfig& config);

// --what-if MODEL: one MoE layer of the model at --ep ranks, payload-free,
// its experts packed into nodes and (where ep fits a node) one a node.
// add_what_if_options adds --what-if, --seq and --micro-batch.
void add_what_if_options(CLI::App& app, Options& o);
int what_if(const Options& o, const RunOptions& run_options);

}  // namespace moe_lab
