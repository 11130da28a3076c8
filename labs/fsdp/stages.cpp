// Each --stage trains the tiny GPT on the same batches and must end with the
// same weights as one rank training on the whole global batch. The table shows
// what one rank keeps of the model's N parameters (its shard, padded so that
// every rank's is the same size) and what it sends per step, read from rank 0's
// trace, beside ZeRO's 2N (stages 0-2) and 3N (stage 3) (Rajbhandari et al.
// 2020, section 7), counted as parameters' worth: an allreduce is a
// reduce-scatter and an all-gather, N each. Below it, each stage's memory on
// rank 0 (memory.cpp), and ZeRO++'s quantized run's loss beside the exact one.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "fsdp.h"
#include "labkit/lab/output.h"
#include "labkit/lab/table.h"
#include "labkit/lab/verdict.h"
#include "labkit/parallel/equivalence.h"
#include "labkit/parallel/quantize.h"
#include "labkit/units.h"

namespace fsdp_lab {

namespace {

// What each rank keeps at `stage`, sharded over `group` of the `ranks`.
std::string kept(int stage, int group, int ranks) {
  static const char* what[] = {"a copy of everything", "1/P of the optimizer state", "1/P of optimizer, gradients",
                               "1/P of everything"};
  std::string text = what[stage];
  if (stage > 0 && group < ranks) text.replace(text.find("1/P"), 3, fmt::format("1/{}", group));
  return text;
}

// A row per stage, and with --qwz or --qgz a quantized row after exact stage 3;
// --trace: a file per row where there are several.
std::vector<StageRun> train_rows(const Options& o, const Sequences& data, const GptConfig& config,
                                 lab::TracePerRow& traces) {
  std::vector<StageRun> runs;
  for (int stage : o.stages) {
    for (bool quantized : {false, true}) {
      if (quantized && !(o.qwz || o.qgz)) continue;
      const RunOptions row = traces.row(fmt::format("stage{}{}", stage, quantized ? "-zeropp" : ""));
      runs.push_back(train(o, row, stage, data, config, quantized));
    }
  }
  return runs;
}

// name_width: "stage", or the longest row's name: "3 qwZ qgZ".
lab::Table stages_table(std::size_t name_width) {
  using lab::Align;
  return lab::Table({{.header = "stage", .key = "stage", .width = int(name_width), .align = Align::left},
                     {.header = "each rank keeps", .width = 28, .align = Align::left},
                     {.header = "shard", .key = "shard", .width = 10},
                     {.header = "padding", .key = "padding", .width = 8},
                     {.header = "sent", .key = "sent_parameters_per_step", .width = 10},
                     {.header = "bytes", .key = "sent_bytes_per_step", .width = 10},
                     {.header = "formula", .key = "sent_parameters_formula", .width = 10},
                     {.header = "x N", .width = 7},
                     {.header = "T_step", .key = "t_step", .width = 9},
                     {.header = "loss", .key = "loss", .width = 8},
                     {.header = "weights vs 1", .key = "weights_vs_one_rank", .width = 13},
                     {.header = "ranks agree", .key = "ranks_agree", .width = 11, .align = Align::left, .gap = 2},
                     {.header = "off node", .key = "off_node_parameters_per_node_step", .gap = 2},
                     {.key = "quantized_weights"},
                     {.key = "quantized_gradients"},
                     {.key = "ranks"},
                     {.key = "nodes"},
                     {.key = "parameters"},
                     {.key = "shard_group"},
                     {.key = "weights_limit"}});
}

void add_row(lab::Table& table, const StageRun& r, const Options& o, double weights, double limit) {
  const auto n = double(r.parameters);
  const auto shard = r.stage == 0 ? r.parameters : r.shard, padding = r.stage == 0 ? 0 : r.padding;  // 0 keeps all
  table.add({{r.stage, r.name}, kept(r.stage, r.shard_group, r.ranks), shard, padding, lab::number(r.volume, "{:.0f}"),
             {r.volume * sizeof(float), format_bytes(std::uint64_t(r.volume * sizeof(float)))},
             lab::number(r.formula, "{:.0f}"), fmt::format("{:.2f}x", r.volume / n), lab::seconds(r.step_seconds),
             {r.losses, fmt::format("{:.4f}", r.losses.back())}, lab::number(weights, "{:.1e}"),
             lab::yes_no(r.ranks_agree), {r.off_node, fmt::format("{:.2f}N", r.off_node / n)},
             r.quantized && o.qwz, r.quantized && o.qgz, r.ranks, r.nodes, r.parameters, r.shard_group, limit});
}

// HSDP's groups or hpZ's, as the heading names them; "" for neither.
std::string groups(const StageRun& r0, const Options& o) {
  if (o.hsdp > 0 && o.hsdp < r0.ranks)
    return fmt::format(" (HSDP: sharded in {} groups of {}, replicated across them)", r0.ranks / o.hsdp, o.hsdp);
  if (o.hpz > 0)
    return fmt::format(" (hpZ: secondary shards in {} group{} of {})", r0.ranks / o.hpz,
                       r0.ranks / o.hpz == 1 ? "" : "s", o.hpz);
  return "";
}

void print_heading(const StageRun& r0, const Options& o) {
  fmt::print("fsdp: {} ({} parameters), {} rank{}{}, global batch {}, {} step{}, {}; per step, rank 0\n", o.model,
             r0.parameters, r0.ranks, r0.ranks == 1 ? "" : "s", groups(r0, o), o.batch, o.steps,
             o.steps == 1 ? "" : "s", o.optimizer);
}

// What each column counts, and how the formula counts HSDP's or ZeRO++'s rows.
void print_footnote(const StageRun& r0, const Options& o) {
  std::string zero_plus_plus;
  if (o.qwz) zero_plus_plus += "; qwZ: the forward's gathers as int8 blocks";
  if (o.qgz) zero_plus_plus += "; qgZ: each reduce-scatter as two all-to-alls of int4 blocks, in the node, then across";
  if (o.qwz || o.qgz)
    zero_plus_plus += fmt::format(" (blocks of {} values and an fp32 scale, their bytes / 4); its weights leave one "
                                  "rank's by design", kQuantBlock);
  fmt::print("(shard: parameters one rank keeps, padded so every rank's is the same size; sent: parameters' worth "
             "per step, an allreduce counting 2N; bytes: what that is in the buffers handed to the collectives, 4 per "
             "fp32 parameter; formula: 2N, and 3N less the second gathers of the embeddings and final norm, kept "
             "whole through the step{}; "
             "off node: parameters' worth each of the {} node{} sends to the others per step, every rank's trace "
             "summed, where a ring leaves a node once)\n",
             o.hsdp > 0 && o.hsdp < r0.ranks ? fmt::format("; HSDP adds 2N/{}, each shard allreduced across the groups",
                                                           o.hsdp)
                                             : zero_plus_plus,
             r0.nodes, r0.nodes == 1 ? "" : "s");
}

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
    lab::Table table({{.header = "step", .key = "step", .width = 5},
                      {.header = "exact", .key = "exact", .width = 10},
                      {.header = what, .key = "quantized", .width = 10},
                      {.header = "difference", .width = 11},
                      {.key = "stage"},
                      {.key = "qwz"},
                      {.key = "qgz"}},
                     {.rows = "  "});
    table.print_header();
    for (std::size_t s = 0; s < lossy.losses.size(); ++s)
      table.add({s + 1, lab::number(exact.losses[s], "{:.5f}"), lab::number(lossy.losses[s], "{:.5f}"),
                 fmt::format("{:+.2e}", double(lossy.losses[s]) - exact.losses[s]), lossy.stage, o.qwz, o.qgz});
    for (const nlohmann::json& row : table.json()) out.push_back(row);
  }
  return out;
}

}  // namespace

int train_stages(const Options& o, const RunOptions& run_options, const Sequences& data, const GptConfig& config) {
  lab::TracePerRow traces(run_options, o.stages.size() > 1 || o.qwz || o.qgz);
  const std::vector<StageRun> runs = train_rows(o, data, config, traces);
  if (runs.front().weights.empty()) return 0;  // a process of mpirun that ran another rank than 0

  const std::vector<float> one_rank = train_one_rank(o, data, config);
  const double reordered = relative_difference(train_one_rank(o, data, config, true), one_rank);
  const double limit = rounding_limit(reordered);
  print_heading(runs.front(), o);
  std::size_t name_width = 5;
  for (const StageRun& r : runs) name_width = std::max(name_width, r.name.size());
  lab::Table table = stages_table(name_width);
  table.print_header();
  lab::Verdict verdict;
  for (const StageRun& r : runs) {
    const double weights = relative_difference(r.weights, one_rank);
    const std::string row = "stage " + r.name;
    verdict.trained(row, r.losses);
    if (!r.quantized) verdict.within(row + ": weights", weights, limit);
    verdict.require(r.ranks_agree, row + ": ranks' weights differ");
    verdict.require(std::abs(r.volume - r.formula) < 0.5,
                    fmt::format("{}: sent {:.0f} parameters' worth, the formula {:.0f}", row, r.volume, r.formula));
    add_row(table, r, o, weights, limit);
  }
  print_footnote(runs.front(), o);
  traces.print("row");
  nlohmann::json memory = nlohmann::json::array();
  for (const StageRun& r : runs)
    for (const nlohmann::json& row : print_memory(r, o, config)) memory.push_back(row);
  explain_stage_three_peak(runs);
  const nlohmann::json losses = print_losses_beside_exact(runs, o);
  if (!o.plot.empty()) plot_memory(runs, o.plot);
  const int status = verdict.print(fmt::format(
      "equal to one rank: weights within {:.1e} ({}: {}x, at least 1e-6, what reversing each batch does to one "
      "rank's, {:.1e}), every rank bit for bit the same, sent = formula{}",
      limit, o.optimizer, kRoundingMargin, reordered,
      o.qwz || o.qgz ? " (ZeRO++'s quantized row: its weights apart by design, its loss above)" : ""));
  lab::write_json(o.json,
                  {{"stages", table.json()}, {"memory", memory}, {"losses", losses}, {"verdict", verdict.json()}});
  return status;
}

}  // namespace fsdp_lab
