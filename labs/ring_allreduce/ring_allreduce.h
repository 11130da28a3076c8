// Lab 2: ring allreduce and its family. One file per view of it:
//   step.cpp     --step      the ring, step by step, as the Day 64 reading draws it
//   compare.cpp  --compare   every algorithm against the model, in the benchmark's nccl-tests table
//   what_if.cpp  --what-if   data parallelism at 7B, 70B and 1T; crossover sizes
//   nccl_choice.cpp          what NCCL would run at each size, and why (--compare, --what-if)
//   main.cpp     --scale     a payload-free ring over thousands of ranks
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "collective_bench.h"
#include "labkit/nccl_model.h"
#include "labkit/run.h"

namespace ring_lab {

int walk_ring(const labkit::RunOptions& run);

// The benchmark's sweep (bench/collective_bench.h): -b, -e, -f, -n, -w, -d, -R,
// and --check-max as data_max_bytes.
struct CompareOptions {
  labkit::bench::Settings sweep;
  std::string json;  // -J, nccl-tests' rows with the model beside each
  std::string plot;  // SVG of time versus size (gnuplot)
};
int compare(const labkit::RunOptions& run, const CompareOptions& options);

// Prints NCCL's predicted time for every algorithm and protocol at each size, and
// returns the one it would run at each.
std::vector<labkit::NcclEstimate> print_nccl_choices(labkit::Collective op, const std::vector<std::size_t>& sizes,
                                                     int ranks, const labkit::Topology& topology);

struct WhatIfOptions {
  double global_batch_tokens = 4 << 20;  // LLaMA-2's 4M tokens per step
  double mfu = 0.4;                      // achieved fraction of peak FLOP/s
};
int what_if(const WhatIfOptions& options);

}  // namespace ring_lab
