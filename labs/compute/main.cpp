// Lab: compute — what training costs in FLOPs, and what bounds each op.
//
//   ./labkit lab compute --budget
//
//   # C = 6 N D (Kaplan et al. 2020): 2 FLOPs per parameter per token forward, 4 backward
//   model              N      D   C = 6ND   reading   a100-hours   reading  its MFU  note
//   GPT-2           1.5B    40B  3.60e+20   3.6e+20          458      ~460      70%
//   ...
//
// --budget the published runs' compute budgets (GPT-2 to Llama 2) and their
// GPU-hours at --mfu, --ccr the communication roofline of data parallelism
// (the course's tables, corrected: book/10-compute.md), --roofline this
// machine's peak and memory bandwidth, measured, and the tiny GPT's ops against
// them (--plot FILE draws it); --json FILE all of it. The train lab prints its
// MFU (labs/train/mfu.cpp). Formulas: core/src/compute.cpp.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "compute_lab.h"
#include "labkit/error.h"
#include "labkit/gpt.h"
#include "labkit/lab/main.h"
#include "labkit/lab/option_checks.h"
#include "labkit/lab/output.h"
#include "labkit/output.h"
#include "labkit/run.h"

namespace cli = labkit::cli;
namespace lab = labkit::lab;

int main(int argc, char** argv) {
  CLI::App app{"Lab: compute budgets, the roofline and the communication roofline"};
  bool budget = false, ccr = false, roofline = false;
  double mfu = 0.7;
  int batch = 0;
  std::string gpu = "a100", device = "cpu", model = "tiny-gpt", plot, json;
  app.add_flag("--budget", budget, "C = 6ND for the reading's runs, and GPU-hours at --mfu");
  app.add_option("--mfu", mfu, "--budget: model FLOPs utilization (the reading's GPT-2 row implies 0.7)")
      ->capture_default_str()->check(cli::above(0.0, 1.0));
  app.add_option("--gpu", gpu, "--budget: a100 or h100 (dense BF16 peak)")
      ->capture_default_str()->check(cli::one_of("gpu", {"a100", "h100"}));
  app.add_flag("--ccr", ccr, "the communication-to-computation ratio of data parallelism, and its ridge");
  app.add_flag("--roofline", roofline, "measure this machine's roofs and time a GPT's ops against them");
  app.add_option("--device", device, "--roofline: cpu, or cuda (a GPU)")
      ->capture_default_str()->check(cli::timed_device());
  app.add_option("--model", model, "--roofline: tiny-gpt (context 32) or small-gpt (context 256: a GPU's size)")
      ->capture_default_str()->check(cli::parsed_by([](const std::string& name) { labkit::gpt_preset(name, 1); }));
  app.add_option("--batch", batch, "--roofline: sequences (default: 65,536 tokens' worth, so that the tensors "
                 "outgrow the caches)")->check(cli::in_range(1, 16384));
  app.add_option("--plot", plot, "--roofline: draw it, ops as points, SVG or PNG (gnuplot)")->check(cli::figure_file());
  app.add_option("--json", json, "also write every table as JSON to this file")->check(cli::output_file());
  return lab::run_main(app, argc, argv, [&] {
    for (const auto& [name, value] : {std::pair<std::string, std::string>{"--plot", plot}, {"--device", device},
                                       {"--model", model}, {"--batch", std::to_string(batch)}})
      if (app.count(name) > 0 && !roofline)
        throw labkit::Error(fmt::format("{} {}: only --roofline reads it (add --roofline)", name, value));
    if (!budget && !ccr && !roofline) budget = ccr = true;
    for (const auto& [name, value] : {std::pair<std::string, std::string>{"--mfu", fmt::format("{:g}", mfu)},
                                       {"--gpu", gpu}})
      if (app.count(name) > 0 && !budget)
        throw labkit::Error(fmt::format("{} {}: only --budget reads it (add --budget)", name, value));
    nlohmann::json report;
    if (budget) report["budget"] = compute_lab::print_budget(labkit::compute::accelerator(gpu), mfu);
    if (budget && ccr) fmt::print("\n");
    if (ccr) report["ccr"] = compute_lab::print_ccr();
    if (roofline) {
      // Measuring takes seconds: the option fuzzer (fuzz/) stops here, as where a lab's ranks would start.
      if (labkit::before_ranks_start) labkit::before_ranks_start(labkit::RunOptions{});
      if (budget || ccr) fmt::print("\n");
      report["roofline"] = compute_lab::print_roofline(labkit::parse_device(device), model, batch, plot);
    }
    lab::write_json(json, report);
    return 0;
  });
}
