// Lab 9: mixture of experts. The tiny GPT with an MoE layer where each block
// had its MLP (parallel/moe.h), its experts spread over --ep ranks, each rank
// training on its share of every step's batch (parallel/moe_gpt.h):
//
//   ./labkit lab moe --ep 4 --steps 10
//
//   moe: tiny-gpt with an MoE layer in each of its 2 blocks: 8 experts, top-2, capacity factor 1.25, ...
//    step     loss  aux loss  dropped  max/mean  tokens per expert, layer 0 (capacity 80)
//       1   3.4450    0.0203     7.4%      1.72  21 89 100 97 76 23 52 54
//       2   3.3841    0.0205    11.2%      2.28  27 97 101 88 83 23 45 48
//
// Every rank must end with the weights one rank reaches on the whole batch,
// having dropped the same assignments; the lab checks it (report.cpp, with the
// all-to-all bytes of each layer beside their formula and where the step's
// time went). The other views: --compare and --plot (heatmap.cpp), --sweep
// capacity=A..B (sweep.cpp), --what-if MODEL (what_if.cpp), --bench (bench.cpp).
#include "labkit/error.h"
#include "labkit/lab/main.h"
#include "labkit/lab/option_checks.h"
#include "moe.h"

using namespace moe_lab;

int main(int argc, char** argv) {
  CLI::App app{"Lab 9: mixture of experts: top-k routing with capacity, load balancing, expert parallelism"};
  Options o;
  RunOptions run_options;
  app.add_option("--experts", o.moe.experts, "experts in each MoE layer (E)")
      ->capture_default_str()->check(cli::in_range(1, 256));
  app.add_option("--top-k", o.moe.top_k, "experts each token goes to (k)")
      ->capture_default_str()->check(cli::in_range(1, 256));
  app.add_option("--capacity-factor", o.moe.capacity_factor,
                 "an expert takes at most this x the fair share, k x tokens / E; the rest are dropped")
      ->capture_default_str()->check(cli::above(0.0, 1e6));
  app.add_option("--ep", o.ep, "expert-parallel ranks: each holds E / ep experts and a share of the batch")
      ->capture_default_str()->check(cli::in_range(1, 256));
  app.add_option("--balance", o.balance, "none, aux (Switch's auxiliary loss) or bias (DeepSeek-V3's, loss-free)")
      ->capture_default_str()->check(cli::parsed_by([](const std::string& name) { parse_balance(name); }));
  app.add_option("--alpha", o.moe.aux_weight, "with --balance aux: the auxiliary loss's weight")
      ->capture_default_str()->check(cli::above(0.0, 1e3));
  app.add_option("--gamma", o.moe.bias_rate, "with --balance bias: the bias's step")
      ->capture_default_str()->check(cli::above(0.0, 1e3));
  app.add_option("--shared-experts", o.moe.shared_experts, "experts every token passes through besides its k")
      ->capture_default_str()->check(cli::in_range(0, 16));
  app.add_option("--layers", o.layers, "the tiny GPT's blocks, each with an MoE layer")
      ->capture_default_str()->check(cli::in_range(1, 64));
  lab::add_training_options(app, o, {.batch = "sequences per step, split over the ranks", .max_batch = 4096,
                                     .lr = "learning rate (SGD, momentum 0.9)",
                                     .json = "also write the tables as JSON to this file",
                                     .bench = "time the simulation: the MoE GPT's steps on --ep ranks against the "
                                              "dense tiny GPT's on one (target 2x); with --what-if the layer's wall "
                                              "time",
                                     .device = "where each rank's tokens, experts and the rest of the model live"});
  add_what_if_options(app, o);
  app.add_option("--plot", o.plot, "draw the routing heatmap, tokens per expert by step (.png or .svg)")
      ->check(cli::figure_file());
  add_sweep_option(app, o);
  app.add_flag("--compare", o.compare, "train with each way of balancing (none, aux, bias) on the same batches: a "
                                       "table, and with --plot their heatmaps side by side");
  add_run_options(app, run_options);
  return lab::run_main(app, argc, argv, [&] {
    if (!o.what_if.empty()) {
      // The model's own experts, routing and layers; a layer's step, no training.
      cli::refuse_unread(app, "--what-if " + o.what_if,
                         {"--experts", "--top-k", "--capacity-factor", "--balance", "--alpha", "--gamma",
                          "--shared-experts", "--layers", "--steps", "--batch", "--lr", "--plot", "--compare",
                          "--sweep"});
      lab::refuse_model_device_backend(o, run_options, "--what-if runs payload-free");
      lab::refuse_trace_of_many_runs(run_options, "--what-if " + o.what_if,
                                     "trace the MoE GPT's steps (no --what-if)");
      if (app.count("--ranks"))
        throw Error("--ranks: --what-if simulates the ep group and the groups beside it on its nodes (set --ep)");
      return what_if(o, run_options);
    }
    if (!o.sweep.over.empty()) {
      const std::string sweep = cli::sweep_flag(o.sweep);
      cli::refuse_unread(app, sweep, {"--capacity-factor", "--bench", "--compare"});
      lab::refuse_trace_of_many_runs(run_options, sweep, "trace one capacity factor's steps: --capacity-factor F");
    }
    if (o.bench) cli::refuse_unread(app, "--bench", {"--plot", "--compare", "--trace"});
    if (app.count("--seq") || app.count("--micro-batch"))
      throw Error("--seq and --micro-batch go with --what-if; the tiny GPT trains on its context (--batch)");
    o.moe.balance = parse_balance(o.balance);
    check_options(o, run_options, app);
    run_options.ranks = o.ep;
    const Sequences data = training_sequences(o.seed, gpt_preset("tiny-gpt", 1).max_seq);
    GptConfig config = gpt_preset("tiny-gpt", data.tokens.vocab);
    config.layers = o.layers;
    if (o.bench) return bench(o, run_options, data, config);
    if (o.compare) return compare_balance(o, run_options, data, config);
    if (!o.sweep.over.empty()) return sweep(o, run_options, data, config);
    return report(o, run_options, data, config);
  });
}
