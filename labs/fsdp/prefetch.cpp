// Lab 6, --sweep hidden=A..B: where prefetching hides a layer's all-gather.
//
// Stage 3 gathers each layer before it computes. Prefetched, the next layer's
// all-gather runs under the current layer's forward, so a layer takes
// max(T_f, T_g) instead of T_f + T_g. Both grow with the layer's parameters,
// but the gather also pays a latency per step of its algorithm: small layers
// are latency-bound and exposed, large ones hidden, if the compute per
// parameter (2 x tokens / FLOP/s) beats the bytes per parameter over the
// link's bandwidth at all. The alpha-beta model (cost_model.h) puts the
// boundary where T_g(h) = T_f(h); the sweep measures it from the executed,
// payload-free step.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <optional>
#include <sstream>

#include <fmt/format.h>

#include "fsdp.h"
#include "labkit/cost_model.h"
#include "labkit/error.h"
#include "labkit/lab/output.h"
#include "labkit/lab/plot.h"
#include "labkit/lab/table.h"
#include "labkit/memory.h"
#include "labkit/parallel/data_parallel.h"
#include "labkit/parallel/fully_sharded.h"
#include "labkit/topology.h"
#include "labkit/units.h"

namespace fsdp_lab {

namespace {

// The model's shape at hidden size h: heads of the same width, the FFN the same
// multiple of h.
memory::Architecture at_hidden(memory::Architecture a, int h) {
  const double scale = double(h) / a.hidden;
  a.heads = std::max(1, int(std::lround(a.heads * scale)));
  a.kv_heads = std::max(1, int(std::lround(a.kv_heads * scale)));
  a.ffn = std::max(1, int(std::lround(a.ffn * scale)));
  a.hidden = h;
  a.name += fmt::format(" at hidden {}", h);
  return a;
}

std::string format_parameters(double n) {
  return n >= 1e9 ? fmt::format("{:.3g}B", n / 1e9) : n >= 1e6 ? fmt::format("{:.3g}M", n / 1e6)
                                                    : fmt::format("{:.3g}K", n / 1e3);
}

double layer_parameters(const memory::Architecture& a) {
  double count = 0;
  for (const memory::WeightTensor& t : memory::layer_tensors(a, 0)) count += t.count;
  return count;
}

// Rank 0's forward: one region per layer, then the root's. In the steady state
// a layer starts every max(T_f, T_g) prefetched, every T_f + T_g not; the
// median gap between layer starts, less the layer's compute, is what the
// gather exposed.
struct Walk {
  double compute = 0, exposed = 0;  // per layer
};
Walk measure_forward(const Trace& trace, int layers) {
  std::vector<const TraceEvent*> forward;
  for (const TraceEvent& e : trace.tracks()[0].events)
    if (e.kind == TraceEvent::Kind::compute && e.name == "forward" && int(forward.size()) < layers)
      forward.push_back(&e);
  std::vector<double> gaps;
  for (std::size_t i = 1; i + 1 < forward.size(); ++i) gaps.push_back(forward[i + 1]->start - forward[i]->start);
  std::nth_element(gaps.begin(), gaps.begin() + gaps.size() / 2, gaps.end());
  const double compute = forward[1]->end - forward[1]->start, exposed = gaps[gaps.size() / 2] - compute;
  return {compute, exposed > 1e-9 * compute ? exposed : 0};  // the subtraction's rounding is no exposure
}

// T_f and T_g over the hidden sizes, log-log: two lines that cross at the
// boundary, T_g's latency floor on the left (gnuplot).
void plot_boundary(const nlohmann::json& rows, std::optional<int> boundary, const std::string& title,
                   const std::string& path) {
  std::ostringstream data;
  for (const nlohmann::json& r : rows)
    data << r["hidden"] << ' ' << double(r["t_forward"]) * 1e6 << ' ' << double(r["t_gather"]) * 1e6 << ' '
         << double(r["t_gather_alpha_beta"]) * 1e6 << '\n';
  lab::plot(path, {}, data.str(), fmt::format(
      "set title \"{}\"\nset logscale x 2\nset logscale y 10\nset format y '%g'\n"
      "set xlabel 'hidden size'\nset ylabel 'us per layer'\n"
      "set grid\nset key bottom right\n{}"
      "plot $data using 1:2 with linespoints linewidth 2 title 'T_f: the layer forward', "
      "'' using 1:3 with linespoints linewidth 2 title 'T_g: its all-gather, measured', "
      "'' using 1:4 with lines dashtype 2 title 'T_g by alpha-beta'\n",
      title,
      boundary ? fmt::format("set arrow from {0}, graph 0 to {0}, graph 1 nohead dashtype 3\n"
                             "set label 'alpha-beta boundary: hidden {0}' at {0}, graph 0.92 offset 1,0\n", *boundary)
               : ""));
}

// The sweep's fixed inputs: the model, the machine, and the runs of one
// stage-3 step of its layer at each hidden size, payload-free.
struct LayerSweep {
  const Options& o;
  memory::Architecture base;
  Topology topology;
  RunOptions run_options;  // payload-free, keeping the trace
  double flops;            // the device's peak times --efficiency
  std::string algorithm = "native";  // the all-gather's, as rank 0's comm names it (on the first walk)

  // One stage-3 step of the model at hidden h, prefetched or not: what rank 0's forward measured.
  Walk walk(const memory::Architecture& arch, Prefetch prefetch) {
    const double step = step_seconds_for(arch, o.seq, flops);
    const RunResult r = run(run_options, [&](Comm& comm) {
      if (comm.rank() == 0) algorithm = std::string(comm.algorithm(Collective::all_gather));
      sharded_meta_step(comm, arch, step, 3, {.prefetch = prefetch});
    });
    return measure_forward(*r.trace, arch.layers);
  }
  // The alpha-beta side: a layer's forward, and the all-gather of its padded bf16 parameters.
  double forward_seconds(const memory::Architecture& a) const { return 2 * o.seq * layer_parameters(a) / flops; }
  double gather_seconds(const memory::Architecture& a) const {
    const std::size_t p = std::size_t(run_options.ranks), dtype_bytes = 2;  // bf16, as the meta step gathers
    const std::size_t shard = (std::size_t(layer_parameters(a)) + p - 1) / p;
    return predict(Collective::all_gather, algorithm, shard * p * dtype_bytes, int(p), topology);
  }
  bool hides(int h) const {
    const memory::Architecture a = at_hidden(base, h);
    return gather_seconds(a) <= forward_seconds(a);
  }
};

// The measured rows: each hidden size A, 2A, ... B, with and without
// prefetching, beside alpha-beta; the last size exposed and the first hidden.
struct Measured {
  nlohmann::json rows;
  std::optional<int> last_exposed, first_hidden;
};
Measured measure_rows(LayerSweep& sweep) {
  const Options& o = sweep.o;
  lab::Table table({{.header = "hidden", .key = "hidden", .width = 7},
                    {.header = "parameters", .key = "layer_parameters", .width = 10},
                    {.header = "T_f", .key = "t_forward", .width = 10},
                    {.header = "T_g", .key = "t_gather", .width = 10},
                    {.header = "T_g (a-b)", .key = "t_gather_alpha_beta", .width = 10},
                    {.header = "exposed", .key = "exposed_prefetched", .width = 10},
                    {.header = "exposed (a-b)", .key = "exposed_alpha_beta", .width = 13}});
  table.print_header();
  Measured out;
  for (int h = int(o.sweep.from); h <= o.sweep.to; h *= 2) {
    const memory::Architecture arch = at_hidden(sweep.base, h);
    const Walk plain = sweep.walk(arch, Prefetch::none), prefetched = sweep.walk(arch, Prefetch::forward);
    const double predicted_gather = sweep.gather_seconds(arch);
    const double predicted_exposed = std::max(0.0, predicted_gather - sweep.forward_seconds(arch));
    const bool hidden = prefetched.exposed <= 0.01 * plain.exposed;
    if (hidden && !out.first_hidden) out.first_hidden = h;
    if (!hidden) out.last_exposed = h;
    const double parameters = layer_parameters(arch);
    table.add({h, {parameters, format_parameters(parameters)}, lab::seconds(plain.compute),
               lab::seconds(plain.exposed), lab::seconds(predicted_gather), lab::seconds(prefetched.exposed),
               lab::seconds(predicted_exposed)},
              hidden ? "hidden" : "exposed");
    std::fflush(stdout);
  }
  out.rows = table.json();
  return out;
}

// The boundary by alpha-beta: the smallest h whose gather fits under its
// forward (a bisection: T_g - T_f falls as h grows), or none up to 2^17.
std::optional<int> print_alpha_beta_boundary(const LayerSweep& sweep) {
  const int top = 1 << 17;
  if (!sweep.hides(top)) {
    const memory::Architecture a = at_hidden(sweep.base, top);
    fmt::print("alpha-beta: no hidden size hides the gather: per parameter it takes {:.3g} s of bandwidth against "
               "{:.3g} s of compute; it takes {:.0f} tokens per GPU or more (--seq)\n",
               sweep.gather_seconds(a) / layer_parameters(a), sweep.forward_seconds(a) / layer_parameters(a),
               sweep.o.seq * sweep.gather_seconds(a) / sweep.forward_seconds(a));
    return std::nullopt;
  }
  int lo = 1, hi = top;  // hides(hi); not hides(lo - 1) once lo > 1
  while (lo < hi) {
    const int mid = lo + (hi - lo) / 2;
    if (sweep.hides(mid)) hi = mid;
    else lo = mid + 1;
  }
  fmt::print("alpha-beta: the gather hides from hidden {} (T_g = T_f there)\n", lo);
  return lo;
}

}  // namespace

int prefetch_sweep(const Options& o, RunOptions run_options) {
  const std::string name = studied_model(o);
  run_options.payload_free = true;
  run_options.keep_trace = true;
  const Topology topology = find_topology(run_options.topology);
  LayerSweep sweep{.o = o, .base = memory::model_preset(name), .topology = topology, .run_options = run_options,
                   .flops = topology.device.peak_flops * run_options.efficiency};
  const int p = run_options.ranks;
  if (sweep.base.layers < 4)
    throw Error(fmt::format("--sweep hidden: {} has {} layers; the walk needs 4", name, sweep.base.layers));

  fmt::print("fsdp --sweep hidden={:g}..{:g}: {}'s layer at each hidden size, stage 3 on {} ranks of {}, {} tokens "
             "per GPU, compute at {:.0f}% of {}'s peak; per layer of the forward ...\n",
             o.sweep.from, o.sweep.to, name, p, topology.name, o.seq, 100 * run_options.efficiency,
             topology.device.name);
  std::fflush(stdout);
  const Measured measured = measure_rows(sweep);
  fmt::print("(T_f: a layer's forward, 2 x tokens x its parameters at {}; T_g: its all-gather ({}), measured as the "
             "gap between layer starts less T_f without prefetch; exposed: the same with the next layer prefetched; "
             "(a-b): by the alpha-beta model, exposed = max(T_f, T_g) - T_f)\n",
             fmt::format("{:.0f} TFLOP/s", sweep.flops / 1e12), sweep.algorithm);
  const std::optional<int> boundary = print_alpha_beta_boundary(sweep);
  const std::optional<int> &last_exposed = measured.last_exposed, &first_hidden = measured.first_hidden;
  const bool agrees = (!first_hidden || (boundary && *boundary <= *first_hidden)) &&
                      (!last_exposed || !boundary || *boundary > *last_exposed);
  fmt::print("measured: {}, {}: {} alpha-beta\n",
             last_exposed ? fmt::format("exposed up to hidden {}", *last_exposed) : "exposed at no size swept",
             first_hidden ? fmt::format("hidden from {}", *first_hidden) : "hidden at none",
             agrees ? "agrees with" : "DISAGREES with");
  if (!o.plot.empty())
    plot_boundary(measured.rows, boundary, fmt::format("{}'s layer at each hidden size: stage 3 on {} ranks of {}, {} "
                                                       "tokens per GPU", name, p, topology.name, o.seq),
                  o.plot);
  const auto or_null = [](std::optional<int> h) { return h ? nlohmann::json(*h) : nlohmann::json(nullptr); };
  lab::write_json(o.json, {{"model", name}, {"ranks", p}, {"topology", topology.name}, {"seq", o.seq},
                           {"rows", measured.rows}, {"alpha_beta_hidden_from", or_null(boundary)},
                           {"measured_exposed_up_to", or_null(last_exposed)},
                           {"measured_hidden_from", or_null(first_hidden)}, {"agrees", agrees}});
  return 0;
}

}  // namespace fsdp_lab
