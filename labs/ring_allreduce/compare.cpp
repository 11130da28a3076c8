// --compare: every allreduce algorithm at every size, simulated and predicted,
// in nccl-tests' columns (size, count, type, redop, time, algbw, busbw, #wrong),
// plus the model's time and its error. The fastest labkit algorithm per size is
// marked, as NCCL's tuner would pick it; native is NCCL's own choice.
#include <cmath>
#include <cstdio>
#include <fstream>

#include <unistd.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "labkit/cost_model.h"
#include "labkit/error.h"
#include "labkit/output.h"
#include "labkit/units.h"
#include "ring_allreduce.h"

using namespace labkit;

namespace ring_lab {

namespace {
const std::vector<std::string> kAlgorithms = {"naive", "binomial_tree", "ring", "recursive_halving_doubling",
                                              "hierarchical", "native"};

struct Row {
  std::uint64_t bytes;
  std::string algo;
  double seconds = 0, model = 0;
  std::int64_t wrong = -1;  // -1: not checked (payload-free)
  bool best = false;
};

// Inputs depend on rank and index and stay small integers, so float sums are exact.
float input(int rank, std::size_t i) { return float((rank * 7 + i) % 11); }

// One timed allreduce on every rank; the slowest rank's time and the wrong
// elements are combined with native collectives, as nccl-tests does with MPI.
Row measure(const RunOptions& base, std::uint64_t bytes, const std::string& algo, bool check) {
  RunOptions o = base;
  o.payload_free = !check;
  o.algos = {"all_reduce=" + algo};
  Row row{bytes, algo};
  const std::size_t count = bytes / sizeof(float);
  run(o, [&](Comm& comm) {
    std::vector<float> data(check ? count : 0);
    for (std::size_t i = 0; i < data.size(); ++i) data[i] = input(comm.rank(), i);
    const View buf = check ? view_of(data) : sizes_only(count, DType::f32);
    const double start = comm.now();
    comm.all_reduce(buf, ReduceOp::sum);
    std::vector<double> seconds = {comm.now() - start};
    std::vector<std::int64_t> wrong = {0};
    std::vector<float> want(11, 0.0f);  // the sum depends on i only through i mod 11
    for (std::size_t i = 0; i < want.size(); ++i)
      for (int r = 0; r < comm.size(); ++r) want[i] += input(r, i);
    for (std::size_t i = 0; i < data.size(); ++i) wrong[0] += data[i] != want[i % 11];
    comm.set_algorithm(Collective::all_reduce, "native");
    comm.all_reduce(view_of(seconds), ReduceOp::max);
    comm.all_reduce(view_of(wrong), ReduceOp::sum);
    if (comm.rank() == 0) {
      row.seconds = seconds[0];
      row.wrong = check ? wrong[0] : -1;
    }
  });
  row.model = predict(Collective::all_reduce, algo, bytes, base.ranks, find_topology(base.topology));
  return row;
}

// Time versus size, one line per algorithm, log-log; SVG, or PNG for a .png name.
void write_plot(const std::vector<Row>& rows, const std::string& path, const RunOptions& run) {
  const std::string data = path + ".dat";
  {
    std::ofstream out = create_file(data);
    for (const std::string& algo : kAlgorithms) {
      out << "\"" << algo << "\"\n";
      for (const Row& r : rows)
        if (r.algo == algo) out << r.bytes << ' ' << r.seconds << '\n';
      out << "\n\n";
    }
  }
  const std::string script = fmt::format(
      "set terminal {terminal} size 800,500 font 'sans,10' background '#ffffff'\n"
      "set output '{path}'\n"
      "set termoption noenhanced\n"
      "set title 'all_reduce on {ranks} ranks, {topology}: simulated time per algorithm'\n"
      "set logscale x 2\nset logscale y\nset xtics 32\nset autoscale xfix\n"
      "set xlabel 'message size'\nset ylabel 'time'\nset format x '%.0b %BB'\nset format y '%.0s %cs'\n"
      "set key top left\nset grid\n"
      // native (last) dashed, so the ring it usually equals shows beneath it
      "plot for [i=0:{last_algo}] '{data}' index i using 1:2 with linespoints title columnheader(1), "
      "'{data}' index {native} using 1:2 with lines dashtype 2 linewidth 2 title columnheader(1)\n",
      fmt::arg("terminal", gnuplot_terminal(path)), fmt::arg("path", path), fmt::arg("ranks", run.ranks),
      fmt::arg("topology", run.topology), fmt::arg("last_algo", kAlgorithms.size() - 2), fmt::arg("data", data),
      fmt::arg("native", kAlgorithms.size() - 1));
  run_gnuplot(script);
  std::remove(data.c_str());
}
}  // namespace

int compare(const RunOptions& run_options, const CompareOptions& o) {
  if (!run_options.trace.empty())
    throw Error("--compare runs a simulation per size and algorithm; trace one with --step or the collectives lab");
  if (o.max_bytes < o.min_bytes)
    throw Error(fmt::format("--min-bytes {} is larger than --max-bytes {}", format_bytes(o.min_bytes),
                            format_bytes(o.max_bytes)));
  const Topology topology = find_topology(run_options.topology);
  std::vector<std::uint64_t> sizes;
  for (std::uint64_t b = o.min_bytes;; b *= o.factor) {
    sizes.push_back(b);
    if (b > o.max_bytes / o.factor) break;  // the next size passes --max-bytes (or would wrap past 2^64)
  }

  std::vector<Row> rows;
  for (std::size_t s = 0; s < sizes.size(); ++s) {
    if (isatty(STDERR_FILENO))
      std::fprintf(stderr, "\r  simulating size %zu/%zu: %-10s", s + 1, sizes.size(), format_bytes(sizes[s]).c_str());
    std::size_t first = rows.size();
    for (const std::string& algo : kAlgorithms) rows.push_back(measure(run_options, sizes[s], algo, sizes[s] <= o.check_max));
    // NCCL's tuner: the fastest of labkit's algorithms at this size.
    Row* best = &rows[first];
    for (std::size_t i = first; i < rows.size(); ++i)
      if (rows[i].algo != "native" && rows[i].seconds < best->seconds) best = &rows[i];
    best->best = true;
  }
  if (isatty(STDERR_FILENO)) std::fprintf(stderr, "\r%40s\r", "");

  const int nodes = (run_options.ranks + topology.devices_per_node - 1) / topology.devices_per_node;
  fmt::print("# all_reduce, {} ranks on {} ({} node{} x {}), float, sum; simulated time vs the alpha-beta model\n",
             run_options.ranks, topology.name, nodes, nodes > 1 ? "s" : "", std::min(run_options.ranks, topology.devices_per_node));
  fmt::print("# {:>10} {:>11} {:>6} {:>6}  {:<27} {:>11} {:>7} {:>7} {:>6} {:>11} {:>7}\n", "size", "count", "type",
             "redop", "algo", "time", "algbw", "busbw", "#wrong", "model", "error");
  fmt::print("# {:>10} {:>11} {:>6} {:>6}  {:<27} {:>11} {:>7} {:>7} {:>6} {:>11} {:>7}\n", "(B)", "(elements)", "",
             "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "");
  const double factor = bus_bandwidth_factor(Collective::all_reduce, run_options.ranks);
  std::int64_t wrong_total = 0;
  nlohmann::json json = nlohmann::json::array();
  for (const Row& r : rows) {
    const double algbw = r.bytes / r.seconds / 1e9, error = (r.seconds - r.model) / r.model;
    wrong_total += std::max<std::int64_t>(r.wrong, 0);
    fmt::print("  {:>10} {:>11} {:>6} {:>6}  {:<27} {:>11.2f} {:>7.2f} {:>7.2f} {:>6} {:>11.2f} {:>6.1f}%{}\n", r.bytes,
               r.bytes / 4, "float", "sum", r.algo, r.seconds * 1e6, algbw, algbw * factor,
               r.wrong < 0 ? "-" : std::to_string(r.wrong), r.model * 1e6, error * 100, r.best ? " *" : "");
    json.push_back({{"size", r.bytes}, {"count", r.bytes / 4}, {"type", "float"}, {"redop", "sum"},
                    {"algo", r.algo}, {"time_us", r.seconds * 1e6}, {"algbw_GBps", algbw},
                    {"busbw_GBps", algbw * factor}, {"wrong", r.wrong < 0 ? nlohmann::json() : nlohmann::json(r.wrong)},
                    {"model_us", r.model * 1e6}, {"error", error}, {"best", r.best}});
  }
  fmt::print("# * fastest labkit algorithm at that size; #wrong is checked up to {} (payload-free above)\n",
             format_bytes(o.check_max));
  fmt::print("# Out of bounds values : {} {}\n", wrong_total, wrong_total ? "FAILED" : "OK");
  for (const std::string& algo : kAlgorithms) {
    double sum = 0;
    int n = 0;
    for (const Row& r : rows)
      if (r.algo == algo) sum += r.bytes / r.seconds / 1e9 * factor, ++n;
    fmt::print("# Avg bus bandwidth    : {:8.2f} GB/s  {}\n", sum / n, algo);
  }
  // Where the model and the simulator part ways, links are shared.
  for (const Row& r : rows)
    if (std::abs(r.seconds - r.model) > 0.01 * r.model && r.algo != "native") {
      fmt::print("# {} at {} differs from the model by {:.1f}%: messages share a port (contention), which the "
                 "closed form leaves out\n", r.algo, format_bytes(r.bytes), (r.seconds - r.model) / r.model * 100);
      break;
    }
  if (nodes > 1)
    fmt::print("# across nodes every flat-ring step waits for the slowest hop ({} at {:g} GB/s, not {} at {:g} "
               "GB/s); hierarchical crosses it in only 2(N-1) = {} of its steps\n",
               format_seconds(topology.inter.alpha), topology.inter.bandwidth / 1e9,
               format_seconds(topology.intra.alpha), topology.intra.bandwidth / 1e9, 2 * (nodes - 1));
  if (!o.json.empty()) create_file(o.json) << json.dump(2) << '\n';
  if (!o.plot.empty()) write_plot(rows, o.plot, run_options);
  return wrong_total ? 1 : 0;
}

}  // namespace ring_lab
