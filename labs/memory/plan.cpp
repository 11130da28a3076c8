// The plan a command line describes: the model's precisions, its parallelism
// and its activations, checked against what the model's shape allows (memory::check_plan).
#include <fmt/format.h>

#include "labkit/cli.h"
#include "labkit/error.h"
#include "memory_lab.h"

using namespace labkit::memory;
namespace cli = labkit::cli;

namespace memory_lab {

void add_plan_options(CLI::App& app, PlanOptions& o) {
  Plan& plan = o.plan;
  const auto precision_name = cli::parsed_by(parse_precision);
  app.add_option("--model", o.model, "a preset (--models lists them)")
      ->capture_default_str()->check(cli::parsed_by(model_preset));
  app.add_option("--gpu", o.gpu, "h100-80g, h200-141g, a100-80g, a100-40g, l40s-48g, rtx4090-24g")
      ->capture_default_str()->check(cli::parsed_by(gpu_preset));
  app.add_option("--optimizer", plan.optimizer, "sgd, momentum, adam, adamw, adafactor, lion, ...")
      ->capture_default_str()->check(cli::parsed_by(find_optimizer));
  app.add_option("--precision", o.precision, "weights: fp32, bf16 (the default), fp16, fp8-e4m3, fp8-e5m2, int8, int4")
      ->check(precision_name);
  app.add_option("--grad-precision", o.grads, "gradients (default: fp32 with --precision fp32, else bf16)")
      ->check(precision_name);
  app.add_option("--state-precision", o.states, "optimizer states")->capture_default_str()->check(precision_name);
  app.add_flag("--no-master", o.no_master, "no fp32 master copy of the weights (none with --precision fp32)");
  app.add_option("--zero", plan.zero, "ZeRO stage 0-3 (3 = FSDP)")->capture_default_str()->check(cli::in_range(0, 3));
  app.add_option("--dp", plan.dp, "data-parallel ranks")->capture_default_str()->check(cli::at_least(1));
  app.add_option("--tp", plan.tp, "tensor-parallel degree")->capture_default_str()->check(cli::at_least(1));
  app.add_option("--pp", plan.pp, "pipeline stages")->capture_default_str()->check(cli::at_least(1));
  app.add_option("--hsdp", plan.shard_group, "HSDP: shard inside groups of this many ranks")->check(cli::at_least(1));
  app.add_flag("--sp", plan.sequence_parallel, "sequence parallelism (with --tp)");
  app.add_option("--virtual", plan.virtual_stages, "interleaved 1F1B: model chunks per pipeline stage (with --pp)")
      ->capture_default_str()->check(cli::at_least(1));
  app.add_option("--recompute", o.recompute, "activation recomputation: none, selective, full")
      ->capture_default_str()->check(cli::parsed_by(parse_recompute));
  app.add_option("--attention", o.attention, "attention's kernel: eager (keeps the s x s scores) or flash")
      ->capture_default_str()->check(cli::parsed_by(parse_attention));
  app.add_flag("--autocast", o.autocast, "PyTorch's autocast to bf16: fp32 weights and gradients, no master copy, "
                                         "activations as autocast keeps them, bf16 copies of the matmuls' weights");
  app.add_option("--activation-precision", o.activation_precision,
                 "16 (Korthikanti's count), fp32 or autocast (default: fp32 with --precision fp32, autocast with "
                 "--autocast, else 16)")
      ->check(cli::parsed_by(parse_activation_precision));
  app.add_option("--dropout", o.dropout, "on or off (default: the model's own)")->check(cli::one_of("dropout", {"on", "off"}));
  app.add_flag("--no-loss-buffers", o.no_loss_buffers,
               "leave out what a step keeps past the last layer (the final norm, the loss's fp32 log-softmax over the "
               "vocabulary, its two gradients at backward's start), as Korthikanti et al. count");
  app.add_option("--workspace-mib", o.workspace_mib, "cuBLAS's and cuBLASLt's workspaces (PyTorch on Hopper: 32 MiB each)")
      ->capture_default_str()->check(cli::at_least(0.0));
  // Whole numbers, held as doubles by the formulas.
  app.add_option("--micro-batch", plan.micro_batch, "sequences per micro-batch")
      ->type_name("INT")->capture_default_str()->check(cli::at_least(1));
  app.add_option("--seq", o.seq, fmt::format("sequence length (default: the model's learned context, {} with "
                                             "rotary positions)", kRotarySeq))
      ->check(cli::at_least(1));
  app.add_option("--activations-gb", o.activations_gb, "use this activation memory instead of the formula")
      ->check(cli::at_least(0.0));
  app.add_option("--params", o.params, "use this parameter count instead of the model's (e.g. 7e9); the shape "
                                       "(layers, hidden, heads) stays the model's")->check(cli::above(0.0));
  app.add_flag("--inference", o.inference, "serving: weights and KV cache");
  app.add_option("--batch", plan.batch, "inference: concurrent sequences")
      ->type_name("INT")->capture_default_str()->check(cli::at_least(1));
  app.add_option("--kv-precision", o.kv, "inference: KV cache")->capture_default_str()->check(precision_name);
  // Serving's options need --inference, and serving reads none of training's
  // (CLI11 refuses either: "--batch requires --inference").
  CLI::Option* serving = app.get_option("--inference");
  for (const char* name : {"--batch", "--kv-precision"}) app.get_option(name)->needs(serving);
  for (const char* name : {"--optimizer", "--grad-precision", "--state-precision", "--no-master", "--dp", "--recompute",
                           "--attention", "--activation-precision", "--dropout", "--no-loss-buffers", "--workspace-mib",
                           "--micro-batch", "--activations-gb"})
    serving->excludes(app.get_option(name));
}

Plan make_plan(const PlanOptions& o, const Architecture& model) {
  Plan plan = o.plan;
  plan.training = !o.inference;
  plan.precision = parse_precision(o.precision.empty() ? "bf16" : o.precision);
  // A model trained in fp32 has fp32 gradients (unless told otherwise) and nothing to copy up.
  const bool fp32 = plan.precision == Precision::fp32;
  if (fp32 && o.no_master)
    throw labkit::Error("--no-master: fp32 weights are their own master copy, and --precision fp32 keeps none");
  plan.state = {plan.precision, parse_precision(!o.grads.empty() ? o.grads : fp32 ? "fp32" : "bf16"),
                parse_precision(o.states), !o.no_master && !fp32};
  if (o.autocast) {  // the model stays fp32; autocast casts the matmuls' inputs and weights to bf16 as they run
    if (!o.precision.empty() || !o.grads.empty() || o.no_master)
      throw labkit::Error("--autocast keeps the weights and gradients in fp32 with no master copy: drop --precision, "
                          "--grad-precision and --no-master");
    plan.precision = Precision::fp32;
    plan.state = {Precision::fp32, Precision::fp32, parse_precision(o.states), false};
  }
  plan.activation_precision = !o.activation_precision.empty() ? parse_activation_precision(o.activation_precision)
                              : o.autocast                     ? ActivationPrecision::autocast
                              : plan.precision == Precision::fp32 ? ActivationPrecision::fp32
                                                                  : ActivationPrecision::bits16;
  if (!o.dropout.empty()) plan.dropout = o.dropout == "on";
  plan.workspace = o.workspace_mib * 1024 * 1024;
  plan.loss_buffers = !o.no_loss_buffers;
  plan.kv_dtype = parse_precision(o.kv);
  plan.recompute = parse_recompute(o.recompute);
  plan.attention = parse_attention(o.attention);
  if (o.activations_gb >= 0) plan.activations = o.activations_gb * 1e9;
  if (o.params > 0) plan.params = o.params;
  plan.seq = what_if_seq(model, o.seq, kRotarySeq);
  check_plan(model, plan);
  return plan;
}

}  // namespace memory_lab
