// --budget: the compute budgets of the course reading "Day 64: Distributed Training Fundamentals"
// (book/99-references.md): C = 6 N D (Kaplan et al. 2020) for four runs, and the A100
// GPU-hours beside them.
//
//   hours = C / (peak x MFU) / 3600
//
// Its GPU-hours column mixes assumptions: GPT-2's is 70% MFU of the A100's
// 312 TFLOP/s; the LLaMA-2 rows are Meta's measured hours (Touvron et al.
// 2023, Table 2: 184,320 and 1,720,320), about 40% MFU; GPT-4's uses its total
// parameter count, where 6ND wants the parameters a token meets.
#include <cmath>

#include <fmt/format.h>

#include "compute_lab.h"
#include "labkit/lab/table.h"

namespace lab = labkit::lab;

using namespace labkit::compute;

namespace compute_lab {

namespace {
struct Run {
  const char* model;
  double params, tokens;
  double reading_flops, reading_hours;  // as Day 64 prints them
  const char* note;                     // where Day 64's hours come from, if not from the MFU asked
};

constexpr Run kReadingRuns[] = {
    {"GPT-2", 1.5e9, 40e9, 3.6e20, 460, "the reading takes 70% MFU"},
    {"LLaMA-2 7B", 7e9, 2e12, 8.4e22, 180e3, "Meta's measured 184,320 hours (Llama 2, Table 2)"},
    {"LLaMA-2 70B", 70e9, 2e12, 8.4e23, 1.7e6, "Meta's measured 1,720,320 hours (Llama 2, Table 2)"},
    {"GPT-4 (est.)", 1.8e12, 13e12, 1.4e26, 200e6, "1.8T is every expert; see below"},
};

// GPT-4 as estimated by SemiAnalysis (Patel & Wong, "GPT-4 Architecture,
// Infrastructure, Training Dataset, Costs", 2023): a mixture of 16 experts, 2 per
// token, about 280B of its 1.8T parameters used per token; ~25,000 A100s for
// 90-100 days (Day 64's epigraph: "25,000 GPUs for 3 months").
constexpr double kGpt4Active = 280e9, kGpt4Gpus = 25000, kGpt4Days = 90;

std::string count(double v) {
  if (v >= 1e12) return fmt::format("{:g}T", v / 1e12);
  if (v >= 1e9) return fmt::format("{:g}B", v / 1e9);
  return fmt::format("{:g}M", v / 1e6);
}

// Day 64's "~180K" style: three significant figures at most.
std::string rounded(double hours) {
  if (hours >= 1e6) return fmt::format("~{:g}M", hours / 1e6);
  if (hours >= 1e4) return fmt::format("~{:g}K", hours / 1e3);
  return fmt::format("~{:g}", hours);
}
}  // namespace

std::string grouped(double value) {
  const std::string digits = fmt::format("{:.0f}", std::round(value));
  const std::size_t sign = digits[0] == '-' ? 1 : 0;
  std::string out = digits.substr(0, sign);
  for (std::size_t i = sign; i < digits.size(); ++i) {
    if (i > sign && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

nlohmann::json print_budget(const Accelerator& gpu, double mfu) {
  const double peak = gpu.roof.peak_flops;
  fmt::print("# C = 6 N D (Kaplan et al. 2020): 2 FLOPs per parameter per token forward, 4 backward\n");
  fmt::print("# {}-hours = C / ({:.0f} TFLOP/s dense BF16 x {:.0f}% MFU) / 3600\n", gpu.name, peak / 1e12, mfu * 100);
  // The note is printed after its two spaces on every row, those without one too.
  lab::Table table({{.header = "model", .key = "model", .width = 13, .align = lab::Align::left},
                    {.header = "N", .key = "parameters", .width = 6},
                    {.header = "D", .key = "tokens", .width = 6},
                    {.header = "C = 6ND", .key = "flops", .width = 9},
                    {.header = "reading", .key = "reading_flops", .width = 9},
                    {.header = gpu.name + "-hours", .key = "hours", .width = 14},
                    {.header = "reading", .key = "reading_hours", .width = 10},
                    {.header = "its MFU", .key = "reading_mfu", .width = 8},
                    {.header = "note", .key = "note", .align = lab::Align::left, .gap = 2, .keep_empty = true},
                    {.key = "differs"}});
  table.print_header();
  for (const Run& r : kReadingRuns) {
    const double flops = training_flops(r.params, r.tokens), hours = device_hours(flops, peak, mfu);
    // Day 64's hours are A100-hours: the MFU they imply is on the A100's peak.
    const double its_mfu = implied_mfu(r.reading_flops, r.reading_hours, accelerator("a100").roof.peak_flops);
    const bool differs = std::abs(hours / r.reading_hours - 1) > 0.1;
    table.add({r.model, {r.params, count(r.params)}, {r.tokens, count(r.tokens)}, lab::number(flops, "{:.2e}"),
               lab::number(r.reading_flops, "{:.1e}"), {hours, grouped(hours)},
               {r.reading_hours, rounded(r.reading_hours)}, {its_mfu, fmt::format("{:.0f}%", its_mfu * 100)},
               differs ? fmt::format("differs: {}", gpu.name == "a100" ? r.note : "the reading counts A100-hours") : "",
               differs});
  }
  const double gpt4 = training_flops(kGpt4Active, 13e12), epigraph = kGpt4Gpus * kGpt4Days * 24;
  const double epigraph_mfu = implied_mfu(gpt4, epigraph, accelerator("a100").roof.peak_flops);
  fmt::print("# GPT-4 is a mixture of experts (est. 16, 2 per token): a token meets ~{} of its {} parameters, so\n"
             "#   C = 6 x {} x 13T = {:.2e}, not 1.4e26 (6ND counts the parameters a token uses)\n", count(kGpt4Active),
             count(1.8e12), count(kGpt4Active), gpt4);
  fmt::print("# the reading's epigraph, {} GPUs for 3 months = {} A100-hours, is that C at {:.0f}% MFU "
             "(its table says ~200M)\n", grouped(kGpt4Gpus), grouped(epigraph), epigraph_mfu * 100);
  return {{"gpu", gpu.name}, {"peak_flops", peak}, {"mfu", mfu}, {"runs", table.json()},
          {"gpt4_active_flops", gpt4}, {"gpt4_epigraph_hours", epigraph}, {"gpt4_epigraph_mfu", epigraph_mfu}};
}

}  // namespace compute_lab
