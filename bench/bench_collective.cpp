// The collective benchmark, in nccl-tests' form: sweep message sizes, time each
// collective as the backend's library runs it (native) and as each labkit
// algorithm runs it over point-to-point, and print nccl-tests' table for each,
// one section per algorithm, so the tools that read nccl-tests output read ours.
// Under mpirun an allreduce sweep also runs a ring written directly against MPI
// (the baseline row), to show what labkit's layers cost.
//
//   ./labkit bench all_reduce --backend mpi -np 4 -b 1M -e 64M
//   mpirun -np 4 build/default/bench/bench_collective all_reduce --backend mpi -b 1M -e 64M
//
// Timing (as nccl-tests): w warm-up calls, a barrier, n timed calls; the time
// per call is the slowest rank's. -R passes over all sizes, and each time is
// its fastest pass's (one pass is nccl-tests' own measure). algbw = bytes /
// time; busbw = algbw x the collective's bus factor (2(P-1)/P for allreduce),
// comparable across P.
#include <algorithm>
#include <cstring>
#include <ctime>
#include <map>

#include <unistd.h>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "collective_bench.h"
#include "labkit/algorithms.h"
#include "labkit/cli.h"
#include "labkit/cost_model.h"
#include "labkit/error.h"
#include "labkit/output.h"
#include "labkit/run.h"
#include "labkit/units.h"

using namespace labkit;
using namespace labkit::bench;

namespace {
struct Row {
  std::string algo;
  std::size_t count;  // float elements
  Timing timing;

  std::size_t bytes() const { return count * sizeof(float); }
  double algbw() const { return bytes() / timing.seconds / 1e9; }  // GB/s
  // On one rank nothing crosses a bus (factor 0): 0, even where the simulator's time is 0.
  double busbw(double bus_factor) const { return bus_factor > 0 ? algbw() * bus_factor : 0; }
};

void print_header(const std::string& algo, const std::string& what) {
  fmt::print("#\n# algo: {}{}\n", algo, what);
  fmt::print("# {:>10}  {:>12}  {:>8}  {:>6}  {:>6}{:^33}{:^33}\n", "", "", "", "", "", "out-of-place", "in-place");
  fmt::print("# {:>10}  {:>12}  {:>8}  {:>6}  {:>6}  {:>7}  {:>6}  {:>6}  {:>6}  {:>7}  {:>6}  {:>6}  {:>6}\n", "size",
             "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw", "#wrong");
  fmt::print("# {:>10}  {:>12}  {:>8}  {:>6}  {:>6}  {:>7}  {:>6}  {:>6}  {:>6}  {:>7}  {:>6}  {:>6}  {:>6}\n", "(B)",
             "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "");
}

// One row, in the columns of the mode the call runs in; the other mode's stay
// blank (nccl-tests leaves them blank too when it does not run one).
void print_row(const Row& row, const CollectiveBench& b, double bus_factor) {
  const Timing& t = row.timing;
  const std::string body = fmt::format("  {:>7.2f}  {:>6.2f}  {:>6.2f}  {:>6}", t.seconds * 1e6, row.algbw(),
                                       row.busbw(bus_factor), t.wrong < 0 ? "N/A" : std::to_string(t.wrong));
  const std::string blank(body.size(), ' ');
  fmt::print("  {:>10}  {:>12}  {:>8}  {:>6}  {:>6}{}{}\n", row.bytes(), row.count, "float",
             has_reduce_op(b.op) ? "sum" : "none", has_root(b.op) ? "0" : "-1", b.in_place ? blank : body,
             b.in_place ? body : blank);
}

nlohmann::json json_row(const Row& row, const CollectiveBench& b, double bus_factor, int iters) {
  const nlohmann::json body = {{"time", row.timing.seconds * 1e6},
                               {"alg_bw", row.algbw()},
                               {"bus_bw", row.busbw(bus_factor)},
                               {"nwrong", row.timing.wrong < 0 ? nlohmann::json() : nlohmann::json(row.timing.wrong)}};
  return {{"size", row.bytes()},
          {"count", row.count},
          {"type", "float"},
          {"redop", has_reduce_op(b.op) ? "sum" : "none"},
          {"root", has_root(b.op) ? 0 : -1},
          {"out_of_place", b.in_place ? nlohmann::json() : body},
          {"in_place", b.in_place ? body : nlohmann::json()},
          {"actual_iterations", iters},
          {"experiment_name", row.algo}};
}

// A progress line on standard error when it is a terminal, rewritten in place; "" clears it.
void progress(const std::string& what) {
  if (!isatty(STDERR_FILENO)) return;
  fmt::print(stderr, "\r\033[K{}", what.empty() ? "" : "# measured " + what);
  std::fflush(stderr);
}

// One ratio column; on one rank nothing crosses a bus (busbw 0), so no ratio.
std::string ratio(double busbw, double to) {
  return to > 0 ? fmt::format("  {:>13.2f}x", busbw / to) : fmt::format("  {:>14}", "n/a");
}

std::string now_string() {
  const std::time_t t = std::time(nullptr);
  char buf[64];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S", std::localtime(&t));
  return buf;
}
}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Sweep one collective's sizes, native and every labkit algorithm side by side (nccl-tests' table)"};
  cli::one_line_errors(app);
  std::string collective, min_bytes = "8", max_bytes = "32M", json;
  Settings s;
  s.rounds = 3;
  int check = 1;
  std::vector<std::string> algos;
  RunOptions run_options;
  app.add_option("collective", collective, "all_reduce, broadcast, all_gather, reduce_scatter or all_to_all")
      ->required()->check(cli::parsed_by(find_bench));
  add_sweep_options(app, min_bytes, max_bytes, s);
  app.add_option("-c,--check", check, "check results (1) or not (0)")
      ->capture_default_str()->check(cli::in_range(0, 1));
  app.add_option("-J,--output_file", json, "write the results as nccl-tests' JSON");
  app.add_option("--algos", algos, "native, baseline and labkit algorithms to run (default: all)");
  add_run_options(app, run_options);
  CLI11_PARSE(app, argc, argv);

  try {
    const CollectiveBench& b = find_bench(collective);
    set_sizes(s, min_bytes, max_bytes);
    s.check = check != 0;
    if (run_options.backend == "sim" && !app.count("--rounds")) s.rounds = 1;  // virtual time does not vary
    if (algos.empty()) {
      algos.push_back("native");
      for (const Algorithm& a : all_algorithms())
        if (a.op == b.op) algos.emplace_back(a.name);
      if (run_options.backend == "mpi" && b.op == Collective::all_reduce) algos.push_back("baseline");
    }
    for (const std::string& algo : algos) {
      if (algo == "baseline" && (run_options.backend != "mpi" || b.op != Collective::all_reduce))
        throw Error("--algos baseline: the bare MPI ring is an all_reduce under --backend mpi");
      try {
        if (algo != "baseline") check_algorithm(b.op, algo);
      } catch (const std::invalid_argument& e) {
        throw Error(fmt::format("--algos: {}", e.what()));
      }
    }
    run_options.check_arguments = false;  // time the collective alone
    if (run_options.backend == "nccl") s.where = DeviceKind::cuda;
    std::vector<Row> rows;
    int ranks = 0;
    const std::string start_time = now_string();
    run(run_options, [&](Comm& comm) {
      ranks = comm.size();
      comm.set_algorithm(Collective::barrier, "native");
      if (comm.rank() == 0) {
        fmt::print("# labkit collective benchmark: {} on {} ranks, backend {}\n", collective, comm.size(),
                   run_options.backend);
        fmt::print("# minBytes {} maxBytes {} step: {}(factor) warmup iters: {} iters: {} validation: {}\n",
                   s.min_bytes, s.max_bytes, s.factor, s.warmup, s.iters, int(s.check));
        fmt::print("# rounds: {} (passes over every size, the algorithms in turn; each time is its fastest pass's)\n",
                   s.rounds);
        if (run_options.backend == "mpi")
          fmt::print("# memcpy bandwidth of this host, one core: {:.1f} GB/s (the ceiling of a shared-memory "
                     "transport)\n",
                     memcpy_bandwidth() / 1e9);
      }
      std::vector<std::size_t> counts;
      for (std::size_t bytes = s.min_bytes; bytes <= s.max_bytes; bytes *= s.factor) {
        std::size_t count = bytes / sizeof(float);
        count -= count % comm.size();  // whole blocks per rank, as nccl-tests aligns
        if (count > 0) counts.push_back(count);
      }
      const Timings timings = sweep(comm, b, algos, counts, s, [&](int pass, std::size_t count) {
        progress(fmt::format("{} of {}, pass {} of {}", format_bytes(count * sizeof(float)), format_bytes(s.max_bytes),
                             pass + 1, s.rounds));
      });
      if (comm.rank() != 0) return;
      progress("");
      for (std::size_t count : counts)
        for (const std::string& algo : algos) rows.push_back({algo, count, timings.at({algo, count})});
    });
    // nccl-tests' table, one section per algorithm.
    const double bus_factor = bus_bandwidth_factor(b.op, ranks);
    std::int64_t total_wrong = 0;
    for (const std::string& algo : algos) {
      print_header(algo, algo == "baseline" ? " (a ring written directly against MPI_Sendrecv: no labkit layers)"
                         : algo == "native" ? " (the backend's own collective)"
                                            : " (labkit, over the backend's point-to-point)");
      double busbw_sum = 0;
      int sizes = 0;
      std::int64_t wrong = 0;
      for (const Row& row : rows) {
        if (row.algo != algo) continue;
        print_row(row, b, bus_factor);
        busbw_sum += row.busbw(bus_factor);
        ++sizes;
        wrong += std::max<std::int64_t>(row.timing.wrong, 0);
      }
      fmt::print("# Out of bounds values : {} {}\n", wrong, wrong ? "FAILED" : "OK");
      fmt::print("# Avg bus bandwidth    : {:.4f} \n", sizes ? busbw_sum / sizes : 0.0);
      total_wrong += wrong;
    }
    // Side by side: each algorithm's busbw over the native collective's, and over the baseline's.
    std::map<std::pair<std::string, std::size_t>, double> busbw;
    for (const Row& r : rows) busbw[{r.algo, r.bytes()}] = r.busbw(bus_factor);
    const bool has_baseline = std::find(algos.begin(), algos.end(), "baseline") != algos.end();
    fmt::print("#\n# busbw side by side (GB/s), and each labkit algorithm's ratio to native{}\n",
               has_baseline ? " and to the baseline" : "");
    std::string head = fmt::format("# {:>10}", "size");
    for (const std::string& a : algos) head += fmt::format("  {:>14}", a);
    for (const std::string& a : algos)
      if (a != "native" && a != "baseline") {
        head += fmt::format("  {:>14}", a + "/native");
        if (has_baseline) head += fmt::format("  {:>14}", a + "/base");
      }
    fmt::print("{}\n", head);
    for (const Row& r : rows) {
      if (r.algo != algos.front()) continue;
      std::string line = fmt::format("  {:>10}", r.bytes());
      for (const std::string& a : algos) line += fmt::format("  {:>14.2f}", busbw[{a, r.bytes()}]);
      for (const std::string& a : algos)
        if (a != "native" && a != "baseline") {
          line += ratio(busbw[{a, r.bytes()}], busbw[{"native", r.bytes()}]);
          if (has_baseline) line += ratio(busbw[{a, r.bytes()}], busbw[{"baseline", r.bytes()}]);
        }
      fmt::print("{}\n", line);
    }
    if (!json.empty()) {
      nlohmann::json results = nlohmann::json::array();
      for (const Row& r : rows) results.push_back(json_row(r, b, bus_factor, s.iters));
      create_file(json) << nlohmann::json{{"version", 1},
                                          {"start_time", start_time},
                                          {"args", std::vector<std::string>(argv, argv + argc)},
                                          {"config",
                                           {{"collective", collective},
                                            {"backend", run_options.backend},
                                            {"ranks", ranks},
                                            {"minimum_bytes", s.min_bytes},
                                            {"maximum_bytes", s.max_bytes},
                                            {"step_factor", s.factor},
                                            {"warmup_iters", s.warmup},
                                            {"iterations", s.iters},
                                            {"validation", int(s.check)}}},
                                          {"results", results},
                                          {"end_time", now_string()}}
                                  .dump(2)
                           << '\n';
    }
    return total_wrong ? 1 : 0;
  } catch (const std::exception& e) {
    fmt::print(stderr, "error: {}\n", e.what());
    return 1;
  }
}
