// Lab 6's sharding options and the rules for combining them. Each rule is
// checked here, before any rank starts, in the options' words;
// FullyShardedGpt's constructor checks the same rules again in its own
// (shard_group=, hpz_group=), where a rank count is known only then (mpirun).
#include <algorithm>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "fsdp.h"
#include "labkit/cli.h"
#include "labkit/error.h"
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

bool has_stage_three(const Options& o) { return std::find(o.stages.begin(), o.stages.end(), 3) != o.stages.end(); }

// HSDP (Zhao et al. 2023, PyTorch FSDP's HYBRID_SHARD): groups of --hsdp ranks, stages 1-3 by default.
void check_hsdp(Options& o, const RunOptions& run_options, bool stage_given) {
  if (o.hsdp == 0) return;
  if (run_options.backend == "sim" && run_options.ranks % o.hsdp != 0) {
    std::vector<int> divisors;
    for (int g = 1; g <= run_options.ranks; ++g)
      if (run_options.ranks % g == 0) divisors.push_back(g);
    throw Error(fmt::format("--hsdp {}: does not divide --ranks {} into equal groups ({} do)", o.hsdp,
                            run_options.ranks, fmt::join(divisors, ", ")));
  }
  if (!stage_given) o.stages = {1, 2, 3};
  if (std::find(o.stages.begin(), o.stages.end(), 0) != o.stages.end())
    throw Error(fmt::format("--hsdp {} with --stage 0: nothing is sharded at stage 0 (DDP); HSDP shards stages 1-3",
                            o.hsdp));
  if (o.sweep.over == "hidden")
    throw Error(fmt::format("--hsdp {} with --sweep hidden: the prefetch sweep gathers over all --ranks", o.hsdp));
}

// ZeRO++'s techniques (Wang et al. 2023) shard stage 3's traffic: --stage 3 by
// default, no other, and not in --sweep. `what`: the technique in a few words.
void check_stage_three_technique(Options& o, bool stage_given, const std::string& flag, const std::string& what) {
  if (!stage_given) o.stages = {3};
  if (o.stages != std::vector<int>{3})
    throw Error(fmt::format("{}: a stage-3 technique{}; drop --stage or give --stage 3", flag, what));
  if (!o.sweep.over.empty())
    throw Error(fmt::format("{}: the tiny GPT's run or --what-if, not --sweep (for now)", flag));
}

// qgZ's all-to-all hops: within each node, then across the nodes, so every node full.
void check_qgz(const Options& o, const RunOptions& run_options) {
  if (o.hsdp > 0)
    throw Error(fmt::format("--qgz with --hsdp {}: qgZ reduces over all the ranks, node by node", o.hsdp));
  if (run_options.backend != "sim") return;
  const int per_node = find_topology(run_options.topology).devices_per_node;
  if (run_options.ranks > per_node && run_options.ranks % per_node != 0)
    throw Error(fmt::format("--qgz on --ranks {}: {} puts {} ranks on a node, so the last node holds {}; qgZ's "
                            "all-to-all hops need every node full (--ranks a multiple of {})", run_options.ranks,
                            run_options.topology, per_node, run_options.ranks % per_node, per_node));
}

// hpZ: a secondary shard in groups of --hpz ranks, for backward's second gathers.
void check_hpz(Options& o, const RunOptions& run_options, bool stage_given) {
  const std::string flag = fmt::format("--hpz {}", o.hpz);
  if (run_options.backend == "sim" && run_options.ranks % o.hpz != 0)
    throw Error(fmt::format("{}: does not divide --ranks {} into equal groups", flag, run_options.ranks));
  if (o.hsdp > 0) throw Error(fmt::format("{} with --hsdp {}: HSDP already gathers within its groups", flag, o.hsdp));
  if (!o.reshard_after_forward)
    throw Error(fmt::format("{} with --reshard-after-forward off: nothing is gathered again for backward", flag));
  check_stage_three_technique(o, stage_given, flag, "");
}

}  // namespace

// In this order, so that a run breaking two rules is told the same first one every time.
void check_sharding_options(Options& o, const RunOptions& run_options, bool stage_given) {
  check_hsdp(o, run_options, stage_given);
  if (o.qwz) check_stage_three_technique(o, stage_given, "--qwz", " (int8 weight gathers)");
  if (o.qgz) check_stage_three_technique(o, stage_given, "--qgz", " (int4 gradient reduces)");
  if (o.qgz) check_qgz(o, run_options);
  if (o.hpz > 0) check_hpz(o, run_options, stage_given);
  if (o.prefetch != "none" && !has_stage_three(o))
    throw Error(fmt::format("--prefetch {}: does nothing here: only stage 3 gathers parameters before they compute",
                            o.prefetch));
  if (!o.reshard_after_forward && !has_stage_three(o))
    throw Error("--reshard-after-forward off: does nothing here: only stage 3 gathers parameters, so only it can "
                "keep them whole from forward to backward");
  if (!o.reshard_after_forward && (!o.what_if.empty() || !o.sweep.over.empty()))
    throw Error("--reshard-after-forward off: the tiny GPT's run, not --what-if or --sweep (for now)");
}

void check_tiny_gpt_run(const Options& o, const RunOptions& run_options) {
  if (run_options.payload_free)
    throw Error("--payload-free: the tiny GPT computes with real values (payload-free runs are --what-if's and "
                "--sweep's)");
  if (run_options.backend == "sim" && o.batch % run_options.ranks != 0)
    throw Error(fmt::format("--batch {} does not split over --ranks {}: each rank takes batch / ranks sequences",
                            o.batch, run_options.ranks));
  if (run_options.backend == "nccl")
    throw Error("--backend nccl: the sharded step keeps its shards in host memory (sim or mpi for now)");
}

}  // namespace fsdp_lab
