// Lab 2: ring allreduce — why ring wins for large messages, tree and recursive
// halving-doubling for small ones, and hierarchical across nodes.
//
//   ./labkit lab ring_allreduce --step --ranks 4     the ring, step by step
//   ./labkit lab ring_allreduce --compare            every algorithm vs the model, 1 KiB..1 GiB
//   ./labkit lab ring_allreduce --what-if            data parallelism at 7B, 70B, 1T; crossovers
//   ./labkit lab ring_allreduce --scale              a payload-free ring over 4096 ranks
#include <chrono>
#include <cstdio>

#include <unistd.h>

#include <fmt/format.h>

#include "labkit/algorithms.h"
#include "labkit/cli.h"
#include "labkit/cost_model.h"
#include "labkit/error.h"
#include "labkit/units.h"
#include "ring_allreduce.h"

using namespace labkit;

namespace {
// A ring allreduce moving sizes only, over as many ranks as asked; wall time is
// the simulator's own speed, virtual time what the cluster would take.
int scale(const RunOptions& base, std::uint64_t bytes) {
  RunOptions o = base;
  o.payload_free = true;
  const std::uint64_t expected = 2ull * (o.ranks - 1) * o.ranks;
  if (isatty(STDERR_FILENO))
    o.progress = [&](std::uint64_t done) {
      std::fprintf(stderr, "\r  %3.0f%% of %llu messages", 100.0 * done / expected, (unsigned long long)expected);
    };
  const auto start = std::chrono::steady_clock::now();
  const RunResult r = run(o, [&](Comm& comm) { ring_all_reduce(comm, sizes_only(bytes / 4, DType::f32), ReduceOp::sum); });
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (isatty(STDERR_FILENO)) std::fprintf(stderr, "\r%40s\r", "");
  const double model = predict(Collective::all_reduce, "ring", bytes, o.ranks, find_topology(o.topology));
  fmt::print("ring allreduce of {} on {} ranks ({}), payload-free\n", format_bytes(bytes), o.ranks, o.topology);
  fmt::print("  simulated time  {} (model {})\n", format_seconds(r.elapsed), format_seconds(model));
  fmt::print("  messages        {}\n", r.messages);
  fmt::print("  wall time       {:.2f} s ({:.2f} M messages/s)\n", wall, r.messages / wall / 1e6);
  return 0;
}
}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Lab 2: ring allreduce and its family"};
  cli::one_line_errors(app);
  RunOptions run_options;
  ring_lab::CompareOptions compare;
  ring_lab::WhatIfOptions what_if;
  std::string bytes = "1G", min_bytes = "1K", max_bytes = "1G", check_max = "16M";
  compare.sweep.factor = 4;
  bool step = false, cmp = false, whatif = false, scaled = false;
  auto* step_flag = app.add_flag("--step", step, "walk the ring step by step (default)");
  auto* cmp_flag = app.add_flag("--compare", cmp, "every algorithm at every size, simulated vs the model");
  auto* whatif_flag = app.add_flag("--what-if", whatif, "data parallelism at 7B, 70B and 1T; crossover sizes");
  auto* scale_flag = app.add_flag("--scale", scaled, "a payload-free ring allreduce over many ranks (default 4096)");
  step_flag->excludes(cmp_flag)->excludes(whatif_flag)->excludes(scale_flag);
  cmp_flag->excludes(whatif_flag)->excludes(scale_flag);
  whatif_flag->excludes(scale_flag);
  labkit::bench::add_sweep_options(app, min_bytes, max_bytes, compare.sweep);
  app.add_option("--check-max", check_max, "--compare: move data and check results up to this size (sizes only above)")
      ->capture_default_str()->check(cli::byte_size());
  app.add_option("-J,--json", compare.json, "--compare: also write the results as JSON")->check(cli::output_file());
  app.add_option("--plot", compare.plot, "--compare: draw time versus size to this SVG or PNG (gnuplot)")
      ->check(cli::figure_file());
  app.add_option("--global-batch", what_if.global_batch_tokens, "--what-if: tokens per step")
      ->capture_default_str()->check(cli::above(0.0));
  app.add_option("--mfu", what_if.mfu, "--what-if: achieved fraction of peak FLOP/s")
      ->capture_default_str()->check(cli::above(0.0, 1.0));
  app.add_option("--bytes", bytes, "--scale: allreduce size")->capture_default_str()->check(cli::byte_size());
  labkit::add_run_options(app, run_options);
  CLI11_PARSE(app, argc, argv);
  try {
    if (whatif) return ring_lab::what_if(what_if);
    if (run_options.backend != "sim" && !cmp)
      throw labkit::Error(fmt::format("--backend {}: --step and --scale replay or size the simulator; real backends "
                                      "run --compare (and --trace)", run_options.backend));
    if (!app.count("--ranks")) run_options.ranks = cmp ? 16 : scaled ? 4096 : 4;
    if (scaled) return scale(run_options, parse_bytes(bytes));
    if (cmp) {
      labkit::bench::set_sizes(compare.sweep, min_bytes, max_bytes);
      compare.sweep.data_max_bytes = parse_bytes(check_max);
      if (run_options.backend == "sim") {  // virtual time does not vary: one call per size, one pass
        if (!app.count("--iters")) compare.sweep.iters = 1;
        if (!app.count("--warmup_iters")) compare.sweep.warmup = 0;
        if (!app.count("--rounds")) compare.sweep.rounds = 1;
      }
      if (run_options.backend == "nccl") compare.sweep.where = DeviceKind::cuda;
      return ring_lab::compare(run_options, compare);
    }
    return ring_lab::walk_ring(run_options);
  } catch (const std::exception& e) {
    fmt::print(stderr, "error: {}\n", e.what());
    return 1;
  }
}
