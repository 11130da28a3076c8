// The pipeline grid: stage by time, one cell per forward or backward as it
// ran, coloured by kind (forward blue, backward or its input's part orange,
// the weights' part green), a later micro-batch a lighter shade, its number
// in the cell (primed on a stage's later chunks); the idle time shows as
// the grey behind. One panel per schedule, stacked, on one time axis (but
// for a panel with its own, naive's, many times longer).
//
// --compare: every schedule at --stages and --microbatches played out by the
// validator at the chunk times --times F:B:W gives, a row each in a table
// and a panel each in --plot: how the bubble and the picture change with the
// ratio of the backward's parts to the forward.
#include <algorithm>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "labkit/cli.h"
#include "labkit/error.h"
#include "labkit/lab/output.h"
#include "labkit/lab/plot.h"
#include "labkit/lab/table.h"
#include "pipeline.h"

namespace pipeline_lab {

void plot_grid(const std::vector<GridPanel>& panels, const std::string& time_unit, const std::string& path) {
  if (panels.empty()) throw Error("--plot: nothing to draw");
  const auto end_of = [](const GridPanel& p) {
    double end = 0;
    for (const auto& stage : p.slots)
      for (const ScheduleRun::Slot& s : stage) end = std::max(end, s.end);
    return end;
  };
  double common = 0;
  for (const GridPanel& p : panels)
    if (!p.own_axis) common = std::max(common, end_of(p));
  const int rows = int(panels.size());
  int height = 40;
  for (const GridPanel& p : panels) height += 90 + 16 * int(p.slots.size());
  std::string commands = fmt::format(
      "set multiplot layout {},1\nset cbrange [0:1]\nunset colorbox\n"
      "set style fill solid 1.0 border rgb '#ffffff'\nset xlabel \"time ({})\"\n",
      rows, time_unit);
  std::string data;  // gnuplot index i: panel i
  for (std::size_t i = 0; i < panels.size(); ++i) {
    const GridPanel& p = panels[i];
    const int P = int(p.slots.size());
    const double axis = p.own_axis || common == 0 ? end_of(p) : common;
    // x centre, stage, half width, kind (0 forward, 1 backward or input, 2 weights), shade, label
    for (int stage = 0; stage < P; ++stage)
      for (const ScheduleRun::Slot& s : p.slots[std::size_t(stage)]) {
        const int kind = s.op == PipeOp::forward ? 0 : s.op == PipeOp::backward_weight ? 2 : 1;
        const double shade = p.microbatches > 1 ? 0.6 * s.microbatch / (p.microbatches - 1) : 0;
        // A cell too narrow for its number goes without.
        const std::string label = (s.end - s.start) / axis < 0.012 ? ""
                                  : fmt::format("{}{}", s.microbatch, s.chunk >= P ? "'" : "");
        data += fmt::format("{} {} {} {} {} \"{}\"\n", (s.start + s.end) / 2, stage, (s.end - s.start) / 2, kind,
                            shade, label);
      }
    data += "\n\n";
    commands += fmt::format(
        "set title \"{0}\"\nset xrange [0:{1}]\nset yrange [{2}:-0.6]\nset ytics 1\nset ylabel 'stage'\n"
        "set object 1 rect from graph 0, graph 0 to graph 1, graph 1 behind fc rgb '#e4e4e4' fs solid 1.0\n"
        "rgb(k, s) = k == 0 ? int(0x1f + s * 200) * 65536 + int(0x77 + s * 130) * 256 + int(0xb4 + s * 70) : "
        "k == 1 ? int(0xff) * 65536 + int(0x7f + s * 120) * 256 + int(0x0e + s * 200) : "
        "int(0x2c + s * 190) * 65536 + int(0xa0 + s * 90) * 256 + int(0x2c + s * 190)\n"
        "plot $data index {3} using 1:2:3:(0.42):(rgb($4, $5)) with boxxyerror lc rgb variable notitle, "
        "$data index {3} using 1:2:6 with labels font 'sans,7' notitle\n",
        p.title, axis, P - 0.4, i);
  }
  commands += "unset multiplot\n";
  lab::plot(path, {.width = 1300, .height = height, .font = 9}, data, commands);
}

PipeTimes parse_times(const std::string& text) {
  double f = 0, b = 0, w = 0;
  char tail = 0;
  if (std::sscanf(text.c_str(), "%lf:%lf:%lf%c", &f, &b, &w, &tail) != 3 || !(f > 0) || !(b > 0) || !(w >= 0) ||
      f > 1e6 || b > 1e6 || w > 1e6)
    throw Error(fmt::format("'{}': F:B:W, a stage's forward, backward for the input and for the weights, e.g. 1:1:1 "
                            "(F and B above 0, W 0 or more)", text));
  return {f, b, w, 0};
}

void add_compare_options(CLI::App& app, Options& o) {
  app.add_flag("--compare", o.compare, "every schedule at --stages and --microbatches played out side by side at "
                                       "--times: the bubble table, and with --plot their grids");
  app.add_option("--times", o.times, "with --compare: a stage's forward, backward for the input and for the weights, "
                                     "F:B:W")
      ->capture_default_str()->check(cli::parsed_by([](const std::string& text) { parse_times(text); }));
}

int compare(const Options& o, const PipeTimes& times) {
  fmt::print("every schedule at P = {}, M = {}, played out by the validator with a chunk's forward {:g}, backward for "
             "the input {:g}, for the weights {:g} (a stage's whole backward {:g}; V = 2 halves each chunk's)\n",
             o.stages, o.microbatches, times.forward, times.backward_input, times.backward_weight,
             times.backward_input + times.backward_weight);
  lab::Table table({{.header = "schedule", .key = "schedule", .width = 12, .align = lab::Align::left},
                    {.header = "V", .key = "virtual_stages", .width = 3},
                    {.header = "step", .key = "makespan", .width = 7},
                    {.header = "bubble", .key = "bubble", .width = 8},
                    {.header = "formula", .key = "formula", .width = 8},
                    {.header = "in flight", .key = "peak_in_flight", .width = 14}});
  table.print_header();
  std::vector<GridPanel> panels;
  for (const std::string_view name : kScheduleNames) {
    const int V = default_virtual(name);
    const PipeTimes chunk{times.forward / V, times.backward_input / V, times.backward_weight / V, times.message};
    Schedule s;
    try {
      s = make_schedule(name, o.stages, o.microbatches, V, chunk);
    } catch (const Error& e) {  // interleaved needs M a multiple of P: say so on its row, which has no numbers
      fmt::print("{:<12} {:>3}  {}\n", name, V, e.what());
      continue;
    }
    const ScheduleRun r = validate(s, chunk);
    std::vector<double> in_flight;  // in micro-batches of a stage's layers: a chunk's activations are 1/V of them
    for (int peak : r.peak_in_flight) in_flight.push_back(double(peak) / V);
    table.add({std::string(name), V, lab::number(r.makespan, "{:.4g}"), lab::percent(r.bubble),
               lab::percent(bubble_formula(s, chunk)), {in_flight, fmt::format("{:g}", fmt::join(in_flight, " "))}});
    panels.push_back({fmt::format("{}: bubble {:.1f}%{}", name, 100 * r.bubble,
                                  name == "naive" ? " (on a time axis of its own)" : ""),
                      r.slots, o.microbatches, name == "naive"});
  }
  fmt::print("(step: the makespan in units of a stage's forward; in flight: each stage's peak, in micro-batches of "
             "its layers; formula: zbv's is the fill alone, (P-1)F over the step, which the paper's zero leaves out by "
             "counting from each stage's first forward{})\n",
             o.microbatches < o.stages ? "; the zero-bubble ones' hold from M = P on, and M < P here" : "");
  if (!o.plot.empty()) plot_grid(panels, "a stage's forward = 1", o.plot);
  // Its times are --times', in units of a stage's forward, not seconds.
  lab::write_json(o.json, {{"stages", o.stages}, {"microbatches", o.microbatches},
                           {"time_unit", "--times' (a stage's forward: 1)"}, {"forward", times.forward},
                           {"backward_input", times.backward_input}, {"backward_weight", times.backward_weight},
                           {"schedules", table.json()}});
  return 0;
}

}  // namespace pipeline_lab
