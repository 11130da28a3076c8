// Lab 2: ring allreduce and its family. One file per view of it:
//   step.cpp     --step      the ring, step by step, every rank's chunks after each
//   compare.cpp  --compare   every algorithm against the model, in the benchmark's nccl-tests table
//   what_if.cpp  --what-if   data parallelism at 7B, 70B and 1T; crossover sizes
//   nccl_choice.cpp          what NCCL would run at each size, and why (--compare, --what-if)
//   scale.cpp    --scale     a payload-free ring over thousands of ranks
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "collective_bench.h"
#include "labkit/nccl_model.h"
#include "labkit/run.h"

namespace CLI {
class App;  // CLI11's, from <CLI/CLI.hpp> where options are added
}

namespace ring_lab {

int walk_ring(const labkit::RunOptions& run);

// The benchmark's sweep (bench/collective_bench.h): -b, -e, -f, -n, -w, -d, -R,
// and --check-max as data_max_bytes.
struct CompareOptions {
  CompareOptions() { sweep.factor = 4; }
  labkit::bench::Settings sweep;
  std::string min_bytes = "1K", max_bytes = "1G", check_max = "16M";  // as given, parsed into `sweep`
  std::string json;  // -J (main.cpp: every view's), nccl-tests' rows with the model beside each
  std::string plot;  // SVG of time versus size (gnuplot)
};
// The sweep's options, --check-max and --plot.
void add_compare_options(CLI::App& app, CompareOptions& o);
// The sizes into the sweep; on the simulator, whose virtual time does not vary,
// one call per size and one pass unless -n, -w or -R say otherwise; on NCCL, the buffers on the GPU.
void settle_sweep(const CLI::App& app, const labkit::RunOptions& run, CompareOptions& o);
int compare(const labkit::RunOptions& run, const CompareOptions& options);

// Prints NCCL's predicted time for every algorithm and protocol at each size,
// and the one it would run; returns the rows as JSON, by size.
nlohmann::json print_nccl_choices(labkit::Collective op, const std::vector<std::size_t>& sizes, int ranks,
                                  const labkit::Topology& topology);

struct WhatIfOptions {
  double global_batch_tokens = 4 << 20;  // LLaMA-2's 4M tokens per step
  double mfu = 0.4;                      // achieved fraction of peak FLOP/s
  std::string json;                      // -J: both tables' rows
};
// --global-batch and --mfu.
void add_what_if_options(CLI::App& app, WhatIfOptions& o);
int what_if(const WhatIfOptions& options);

// A payload-free ring allreduce of `bytes` over `run.ranks` ranks; its figures to `json` (-J) too.
int scale(const labkit::RunOptions& run, std::uint64_t bytes, const std::string& json);

}  // namespace ring_lab
