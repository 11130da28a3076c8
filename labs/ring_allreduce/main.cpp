// Lab 2: ring allreduce — why ring wins for large messages, tree and recursive
// halving-doubling for small ones, and hierarchical across nodes.
//
//   ./labkit lab ring_allreduce --step --ranks 4     the ring, step by step (step.cpp)
//   ./labkit lab ring_allreduce --compare            every algorithm vs the model, 1 KiB..1 GiB (compare.cpp)
//   ./labkit lab ring_allreduce --what-if            data parallelism at 7B, 70B, 1T; crossovers (what_if.cpp)
//   ./labkit lab ring_allreduce --scale              a payload-free ring over 4096 ranks (scale.cpp)
//
//   ring allreduce on 4 ranks: 4 chunks per buffer; an entry lists whose data the chunk holds (Σ = everyone's)
//             chunk 0  chunk 1  chunk 2  chunk 3
//   start
//     rank 0  0        0        0        0
//   ...
//   reduce-scatter step 1/3 at 1.00 us  (0→1: chunk 0, 1→2: chunk 1, 2→3: chunk 2, 3→0: chunk 3)
//     rank 0  0        0        0        0+3
//   ...
#include <fmt/format.h>

#include "labkit/cli.h"
#include "labkit/error.h"
#include "labkit/lab/main.h"
#include "labkit/lab/option_checks.h"
#include "labkit/units.h"
#include "ring_allreduce.h"

using namespace labkit;

int main(int argc, char** argv) {
  CLI::App app{"Lab 2: ring allreduce and its family"};
  RunOptions run_options;
  ring_lab::CompareOptions compare;
  ring_lab::WhatIfOptions what_if;
  std::string bytes = "1G";
  bool step = false, cmp = false, whatif = false, scaled = false;
  auto* step_flag = app.add_flag("--step", step, "walk the ring step by step (default; 4 ranks by default)");
  auto* cmp_flag = app.add_flag("--compare", cmp, "every algorithm at every size, simulated vs the model (16 ranks by default: two nodes)");
  auto* whatif_flag = app.add_flag("--what-if", whatif, "data parallelism at 7B, 70B and 1T; crossover sizes");
  auto* scale_flag = app.add_flag("--scale", scaled, "a payload-free ring allreduce over many ranks (default 4096)");
  step_flag->excludes(cmp_flag)->excludes(whatif_flag)->excludes(scale_flag);
  cmp_flag->excludes(whatif_flag)->excludes(scale_flag);
  whatif_flag->excludes(scale_flag);
  // Each run's own options need it; --what-if's closed forms read none of the cluster's.
  for (CLI::Option* option : cli::added_by(app, [&] { ring_lab::add_compare_options(app, compare); }))
    option->needs(cmp_flag);
  for (CLI::Option* option : cli::added_by(app, [&] { ring_lab::add_what_if_options(app, what_if); }))
    option->needs(whatif_flag);
  std::string json;
  app.add_option("-J,--json", json, "also write the results as JSON (--compare, --what-if, --scale)")
      ->check(cli::output_file());
  app.add_option("--bytes", bytes, "--scale: allreduce size")
      ->capture_default_str()->check(cli::byte_size())->needs(scale_flag);
  const auto add_ours = [&] { add_run_options(app, run_options, RunOptionSet::collective_timing); };
  for (CLI::Option* option : cli::added_by(app, add_ours))
    whatif_flag->excludes(option);
  return lab::run_main(app, argc, argv, [&] {
    compare.json = what_if.json = json;
    if (!json.empty() && !cmp && !whatif && !scaled)
      throw Error(fmt::format("--json {}: --step walks the ring on screen; --compare, --what-if and --scale write JSON",
                              json));
    if (whatif) return ring_lab::what_if(what_if);
    if (run_options.backend != "sim" && !cmp)
      throw Error(fmt::format("--backend {}: --step and --scale replay or size the simulator; real backends "
                              "run --compare (and --trace)", run_options.backend));
    if (!app.count("--ranks")) run_options.ranks = cmp ? 16 : scaled ? 4096 : 4;
    if (scaled) return ring_lab::scale(run_options, parse_bytes(bytes), json);
    if (!cmp) {
      if (run_options.payload_free)
        throw Error("--payload-free: --step shows what each chunk holds, and a payload-free run moves none (--compare "
                    "and --scale time sizes alone)");
      return ring_lab::walk_ring(run_options);
    }
    ring_lab::settle_sweep(app, run_options, compare);
    return ring_lab::compare(run_options, compare);
  });
}
