// Lab 6's sharding options, checked before any rank starts by the rules
// FullyShardedGpt holds them to (check_sharding, which its constructor runs
// again where the ranks are known only then: mpirun), and by what the lab's
// views run.
#include <string>
#include <utility>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "fsdp.h"
#include "labkit/cli.h"
#include "labkit/error.h"
#include "labkit/lab/option_checks.h"
#include "labkit/lab/training_options.h"
#include "labkit/memory.h"
#include "labkit/parallel/fully_sharded.h"
#include "labkit/topology.h"

namespace fsdp_lab {

void add_sharding_options(CLI::App& app, Options& o) {
  app.add_option("--stage", o.stages, "ZeRO stage: 0 (DDP), 1 (optimizer state), 2 (and gradients), 3 (and "
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
  app.add_option("--prefetch", o.prefetch, "stage 3: gather the next block under the current one's compute in the "
                                           "forward pass, the backward, or both (none: in front of it)")
      ->capture_default_str()->check(cli::one_of("prefetch", {"none", "forward", "backward", "both"}));
}

namespace {

// The stages a run trains unless --stage says: HSDP's 1-3, and stage 3 alone
// for a technique of stage 3 alone (--hpz, --qwz, --qgz).
void default_stages(Options& o, bool stage_given) {
  if (stage_given) return;
  if (o.hsdp > 0) o.stages = {1, 2, 3};
  if (o.qwz || o.qgz || o.hpz > 0) o.stages = {3};
}

ShardingOptions sharding_options(const Options& o) {
  return {.shard_group = o.hsdp,
          .reshard_after_forward = o.reshard_after_forward,
          .prefetch = parse_prefetch(o.prefetch),
          .hpz_group = o.hpz,
          .quantize_weights = o.qwz,
          .quantize_gradients = o.qgz};
}

// Where the ranks run: under mpirun their nodes are known only once MPI starts.
ShardingPlacement placement(const RunOptions& run_options) {
  if (run_options.backend != "sim") return {.ranks = run_options.ranks, .ranks_option = ranks_flag(run_options)};
  return {.ranks = run_options.ranks,
          .ranks_option = ranks_flag(run_options),
          .per_node = find_topology(run_options.topology).devices_per_node,
          .topology = run_options.topology};
}

}  // namespace

void check_sharding_options(Options& o, const RunOptions& run_options, bool stage_given) {
  default_stages(o, stage_given);
  check_sharding(o.stages, sharding_options(o), placement(run_options));
  // What the lab's views run: the tiny GPT's, --what-if's and the sweeps.
  if (o.hsdp > 0 && o.sweep.over == "hidden")
    throw Error(fmt::format("--hsdp {} with --sweep hidden: the prefetch sweep gathers over all --ranks", o.hsdp));
  if (stage_given && o.sweep.over == "hidden" && o.stages != std::vector<int>{3})
    throw Error(fmt::format("--stage {}: --sweep hidden times stage 3's gathers, the only stage that gathers the "
                            "parameters", fmt::join(o.stages, ",")));
  for (const auto& [flag, given] : {std::pair<std::string, bool>{"--qwz", o.qwz}, {"--qgz", o.qgz},
                                    {fmt::format("--hpz {}", o.hpz), o.hpz > 0}})
    if (given && !o.sweep.over.empty())
      throw Error(fmt::format("{}: the tiny GPT's run or --what-if, not --sweep (for now)", flag));
  if (!o.reshard_after_forward && (!o.what_if.empty() || !o.sweep.over.empty()))
    throw Error("--reshard-after-forward off: the tiny GPT's run, not --what-if or --sweep (for now)");
  if (!o.what_if.empty() || !o.sweep.over.empty()) {
    o.seq = int(memory::what_if_seq(memory::model_preset(studied_model(o)), o.seq, kRotarySeq));
    lab::refuse_model_device_backend(o, run_options, (o.what_if.empty() ? "--sweep" : "--what-if") +
                                                         std::string(" runs payload-free"));
  }
}

void check_tiny_gpt_run(const Options& o, const RunOptions& run_options) {
  lab::refuse_payload_free(run_options.payload_free, {"--what-if", "--sweep"});
  lab::check_batch_splits(o.batch, run_options);
}

void refuse_what_the_run_does_not_read(const CLI::App& app, const Options& o) {
  std::vector<std::string> unread = {"--steps", "--batch", "--lr", "--seed", "--optimizer", "--bench"};
  const auto also = [&](std::initializer_list<std::string> more) { unread.insert(unread.end(), more); };
  std::string run;
  if (o.sweep.over == "hidden") {
    run = cli::sweep_flag(o.sweep);
    also({"--step-seconds", "--gpu", "--recompute", "--prefetch"});
  } else if (!o.sweep.over.empty()) {
    run = cli::sweep_flag(o.sweep);
    also({"--ranks", "--topology", "--efficiency", "--plot"});
  } else if (!o.what_if.empty()) {
    run = "--what-if " + o.what_if;  // its memory is Adam's, as ZeRO's figures count it
    also({"--efficiency", "--plot"});
  } else {
    run = o.bench ? "--bench" : "a training run";
    unread = {"--step-seconds", "--gpu", "--seq", "--recompute"};
    // The benchmark times stage 0 against plain stage 3, native collectives, and a 70B step.
    if (o.bench)
      also({"--plot", "--trace", "--stage", "--hsdp", "--hpz", "--qwz", "--qgz", "--prefetch", "--reshard-after-forward",
            "--algo"});
  }
  cli::refuse_unread(app, run, unread);
}

}  // namespace fsdp_lab
