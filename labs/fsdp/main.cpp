// Lab 6: FSDP and ZeRO. Data parallelism that splits the model state over the
// ranks instead of copying it to each (parallel/fully_sharded.h): stage 1 the
// optimizer state, stage 2 the gradients too, stage 3 the parameters too,
// gathered one unit (a block) at a time just before they compute.
//
//   ./labkit lab fsdp --ranks 8 --steps 10
//
// Each stage trains the tiny GPT on the same batches and must end with the same
// weights as one rank training on the whole global batch; the lab checks it.
// The table shows what one rank keeps of the model's N parameters (its shard,
// padded so that every rank's is the same size) and what it sends per step,
// read from rank 0's trace, beside ZeRO's 2N (stages 0-2) and 3N (stage 3),
// counted as parameters' worth: an allreduce is a reduce-scatter and an
// all-gather, N each. Below it, each stage's memory on rank 0, as the sharded
// step told the rank's tracker, beside the memory lab's estimate.
//
//   --what-if llama2-7b   each stage's memory per GPU and a payload-free step of a
//                         real model's shapes (--prefetch forward|backward|both),
//                         beside ZeRO's Figure 1 and the reading's ZeRO table
//   --sweep ranks=8..1024 the same on 8 to 1024 GPUs of every topology preset
//   --sweep hidden=256..16384 the layer size from which prefetching hides stage 3's gathers
#include <algorithm>
#include <cmath>
#include <string>
#include <tuple>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "fsdp.h"
#include "labkit/cli.h"
#include "labkit/error.h"
#include "labkit/memory.h"
#include "labkit/output.h"
#include "labkit/parallel/equivalence.h"
#include "labkit/parallel/quantize.h"
#include "labkit/topology.h"
#include "labkit/units.h"

using namespace fsdp_lab;

namespace {

// Each lossy run's loss, step by step, beside the exact run of its stage (the
// one before it): what ZeRO++'s quantization costs in training.
nlohmann::json print_losses_beside_exact(const std::vector<StageRun>& runs, const Options& o) {
  nlohmann::json out = nlohmann::json::array();
  for (std::size_t i = 1; i < runs.size(); ++i) {
    if (!runs[i].quantized) continue;
    const StageRun &exact = runs[i - 1], &lossy = runs[i];
    const std::string what = lossy.name.substr(lossy.name.find(' ') + 1);  // "qwZ qgZ"
    fmt::print("stage {}: the global batch's loss, exact beside {} ({}{}{})\n", lossy.stage, what,
               o.qwz ? "int8 weight gathers" : "", o.qwz && o.qgz ? ", " : "", o.qgz ? "int4 gradient reduces" : "");
    fmt::print("  {:>5} {:>10} {:>10} {:>11}\n", "step", "exact", what, "difference");
    for (std::size_t s = 0; s < lossy.losses.size(); ++s) {
      fmt::print("  {:>5} {:>10.5f} {:>10.5f} {:>+11.2e}\n", s + 1, exact.losses[s], lossy.losses[s],
                 double(lossy.losses[s]) - exact.losses[s]);
      out.push_back({{"stage", lossy.stage}, {"step", s + 1}, {"exact", exact.losses[s]}, {"quantized", lossy.losses[s]},
                     {"qwz", o.qwz}, {"qgz", o.qgz}});
    }
  }
  return out;
}

cli::Sweep parse_sweep(const std::string& text) {
  return cli::parse_sweep(text, {{"ranks", 1, 65536, true, ""}, {"hidden", 64, 65536, true, ""}});
}

// What each rank keeps at `stage`, sharded over `group` of the `ranks`.
std::string kept(int stage, int group, int ranks) {
  static const char* what[] = {"a copy of everything", "1/P of the optimizer state", "1/P of optimizer, gradients",
                               "1/P of everything"};
  std::string text = what[stage];
  if (stage > 0 && group < ranks) text.replace(text.find("1/P"), 3, fmt::format("1/{}", group));
  return text;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Lab 6: FSDP and ZeRO: data parallelism with the model state sharded, stage 0 (DDP) to 3"};
  cli::one_line_errors(app);
  Options o;
  RunOptions run_options;
  run_options.ranks = 8;
  CLI::Option* stages = app.add_option("--stage", o.stages, "ZeRO stage: 0 (DDP), 1 (optimizer state), 2 (and gradients), 3 (and "
                                      "parameters: FSDP); several: a row each")
      ->capture_default_str()->check(cli::in_range(0, 3));
  app.add_option("--hpz", o.hpz, "stage 3, ZeRO++'s hierarchical partitioning: keep a secondary shard of each "
                                 "block within groups of G neighbouring ranks (a node's) for backward's gathers")
      ->check(cli::at_least(1));
  app.add_flag("--qwz", o.qwz, "stage 3, ZeRO++'s quantized weights: the forward's all-gathers in int8 blocks, "
                             "trained beside exact stage 3, loss by loss");
  app.add_flag("--qgz", o.qgz, "stage 3, ZeRO++'s quantized gradients: each reduce-scatter as int4 blocks in an "
                             "all-to-all within each node, then one across the nodes; trained beside exact stage 3");
  app.add_option("--hsdp", o.hsdp, "HSDP: shard within groups of G neighbouring ranks (a node's), replicate across "
                                   "the groups")
      ->check(cli::at_least(1));
  app.add_option_function<std::string>(
         "--reshard-after-forward", [&o](const std::string& v) { o.reshard_after_forward = v == "on"; },
         "stage 3: on frees each block after its forward and gathers it again for its backward (3N sent); off "
         "keeps it whole until its backward (2N, the whole model's memory at the turn)")
      ->default_str("on")->check(cli::one_of("value", {"on", "off"}));
  app.add_option("--steps", o.steps, "optimizer steps")->capture_default_str()->check(cli::at_least(1));
  app.add_option("--batch", o.batch, "global batch: sequences per step over all ranks")
      ->capture_default_str()->check(cli::at_least(1));
  app.add_option("--optimizer", o.optimizer, "sgd (momentum 0.9) or adamw")
      ->capture_default_str()->check(cli::one_of("optimizer", {"sgd", "adamw"}));
  app.add_option("--lr", o.lr, fmt::format("learning rate (default {:g} with sgd, {:g} with adamw)", kSgdLr, kAdamwLr))
      ->check(cli::above(0.0f));
  app.add_option("--seed", o.seed, "initialisation, corpus and shuffling")
      ->capture_default_str()->check(cli::at_least(std::uint64_t(0)));
  app.add_option("--json", o.json, "also write the table as JSON to this file")->check(cli::output_file());
  app.add_option("--what-if", o.what_if, "a model preset (llama2-7b, ...): each stage's memory per GPU and a "
                                         "payload-free step of its shapes")
      ->check(cli::parsed_by([](const std::string& name) { memory::model_preset(name); }));
  app.add_option("--step-seconds", o.step_seconds, "--what-if: compute per step, in seconds")
      ->capture_default_str()->check(cli::above(0.0));
  app.add_option("--gpu", o.gpu, "--what-if: the GPU whose memory must hold it")
      ->capture_default_str()->check(cli::parsed_by([](const std::string& name) { memory::gpu_preset(name); }));
  app.add_option("--seq", o.seq, "--what-if: tokens per sequence (one sequence per GPU)")
      ->capture_default_str()->check(cli::in_range(1, 1 << 20));
  app.add_option("--recompute", o.recompute, "--what-if: activation recomputation: none, selective or full")
      ->capture_default_str()->check(cli::one_of("recomputation", {"none", "selective", "full"}));
  app.add_option("--prefetch", o.prefetch, "stage 3: gather the next block under the current one's compute in the "
                                           "forward pass, the backward, or both (none: in front of it)")
      ->capture_default_str()->check(cli::one_of("prefetch", {"none", "forward", "backward", "both"}));
  app.add_option_function<std::string>(
         "--sweep", [&o](const std::string& t) { o.sweep = parse_sweep(t); },
         "ranks=A..B: the --what-if model (llama2-7b by default) on A, 2A, ... B GPUs of every topology preset: "
         "each stage's memory per GPU and exposed communication; hidden=A..B: its layer at hidden A, 2A, ... B, "
         "stage 3 on --ranks: where prefetching hides the all-gather, measured and by alpha-beta")
      ->check(cli::parsed_by([](const std::string& t) { parse_sweep(t); }));
  app.add_option("--plot", o.plot, "draw each stage's memory at rank 0's peak, stacked by use (with --sweep "
                                   "hidden: T_f and T_g over the hidden sizes), to this SVG or PNG (gnuplot)")
      ->check(cli::figure_file());
  app.add_flag("--bench", o.bench, "time the simulation itself: stage 3 against stage 0 on the tiny GPT, and a "
                                   "payload-free 70B stage-3 step on 1024 ranks");
  add_run_options(app, run_options);
  CLI11_PARSE(app, argc, argv);
  if (!app.count("--lr")) o.lr = o.optimizer == "adamw" ? kAdamwLr : kSgdLr;

  try {
    if (o.hsdp > 0) {
      if (run_options.backend == "sim" && run_options.ranks % o.hsdp != 0) {
        std::vector<int> divisors;
        for (int g = 1; g <= run_options.ranks; ++g)
          if (run_options.ranks % g == 0) divisors.push_back(g);
        throw Error(fmt::format("--hsdp {}: does not divide --ranks {} into equal groups ({} do)", o.hsdp,
                                run_options.ranks, fmt::join(divisors, ", ")));
      }
      if (stages->count() == 0) o.stages = {1, 2, 3};
      if (std::find(o.stages.begin(), o.stages.end(), 0) != o.stages.end())
        throw Error(fmt::format("--hsdp {} with --stage 0: nothing is sharded at stage 0 (DDP); HSDP shards stages 1-3",
                                o.hsdp));
      if (o.sweep.over == "hidden")
        throw Error(fmt::format("--hsdp {} with --sweep hidden: the prefetch sweep gathers over all --ranks", o.hsdp));
    }
    for (const auto& [flag, on, what] : {std::tuple{"--qwz", o.qwz, "int8 weight gathers"},
                                         std::tuple{"--qgz", o.qgz, "int4 gradient reduces"}}) {
      if (!on) continue;
      if (stages->count() == 0) o.stages = {3};
      if (o.stages != std::vector<int>{3})
        throw Error(fmt::format("{}: a stage-3 technique ({}); drop --stage or give --stage 3", flag, what));
      if (!o.sweep.over.empty())
        throw Error(fmt::format("{}: the tiny GPT's run or --what-if, not --sweep (for now)", flag));
    }
    if (o.qgz && o.hsdp > 0)
      throw Error(fmt::format("--qgz with --hsdp {}: qgZ reduces over all the ranks, node by node", o.hsdp));
    if (o.qgz && run_options.backend == "sim") {
      const int per_node = find_topology(run_options.topology).devices_per_node;
      if (run_options.ranks > per_node && run_options.ranks % per_node != 0)
        throw Error(fmt::format("--qgz on --ranks {}: {} puts {} ranks on a node, so the last node holds {}; qgZ's "
                                "all-to-all hops need every node full (--ranks a multiple of {})", run_options.ranks,
                                run_options.topology, per_node, run_options.ranks % per_node, per_node));
    }
    if (o.hpz > 0) {
      if (run_options.backend == "sim" && run_options.ranks % o.hpz != 0)
        throw Error(fmt::format("--hpz {}: does not divide --ranks {} into equal groups", o.hpz, run_options.ranks));
      if (o.hsdp > 0) throw Error(fmt::format("--hpz {} with --hsdp {}: HSDP already gathers within its groups", o.hpz, o.hsdp));
      if (!o.reshard_after_forward)
        throw Error(fmt::format("--hpz {} with --reshard-after-forward off: nothing is gathered again for backward",
                                o.hpz));
      if (stages->count() == 0) o.stages = {3};
      if (o.stages != std::vector<int>{3})
        throw Error(fmt::format("--hpz {}: a stage-3 technique; drop --stage or give --stage 3", o.hpz));
      if (!o.sweep.over.empty())
        throw Error(fmt::format("--hpz {}: the tiny GPT's run or --what-if, not --sweep (for now)", o.hpz));
    }
    if (o.prefetch != "none" && std::find(o.stages.begin(), o.stages.end(), 3) == o.stages.end())
      throw Error(fmt::format("--prefetch {}: does nothing here: only stage 3 gathers parameters before they compute",
                              o.prefetch));
    if (!o.reshard_after_forward && std::find(o.stages.begin(), o.stages.end(), 3) == o.stages.end())
      throw Error("--reshard-after-forward off: does nothing here: only stage 3 gathers parameters, so only it can "
                  "keep them whole from forward to backward");
    if (!o.reshard_after_forward && (!o.what_if.empty() || !o.sweep.over.empty()))
      throw Error("--reshard-after-forward off: the tiny GPT's run, not --what-if or --sweep (for now)");
    if (o.sweep.over == "hidden") return prefetch_sweep(o, run_options);
    if (!o.sweep.over.empty()) return sweep(o, run_options);
    if (!o.what_if.empty()) return what_if(o, run_options);
    if (run_options.payload_free)
      throw Error("--payload-free: the tiny GPT computes with real values (payload-free runs are --what-if's and "
                  "--sweep's)");
    if (run_options.backend == "sim" && o.batch % run_options.ranks != 0)
      throw Error(fmt::format("--batch {} does not split over --ranks {}: each rank takes batch / ranks sequences",
                              o.batch, run_options.ranks));
    if (run_options.backend == "nccl")
      throw Error("--backend nccl: the sharded step keeps its shards in host memory (sim or mpi for now)");
    const Sequences data = training_sequences(o.seed, gpt_preset("tiny-gpt", 1).max_seq);
    const GptConfig config = gpt_preset("tiny-gpt", data.tokens.vocab);
    if (o.bench) return bench(o, run_options, data, config);
    std::vector<StageRun> runs;
    std::vector<std::string> traces;  // --trace: one file per row where there are several
    const bool several = o.stages.size() > 1 || o.qwz || o.qgz;
    for (int stage : o.stages) {
      for (bool quantized : {false, true}) {
        if (quantized && !(o.qwz || o.qgz)) continue;
        RunOptions row = run_options;
        if (!row.trace.empty() && several)
          traces.push_back(row.trace = row_file(row.trace, fmt::format("stage{}{}", stage, quantized ? "-zeropp" : "")));
        runs.push_back(train(o, row, stage, data, config, quantized));
      }
    }
    if (runs.front().weights.empty()) return 0;  // a process of mpirun that ran another rank than 0

    const std::vector<float> one_rank = train_one_rank(o, data, config);
    const double reordered = relative_difference(train_one_rank(o, data, config, true), one_rank);
    const double limit = rounding_limit(reordered);
    const StageRun& r0 = runs.front();
    fmt::print("fsdp: tiny-gpt ({} parameters), {} rank{}{}, global batch {}, {} step{}, {}; per step, rank 0\n",
               r0.parameters, r0.ranks, r0.ranks == 1 ? "" : "s",
               o.hsdp > 0 && o.hsdp < r0.ranks ? fmt::format(" (HSDP: sharded in {} groups of {}, replicated across them)",
                                                             r0.ranks / o.hsdp, o.hsdp)
               : o.hpz > 0 ? fmt::format(" (hpZ: secondary shards in {} group{} of {})", r0.ranks / o.hpz,
                                         r0.ranks / o.hpz == 1 ? "" : "s", o.hpz)
                           : "",
               o.batch, o.steps, o.steps == 1 ? "" : "s", o.optimizer);
    std::size_t name_width = 5;  // "stage", or the longest row's name: "3 qwZ qgZ"
    for (const StageRun& r : runs) name_width = std::max(name_width, r.name.size());
    fmt::print("{:<{}} {:<28} {:>10} {:>8} {:>10} {:>10} {:>10} {:>7} {:>9} {:>8} {:>13}  {}  {}\n", "stage", name_width,
               "each rank keeps", "shard", "padding", "sent", "bytes", "formula", "x N", "T_step", "loss",
               "weights vs 1", "ranks agree", "off node");
    nlohmann::json rows = nlohmann::json::array();
    std::vector<std::string> failed;  // each criterion a row missed, named
    for (const StageRun& r : runs) {
      const double weights = relative_difference(r.weights, one_rank);
      const std::string row = "stage " + r.name;
      if (!r.quantized && !(weights <= limit)) failed.push_back(row + ": " + failed_criterion("weights", weights, limit));
      if (!r.ranks_agree) failed.push_back(row + ": ranks' weights differ");
      if (!(std::abs(r.volume - r.formula) < 0.5))
        failed.push_back(fmt::format("{}: sent {:.0f} parameters' worth, the formula {:.0f}", row, r.volume, r.formula));
      fmt::print("{:<{}} {:<28} {:>10} {:>8} {:>10.0f} {:>10} {:>10.0f} {:>6.2f}x {:>9} {:>8.4f} {:>13.1e}  {:<11}  {:.2f}N\n",
                 r.name, name_width,
                 kept(r.stage, r.shard_group, r.ranks), r.stage == 0 ? r.parameters : r.shard,
                 r.stage == 0 ? 0 : r.padding, r.volume, format_bytes(std::uint64_t(r.volume * sizeof(float))),
                 r.formula, r.volume / double(r.parameters),
                 format_seconds(r.step_seconds), r.losses.back(), weights, r.ranks_agree ? "yes" : "NO",
                 r.off_node / double(r.parameters));
      rows.push_back({{"stage", r.stage}, {"quantized_weights", r.quantized && o.qwz},
                      {"quantized_gradients", r.quantized && o.qgz}, {"ranks", r.ranks}, {"nodes", r.nodes}, {"parameters", r.parameters}, {"shard", r.shard},
                      {"padding", r.padding}, {"shard_group", r.shard_group}, {"sent_parameters_per_step", r.volume},
                      {"sent_bytes_per_step", r.volume * sizeof(float)},
                      {"off_node_parameters_per_node_step", r.off_node}, {"formula", r.formula},
                      {"t_step", r.step_seconds}, {"loss", r.losses}, {"weights_vs_one_rank", weights},
                      {"weights_limit", limit}, {"ranks_agree", r.ranks_agree}});
    }
    std::string zero_plus_plus;  // how the quantized row's formula counts
    if (o.qwz) zero_plus_plus += "; qwZ: the forward's gathers as int8 blocks";
    if (o.qgz) zero_plus_plus += "; qgZ: each reduce-scatter as two all-to-alls of int4 blocks, in the node, then across";
    if (o.qwz || o.qgz)
      zero_plus_plus += fmt::format(" (blocks of {} values and an fp32 scale, their bytes / 4); its weights leave one "
                                    "rank's by design", kQuantBlock);
    fmt::print("(shard: parameters one rank keeps, padded so every rank's is the same size; sent: parameters' worth "
               "per step, an allreduce counting 2N; bytes: what that is on the wire, 4 per fp32 parameter; formula: "
               "2N, and 3N less the second gathers of the embeddings and final norm, kept whole through the step{}; "
               "off node: parameters' worth each of the {} node{} sends to the others per step, every rank's trace "
               "summed, where a ring leaves a node once)\n",
               o.hsdp > 0 && o.hsdp < r0.ranks ? fmt::format("; HSDP adds 2N/{}, each shard allreduced across the groups", o.hsdp)
                                               : zero_plus_plus,
               r0.nodes, r0.nodes == 1 ? "" : "s");
    if (!traces.empty()) fmt::print("traces, one per row: {}\n", fmt::join(traces, ", "));
    nlohmann::json memory_rows = nlohmann::json::array();
    for (const StageRun& r : runs)
      for (const nlohmann::json& row : print_memory(r, o, config)) memory_rows.push_back(row);
    explain_stage_three_peak(runs);
    const nlohmann::json losses = print_losses_beside_exact(runs, o);
    if (!o.plot.empty()) plot_memory(runs, o.plot);
    if (failed.empty())
      fmt::print("equal to one rank: weights within {:.1e} ({}: {}x, at least 1e-6, what reversing each batch does "
                 "to one rank's, {:.1e}), every rank bit for bit the same, sent = formula{}\n",
                 limit, o.optimizer, kRoundingMargin, reordered,
                 o.qwz || o.qgz ? " (ZeRO++'s quantized row: its weights apart by design, its loss above)" : "");
    else
      fmt::print("MISMATCH: {}\n", fmt::join(failed, "; "));
    if (!o.json.empty())
      create_file(o.json) << nlohmann::json{{"stages", rows}, {"memory", memory_rows}, {"losses", losses}}.dump(2)
                          << '\n';
    return failed.empty() ? 0 : 1;
  } catch (const std::exception& e) {
    std::fflush(stdout);
    fmt::print(stderr, "error: {}\n", e.what());
    return 1;
  }
}
