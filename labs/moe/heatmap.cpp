// The routing heatmap: a run's assignments per expert (rows) and step
// (columns), layer 0, darker for more, beside the fair share and the
// capacity in the colour bar's range. --compare trains once with each way of
// balancing (none, aux, bias) on the same batches and draws the three side by
// side: the collapse and its two cures.
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "labkit/error.h"
#include "labkit/lab/output.h"
#include "labkit/lab/plot.h"
#include "labkit/lab/table.h"
#include "moe.h"

namespace moe_lab {

void plot_heatmaps(const std::vector<HeatmapPanel>& panels, const std::string& path) {
  if (panels.empty()) throw Error("--plot: nothing to draw");
  std::int64_t most = 1;
  for (const HeatmapPanel& p : panels)
    for (const StepRun& s : p.run->steps)
      for (std::int64_t c : s.layers[0].stats.chosen) most = std::max(most, c);
  const int experts = int(panels[0].run->steps[0].layers[0].stats.chosen.size());
  std::string commands = fmt::format(
      "set multiplot layout 1,{}\nset palette defined (0 '#ffffff', 1 '#fdd49e', 2 '#fc8d59', 3 '#b30000', "
      "4 '#3f0000')\nset cbrange [0:{}]\nset xlabel 'step'\nset ylabel 'expert (layer 0)'\nset yrange [-0.5:{}]\n"
      "set ytics 1\n",
      panels.size(), most, experts - 0.5);
  std::string data;  // gnuplot index i: panel i, a line per step and expert, a blank line after each step
  for (std::size_t i = 0; i < panels.size(); ++i) {
    const HeatmapPanel& p = panels[i];
    for (std::size_t s = 0; s < p.run->steps.size(); ++s) {
      for (std::size_t e = 0; e < p.run->steps[s].layers[0].stats.chosen.size(); ++e)
        data += fmt::format("{} {} {}\n", s + 1, e, p.run->steps[s].layers[0].stats.chosen[e]);
      data += '\n';
    }
    data += '\n';
    commands += fmt::format("set title \"{}\"\nset xrange [0.5:{}]\n"
                            "plot $data index {} using 1:2:3 with image notitle\n",
                            p.title, p.run->steps.size() + 0.5, i);
  }
  commands += "unset multiplot\n";
  lab::plot(path, {.width = 40 + 420 * int(panels.size()), .height = 360, .font = 9}, data, commands);
}

int compare_balance(Options o, const RunOptions& run_options, const Sequences& data, const GptConfig& config) {
  fmt::print("every way of balancing, {} step{} on the same batches: {} experts, top-{}, capacity factor {:g}, ep {}; "
             "aux at alpha {:g}, bias at gamma {:g}\n",
             o.steps, o.steps == 1 ? "" : "s", o.moe.experts, o.moe.top_k, o.moe.capacity_factor, o.ep,
             o.moe.aux_weight, o.moe.bias_rate);
  std::fflush(stdout);
  lab::Table table({{.header = "balance", .key = "balance", .width = 8, .align = lab::Align::left},
                    {.header = "loss", .key = "loss", .width = 8},
                    {.header = "dropped", .key = "dropped", .width = 8},
                    {.header = "max/mean", .key = "max_over_mean", .width = 9},
                    {.header = "tokens per expert, layer 0, the last step", .key = "chosen",
                     .align = lab::Align::left, .gap = 2}});
  table.print_header();
  std::vector<MoeRun> runs;
  std::vector<HeatmapPanel> panels;
  lab::TracePerRow traces(run_options);
  for (Balance b : {Balance::none, Balance::aux, Balance::bias}) {
    o.moe.balance = b;
    runs.push_back(train(o, traces.row(name_of(b)), data, config, false));
  }
  for (std::size_t i = 0; i < runs.size(); ++i) {
    const MoeRun& r = runs[i];
    if (r.steps.empty()) return 0;  // a process of mpirun that ran another rank than 0
    const std::string name{name_of(Balance(i))};
    const StepRun& last = r.steps.back();
    const std::vector<std::int64_t>& chosen = last.layers[0].stats.chosen;
    const double dropped = last.drop_rate();
    table.add({name, lab::number(last.loss, "{:.4f}"), {dropped, fmt::format("{:.1f}%", 100 * dropped)},
               lab::number(last.imbalance(), "{:.2f}"), {chosen, counts_text(chosen)}});
    panels.push_back({fmt::format("{}: {:.0f}% dropped at step {}", name, 100 * dropped, r.steps.size()), &r});
  }
  fmt::print("(the last step; dropped: every layer's mean; max/mean: the busiest expert over the fair share, the "
             "worst layer's)\n");
  traces.print("way of balancing");
  if (!o.plot.empty()) plot_heatmaps(panels, o.plot);
  lab::write_json(o.json, {{"steps", o.steps}, {"runs", table.json()}});
  return 0;
}

}  // namespace moe_lab
