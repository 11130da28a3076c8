// Lab 6's memory table: what rank 0's tracker measured, by use, beside the
// memory lab's estimate for the same configuration.
#include <algorithm>
#include <cmath>
#include <sstream>

#include <fmt/format.h>

#include "fsdp.h"
#include "labkit/lab/plot.h"
#include "labkit/lab/table.h"
#include "labkit/memory.h"
#include "labkit/parallel/fully_sharded.h"
#include "labkit/units.h"

namespace fsdp_lab {

namespace {

// The memory lab's plan for rank 0 of run `r`: fp32 weights, gradients and
// states, no master copy, llm.c's activation buffers.
memory::Plan plan_of(const StageRun& r, const Options& o, const GptConfig& config) {
  memory::Plan plan;
  plan.precision = memory::Precision::fp32;
  plan.state = {memory::Precision::fp32, memory::Precision::fp32, memory::Precision::fp32, false};
  plan.optimizer = Optimizer(o).estimator_name();
  plan.zero = r.stage;
  plan.dp = r.stage == 0 ? r.ranks : r.shard_group;  // ZeRO's sharding degree: HSDP shards over its group
  plan.micro_batch = double(o.batch) / r.ranks;
  plan.seq = config.max_seq;
  plan.activation_layout = memory::ActivationLayout::llmc;  // the tiny GPT keeps llm.c's buffers
  plan.reshard_after_forward = o.reshard_after_forward;
  const Prefetch prefetch = parse_prefetch(o.prefetch);  // a pass prefetches where it gathers
  plan.prefetch = prefetches_forward(prefetch) || (prefetches_backward(prefetch) && o.reshard_after_forward);
  plan.hpz = o.hpz;
  return plan;
}

}  // namespace

// Rank 0's peak memory by use beside the memory lab's estimate for the same
// configuration, each difference said on its line.
nlohmann::json print_memory(const StageRun& r, const Options& o, const GptConfig& config) {
  const memory::Plan plan = plan_of(r, o, config);
  const memory::Breakdown estimate = memory::estimate(architecture_of(config), plan, memory::gpu_preset("h100-80g"));
  const std::string padded = fmt::format("the shard is padded to a multiple of P ({} elements in all)", r.padding);
  struct Row {
    MemoryUse use;
    const char* estimator;
    std::string why;  // what the estimate leaves out, where it does
  };
  std::vector<Row> rows = {
      {MemoryUse::weights, "weights", r.stage == 3 && r.padding ? padded : ""},
      {MemoryUse::gradients, "gradients", r.stage >= 2 && r.padding ? padded : ""},
      {MemoryUse::optimizer, "optimizer states", r.stage >= 1 && r.padding ? padded : ""},
      {MemoryUse::activations, "activations", ""},
      {MemoryUse::gathered, "gathered weights", ""},
  };
  if (plan.prefetch && r.stage == 3) rows.push_back({MemoryUse::prefetched, "prefetched weights", ""});
  fmt::print("stage {}: rank 0's peak memory by use (its tracker) beside the memory lab's estimate\n", r.name);
  lab::Table table({{.header = "use", .key = "use", .width = 12, .align = lab::Align::left},
                    {.header = "measured", .key = "measured_peak", .width = 10},
                    {.header = "estimate", .key = "estimate", .width = 10},
                    {.header = "off by", .key = "error", .width = 10},
                    {.key = "stage"},
                    {.key = "row"}},  // the stage's row of the table above: "3", or "3 qwZ" beside it
                   {.rows = "  "});
  table.print_header();
  int off = 0;  // uses further than 5% from the estimate
  for (const Row& row : rows) {
    const double measured = double(r.memory.peak[std::size_t(row.use)]), want = estimate.bytes_of(row.estimator);
    const double error = want > 0 ? (measured - want) / want : measured > 0 ? 1 : 0;
    off += std::abs(error) > 0.05;
    const lab::Cell off_by = {error, want > 0 ? fmt::format("{:+.1f}%", 100 * error) : "-"};
    table.add({std::string(name_of(row.use)), {measured, format_bytes(std::uint64_t(measured))},
               {want, format_bytes(std::uint64_t(want))}, off_by, r.stage, r.name},
              row.why);
  }
  fmt::print("  {:<12} {:>10}  {}\n", "peak total", format_bytes(std::uint64_t(r.memory.peak_total)),
             r.peak_during.empty() ? "" : "during " + r.peak_during);
  if (off == 0) fmt::print("  every use within 5% of the estimate\n");
  else fmt::print("  {} use{} further than 5% from the estimate\n", off, off > 1 ? "s" : "");
  nlohmann::json rows_json = table.json();
  rows_json.push_back({{"use", "peak total"}, {"measured_peak", r.memory.peak_total}, {"during", r.peak_during},
                       {"stage", r.stage}, {"row", r.name}});
  return rows_json;
}

// The confusion this answers: stage 3 shards the most, so it should hold the
// least. It holds its shard plus what is whole at once (gathered), and where
// that outweighs what sharding saved, a lower stage peaks lower.
void explain_stage_three_peak(const std::vector<StageRun>& runs) {
  const StageRun* three = nullptr;
  for (const StageRun& r : runs)
    if (r.stage == 3) three = &r;
  if (!three) return;
  for (const StageRun& r : runs) {
    if (r.stage == 3 || r.stage == 0 || r.memory.peak_total >= three->memory.peak_total) continue;
    const auto weights = std::size_t(MemoryUse::weights);
    const std::int64_t whole = three->memory.peak[std::size_t(MemoryUse::gathered)] +
                               three->memory.peak[std::size_t(MemoryUse::prefetched)];
    const std::int64_t saved = r.memory.peak[weights] - three->memory.peak[weights];
    fmt::print("stage 3 peaks above stage {} here ({} against {}): sharding the weights saves {} of them, but what "
               "stage 3 holds whole at once, {}, comes to {}; with few ranks or large layers (or blocks kept whole "
               "from forward to backward) the most sharded stage is not the smallest\n",
               r.stage, format_bytes(std::uint64_t(three->memory.peak_total)),
               format_bytes(std::uint64_t(r.memory.peak_total)),
               format_bytes(std::uint64_t(saved)),
               three->memory.peak[std::size_t(MemoryUse::prefetched)] ? "gathered and prefetched" : "gathered",
               format_bytes(std::uint64_t(whole)));
    return;
  }
}

void plot_memory(const std::vector<StageRun>& runs, const std::string& path) {
  std::vector<std::string> uses;  // those some stage holds at its peak
  std::vector<std::size_t> held;
  for (std::size_t i = 0; i < runs.front().at_peak.size(); ++i)
    if (std::any_of(runs.begin(), runs.end(), [&](const StageRun& r) { return r.at_peak[i].second > 0; })) {
      uses.push_back(runs.front().at_peak[i].first);
      held.push_back(i);
    }
  std::ostringstream data;
  for (const StageRun& r : runs) {
    data << '"' << fmt::format("stage {}\\n{}", r.stage, r.peak_during) << '"';
    for (std::size_t i : held) data << ' ' << r.at_peak[i].second / (1 << 20);
    data << '\n';
  }
  std::string plot = fmt::format("plot $data using 2:xtic(1) title '{}'", uses[0]);
  for (std::size_t i = 1; i < uses.size(); ++i) plot += fmt::format(", '' using {} title '{}'", i + 2, uses[i]);
  lab::plot(path, {.width = 960, .height = 560}, data.str(), fmt::format(
      "set title 'rank 0 of {} at its memory peak, by use (and what it was computing)'\n"
      "set style data histograms\nset style histogram rowstacked\nset style fill solid 0.8 border -1\n"
      "set boxwidth 0.6\nset bmargin 4\nset ylabel 'MiB'\nset yrange [0:*]\nset key outside right\nset grid y\n{}\n",
      runs.front().ranks, plot));
}

}  // namespace fsdp_lab
