// Lab 5: data parallelism (DDP). One file per view of it:
//   main.cpp     the options, and which view runs
//   modes.cpp    the tiny GPT trained data-parallel in each mode, times per step, equal to one rank
//   train.cpp    the training loop: the corpus, each rank's shard, the optimizer
//   what_if.cpp  --what-if, --sweep, --volume: payload-free steps of real models' shapes
//   bench.cpp    --bench: what the simulation costs in wall time
//   compression.cpp  --compress: bf16, PowerSGD or top-k averaging beside the uncompressed one
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "labkit/gpt.h"
#include "labkit/lab/sweep.h"
#include "labkit/lab/training_options.h"
#include "labkit/parallel/data_parallel.h"
#include "labkit/parallel/equivalence.h"
#include "labkit/parallel/gradient_compression.h"
#include "labkit/parallel/sequences.h"
#include "labkit/run.h"

namespace ddp_lab {

using namespace labkit;

// --sweep: the rank counts A, 2A, 4A, ... up to B ("ranks"), or the bucket caps
// A, 2A, ... MiB up to B ("bucket-mb"); `over` empty: no sweep.
using SweepRange = cli::Sweep;

struct Options : lab::TrainingOptions {
  Options() : TrainingOptions{.steps = 20, .batch = 16, .lr = 3e-3f} {}
  std::vector<std::string> modes = {"naive", "bucketed", "overlap"};
  int accum = 1;
  double bucket_mb = 25, first_bucket_mb = 1;
  std::string optimizer = "adamw";
  int warmup = 0;   // steps of linear learning-rate warmup
  double clip = 0;  // clip the gradients' global norm to this (0: never)
  std::string what_if;       // a model preset: its payload-free step instead of the tiny GPT
  double step_seconds = 2;   // --what-if: compute per step
  bool volume = false;
  SweepRange sweep;
  std::string plot;
  CompressionSpec compress;  // --compress: none trains the --mode runs instead
};

BucketCaps caps_of(const Options& o);
// The runs' header words for their shape: "8 ranks, global batch 16 x 2 micro-steps, 20 steps".
std::string run_shape(const Options& o, int ranks);

struct ModeRun {
  DdpMode mode = DdpMode::naive;
  int ranks = 0, buckets = 0;
  StepTimes per_step;
  std::vector<float> losses;       // the global batch's mean loss, per step
  std::vector<float> first_grads;  // rank 0's averaged gradients of the first step
  std::vector<float> weights;      // rank 0's, at the end (on the process that ran rank 0)
  bool ranks_agree = false;        // every rank's weights bit for bit rank 0's
  std::uint64_t fingerprint = 0;   // of rank 0's weights: a repeated run must give the same
  // A run through a GradientCompressor: rank 0's bytes per step, counted by the
  // compressor, from its formula, and read off rank 0's trace.
  std::uint64_t bytes_sent = 0, bytes_formula = 0, bytes_traced = 0;
};

// Trains `o.steps` steps data-parallel in `mode` and measures them; given a
// `compression`, each step ends in that compressed average instead.
ModeRun train(const Options& o, RunOptions run_options, DdpMode mode, const Sequences& corpus, const GptConfig& config,
              std::optional<CompressionSpec> compression = {});

// One rank, no communication, on the whole global batch of every step: what
// every data-parallel run must equal. Its first step's gradients and its last weights.
// `reversed`: each batch's sequences in reverse order, to measure what rounding
// alone does over the run (labkit::rounding_limit). `micro_steps`: each global
// batch in that many forwards and backwards, gradients accumulated.
OneRankRun train_one_rank(const Options& o, const Sequences& corpus, const GptConfig& config, bool reversed = false,
                          int micro_steps = 1);

// The studies' options (--what-if, --step-seconds, --volume, --sweep), and --compress's.
void add_what_if_options(CLI::App& app, Options& o);
void add_compress_option(CLI::App& app, Options& o);

// The tiny GPT trained in each mode, its table, and the verdict against one rank; the exit status.
int train_modes(const Options& o, const RunOptions& run_options, const std::vector<DdpMode>& modes,
                const Sequences& corpus, const GptConfig& config);
int what_if(const Options& o, const RunOptions& run_options, const std::vector<DdpMode>& modes);
// Each mode's step as a stacked bar (forward, backward, optimizer, exposed
// communication), to an SVG or PNG through gnuplot.
void plot_step_bars(const std::string& path, const std::string& title,
                    const std::vector<std::pair<DdpMode, StepTimes>>& steps);
int sweep(const Options& o, RunOptions run_options);
int bucket_sweep(const Options& o, RunOptions run_options);
int volume(const Options& o, int ranks);
int bench(const Options& o, const RunOptions& run_options, const Sequences& corpus, const GptConfig& config);
// --compress replaces the averaging, so it takes no --mode or bucket caps, and trains the
// tiny GPT, so no payload-free study. Throws naming what it is refused beside.
// (Its arithmetic works in host memory, copied there and back explicitly; the
// NCCL backend stages host buffers through the GPU.)
void check_compress_alone(const CLI::App& app, const Options& o);
// The tiny GPT averaged plainly and with --compress on the same batches, side by side.
int compare_compression(const Options& o, const RunOptions& run_options, const Sequences& corpus,
                        const GptConfig& config);

}  // namespace ddp_lab
