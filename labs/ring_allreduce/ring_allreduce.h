// Lab 2: ring allreduce and its family. One file per view of it:
//   step.cpp     --step      the ring, step by step, as the reading draws it
//   compare.cpp  --compare   every algorithm against the model, nccl-tests columns
//   what_if.cpp  --what-if   data parallelism at 7B, 70B and 1T; crossover sizes
//   main.cpp     --scale     a payload-free ring over thousands of ranks
#pragma once

#include <cstdint>
#include <string>

#include "labkit/run.h"

namespace ring_lab {

int walk_ring(const labkit::RunOptions& run);

struct CompareOptions {
  std::uint64_t min_bytes = 1 << 10, max_bytes = std::uint64_t(1) << 30;
  int factor = 4;
  std::uint64_t check_max = 16 << 20;  // above this, payload-free: no #wrong check
  std::string json;                    // -J, as nccl-tests
  std::string plot;                    // SVG of time versus size (gnuplot)
};
int compare(const labkit::RunOptions& run, const CompareOptions& options);

struct WhatIfOptions {
  double global_batch_tokens = 4 << 20;  // LLaMA-2's 4M tokens per step
  double mfu = 0.4;                      // achieved fraction of peak FLOP/s
};
int what_if(const WhatIfOptions& options);

}  // namespace ring_lab
