// Lab 7: tensor parallelism. One file per view of it:
//   main.cpp     the options, and which view runs
//   options.cpp  which option combinations can be, checked before any rank starts
//   tensor_parallel.cpp  the tiny GPT split over the ranks, equal to one rank; what it keeps, sends and holds
//   traffic.cpp  one layer's f and g, from the trace
//   bench.cpp    --bench: what the simulation costs in wall time
//   what_if.cpp  --what-if: a real model's layer with its allreduces inside a node and across nodes
//   context_parallel.cpp  --cp: attention over sequence shards, ring attention in two layouts
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "labkit/gpt.h"
#include "labkit/lab/training_options.h"
#include "labkit/memory.h"
#include "labkit/parallel/ring_attention.h"
#include "labkit/parallel/sequences.h"
#include "labkit/run.h"
#include "labkit/trace.h"

namespace tp_lab {

using namespace labkit;

struct Options : lab::TrainingOptions {
  Options() : TrainingOptions{.steps = 10, .batch = 4, .lr = 0.05f} {}
  bool sp = false;      // sequence parallelism: norms and residuals on sequence shards
  std::string what_if;  // a model preset: its layer, payload-free, instead of the tiny GPT
  int cp = 0;           // context parallelism: attention over this many sequence shards (0: off)
  int tp = 0;           // with --cp: ranks per head group (0: the ranks over cp)
  int seq = 0;          // with --cp or --what-if: the sequence length (0: the model's context)
  std::string plot;     // layer 0's timeline with f and g; with --cp the layouts' attention matrices (.svg or .png)
};

// What the command line asks that cannot be, refused before any rank starts (options.cpp).
void check_options(const Options& o, const RunOptions& run_options, const GptConfig& config);

// One of a layer's f and g as the run executed it: its collective (empty:
// the identity) with its bytes and time, from rank 0's trace.
struct LayerPlace {
  std::string pass, op, where, collective;
  double bytes = 0, seconds = 0;
};
// A step of the layer on rank 0, in the order it ran: a compute region (op
// empty) or one of its f and g (label "f: all_reduce", or "f: identity").
struct LayerStep {
  std::string pass, label, op;
};
struct LayerTraffic {
  std::vector<LayerPlace> places;
  std::vector<LayerStep> steps;
};
LayerTraffic layer_traffic(const TraceTrack& rank0, bool sp, double step_start);
nlohmann::json print_layer_traffic(const std::vector<LayerPlace>& places);
void plot_layer(const LayerTraffic& layer, int ranks, bool sp, const std::string& path);  // the f and g picture

// The tiny GPT trained on --ranks tensor-parallel ranks, as rank 0 saw it.
struct TpRun {
  int ranks = 0;
  std::size_t kept = 0;  // parameters rank 0 keeps
  int padded_vocab = 0;
  double step_seconds = 0;
  // Rank 0's collectives of the B x T x C activations per layer, and the bytes a ring sends for them.
  double allreduces_per_layer = 0, gathers_per_layer = 0, scatters_per_layer = 0, sent_per_layer = 0;
  std::vector<float> losses;
  double weights_vs_dense = 0;  // the largest over the ranks
  double activations = 0;       // rank 0's peak, as its tracker was told
  LayerTraffic layer;           // layer 0's f and g in the first step
};
// compare: train the dense model too, and measure each rank's slice against it.
TpRun train(const Options& o, const RunOptions& run_options, const Sequences& data, const GptConfig& config,
            bool compare = true);

// The views; each prints its tables, writes --json and returns the exit status.
int tensor_parallel(const Options& o, const RunOptions& run_options, const Sequences& data, const GptConfig& config);
int bench(const Options& o, const RunOptions& run_options, const Sequences& data, const GptConfig& config);
int what_if(const Options& o, RunOptions run_options);
void add_context_parallel_options(CLI::App& app, Options& o);
// The tiny GPT's attention (all its heads over the whole --batch and --seq) over --cp ranks.
int context_parallel(const Options& o, const RunOptions& run_options, const GptConfig& config);

}  // namespace tp_lab
