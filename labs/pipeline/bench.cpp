// --bench: what the simulation itself costs in wall time, side by side in one
// run: --steps steps of the tiny GPT on one rank (no simulator) against the
// same steps on --stages simulated stages under every schedule, the same
// batches; then GPT-3's interleaved step at P = 16, M = 128, V = 2,
// payload-free, as a capstone's what-if would run it.
#include <functional>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "labkit/lab/bench.h"
#include "labkit/lab/output.h"
#include "labkit/output.h"
#include "labkit/parallel/equivalence.h"
#include "pipeline.h"

namespace pipeline_lab {

int bench(const Options& o, const RunOptions& run_options, const Sequences& data, const GptConfig& config) {
  lab::refuse_what_the_bench_cannot_time(run_options, o.device);
  // The one-rank baseline is the lab's first work, outside any rank: where its ranks would start.
  if (before_ranks_start) before_ranks_start(run_options);
  const int B = o.batch_or_default();
  const double one_rank = lab::timed("timing one rank", [&] {
    train_one_rank_sgd(config, data, o.seed, o.steps, B, o.lr, parse_device(o.device));
  });
  std::vector<std::pair<std::string, double>> runs;
  std::vector<std::string> skipped;  // each with why
  for (const std::string_view name : kScheduleNames) {
    if (const int V = default_virtual(name); !schedule_fits(name, config.layers, o.stages, o.microbatches)) {
      skipped.push_back(config.layers % (o.stages * V) != 0
                            ? fmt::format("{} ({} layers do not cut into {} x {} equal chunks)", name, config.layers,
                                          o.stages, V)
                            : fmt::format("{} (M = {} is no multiple of P = {})", name, o.microbatches, o.stages));
      continue;
    }
    const Schedule schedule = make_schedule(name, o.stages, o.microbatches, default_virtual(name));
    runs.emplace_back(name, lab::timed(fmt::format("timing {} on {} simulated stages", name, o.stages),
                                  [&] { train(o, run_options, data, config, schedule, false); }));
  }
  Options gpt3 = o;
  gpt3.what_if = "gpt3-175b", gpt3.stages = 16, gpt3.microbatches = 128, gpt3.batch = 128;
  gpt3.json = o.json.empty() ? "" : row_file(o.json, "gpt3");  // its tables' JSON, beside the bench's
  const double at_scale = lab::timed("timing GPT-3 interleaved, P = 16, M = 128, V = 2, payload-free", [&] {
    what_if(gpt3, run_options, interleaved_schedule(16, 128, 2));
  });
  // Its JSON has a row per schedule (its name, not the printed run) and names the other figures (below).
  lab::Table table = lab::bench_table(44, {{.key = "schedule"}, {.key = "ratio"}});
  const lab::Cell none{nullptr, ""};
  table.print_header();
  table.print_row({fmt::format("one rank, {} steps of {} sequences", o.steps, B), lab::seconds(one_rank), none, none});
  for (const auto& [name, wall] : runs)
    table.add({fmt::format("{}, {} stages, M = {}", name, o.stages, o.microbatches), lab::seconds(wall), name,
               wall / one_rank},
              fmt::format("{:.2f}x one rank's (target <= 1.5x)", wall / one_rank));
  table.print_row({"GPT-3 interleaved P = 16, M = 128, V = 2", lab::seconds(at_scale), none, none}, "(target < 5 s)");
  if (!skipped.empty()) fmt::print("(not timed: {})\n", fmt::join(skipped, "; "));
  nlohmann::json targets = {{"gpt3_payload_free_seconds", lab::target(at_scale, 5)}};
  for (const auto& [name, wall] : runs) targets[name + "_ratio"] = lab::target(wall / one_rank, 1.5);
  lab::write_json(o.json, {{"stages", o.stages}, {"microbatches", o.microbatches}, {"steps", o.steps},
                           {"one_rank_seconds", one_rank}, {"schedules", table.json()},
                           {"gpt3_payload_free_seconds", at_scale}, {"gpt3_json", gpt3.json}, {"targets", targets}});
  return 0;
}

}  // namespace pipeline_lab
