#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "ddp.h"
#include "labkit/cli.h"
#include "labkit/lab/option_checks.h"
#include "labkit/lab/output.h"
#include "labkit/lab/plot.h"
#include "labkit/lab/table.h"
#include "labkit/lab/what_if.h"
#include "labkit/memory.h"
#include "labkit/topology.h"
#include "labkit/units.h"

namespace ddp_lab {

namespace {

// --sweep's forms: weak scaling over rank counts, or the bucket cap in MiB.
SweepRange parse_sweep(const std::string& text) {
  return cli::parse_sweep(text, {{"ranks", 1, 65536, true, ""}, {"bucket-mb", 0, 65536, false, " MiB"}});
}

}  // namespace

void add_what_if_options(CLI::App& app, Options& o) {
  lab::add_what_if(app, o.what_if, "a model preset (llama2-7b, ...): one payload-free step of its shapes per mode, "
                                   "against the reading's estimate");
  lab::add_step_seconds(app, o.step_seconds);
  app.add_flag("--volume", o.volume, "the reading's DDP communication-volume table, computed");
  cli::add_parsed(app, "--sweep", o.sweep, parse_sweep,
      "ranks=A..B: weak scaling of the --what-if model (llama2-7b by default) on every topology preset; "
      "bucket-mb=A..B: its exposed communication against the bucket cap, beside an overhead model's optimum");
}

namespace {
// One payload-free step of `model` in `mode`, measured from rank 0's trace, and
// how many allreduces it took (its buckets).
struct MetaRun {
  StepTimes times;
  int buckets = 0;
};
MetaRun run_meta_step(RunOptions run_options, const MetaModel& model, DdpMode mode, const BucketCaps& caps) {
  run_options.payload_free = true;
  run_options.keep_trace = true;
  double from = 0, to = 0;
  const RunResult r = run(run_options, [&](Comm& comm) {
    const double start = comm.now();
    meta_step(comm, model, mode, caps);
    if (comm.rank() == 0) from = start, to = comm.now();
  });
  const TraceTrack& rank0 = r.trace->tracks()[0];
  const auto all_reduces = std::count_if(rank0.events.begin(), rank0.events.end(),
                                         [](const TraceEvent& e) { return e.kind == TraceEvent::Kind::collective; });
  return {step_times(rank0, from, to), int(all_reduces)};
}

// Scaling efficiency: compute over compute plus what communication adds to it.
double efficiency(const StepTimes& t) { return t.compute() / (t.compute() + t.exposed()); }

}  // namespace

// --what-if MODEL: one data-parallel step of a real model's shapes, payload-free
// (sizes only), per mode, beside the estimate of "Day 64: Distributed Training
// Fundamentals" (book/99-references.md), T_comm = 2 (P-1)/P x G / B for G
// bytes of gradients over links of B bytes/s, and its efficiency
// T_compute / (T_compute + T_comm), which assumes nothing overlaps.
int what_if(const Options& o, const RunOptions& run_options, const std::vector<DdpMode>& modes) {
  const memory::Architecture arch = memory::model_preset(o.what_if);
  const MetaModel model = meta_model(arch, o.step_seconds);
  const Topology topology = find_topology(run_options.topology);
  const int p = run_options.ranks;
  const double grads = double(model.parameters()) * size_of(model.grad_dtype);
  const Link& link = p > topology.devices_per_node ? topology.inter : topology.intra;
  const double formula = 2.0 * (p - 1) / p * grads / link.bandwidth;
  fmt::print("ddp --what-if {}: {:.2f}B parameters, {} of bf16 gradients, {} ranks on {} ({:g} GB/s links), "
             "{} of compute per step\n", o.what_if, model.parameters() / 1e9, format_bytes(std::uint64_t(grads)), p,
             topology.name, link.bandwidth / 1e9, format_seconds(o.step_seconds));
  fmt::print("the reading's estimate: T_comm = 2 (P-1)/P x G / B = {}, efficiency {:.1f}% (no overlap)\n",
             format_seconds(formula), 100 * o.step_seconds / (o.step_seconds + formula));
  lab::Table table({{.header = "mode", .key = "mode", .width = 9, .align = lab::Align::left},
                    {.header = "buckets", .key = "buckets", .width = 7},
                    {.header = "T_compute", .key = "t_compute", .width = 10},
                    {.header = "T_comm", .key = "t_comm", .width = 10},
                    {.header = "exposed", .key = "exposed", .width = 10},
                    {.header = "T_step", .key = "t_step", .width = 10},
                    {.header = "efficiency", .key = "efficiency", .width = 11},
                    {.key = "formula_t_comm"}});
  table.print_header();
  std::vector<std::pair<DdpMode, StepTimes>> steps;
  lab::TracePerRow traces(run_options, modes.size() > 1);
  for (DdpMode mode : modes) {
    const auto [t, buckets] = run_meta_step(traces.row(name_of(mode)), model, mode, caps_of(o));
    steps.emplace_back(mode, t);
    table.add({name_of(mode), buckets, lab::seconds(t.compute()), lab::seconds(t.comm), lab::seconds(t.exposed()),
               lab::seconds(t.step), lab::percent(efficiency(t)), formula});
  }
  if (p > topology.devices_per_node && topology.nics_per_node > 1)
    fmt::print("(T_comm: NCCL's rings leave each node through all {} of its NICs, {:g} GB/s a node, where the "
               "reading's estimate prices one {:g} GB/s link; chapter 2)\n", topology.nics_per_node,
               topology.nics_per_node * link.bandwidth / 1e9, link.bandwidth / 1e9);
  traces.print("mode");
  lab::write_json(o.json, {{"model", o.what_if}, {"parameters", model.parameters()}, {"gradient_bytes", grads},
                           {"ranks", p}, {"topology", topology.name}, {"link_bandwidth", link.bandwidth},
                           {"compute_seconds", o.step_seconds}, {"modes", table.json()}});
  if (!o.plot.empty())
    plot_step_bars(o.plot, fmt::format("DDP step of {} on {} ranks of {}", o.what_if, p, topology.name), steps);
  return 0;
}

void plot_step_bars(const std::string& path, const std::string& title,
                    const std::vector<std::pair<DdpMode, StepTimes>>& steps) {
  double longest = 0;
  for (const auto& [mode, t] : steps) longest = std::max(longest, t.step);
  const auto [unit, scale] = longest < 1e-3 ? std::pair{"us", 1e6} : std::pair{"ms", 1e3};
  std::ostringstream data;
  for (const auto& [mode, t] : steps)
    data << name_of(mode) << ' ' << scale * t.forward << ' ' << scale * t.backward << ' ' << scale * t.optimizer
         << ' ' << scale * t.exposed() << '\n';
  lab::plot(path, {}, data.str(), fmt::format(
      "set title '{}: where the step goes'\n"
      "set style data histograms\nset style histogram rowstacked\nset style fill solid 0.8 border -1\n"
      "set boxwidth 0.6\nset ylabel 'time per step ({})'\nset yrange [0:*]\nset key outside right\nset grid y\n"
      "plot $data using 2:xtic(1) title 'forward', '' using 3 title 'backward', '' using 4 title 'optimizer', "
      "'' using 5 title 'exposed communication'\n",
      title, unit));
}

// --sweep ranks=A..B: weak scaling of one --what-if step (each rank keeps its
// compute: its share of the batch is fixed) on every topology preset, naive and
// overlapped: scaling efficiency T_compute / (T_compute + T_exposed), and the
// communication-to-computation ratio T_comm / T_compute.
int sweep(const Options& o, RunOptions run_options) {
  const std::string name = o.what_if.empty() ? "llama2-7b" : o.what_if;
  const MetaModel model = meta_model(memory::model_preset(name), o.step_seconds);
  std::vector<int> counts;
  for (int p = int(o.sweep.from); p <= o.sweep.to; p *= 2) counts.push_back(p);
  const std::vector<std::string_view> topologies = topology_presets();
  fmt::print("ddp --sweep: {} ({:.2f}B parameters, bf16 gradients), {} of compute per rank and step, ranks {}..{} "
             "on {} topologies ...\n", name, model.parameters() / 1e9, format_seconds(o.step_seconds), o.sweep.from,
             o.sweep.to, topologies.size());
  std::fflush(stdout);
  lab::Table table({{.header = "topology", .key = "topology", .width = 10, .align = lab::Align::left},
                    {.header = "ranks", .key = "ranks", .width = 6},
                    {.header = "T_comm", .key = "t_comm", .width = 10},
                    {.header = "comm/comp", .key = "comm_to_compute", .width = 10},
                    {.header = "naive", .key = "naive_efficiency", .width = 10},
                    {.header = "overlap", .key = "overlap_efficiency", .width = 10},
                    {.header = "T_step", .key = "overlap_t_step", .width = 10},
                    {.header = "exposed", .key = "overlap_exposed", .width = 10}});
  table.print_header();
  for (std::string_view topology : topologies) {
    run_options.topology = std::string(topology);
    for (int p : counts) {
      run_options.ranks = p;
      const StepTimes naive = run_meta_step(run_options, model, DdpMode::naive, caps_of(o)).times;
      const StepTimes overlap = run_meta_step(run_options, model, DdpMode::overlap, caps_of(o)).times;
      table.add({topology, p, lab::seconds(naive.comm), lab::number(naive.comm / naive.compute(), "{:.3f}"),
                 lab::percent(efficiency(naive)), lab::percent(efficiency(overlap)), lab::seconds(overlap.step),
                 lab::seconds(overlap.exposed())});
    }
  }
  fmt::print("(naive, overlap: scaling efficiency T_compute / (T_compute + T_exposed); T_step and exposed: overlap)\n");
  const nlohmann::json& rows = table.json();
  lab::write_json(o.json, rows);
  if (!o.plot.empty()) {
    std::ostringstream data;
    for (std::string_view topology : topologies) {
      data << '"' << topology << "\"\n";
      for (const nlohmann::json& r : rows)
        if (r["topology"] == topology)
          data << r["ranks"] << ' ' << 100 * r["overlap_efficiency"].get<double>() << ' '
               << 100 * r["naive_efficiency"].get<double>() << '\n';
      data << "\n\n";
    }
    lab::plot(o.plot, {}, data.str(), fmt::format(
        "set title 'DDP weak scaling, {}: overlapped (solid) and naive (dashed)'\n"
        "set logscale x 2\nset xlabel 'ranks'\nset ylabel 'scaling efficiency (%)'\nset yrange [0:105]\n"
        "set key bottom left\nset grid\n"
        "plot for [i=0:{}] $data index i using 1:2 with linespoints linecolor i+1 title columnheader(1), "
        "for [i=0:{}] $data index i using 1:3 with lines dashtype 2 linecolor i+1 notitle\n",
        name, topologies.size() - 1, topologies.size() - 1));
  }
  return 0;
}

namespace {

// One allreduce's time on this run's ranks and topology as a line, fitted
// through two payload-free allreduces of the sizes buckets have.
AllReduceLine measure_all_reduce(RunOptions run_options, std::size_t small_bytes, std::size_t large_bytes) {
  run_options.payload_free = true;
  double took[2] = {};
  run(run_options, [&](Comm& comm) {
    for (int i = 0; i < 2; ++i) {
      const double start = comm.now();
      comm.all_reduce(meta_view((i == 0 ? small_bytes : large_bytes) / 2, DType::bf16), ReduceOp::avg);
      if (comm.rank() == 0) took[i] = comm.now() - start;
    }
  });
  const double b = (took[1] - took[0]) / double(large_bytes - small_bytes);
  return {took[0] - b * double(small_bytes), b};
}

}  // namespace

// --sweep bucket-mb=A..B: one overlapped step of the --what-if model (llama2-7b
// by default) per bucket cap, its exposed communication measured, beside the
// overhead model's at the same bucket count, and the cap the sweep finds best
// beside the model's G / k*.
int bucket_sweep(const Options& o, RunOptions run_options) {
  const std::string name = o.what_if.empty() ? "llama2-7b" : o.what_if;
  const MetaModel model = meta_model(memory::model_preset(name), o.step_seconds);
  const double G = double(model.parameters()) * size_of(model.grad_dtype);
  double T = 0;
  for (const MetaModel::Piece& p : model.pieces) T += p.backward_seconds;
  const AllReduceLine line = measure_all_reduce(run_options, std::size_t(G / 64), std::size_t(G / 4));
  fmt::print("ddp --sweep bucket-mb={:g}..{:g}: {}, {} of bf16 gradients in {} tensors, {} ranks on {}, T_bwd {}, "
             "overlap mode, first bucket {:g} MiB ...\n", o.sweep.from, o.sweep.to, name,
             format_bytes(std::uint64_t(G)), model.pieces.size(), run_options.ranks, run_options.topology,
             format_seconds(T), o.first_bucket_mb);
  fmt::print("one allreduce of n bytes, fitted on this cluster: a + n b, a = {} per call, 1/b = {:.1f} GB/s\n",
             format_seconds(line.a), 1e-9 / line.b);
  std::fflush(stdout);
  lab::Table table({{.header = "cap MiB", .key = "cap_mib", .width = 10},
                    {.header = "buckets", .key = "buckets", .width = 8},
                    {.header = "mean bucket", .key = "mean_bucket_bytes", .width = 11},
                    {.header = "T_comm", .key = "t_comm", .width = 10},
                    {.header = "exposed", .key = "exposed", .width = 10},
                    {.header = "model", .key = "model_exposed", .width = 10},
                    {.header = "T_step", .key = "t_step", .width = 10}});
  table.print_header();
  double best_cap = 0, best_exposed = 0;
  for (double cap = o.sweep.from; cap <= o.sweep.to * (1 + 1e-9); cap *= 2) {
    Options at_cap = o;
    at_cap.bucket_mb = cap;
    const auto [t, buckets] = run_meta_step(run_options, model, DdpMode::overlap, caps_of(at_cap));
    const double model_exposed = exposed_communication(buckets, T, G, line);
    table.add({lab::number(cap, "{:g}"), buckets, lab::bytes(G / buckets), lab::seconds(t.comm),
               lab::seconds(t.exposed()), lab::seconds(model_exposed), lab::seconds(t.step)});
    std::fflush(stdout);
    if (best_cap == 0 || t.exposed() < best_exposed) best_cap = cap, best_exposed = t.exposed();
  }
  const double k = best_bucket_count(T, G, line);
  const nlohmann::json& rows = table.json();
  fmt::print("sweep:       least exposed at a {:g} MiB cap: {}\n", best_cap, format_seconds(best_exposed));
  fmt::print("closed form: k* = max((T - G b) / a, sqrt(T / a)) = {:.0f} buckets of G / k* = {:.1f} MiB: {} "
             "exposed\n", k, G / k / (1 << 20), format_seconds(exposed_communication(k, T, G, line)));
  lab::write_json(o.json, {{"model", name}, {"ranks", run_options.ranks}, {"topology", run_options.topology},
                           {"gradient_bytes", G}, {"t_bwd", T}, {"alpha_seconds", line.a},
                           {"seconds_per_byte", line.b}, {"rows", rows}, {"best_cap_mib", best_cap},
                           {"best_exposed", best_exposed}, {"model_best_buckets", k},
                           {"model_best_mib", G / k / (1 << 20)},
                           {"model_best_exposed", exposed_communication(k, T, G, line)}});
  if (!o.plot.empty()) {
    std::ostringstream data;
    for (const nlohmann::json& r : rows)
      data << r["cap_mib"] << ' ' << 1e3 * r["exposed"].get<double>() << ' ' << 1e3 * r["model_exposed"].get<double>()
           << '\n';
    lab::plot(o.plot, {}, data.str(), fmt::format(
        "set title 'DDP bucket size, {}, {} ranks on {}: exposed communication'\n"
        "set logscale x 2\nset xlabel 'bucket cap (MiB)'\nset ylabel 'exposed communication (ms)'\n"
        "set yrange [0:*]\nset key top right\nset grid\nset arrow from {},graph 0 to {},graph 1 nohead dashtype 3\n"
        "plot $data using 1:2 with linespoints title 'measured (the simulated step)', "
        "'' using 1:3 with linespoints dashtype 2 title 'overhead model at the same bucket count', "
        "NaN with lines dashtype 3 linecolor rgb 'black' title 'closed-form optimum G / k*'\n",
        name, run_options.ranks, run_options.topology, G / k / (1 << 20), G / k / (1 << 20)));
  }
  return 0;
}

// --volume: the long guide's DDP communication table (section 7.4), each row
// computed: a ring allreduce sends 2 (P-1)/P x N x sizeof(dtype) bytes per rank
// per step (Patarasuk & Yuan 2009), which the guide rounds to 2N x sizeof.
int volume(const Options& o, int ranks) {
  struct Row {
    const char* model;
    double params;
  };
  const Row rows[] = {{"ResNet-50", 25e6}, {"BERT-Large", 340e6}, {"GPT-2 XL", 1.5e9}, {"Llama-7B", 7e9},
                      {"Llama-70B", 70e9}};
  const double link = 200e9;  // the guide's column: 200 GB/s
  fmt::print("DDP communication per step and rank (the reading's 2N x sizeof; exactly 2 (P-1)/P N x sizeof: x{:.3f} "
             "at P = {})\n", 2.0 * (ranks - 1) / ranks / 2, ranks);
  lab::Table table({{.header = "model", .key = "model", .width = 11, .align = lab::Align::left},
                    {.header = "params", .key = "parameters", .width = 7},
                    {.header = "fp32 GB", .key = "fp32_bytes", .width = 10},
                    {.header = "fp16 GB", .key = "half_bytes", .width = 10},
                    {.header = "@ 200 GB/s", .key = "seconds_at_200GBps", .width = 12},
                    {.header = fmt::format("fp16 GB, P = {}", ranks), .key = "exact_half_bytes", .width = 15},
                    {.key = "ranks"}});
  table.print_header();
  for (const Row& r : rows) {
    const double fp32 = 2 * r.params * 4, half = 2 * r.params * 2, exact = 2.0 * (ranks - 1) / ranks * r.params * 2;
    table.add({r.model, lab::number(r.params, "{:.3g}B", 1e9), lab::number(fp32, "{:.3g}", 1e9),
               lab::number(half, "{:.3g}", 1e9), lab::seconds(half / link), lab::number(exact, "{:.3g}", 1e9), ranks});
  }
  lab::write_json(o.json, table.json());
  return 0;
}

}  // namespace ddp_lab
