// A pipeline scenario, "pp:STAGES:SCHEDULE[:MICROBATCHES[:TOPOLOGY]]"
// ("pp:4:zb-h1:8"): one step of a pipeline schedule over GPT-3's layers (the
// pipeline lab's --what-if), payload-free; each rank's track is its stage's
// row of the pipeline grid.
#include <fmt/format.h>

#include "labkit/error.h"
#include "labkit/memory.h"
#include "labkit/parallel/pipeline_executor.h"
#include "labkit/run.h"
#include "scenarios/scenarios.h"

namespace viz {

namespace {
// GPT-3 (96 layers, h = 12288), micro-batches of two 2048-token sequences:
// the pipeline lab's --what-if default, so the two give the same step.
constexpr int kPipelineLayers = 96;
constexpr double kPipelineSequence = 2048, kPipelineTokens = 2 * kPipelineSequence;

struct PipelineScenario final : Scenario {
  std::string schedule = "1f1b";  // as labkit::make_schedule names it: naive, gpipe, 1f1b, interleaved, zb-h1, zbv
  int microbatches = 8;

  int chunks_per_stage() const { return schedule == "interleaved" || schedule == "zbv" ? 2 : 1; }
  labkit::Schedule make_schedule() const {
    return labkit::make_schedule(schedule, ranks, microbatches, chunks_per_stage());
  }

  // Each stage's forwards and backwards in its schedule's order, the messages between.
  ScenarioRun run() const override {
    const labkit::memory::Architecture gpt3 = labkit::memory::model_preset("gpt3-175b");
    const labkit::Schedule plan = make_schedule();
    const double layers = double(kPipelineLayers) / plan.chunks();
    const labkit::memory::LayerFlops layer = labkit::memory::layer_flops(gpt3, kPipelineTokens, kPipelineSequence);
    const labkit::RunResult r = labkit::run(run_options(), [&](labkit::Comm& comm) {
      labkit::play_payload_free(comm, plan,
                                {layers * layer.forward, layers * layer.backward_input, layers * layer.backward_weight},
                                std::size_t(kPipelineTokens * gpt3.hidden * 2));
    });
    return {from_trace(*r.trace, fmt::format("{} pipeline step of GPT-3 on {} stages, {} micro-batches of 2 x 2048 "
                                             "tokens, {}", plan.name, ranks, microbatches, topology))};
  }
};
}  // namespace

std::unique_ptr<Scenario> parse_pp_scenario(const ScenarioText& t) {
  auto s = std::make_unique<PipelineScenario>();
  s->ranks = t.ranks;  // for make_schedule, below
  s->schedule = t.fields[2];
  if (t.fields.size() > 3 && !whole_number(t.fields[3], 1, 1024, s->microbatches))
    throw labkit::Error(fmt::format("'{}': '{}' is not a micro-batch count from 1 to 1024", t.text, t.fields[3]));
  s->topology = t.field_or(4, s->topology);
  const int chunks = t.ranks * s->chunks_per_stage();
  if (kPipelineLayers % chunks != 0)
    throw labkit::Error(fmt::format("'{}' is not pp:STAGES:SCHEDULE[:MICROBATCHES[:TOPOLOGY]] with GPT-3's {} "
                                    "layers cut into equal chunks ({} do not divide them)", t.text, kPipelineLayers,
                                    chunks));
  s->make_schedule();  // throws, naming the schedules and what each needs
  return s;
}

}  // namespace viz
