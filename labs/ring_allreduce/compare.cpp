// --compare: every allreduce algorithm at every size, swept and printed by the
// collective benchmark (bench/: nccl-tests' table, one section per algorithm,
// then busbw side by side), and beside it what this lab adds: the alpha-beta
// model's error against the simulator, and the fastest labkit algorithm per size,
// as NCCL's tuner would pick it (native is NCCL's own choice); then NCCL's
// tuning model at each size, which algorithm and protocol it runs and why.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "labkit/cli.h"
#include "labkit/cost_model.h"
#include "labkit/error.h"
#include "labkit/lab/option_checks.h"
#include "labkit/lab/output.h"
#include "labkit/lab/plot.h"
#include "labkit/output.h"
#include "labkit/units.h"
#include "ring_allreduce.h"
#include "table.h"

using namespace labkit;
using namespace labkit::bench;

namespace ring_lab {

namespace {
const std::vector<std::string> kAlgorithms = {"naive", "binomial_tree", "ring", "recursive_halving_doubling",
                                              "hierarchical", "native"};

// What the model predicts for each row, and where it stands against the simulator.
struct Modeled {
  double seconds;
  double error;  // (measured - model) / model
};

std::vector<Modeled> model_rows(const std::vector<Row>& rows, const RunOptions& run) {
  const Topology topology = find_topology(run.topology);
  std::vector<Modeled> modeled;
  for (const Row& r : rows) {
    const double model = predict(Collective::all_reduce, r.algo, r.bytes, run.ranks, topology);
    modeled.push_back({model, (r.timing.seconds - model) / model});
  }
  return modeled;
}

// Per size, the labkit algorithm (not native) that took least time.
std::map<std::size_t, std::string> fastest_per_size(const std::vector<Row>& rows) {
  std::map<std::size_t, const Row*> best;
  for (const Row& r : rows)
    if (r.algo != "native" && (!best.count(r.bytes) || r.timing.seconds < best[r.bytes]->timing.seconds))
      best[r.bytes] = &r;
  std::map<std::size_t, std::string> names;
  for (const auto& [bytes, row] : best) names[bytes] = row->algo;
  return names;
}

// What the rows' times are: the simulator's, or the wall clock's under mpirun.
std::string_view times_of(const RunOptions& run) { return run.backend == "sim" ? "simulated" : "measured"; }

// One line per size: each algorithm's model error, then the fastest labkit algorithm.
void print_model_errors(const std::vector<Row>& rows, const std::vector<Modeled>& modeled,
                        const std::map<std::size_t, std::string>& fastest, const RunOptions& run) {
  fmt::print("#\n# the alpha-beta model against the {} time: (time - model) / model; and the fastest labkit "
             "algorithm, as NCCL's tuner would pick it\n", times_of(run));
  std::string head = fmt::format("# {:>10}", "size");
  for (const std::string& a : kAlgorithms) head += fmt::format("  {:>8}", a);
  fmt::print("{}  fastest\n", head);
  for (std::size_t i = 0; i < rows.size(); ++i) {
    if (rows[i].algo == kAlgorithms.front()) fmt::print("  {:>10}", rows[i].bytes);
    fmt::print("  {:>{}}", fmt::format("{:.1f}%", modeled[i].error * 100),
               std::max<std::size_t>(8, rows[i].algo.size()));
    if (rows[i].algo == kAlgorithms.back()) fmt::print("  {}\n", fastest.at(rows[i].bytes));
  }
}

// Time versus size, one line per algorithm, log-log; SVG, or PNG for a .png name.
void write_plot(const std::vector<Row>& rows, const std::string& path, const RunOptions& run) {
  std::ostringstream data;
  for (const std::string& algo : kAlgorithms) {
    data << "\"" << algo << "\"\n";
    for (const Row& r : rows)
      if (r.algo == algo) data << r.bytes << ' ' << r.timing.seconds << '\n';
    data << "\n\n";
  }
  const std::string commands = fmt::format(
      "set title 'all_reduce on {ranks} ranks, {topology}: {times} time per algorithm'\n"
      "set logscale x 2\nset logscale y\nset xtics 32\nset autoscale xfix\n"
      "set xlabel 'message size'\nset ylabel 'time'\nset format x '%.0b %BB'\nset format y '%.0s %cs'\n"
      "set key top left\nset grid\n"
      // native (last) dashed, so the ring it usually equals shows beneath it
      "plot for [i=0:{last_algo}] $data index i using 1:2 with linespoints title columnheader(1), "
      "$data index {native} using 1:2 with lines dashtype 2 linewidth 2 title columnheader(1)\n",
      fmt::arg("ranks", run.ranks), fmt::arg("topology", run.topology), fmt::arg("times", times_of(run)),
      fmt::arg("last_algo", kAlgorithms.size() - 2),
      fmt::arg("native", kAlgorithms.size() - 1));
  lab::plot(path, {}, data.str(), commands);
}

// The JSON of nccl-tests' rows, each with the model's time and error, whether it
// was the fastest labkit algorithm at its size, and NCCL's predictions there
// (`nccl`: print_nccl_choices' rows, by size).
nlohmann::json json_rows(const Table& table, const std::vector<Row>& rows, int iters,
                         const std::vector<Modeled>& modeled, const std::map<std::size_t, std::string>& fastest,
                         const std::vector<std::size_t>& sizes, const nlohmann::json& nccl) {
  nlohmann::json json = nlohmann::json::array();
  for (std::size_t i = 0; i < rows.size(); ++i) {
    nlohmann::json row = json_row(table, rows[i], iters);
    row["model_us"] = modeled[i].seconds * 1e6;
    row["model_error"] = modeled[i].error;
    row["fastest"] = fastest.at(rows[i].bytes) == rows[i].algo;
    row["nccl"] = nccl[std::size_t(std::find(sizes.begin(), sizes.end(), rows[i].bytes) - sizes.begin())];
    json.push_back(std::move(row));
  }
  return json;
}
}  // namespace

void add_compare_options(CLI::App& app, CompareOptions& o) {
  add_sweep_options(app, o.min_bytes, o.max_bytes, o.sweep);
  app.add_option("--check-max", o.check_max,
                 "--compare: move data and check results up to this size (sizes only above)")
      ->capture_default_str()->check(cli::byte_size());
  app.add_option("--plot", o.plot, "--compare: draw time versus size to this SVG or PNG (gnuplot)")
      ->check(cli::figure_file());
}

void settle_sweep(const CLI::App& app, const RunOptions& run, CompareOptions& o) {
  set_sizes(o.sweep, o.min_bytes, o.max_bytes);
  // --payload-free moves sizes without values: every size is timed, none checked.
  if (run.payload_free && app.count("--check-max"))
    throw Error(fmt::format("--check-max {}: --payload-free moves no values to check", o.check_max));
  // Sizes without values are the simulator's: a real backend moves, and checks, the data of every size.
  if (run.backend != "sim" && app.count("--check-max"))
    throw Error(fmt::format("--check-max {}: under --backend {} every size moves its data and is checked (only the "
                            "simulator times sizes alone)", o.check_max, run.backend));
  o.sweep.data_max_bytes = run.payload_free ? 0 : run.backend == "sim" ? parse_bytes(o.check_max) : SIZE_MAX;
  if (run.backend == "sim") {
    if (!app.count("--iters")) o.sweep.iters = 1;
    if (!app.count("--warmup_iters")) o.sweep.warmup = 0;
    if (!app.count("--rounds")) o.sweep.rounds = 1;
  }
  if (run.backend == "nccl") o.sweep.where = DeviceKind::cuda;
}

int compare(const RunOptions& run_options, const CompareOptions& o) {
  if (!run_options.trace.empty())
    throw Error("--compare sweeps every size and algorithm; trace one with --step or the collectives lab");
  refuse_one_simulated_rank(run_options);
  const Topology topology = find_topology(run_options.topology);
  const CollectiveBench& all_reduce = find_bench("all_reduce");
  RunOptions run_all = run_options;
  run_all.check_arguments = false;  // time the collective alone
  run_all.lab_reads_topology = true;  // its model column
  std::vector<Row> rows;
  RunOptions ran = run_options;  // under mpirun, -np ranks rather than --ranks
  run(run_all, [&](Comm& comm) {
    comm.set_algorithm(Collective::barrier, nullptr);  // the barrier that starts each clock
    const std::vector<std::size_t> counts = counts_of(o.sweep, comm.size());
    const Timings timings = sweep(comm, all_reduce, kAlgorithms, counts, o.sweep, [&](int, std::size_t count) {
      progress_line("  measured " + format_bytes(count * size_of(o.sweep.dtype)));
    });
    if (comm.rank() != 0) return;
    rows = rows_of(timings, kAlgorithms, counts, o.sweep.dtype);
    ran.ranks = comm.size();
  });
  progress_line("");
  if (rows.empty()) return 0;  // a process of mpirun that ran another rank than 0

  const int nodes = (ran.ranks + topology.devices_per_node - 1) / topology.devices_per_node;
  fmt::print("# all_reduce, {} ranks on {} ({} node{} x {}), backend {}; #wrong checked {}\n", ran.ranks,
             topology.name, nodes, nodes > 1 ? "s" : "", std::min(ran.ranks, topology.devices_per_node), ran.backend,
             o.sweep.data_max_bytes == SIZE_MAX ? "at every size"
                                                : fmt::format("up to {} (sizes only above)",
                                                              format_bytes(o.sweep.data_max_bytes)));
  const Table table{all_reduce, o.sweep.dtype, bus_bandwidth_factor(Collective::all_reduce, ran.ranks)};
  const std::int64_t wrong = print_table(table, kAlgorithms, rows);
  const std::vector<Modeled> modeled = model_rows(rows, ran);
  const std::map<std::size_t, std::string> fastest = fastest_per_size(rows);
  print_model_errors(rows, modeled, fastest, ran);
  // Where the model and the simulator part ways, ports are shared (a real machine parts ways for its own reasons).
  for (std::size_t i = 0; i < rows.size() && ran.backend == "sim"; ++i)
    if (std::abs(modeled[i].error) > 0.01 && rows[i].algo != "native") {
      fmt::print("# {} at {} differs from the model by {:.1f}%: its messages share a port, whose bandwidth the "
                 "simulator splits among them (--network); the closed form leaves that contention out\n",
                 rows[i].algo, format_bytes(rows[i].bytes), modeled[i].error * 100);
      break;
    }
  std::vector<std::size_t> sizes;
  for (const Row& r : rows)
    if (r.algo == kAlgorithms.front()) sizes.push_back(r.bytes);
  const nlohmann::json nccl = print_nccl_choices(Collective::all_reduce, sizes, ran.ranks, topology);
  if (nodes > 1)
    fmt::print("# across nodes every flat-ring step waits for the slowest hop ({} at {:g} GB/s, not {} at {:g} "
               "GB/s); hierarchical crosses it in only 2(N-1) = {} of its steps\n",
               format_seconds(topology.inter.alpha), topology.inter.bandwidth / 1e9,
               format_seconds(topology.intra.alpha), topology.intra.bandwidth / 1e9, 2 * (nodes - 1));
  lab::write_json(o.json, json_rows(table, rows, o.sweep.iters, modeled, fastest, sizes, nccl));
  if (!o.plot.empty()) write_plot(rows, o.plot, ran);
  return wrong ? 1 : 0;
}

}  // namespace ring_lab
