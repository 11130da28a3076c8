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
#include "labkit/output.h"
#include "labkit/units.h"
#include "moe.h"

namespace moe_lab {

cli::Sweep parse_sweep(const std::string& text) {
  const cli::Sweep s = cli::parse_sweep(text, {{"capacity", 0, 64, false, ""}});
  if ((s.to - s.from) / kCapacityStep > 32)
    throw Error(fmt::format("--sweep {}: more than 32 factors {:g} apart", text, kCapacityStep));
  return s;
}

int sweep(Options o, const RunOptions& run_options, const Sequences& data, const GptConfig& config) {
  fmt::print("--sweep capacity={:g}..{:g}: {} experts, top-{}, ep {}, balance {}, {} step{} each on the same "
             "batches ...\n",
             o.sweep.from, o.sweep.to, o.moe.experts, o.moe.top_k, o.ep, o.balance, o.steps, o.steps == 1 ? "" : "s");
  std::fflush(stdout);
  fmt::print("{:>8} {:>9} {:>8} {:>11} {:>11} {:>10} {:>9}\n", "factor", "capacity", "dropped", "all-to-all",
             "MoE a step", "loss", "max/mean");
  std::vector<double> factors, drops, traffic;
  nlohmann::json rows = nlohmann::json::array();
  for (double c = o.sweep.from; c <= o.sweep.to + 1e-9; c += kCapacityStep) {
    o.moe.capacity_factor = c;
    const MoeRun r = train(o, run_options, data, config, false);
    if (r.steps.empty()) return 0;  // a process of mpirun that ran another rank than 0
    double dropped = 0, worst = 0;
    for (const StepRun& s : r.steps) {
      dropped += s.drop_rate() / double(r.steps.size());
      worst = std::max(worst, s.imbalance());
    }
    const MoeLayer::Phases& p = r.phases;
    const double time = p.route + p.dispatch + p.experts + p.combine;
    std::int64_t bytes = 0;
    for (const MoeLayer::Traffic& t : r.traffic) bytes += t.to_experts + t.from_experts;
    fmt::print("{:>8g} {:>9} {:>7.1f}% {:>11} {:>11} {:>10.4f} {:>9.2f}\n", c, r.steps.back().layers[0].stats.capacity,
               100 * dropped, format_bytes(std::uint64_t(bytes)), format_seconds(time), r.steps.back().loss, worst);
    factors.push_back(c), drops.push_back(dropped), traffic.push_back(double(bytes));
    rows.push_back({{"capacity_factor", c}, {"capacity", r.steps.back().layers[0].stats.capacity},
                    {"dropped", dropped}, {"all_to_all_bytes", bytes}, {"moe_seconds", time},
                    {"loss", r.steps.back().loss}, {"max_over_mean", worst}});
  }
  fmt::print("(capacity: an expert's, ceil(factor x k x tokens / E), tokens the group's; dropped: the assignments "
             "dropped over the run, every layer's; all-to-all: the last step's bytes between ranks, every layer's, "
             "forward and backward; MoE a step: the last step's MoE layers, forward and backward, "
             "each phase on the slowest rank; loss and max/mean: the last step's, max/mean the worst layer's over "
             "the run)\n");
  if (!o.plot.empty()) {
    const std::string data_file = o.plot + ".dat";
    {
      std::ofstream out = create_file(data_file);
      for (std::size_t i = 0; i < factors.size(); ++i)
        out << fmt::format("{} {} {}\n", factors[i], 100 * drops[i], traffic[i] / 1024);
    }
    run_gnuplot(fmt::format(
        "set terminal {} size 720,380 font 'sans,10' background '#ffffff'\nset output '{}'\n"
        "set xlabel 'capacity factor'\nset ylabel 'assignments dropped (%)'\nset y2label 'all-to-all a step (KiB)'\n"
        "set ytics nomirror\nset y2tics\nset key center right\nset grid\n"
        "plot '{}' using 1:2 with linespoints lw 2 lc rgb '#b30000' title 'dropped', "
        "'' using 1:3 axes x1y2 with linespoints lw 2 lc rgb '#1f77b4' title 'all-to-all'\n",
        gnuplot_terminal(o.plot), o.plot, data_file));
    std::remove(data_file.c_str());
    fmt::print("wrote {}\n", o.plot);
  }
  if (!o.json.empty()) create_file(o.json) << nlohmann::json{{"steps", o.steps}, {"sweep", rows}}.dump(2) << '\n';
  return 0;
}

}  // namespace moe_lab
