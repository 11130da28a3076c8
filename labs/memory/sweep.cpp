// --sweep: the same model under each ZeRO stage, or over 1 to 1024 GPUs, side
// by side; --plot draws the stages as stacked bars (gnuplot).
#include <algorithm>
#include <iterator>
#include <sstream>

#include <fmt/format.h>

#include "labkit/error.h"
#include "labkit/lab/plot.h"
#include "labkit/lab/table.h"
#include "memory_lab.h"

using namespace labkit::memory;

namespace memory_lab {

namespace lab = labkit::lab;

namespace {
const char* kParts[] = {"weights",        "gathered weights", "gradients",
                        "master weights", "optimizer states", "activations"};
constexpr int kPartCount = std::size(kParts);

struct Row {
  std::string label;
  int zero = 0, dp = 1;  // the plan's, for --json (the label prints them)
  double parts[kPartCount] = {};
  double peak = 0, overheads = 0, total = 0;  // peak: what the step holds at once (the loss's buffers among it)
  // The plot's bar: the parts the peak holds (gradients are not there where the step frees them
  // between steps), and the rest of it (the loss's buffers, workspaces, autocast's copies).
  double at_peak[kPartCount] = {}, rest_at_peak = 0;
  bool fits = false;
};

Row row(const std::string& label, const Plan& p, const Breakdown& b) {
  Row r{label, p.zero, p.dp};
  const Phase& peak = *std::find_if(b.timeline.begin(), b.timeline.end(), [&](const Phase& p) { return p.name == b.peak_at; });
  r.rest_at_peak = b.peak;
  for (const Line& l : b.lines) {
    if (l.overhead) r.overheads += l.bytes;
    for (int i = 0; i < kPartCount; ++i) {
      if (l.component != kParts[i]) continue;
      r.parts[i] = l.bytes;
      if (std::find(peak.lines.begin(), peak.lines.end(), l.component) != peak.lines.end()) r.at_peak[i] = l.bytes;
      r.rest_at_peak -= r.at_peak[i];
    }
  }
  r.peak = b.peak;
  r.total = b.total;
  r.fits = b.fits();
  return r;
}

void plot_stages(const std::vector<Row>& rows, const std::string& path, const Architecture& model, const Plan& plan,
                 const Gpu& gpu) {
  std::ostringstream data;
  data << "stage weights gathered gradients master optimizer activations \"loss, workspaces\" overheads\n";
  for (const Row& r : rows) {
    data << '"' << r.label << '"';
    for (double p : r.at_peak) data << ' ' << p / GB;
    data << ' ' << r.rest_at_peak / GB << ' ' << r.overheads / GB << '\n';
  }
  const std::string commands = fmt::format(
      "set title '{model}, {optimizer}, dp {dp}, on {gpu}: memory per GPU at the peak of a step, by ZeRO stage'\n"
      "set style data histograms\nset style histogram rowstacked\nset style fill solid 0.85 border -1\n"
      "set boxwidth 0.6\nset ylabel 'GB per GPU'\nset key outside right top\nset grid ytics\nset yrange [0:*]\n"
      "set arrow from graph 0, first {limit} to graph 1, first {limit} nohead dashtype 2 linewidth 2\n"
      "set label 'GPU memory' at graph 0.99, first {limit} right offset 0,0.7\n"
      "plot for [i=2:9] $data using i:xtic(1) title columnheader(i)\n",
      fmt::arg("model", model.name), fmt::arg("optimizer", plan.optimizer), fmt::arg("dp", plan.dp),
      fmt::arg("gpu", gpu.name), fmt::arg("limit", gpu.bytes / GB));
  lab::plot(path, {}, data.str(), commands);
}

// A row per plan; the first column names the rows (`rows_are`: stage, or ZeRO-N for the GPU counts).
lab::Table sweep_table(const std::string& rows_are) {
  return lab::Table({{.header = rows_are, .key = "label", .width = 10, .align = lab::Align::left},
                     {.header = "weights", .key = "weights", .width = 9},
                     {.header = "gathered", .key = "gathered", .width = 9},
                     {.header = "grads", .key = "gradients", .width = 9},
                     {.header = "master", .key = "master", .width = 9},
                     {.header = "optimizer", .key = "optimizer", .width = 9},
                     {.header = "activations", .key = "activations", .width = 11},
                     {.header = "peak", .key = "peak", .width = 9},
                     {.header = "overhead", .key = "overheads", .width = 9},
                     {.header = "total", .key = "total", .width = 9},
                     {.header = "(GB per GPU)", .key = "fits", .gap = 2},
                     {.key = "zero"},
                     {.key = "dp"}});
}
}  // namespace

nlohmann::json print_sweep(const Architecture& model, const Plan& base, const Gpu& gpu, const std::string& what,
                           const std::string& plot) {
  std::vector<Row> rows;
  Plan p = base;
  if (what == "zero") {
    for (p.zero = 0; p.zero <= 3; ++p.zero)
      rows.push_back(row(p.zero == 0 ? "DDP" : fmt::format("ZeRO-{}", p.zero), p, estimate(model, p, gpu)));
  } else {
    if (p.zero == 0) p.zero = 3;
    for (p.dp = 1; p.dp <= 1024; p.dp *= 2)
      rows.push_back(row(fmt::format("{} GPU{}", p.dp, p.dp > 1 ? "s" : ""), p, estimate(model, p, gpu)));
  }
  fmt::print("\n");
  lab::Table table = sweep_table(what == "zero" ? "stage" : "ZeRO-" + std::to_string(p.zero));
  table.print_header();
  for (const Row& r : rows) {
    table.add({r.label, gb(r.parts[0]), gb(r.parts[1]), gb(r.parts[2]), gb(r.parts[3]), gb(r.parts[4]),
               gb(r.parts[5]), gb(r.peak), gb(r.overheads), gb(r.total), {r.fits, r.fits ? "fits" : "does not fit"},
               r.zero, r.dp});
  }
  if (!plot.empty()) plot_stages(rows, plot, model, base, gpu);
  return table.json();
}

}  // namespace memory_lab
