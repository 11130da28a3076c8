// The train lab's pieces: training.cpp trains the tiny GPT on one rank and
// reports its throughput and memory; mfu.cpp its model FLOPs utilization.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "labkit/lab/training_options.h"
#include "labkit/run.h"
#include "labkit/device.h"

namespace train_lab {

namespace lab = labkit::lab;

struct Options : lab::TrainingOptions {
  Options() : TrainingOptions{.steps = 200, .batch = 8, .lr = 3e-3f} {}
  int print_every = 20;               // steps between loss lines
  std::string checkpoint = "train.ckpt";
  int checkpoint_every = 0;           // 0: never saved
  bool resume = false;                // go on from --checkpoint
  bool mfu = false;                   // also measure this device's peak
};

// Trains --model for --steps on one rank (the rank of `run`), printing the loss
// and validation loss every --print-every steps, then the throughput, the
// memory per rank and the MFU; writes them and the loss curve to --json.
int train(const Options& o, const labkit::RunOptions& run);

// MFU = model FLOPs / seconds / peak FLOP/s (Chowdhery et al. 2022, "PaLM",
// appendix B), on the simulated device and, with --mfu, measured on `here`.
// Returns its figures for --json (wall_*: this machine's clock, which differs run to run).
nlohmann::json print_mfu(double model_flops, double wall, double simulated, const labkit::RunOptions& run,
                         const labkit::Device& here, bool measure_here);

}  // namespace train_lab
