// --bench: what the simulation itself costs in wall time, side by side in one
// run: --steps steps of the tiny GPT on one rank (no simulator) against the
// same steps on --stages simulated stages under every schedule, the same
// batches; then GPT-3's interleaved step at P = 16, M = 128, V = 2,
// payload-free, as a capstone's what-if would run it.
#include <functional>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "labkit/lab/bench.h"
#include "labkit/lab/output.h"
#include "labkit/optim.h"
#include "labkit/output.h"
#include "labkit/parallel/equivalence.h"
#include "labkit/units.h"
#include "pipeline.h"

namespace pipeline_lab {

int bench(const Options& o, const RunOptions& run_options, const Sequences& data, const GptConfig& config) {
  // The one-rank baseline is the lab's first work, outside any rank: where its ranks would start.
  if (before_ranks_start) before_ranks_start(run_options);
  const int B = o.batch_or_default();
  SgdMomentum sgd{.lr = o.lr};
  const double one_rank = lab::timed("timing one rank", [&] {
    train_one_rank(config, data, o.seed, o.steps, B,
                   [&](std::span<float> w, std::span<const float> g) { sgd.update(w, g); });
  });
  nlohmann::json rows = nlohmann::json::array();
  std::vector<std::pair<std::string, double>> runs;
  for (const std::string_view name : kScheduleNames) {
    if (!schedule_fits(name, config.layers, o.stages, o.microbatches)) continue;
    const Schedule schedule = make_schedule(name, o.stages, o.microbatches, default_virtual(name));
    runs.emplace_back(name, lab::timed(fmt::format("timing {} on {} simulated stages", name, o.stages),
                                  [&] { train(o, run_options, data, config, schedule, false); }));
  }
  Options gpt3 = o;
  gpt3.what_if = "gpt3-175b", gpt3.stages = 16, gpt3.microbatches = 128, gpt3.batch = 128, gpt3.json.clear();
  const double at_scale = lab::timed("timing GPT-3 interleaved, P = 16, M = 128, V = 2, payload-free", [&] {
    what_if(gpt3, run_options, interleaved_schedule(16, 128, 2));
  });
  fmt::print("{:<44} {:>10}\n", "run", "wall");
  fmt::print("{:<44} {:>10}\n", fmt::format("one rank, {} steps of {} sequences", o.steps, B),
             format_seconds(one_rank));
  for (const auto& [name, wall] : runs) {
    fmt::print("{:<44} {:>10}  {:.2f}x one rank's (target <= 1.5x)\n",
               fmt::format("{}, {} stages, M = {}", name, o.stages, o.microbatches), format_seconds(wall),
               wall / one_rank);
    rows.push_back({{"schedule", name}, {"seconds", wall}, {"ratio", wall / one_rank}});
  }
  fmt::print("{:<44} {:>10}  (target < 5 s)\n", "GPT-3 interleaved P = 16, M = 128, V = 2", format_seconds(at_scale));
  lab::write_json(o.json, {{"stages", o.stages}, {"microbatches", o.microbatches}, {"steps", o.steps},
                           {"one_rank_seconds", one_rank}, {"schedules", rows},
                           {"gpt3_payload_free_seconds", at_scale}});
  return 0;
}

}  // namespace pipeline_lab
