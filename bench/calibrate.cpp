// Calibrate the simulator to a real machine: measure labkit's allreduce
// algorithms over a size sweep on a real backend, fit the alpha-beta link that
// explains them best (calibration.h), and write it as a topology JSON that
// `--backend sim --topology FILE` reads, so the simulator predicts this machine.
//
//   ./labkit calibrate -np 2        (mpirun -np 2 build/default/bench/calibrate)
//
// Between the fit's two regimes lie a transport's protocol switch (eager to
// rendezvous) and the caches' edge, which no single line follows; the table
// shows it. Each algorithm gets its own fit: the model leaves out the
// reduction's compute and the memory traffic around it, which each algorithm
// pays differently, and a fitted beta absorbs them. The topology takes the fit
// of --use (the ring, the algorithm of large messages).
//
// It ends as a benchmark does, with the calibrated simulator against a size the
// fit never saw (--check), measured: how well this machine was predicted, on
// this run. A busy machine measures slower than the fit, so that line informs
// and the exit status does not depend on it; the fit's mechanics are
// tests/calibration_test.cpp's.
#include <algorithm>
#include <cmath>
#include <iterator>
#include <map>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "calibration.h"
#include "collective_bench.h"
#include "labkit/algorithms.h"
#include "labkit/cli.h"
#include "labkit/error.h"
#include "labkit/output.h"
#include "labkit/run.h"
#include "labkit/units.h"

using namespace labkit;
using namespace labkit::bench;

int main(int argc, char** argv) {
  CLI::App app{"Fit the simulator's alpha-beta link to a real backend and write it as a topology JSON"};
  cli::one_line_errors(app);
  std::string min_bytes = "1K", max_bytes = "64M", check_bytes = "128M", out = "out/calibrated.json";
  std::string latency_below = "64K", bandwidth_above = "32M";  // past this machine's 32 MiB L3
  Settings s{.factor = 2, .iters = 5, .warmup = 2, .rounds = 5};
  double tolerance = 0.25;
  std::vector<std::string> algos = {"ring", "recursive_halving_doubling", "binomial_tree"};
  std::string use = "ring";
  RunOptions run_options;
  run_options.backend = "mpi";
  add_sweep_options(app, min_bytes, max_bytes, s);
  const auto all_reduce_algorithm =
      cli::parsed_by([](const std::string& name) { check_algorithm(Collective::all_reduce, name); });
  app.add_option("--algos", algos, "labkit allreduce algorithms to fit")
      ->capture_default_str()->check(all_reduce_algorithm);
  app.add_option("--use", use, "the algorithm whose fit the topology takes")
      ->capture_default_str()->check(all_reduce_algorithm);
  app.add_option("-o,--out", out, "the topology JSON to write")->capture_default_str()->check(cli::output_file());
  app.add_option("--latency-below", latency_below, "alpha is fitted on messages up to this size")
      ->capture_default_str()->check(cli::byte_size(1));
  app.add_option("--bandwidth-above", bandwidth_above, "beta is fitted on messages from this size")
      ->capture_default_str()->check(cli::byte_size(1));
  app.add_option("--check", check_bytes, "a larger size, measured but left out of the fit, that the calibrated "
                 "simulator then predicts")->capture_default_str()->check(cli::byte_size(1));
  app.add_option("--tolerance", tolerance, "--check: the relative error it calls within the fit (it informs: the exit "
                 "status is the calibration's)")
      ->capture_default_str()->check(cli::above(0.0));
  add_run_options(app, run_options, RunOptionSet::collective_timing);
  CLI11_PARSE(app, argc, argv);

  try {
    set_sizes(s, min_bytes, max_bytes);
    const std::size_t check = parse_bytes(check_bytes);
    // Refused now rather than after minutes of measuring.
    if (check <= s.max_bytes) throw Error("--check " + check_bytes + ": must be larger than --maxbytes " + max_bytes);
    if (parse_bytes(latency_below) < s.min_bytes || parse_bytes(bandwidth_above) > s.max_bytes)
      throw Error(fmt::format("--latency-below {} and --bandwidth-above {}: must lie within --minbytes {} to "
                              "--maxbytes {}, or a fit has no messages", latency_below, bandwidth_above, min_bytes,
                              max_bytes));
    const CollectiveBench& b = find_bench("all_reduce");
    run_options.check_arguments = false;
    if (run_options.backend == "nccl") s.where = DeviceKind::cuda;
    if (std::find(algos.begin(), algos.end(), use) == algos.end()) throw Error("--use " + use + ": not among --algos");
    std::vector<Sample> samples;
    int ranks = 0;
    bool speaker = false;  // rank 0 fits and prints
    run(run_options, [&](Comm& comm) {
      ranks = comm.size();
      speaker = speaker || comm.rank() == 0;
      comm.set_algorithm(Collective::barrier, nullptr);
      std::vector<std::size_t> counts;  // of -d's elements
      for (std::size_t bytes = s.min_bytes; bytes <= s.max_bytes; bytes *= s.factor)
        counts.push_back(bytes / size_of(s.dtype));
      counts.push_back(check / size_of(s.dtype));
      // The fastest of --rounds passes over every size.
      const Timings best = sweep(comm, b, algos, counts, s, [&](int pass, std::size_t count) {
        progress_line(fmt::format("# measured {} of {}, pass {} of {}", format_bytes(count * size_of(s.dtype)),
                                  format_bytes(check), pass + 1, s.rounds));
      });
      progress_line("");
      if (comm.rank() != 0) return;
      for (std::size_t count : counts)
        for (const std::string& algo : algos) {
          const std::size_t bytes = count * size_of(s.dtype);
          const Timing& t = best.at({algo, count});
          if (t.wrong > 0) throw Error(fmt::format("calibrate: {} gave {} wrong elements at {}", algo, t.wrong, bytes));
          samples.push_back(sample_of(algo, bytes, ranks, t.seconds));
        }
    });
    if (ranks < 2) throw Error("calibrate: needs at least 2 ranks (mpirun -np 2)");

    if (!speaker) return 0;
    fmt::print("# calibration of {} ranks on backend {}: all_reduce, {} to {}\n", ranks, run_options.backend,
               format_bytes(s.min_bytes), format_bytes(s.max_bytes));
    std::map<std::string, Link> fits;
    nlohmann::json rows = nlohmann::json::array();
    for (const std::string& algo : algos) {
      std::vector<Sample> mine;
      std::copy_if(samples.begin(), samples.end(), std::back_inserter(mine),
                   [&](const Sample& x) { return x.algo == algo && x.bytes <= s.max_bytes; });
      const Link link = fits[algo] = fit(mine, parse_bytes(latency_below), parse_bytes(bandwidth_above));
      fmt::print("#\n# {}: alpha = {:.2f} us, bandwidth = {:.2f} GB/s (beta = {:.4f} ns/B){}\n", algo,
                 link.alpha * 1e6, link.bandwidth / 1e9, 1e9 / link.bandwidth, algo == use ? "  <- the topology's" : "");
      fmt::print("# {:>10}  {:>11} {:>11} {:>8}\n", "size", "measured", "fit", "error");
      fmt::print("# {:>10}  {:>11} {:>11} {:>8}\n", "(B)", "(us)", "(us)", "");
      for (const Sample& x : mine) {
        const double p = predicted(x, link), error = (p - x.seconds) / x.seconds;
        fmt::print("  {:>10}  {:>11.2f} {:>11.2f} {:>7.1f}%\n", x.bytes, x.seconds * 1e6, p * 1e6, error * 100);
        rows.push_back({{"size", x.bytes}, {"algo", x.algo}, {"measured_us", x.seconds * 1e6},
                        {"fit_us", p * 1e6}, {"error", error}});
      }
    }
    const Link link = fits.at(use);
    const std::string name = fmt::format("calibrated ({}, {} ranks)", run_options.backend, ranks);
    nlohmann::json topology = topology_json(name, ranks, link, rows);
    const auto write_topology = [&] {
      std::ofstream file = create_file(out);
      file << topology.dump(2) << '\n';
      finish_file(file, out);
    };
    write_topology();
    fmt::print("# wrote {}: --backend sim --topology {} now predicts this machine\n", out, out);

    // The check, a benchmark's: the simulator, on the topology just written,
    // against the measured time of a size the fit never saw.
    const Sample& held_out = *std::find_if(samples.begin(), samples.end(),
                                           [&](const Sample& x) { return x.algo == use && x.bytes == check; });
    RunOptions sim;
    sim.ranks = ranks;
    sim.topology = out;
    sim.payload_free = true;
    const RunResult simulated = run(sim, [&](Comm& comm) {
      use_algorithm(comm, Collective::all_reduce, use);
      comm.all_reduce(meta_view(check / size_of(s.dtype), s.dtype), ReduceOp::sum);
    });
    const double error = (simulated.elapsed - held_out.seconds) / held_out.seconds;
    const bool within = std::abs(error) <= tolerance;
    fmt::print("# check, {} at {} (left out of the fit): measured {:.2f} us, the calibrated simulator says {:.2f} us: "
               "{:+.1f}% ({}within {:.0f}%{})\n",
               use, format_bytes(check), held_out.seconds * 1e6, simulated.elapsed * 1e6, error * 100,
               within ? "" : "NOT ", tolerance * 100,
               within ? "" : ": other work on this machine slows what it measures; run it again alone, or --check "
                             "past the caches");
    // The file keeps how well it predicted, beside what it was fitted on.
    topology["check"] = {{"algo", use},         {"size", check},        {"measured_us", held_out.seconds * 1e6},
                         {"simulated_us", simulated.elapsed * 1e6}, {"error", error}, {"within", within},
                         {"tolerance", tolerance}};
    write_topology();
  } catch (const std::exception& e) {
    std::fflush(stdout);  // the table so far, then the error after it
    fmt::print(stderr, "error: {}\n", e.what());
    return 1;
  }
  return 0;
}
