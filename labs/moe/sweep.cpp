// --sweep capacity=A..B: the capacity factor against what it costs. A
// factor below 1 cannot hold even a perfectly balanced step's tokens; above
// it, fewer are dropped and the experts and all-to-alls carry more. Each
// factor trains --steps on the same batches; the table gives the assignments
// dropped over the run, the last step's all-to-all bytes and MoE time; the
// plot the drops and the bytes.
#include <cstdio>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "labkit/error.h"
#include "labkit/lab/option_checks.h"
#include "labkit/lab/output.h"
#include "labkit/lab/plot.h"
#include "labkit/lab/table.h"
#include "labkit/units.h"
#include "moe.h"

namespace moe_lab {

namespace {

cli::Sweep parse_sweep(const std::string& text) {
  const cli::Sweep s = cli::parse_sweep(text, {{"capacity", 0, 64, false, ""}});
  if ((s.to - s.from) / kCapacityStep > 32)
    throw Error(fmt::format("--sweep {}: more than 32 factors {:g} apart", text, kCapacityStep));
  return s;
}

// The drops (left axis) and the all-to-all bytes (right) against the factor, from the table's rows.
void plot_sweep(const nlohmann::json& rows, const std::string& path) {
  std::string data;
  for (const nlohmann::json& row : rows)
    data += fmt::format("{} {} {}\n", row["capacity_factor"].get<double>(), 100 * row["dropped"].get<double>(),
                        double(row["all_to_all_bytes"].get<std::int64_t>()) / 1024);
  lab::plot(path, {.width = 720, .height = 380}, data,
      "set xlabel 'capacity factor'\nset ylabel 'assignments dropped (%)'\nset y2label 'all-to-all a step (KiB)'\n"
      "set ytics nomirror\nset y2tics\nset key center right\nset grid\n"
      "plot $data using 1:2 with linespoints lw 2 lc rgb '#b30000' title 'dropped', "
      "'' using 1:3 axes x1y2 with linespoints lw 2 lc rgb '#1f77b4' title 'all-to-all'\n");
}

}  // namespace

void add_sweep_option(CLI::App& app, Options& o) {
  cli::add_parsed(app, "--sweep", o.sweep, parse_sweep,
      "capacity=A..B: each capacity factor from A to B, 0.25 apart, trained on the same batches: the assignments "
      "dropped and the MoE layers' time (with --plot drawn)");
}

int sweep(Options o, const RunOptions& run_options, const Sequences& data, const GptConfig& config) {
  fmt::print("--sweep capacity={:g}..{:g}: {} experts, top-{}, ep {}, balance {}, {} step{} each on the same "
             "batches ...\n",
             o.sweep.from, o.sweep.to, o.moe.experts, o.moe.top_k, o.ep, o.balance, o.steps, o.steps == 1 ? "" : "s");
  std::fflush(stdout);
  lab::Table table({{.header = "factor", .key = "capacity_factor", .width = 8},
                    {.header = "capacity", .key = "capacity", .width = 9},
                    {.header = "dropped", .key = "dropped", .width = 8},
                    {.header = "all-to-all", .key = "all_to_all_bytes", .width = 11},
                    {.header = "MoE a step", .key = "t_moe", .width = 11},
                    {.header = "loss", .key = "loss", .width = 10},
                    {.header = "max/mean", .key = "max_over_mean", .width = 9}});
  table.print_header();
  for (double c = o.sweep.from; c <= o.sweep.to + 1e-9; c += kCapacityStep) {
    o.moe.capacity_factor = c;
    const MoeRun r = train(o, run_options, data, config, false);
    if (r.steps.empty()) continue;  // a process of mpirun that ran another rank than 0: on to the next run
    double dropped = 0, worst = 0;
    for (const StepRun& s : r.steps) {
      dropped += s.drop_rate() / double(r.steps.size());
      worst = std::max(worst, s.imbalance());
    }
    const MoeLayer::Phases& p = r.phases;
    std::int64_t bytes = 0;
    for (const MoeLayer::Traffic& t : r.traffic) bytes += t.to_experts + t.from_experts;
    table.add({lab::number(c, "{:g}"), r.steps.back().layers[0].stats.capacity,
               {dropped, fmt::format("{:.1f}%", 100 * dropped)}, {bytes, format_bytes(std::uint64_t(bytes))},
               lab::seconds(p.route + p.dispatch + p.experts + p.combine), lab::number(r.steps.back().loss, "{:.4f}"),
               lab::number(worst, "{:.2f}")});
  }
  fmt::print("(capacity: an expert's, ceil(factor x k x tokens / E), tokens the group's; dropped: the assignments "
             "dropped over the run, every layer's; all-to-all: the last step's bytes between ranks, every layer's, "
             "forward and backward; MoE a step: the last step's MoE layers, forward and backward, "
             "each phase on the slowest rank; loss and max/mean: the last step's, max/mean the worst layer's over "
             "the run)\n");
  if (!o.plot.empty()) plot_sweep(table.json(), o.plot);
  lab::write_json(o.json, {{"steps", o.steps}, {"sweep", table.json()}});
  return 0;
}

}  // namespace moe_lab
