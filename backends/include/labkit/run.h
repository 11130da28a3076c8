// labkit::run — the launcher: the one piece that knows every backend. A lab
// adds its own options to a CLI11 app, then hands its rank function here.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "labkit/comm.h"

namespace CLI {
class App;  // CLI11's, from <CLI/CLI.hpp> where options are added
}

namespace labkit {

struct RunOptions {
  std::string backend = "sim";
  int ranks = 4;  // with --backend mpi or nccl, mpirun's -np (unless --ranks is given)
  std::string topology = "dgx-h100";
  std::string network = "fair";     // sim: how messages that meet on a port share it ("fair", "serial")
  std::string trace;                // Chrome trace path; empty: no trace
  std::vector<std::string> algos;   // "ring" (every collective that has one) or "all_reduce=ring"
  bool payload_free = false;
  double efficiency = 0.5;
  std::vector<std::string> stragglers;  // "RANK:SPEED", e.g. "2:0.5"
  bool ranks_given = false;  // --ranks was on the command line (under mpirun, -np decides otherwise)
  std::set<std::string> given;  // the options of one kind of backend that were on the command line
  double deadlock_timeout = 60;  // real backends: seconds a wait may make no progress before the run stops
  // --fail-rank R --at T: rank R stops at time T (virtual on sim; under mpirun its
  // process kills itself), and the ranks that wait on it get a RankFailedError.
  int fail_rank = -1;  // -1: none
  double fail_at = 0;  // seconds

  // Set by labs, not on the command line:
  bool keep_trace = false;  // return the trace in RunResult (as well as writing --trace)
  // The lab reads --topology itself (a model's column, ranks grouped into its
  // nodes), so on a real backend it is not refused as the simulator's alone.
  bool lab_reads_topology = false;
  // sim only: stop once virtual time passes this, to see every buffer at that instant.
  double stop_at = std::numeric_limits<double>::infinity();
  // Called now and then with the number of messages delivered so far (progress lines).
  std::function<void(std::uint64_t messages)> progress;
  // Real backends: check every collective's arguments across ranks first (one
  // small allgather per call). Benchmarks turn it off to time the collective alone.
  bool check_arguments = true;
};

struct RunResult {
  double elapsed = 0;          // seconds: virtual on sim
  std::uint64_t messages = 0;  // point-to-point messages delivered
  std::shared_ptr<const Trace> trace;  // with keep_trace or --trace
  // --fail-rank's rank, when it finished before --at and so never failed: its
  // clock then (run() refuses such a run; -1 otherwise).
  double fail_rank_finished = -1;
};

using RankFn = std::function<void(Comm&)>;

// Which of the run options a program takes: all of them, or, where a program
// times collectives and picks their algorithms itself (ring_allreduce, the
// collective benchmark, calibrate), all but --algo, --efficiency and
// --straggler (nothing there computes).
enum class RunOptionSet { all, collective_timing };

// Adds --backend, --ranks, --topology, --network, --trace, --algo, --payload-free,
// --efficiency, --straggler, --deadlock-timeout, --fail-rank and --at to a lab's
// command line.
// Under mpirun, it also quiets standard output on every process but rank 0's, so
// a lab prints once, as it does on the simulator.
void add_run_options(CLI::App& app, RunOptions& options, RunOptionSet set = RunOptionSet::all);

// What set `o.ranks`, for a message that names it: "--ranks", or under mpirun "-np".
std::string_view ranks_flag(const RunOptions& o);

// Runs rank_fn once on every rank. Throws labkit::Error on misuse or deadlock,
// and RankFailedError after --fail-rank (labkit::Error where its rank finished
// before --at: the option changed nothing).
// Under --backend mpi every process of mpirun calls it, and each runs its own rank.
RunResult run(const RunOptions& options, const RankFn& rank_fn);

// After a lab's runs, the run options that changed nothing are errors that say
// why: an --algo choice that no collective ran with (ddp --algo
// all_to_all=pairwise: DDP calls no all_to_all; "native", the default, is
// always met), --efficiency where no simulated rank computed, a --straggler
// whose rank computed nothing, --network where no message was sent.
void check_run_options_took_effect(const CLI::App& app);

// When set, run() calls it on the simulator once the options are checked, before
// any rank starts, and it may throw to stop there: the option fuzzers (fuzz/)
// parse a lab's whole command line this way without running the lab.
extern void (*before_ranks_start)(const RunOptions& options);

}  // namespace labkit
