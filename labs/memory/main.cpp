// Lab 3: memory — will it fit, and on how many GPUs?
//
//   ./labkit lab memory --model llama2-7b --optimizer adamw --precision bf16 --zero 3 --dp 64 --gpu h100-80g
//
//   component                              GB per GPU  note
//   weights                                      0.21  bf16 (ZeRO-3 over 64)
//   ...
//   total                                       xx.x   fits: xx% of 85.5 GB
//
// --timeline the memory over one step, --recommend the parallelism to use,
// --sweep zero|gpus a comparison, --json FILE all of it. The lab is analytical:
// it computes from formulas (core/src/memory.cpp) and runs no ranks.
#include <fstream>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "labkit/cli.h"
#include "labkit/error.h"
#include "labkit/output.h"
#include "memory_lab.h"

using namespace labkit::memory;
namespace cli = labkit::cli;

namespace {
// What the model's shape allows: tensor parallelism gives each rank whole
// attention heads (and splits the KV heads, or copies each to the same number
// of ranks), a pipeline stage holds at least one layer, HSDP's shard groups
// split the data-parallel ranks evenly, and sequence parallelism has tensor-
// parallel ranks to shard over.
void check_plan(const Architecture& m, const Plan& p) {
  if (m.heads % p.tp != 0) {
    std::vector<int> divisors;
    for (int d = 1; d <= m.heads; ++d)
      if (m.heads % d == 0) divisors.push_back(d);
    throw labkit::Error(fmt::format("--tp {}: each rank takes whole attention heads, and {} has {}: --tp must "
                                    "divide {} ({})", p.tp, m.name, m.heads, m.heads, fmt::join(divisors, ", ")));
  }
  if (!m.latent && m.kv_heads % p.tp != 0 && p.tp % m.kv_heads != 0)
    throw labkit::Error(fmt::format("--tp {}: {}'s {} KV heads neither split evenly over {} ranks nor copy evenly "
                                    "to them", p.tp, m.name, m.kv_heads, p.tp));
  if (p.pp > m.layers)
    throw labkit::Error(fmt::format("--pp {}: {} has {} layers, and each pipeline stage needs at least one", p.pp,
                                    m.name, m.layers));
  if (p.shard_group > 0 && p.dp % p.shard_group != 0)
    throw labkit::Error(fmt::format("--hsdp {}: shard groups must split --dp {} evenly", p.shard_group, p.dp));
  if (p.sequence_parallel && p.tp == 1)
    throw labkit::Error("--sp: sequence parallelism splits the norms' and dropouts' activations over the "
                        "tensor-parallel ranks; with --tp 1 there are none to split over (add --tp)");
}
}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Lab 3: what training and inference need per GPU"};
  cli::one_line_errors(app);
  std::string model = "llama2-7b", gpu = "h100-80g", precision = "bf16", grads = "bf16", states = "fp32";
  std::string kv = "bf16", recompute = "none", attention = "eager", sweep, json, plot;
  Plan plan;
  bool no_master = false, inference = false, timeline = false, advice = false, list = false;
  double activations_gb = -1;
  int gpus = 0, per_node = 8;
  const auto precision_name = cli::parsed_by(parse_precision);
  app.add_option("--model", model, "a preset (--models lists them)")
      ->capture_default_str()->check(cli::parsed_by(model_preset));
  app.add_flag("--models", list, "list the model presets with their parameter counts");
  app.add_option("--gpu", gpu, "h100-80g, h200-141g, a100-80g, a100-40g, l40s-48g, rtx4090-24g")
      ->capture_default_str()->check(cli::parsed_by(gpu_preset));
  app.add_option("--optimizer", plan.optimizer, "sgd, momentum, adam, adamw, adafactor, lion, ...")
      ->capture_default_str()->check(cli::parsed_by(find_optimizer));
  app.add_option("--precision", precision, "weights: fp32, bf16, fp16, fp8-e4m3, fp8-e5m2, int8, int4")
      ->capture_default_str()->check(precision_name);
  app.add_option("--grad-precision", grads, "gradients")->capture_default_str()->check(precision_name);
  app.add_option("--state-precision", states, "optimizer states")->capture_default_str()->check(precision_name);
  app.add_flag("--no-master", no_master, "no fp32 master copy of the weights");
  app.add_option("--zero", plan.zero, "ZeRO stage 0-3 (3 = FSDP)")->capture_default_str()->check(cli::in_range(0, 3));
  app.add_option("--dp", plan.dp, "data-parallel ranks")->capture_default_str()->check(cli::at_least(1));
  app.add_option("--tp", plan.tp, "tensor-parallel degree")->capture_default_str()->check(cli::at_least(1));
  app.add_option("--pp", plan.pp, "pipeline stages")->capture_default_str()->check(cli::at_least(1));
  app.add_option("--hsdp", plan.shard_group, "HSDP: shard inside groups of this many ranks")->check(cli::at_least(1));
  app.add_flag("--sp", plan.sequence_parallel, "sequence parallelism (with --tp)");
  app.add_option("--recompute", recompute, "activation recomputation: none, selective, full")
      ->capture_default_str()->check(cli::parsed_by(parse_recompute));
  app.add_option("--attention", attention, "attention's kernel: eager (keeps the s x s scores) or flash")
      ->capture_default_str()->check(cli::parsed_by(parse_attention));
  // Whole numbers, held as doubles by the formulas.
  app.add_option("--micro-batch", plan.micro_batch, "sequences per micro-batch")
      ->type_name("INT")->capture_default_str()->check(cli::at_least(1));
  app.add_option("--seq", plan.seq, "sequence length")->type_name("INT")->capture_default_str()->check(cli::at_least(1));
  app.add_option("--activations-gb", activations_gb, "use this activation memory instead of the formula")
      ->check(cli::at_least(0.0));
  double params = 0;
  app.add_option("--params", params, "use this parameter count instead of the model's (e.g. 7e9); the shape "
                                     "(layers, hidden, heads) stays the model's")->check(cli::above(0.0));
  app.add_flag("--inference", inference, "serving: weights and KV cache");
  app.add_option("--batch", plan.batch, "inference: concurrent sequences")
      ->type_name("INT")->capture_default_str()->check(cli::at_least(1));
  app.add_option("--kv-precision", kv, "inference: KV cache")->capture_default_str()->check(precision_name);
  app.add_flag("--timeline", timeline, "memory over one training step");
  app.add_flag("--recommend", advice, "which parallelism to use, and why");
  app.add_option("--gpus", gpus, "--recommend: GPUs available (default: dp x tp x pp)")->check(cli::at_least(1));
  app.add_option("--gpus-per-node", per_node, "--recommend: GPUs per node")
      ->capture_default_str()->check(cli::at_least(1));
  app.add_option("--sweep", sweep, "zero (stages 0-3) or gpus (1 to 1024 ranks)")
      ->check(cli::one_of("sweep", {"zero", "gpus"}));
  app.add_option("--plot", plot, "--sweep zero: a stacked bar per stage, SVG or PNG (gnuplot)")
      ->check(cli::figure_file());
  app.add_option("--json", json, "also write everything as JSON to this file")->check(cli::output_file());
  CLI11_PARSE(app, argc, argv);
  try {
    if (list) return memory_lab::list_models();
    const Architecture arch = model_preset(model);
    plan.training = !inference;
    plan.precision = parse_precision(precision);
    plan.state = {plan.precision, parse_precision(grads), parse_precision(states), !no_master};
    plan.kv_dtype = parse_precision(kv);
    plan.recompute = parse_recompute(recompute);
    plan.attention = parse_attention(attention);
    if (activations_gb >= 0) plan.activations = activations_gb * 1e9;
    if (params > 0) plan.params = params;
    check_plan(arch, plan);
    if (!sweep.empty() && inference) throw labkit::Error("--sweep " + sweep + ": sweeps compare training plans");
    if (timeline && inference)
      throw labkit::Error("--timeline: the memory over one training step (gradients, the optimizer's step); "
                          "--inference holds its weights and KV cache throughout");
    if (app.count("--zero") && inference)
      throw labkit::Error(fmt::format("--zero {}: ZeRO shards what training keeps (optimizer states, gradients, "
                                      "weights) over --dp; --inference splits its weights by --tp and --pp",
                                      plan.zero));
    if (!plot.empty() && sweep != "zero") throw labkit::Error("--plot " + plot + ": draws --sweep zero (add it)");
    const Gpu device = gpu_preset(gpu);

    nlohmann::json report = memory_lab::print_breakdown(arch, plan, device);
    if (timeline) report["timeline"] = memory_lab::print_timeline(arch, plan);
    if (advice) report["recommendation"] = memory_lab::print_recommendation(arch, plan, device, gpus, per_node);
    if (!sweep.empty()) report["sweep"] = memory_lab::print_sweep(arch, plan, device, sweep, plot);
    if (!json.empty()) labkit::create_file(json) << report.dump(2) << '\n';
    return 0;
  } catch (const std::exception& e) {
    fmt::print(stderr, "error: {}\n", e.what());
    return 1;
  }
}
