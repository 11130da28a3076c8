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
#include <ctime>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "collective_bench.h"
#include "table.h"
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
  app.add_option("collective", collective, "all_reduce, broadcast, all_gather, reduce_scatter, all_to_all or all_to_allv")
      ->required()->check(cli::parsed_by(find_bench));
  add_sweep_options(app, min_bytes, max_bytes, s);
  app.add_option("-c,--check", check, "check results (1) or not (0)")
      ->capture_default_str()->check(cli::in_range(0, 1));
  app.add_option("-J,--output_file", json, "write the results as nccl-tests' JSON")->check(cli::output_file());
  app.add_option("--algos", algos, "native, baseline and labkit algorithms to run (default: all)");
  add_run_options(app, run_options, RunOptionSet::collective_timing);
  CLI11_PARSE(app, argc, argv);

  try {
    const CollectiveBench& b = find_bench(collective);
    set_sizes(s, min_bytes, max_bytes);
    s.check = check != 0;
    if (run_options.payload_free) {  // sizes without values: every size timed, none checked
      if (app.count("--check") && check) throw Error("--check 1: --payload-free moves no values to check");
      s.data_max_bytes = 0;
    }
    if (run_options.backend == "sim" && !app.count("--rounds")) s.rounds = 1;  // virtual time does not vary
    if (algos.empty()) {
      algos.push_back("native");
      for (const Algorithm& a : all_algorithms())
        if (a.op == b.op) algos.emplace_back(a.name);
      if (run_options.backend == "mpi" && b.op == Collective::all_reduce && s.dtype == DType::f32)
        algos.push_back("baseline");
    }
    for (const std::string& algo : algos) {
      if (algo == "baseline" && (run_options.backend != "mpi" || b.op != Collective::all_reduce || s.dtype != DType::f32))
        throw Error("--algos baseline: the bare MPI ring is an f32 all_reduce under --backend mpi");
      try {
        if (algo != "baseline") check_algorithm(b.op, algo);
      } catch (const std::invalid_argument& e) {
        throw Error(fmt::format("--algos: {}", e.what()));
      }
    }
    refuse_one_simulated_rank(run_options);
    run_options.check_arguments = false;  // time the collective alone
    if (run_options.backend == "nccl") s.where = DeviceKind::cuda;
    std::vector<Row> rows;
    int ranks = 0;
    const std::string start_time = now_string();
    run(run_options, [&](Comm& comm) {
      ranks = comm.size();
      comm.set_algorithm(Collective::barrier, nullptr);
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
      const std::vector<std::size_t> counts = counts_of(s, comm.size());
      const Timings timings = sweep(comm, b, algos, counts, s, [&](int pass, std::size_t count) {
        progress_line(fmt::format("# measured {} of {}, pass {} of {}", format_bytes(count * size_of(s.dtype)),
                                  format_bytes(s.max_bytes), pass + 1, s.rounds));
      });
      if (comm.rank() != 0) return;
      progress_line("");
      rows = rows_of(timings, algos, counts, s.dtype);
    });
    const Table table{b, s.dtype, bus_bandwidth_factor(b.op, ranks)};
    const std::int64_t total_wrong = print_table(table, algos, rows);
    if (!json.empty()) {
      nlohmann::json results = nlohmann::json::array();
      for (const Row& r : rows) results.push_back(json_row(table, r, s.iters));
      std::ofstream file = create_file(json);
      file << nlohmann::json{{"version", 1},
                             {"start_time", start_time},
                             {"args", std::vector<std::string>(argv, argv + argc)},
                             {"config",
                              {{"collective", collective},
                               {"backend", run_options.backend},
                               {"ranks", ranks},
                               {"datatype", name_of(s.dtype)},
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
      finish_file(file, json);
    }
    return total_wrong ? 1 : 0;
  } catch (const std::exception& e) {
    std::fflush(stdout);  // the table so far, then the error after it
    fmt::print(stderr, "error: {}\n", e.what());
    return 1;
  }
}
