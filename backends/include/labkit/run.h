// labkit::run — the launcher: the one piece that knows every backend. A lab
// adds its own options to a CLI11 app, then hands its rank function here.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "labkit/comm.h"

namespace labkit {

struct RunOptions {
  std::string backend = "sim";
  int ranks = 4;
  std::string topology = "dgx-h100";
  std::string trace;                // Chrome trace path; empty: no trace
  std::vector<std::string> algos;   // "ring" (every collective that has one) or "all_reduce=ring"
  bool payload_free = false;
  double efficiency = 0.5;
  std::vector<std::string> stragglers;  // "RANK:SPEED", e.g. "2:0.5"

  // Set by labs, not on the command line:
  bool keep_trace = false;  // return the trace in RunResult (as well as writing --trace)
  // sim only: stop once virtual time passes this, to see every buffer at that instant.
  double stop_at = std::numeric_limits<double>::infinity();
  // Called now and then with the number of messages delivered so far (progress lines).
  std::function<void(std::uint64_t messages)> progress;
};

struct RunResult {
  double elapsed = 0;          // seconds: virtual on sim
  std::uint64_t messages = 0;  // point-to-point messages delivered
  std::shared_ptr<const Trace> trace;  // with keep_trace or --trace
};

using RankFn = std::function<void(Comm&)>;

// Adds --backend, --ranks, --topology, --trace, --algo, --payload-free,
// --efficiency and --straggler to a lab's command line.
void add_run_options(CLI::App& app, RunOptions& options);

// Runs rank_fn once on every rank. Throws labkit::Error on misuse or deadlock.
RunResult run(const RunOptions& options, const RankFn& rank_fn);

}  // namespace labkit
