// Lab 3: memory — will it fit, and on how many GPUs?
//
//   ./labkit lab memory --model llama2-7b --optimizer adamw --precision bf16 --zero 3 --dp 64 --gpu h100-80g
//
//   llama2-7b (6.74B parameters), training with adamw, bf16 weights, ZeRO-3 (FSDP), dp 64
//   on h100-80g (85.5 GB usable)
//
//   component                              GB per GPU  note
//   weights                                      0.21  bf16 (ZeRO-3 over 64)
//   ...
//   total                                       33.60  fits: 39% of 85.5 GB
//
// The plan's options (plan.cpp); --timeline the memory over one step and
// --recommend the parallelism to use (breakdown.cpp), --sweep zero|gpus a
// comparison (sweep.cpp), --json FILE all of it. The lab is analytical: it
// computes from formulas (core/src/memory.cpp) and runs no ranks.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "labkit/error.h"
#include "labkit/lab/main.h"
#include "labkit/lab/option_checks.h"
#include "labkit/lab/output.h"
#include "memory_lab.h"

using namespace labkit::memory;
namespace cli = labkit::cli;
namespace lab = labkit::lab;

namespace {
// The views that --inference has no use for, refused with the reason.
void check_inference_views(const CLI::App& app, const std::string& sweep, bool timeline, int zero) {
  cli::refuse_unread(app, "--inference", {"--sp", "--virtual", "--hsdp"});
  if (!sweep.empty()) throw labkit::Error("--sweep " + sweep + ": sweeps compare training plans");
  if (timeline)
    throw labkit::Error("--timeline: the memory over one training step (gradients, the optimizer's step); "
                        "--inference holds its weights and KV cache throughout");
  if (app.count("--zero"))
    throw labkit::Error(fmt::format("--zero {}: ZeRO shards what training keeps (optimizer states, gradients, "
                                    "weights) over --dp; --inference splits its weights by --tp and --pp", zero));
}
}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Lab 3: what training and inference need per GPU"};
  memory_lab::PlanOptions o;
  std::string sweep, json, plot;
  bool timeline = false, advice = false, list = false;
  int gpus = 0, per_node = 8;
  app.add_flag("--models", list, "list the model presets with their parameter counts");
  memory_lab::add_plan_options(app, o);
  app.add_flag("--timeline", timeline, "memory over one training step");
  CLI::Option* recommend = app.add_flag("--recommend", advice, "which parallelism to use, and why");
  app.add_option("--gpus", gpus, "--recommend: GPUs available (default: dp x tp x pp)")
      ->check(cli::at_least(1))->needs(recommend);
  app.add_option("--gpus-per-node", per_node, "--recommend: GPUs per node")
      ->capture_default_str()->check(cli::at_least(1))->needs(recommend);
  app.add_option("--sweep", sweep, "zero (stages 0-3), gpus (1 to 1024 ranks) or recompute (none, selective, with "
                                   "--sp, full: Korthikanti et al.'s Figure 1)")
      ->check(cli::one_of("sweep", {"zero", "gpus", "recompute"}));
  app.add_option("--plot", plot, "--sweep zero: a stacked bar per stage, SVG or PNG (gnuplot)")
      ->check(cli::figure_file());
  app.add_option("--json", json, "also write everything as JSON to this file")->check(cli::output_file());
  return lab::run_main(app, argc, argv, [&] {
    if (list) {  // the presets, and nothing else
      std::vector<std::string> others;
      for (const CLI::Option* option : app.get_options())
        if (option->get_name() != "--models" && option->get_name() != "--json") others.push_back(option->get_name());
      cli::refuse_unread(app, "--models", others);
      lab::write_json(json, memory_lab::list_models());
      return 0;
    }
    const Architecture arch = model_preset(o.model);
    if (o.inference) check_inference_views(app, sweep, timeline, o.plan.zero);
    const Plan plan = memory_lab::make_plan(o, arch);
    if (!plot.empty() && sweep != "zero") throw labkit::Error("--plot " + plot + ": draws --sweep zero (add it)");
    const Gpu device = gpu_preset(o.gpu);

    nlohmann::json report = memory_lab::print_breakdown(arch, plan, device);
    if (timeline) report["timeline"] = memory_lab::print_timeline(arch, plan);
    if (advice) report["recommendation"] = memory_lab::print_recommendation(arch, plan, device, gpus, per_node);
    if (sweep == "recompute")
      report["sweep"] = memory_lab::print_recompute_sweep(arch, plan, device);
    else if (!sweep.empty())
      report["sweep"] = memory_lab::print_sweep(arch, plan, device, sweep, plot);
    lab::write_json(json, report);
    return 0;
  });
}
