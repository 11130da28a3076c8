// A DDP scenario, "ddp:RANKS:MODE[:TOPOLOGY]" ("ddp:8:overlap"): one
// data-parallel step of Llama-2 7B's shapes, the DDP lab's --what-if.
#include <fmt/format.h>

#include "labkit/error.h"
#include "labkit/memory.h"
#include "labkit/parallel/data_parallel.h"
#include "labkit/run.h"
#include "scenarios/scenarios.h"

namespace viz {

namespace {
struct DdpScenario final : Scenario {
  labkit::DdpMode mode = labkit::DdpMode::overlap;

  // Compute on each rank's track, each bucket's allreduce on its comm stream.
  ScenarioRun run() const override {
    const labkit::MetaModel llama = labkit::meta_model(labkit::memory::model_preset("llama2-7b"), 2.0);
    const labkit::RunResult r =
        labkit::run(run_options(), [&](labkit::Comm& comm) { labkit::meta_step(comm, llama, mode); });
    return {from_trace(*r.trace, fmt::format("DDP step ({}) of Llama-2 7B's shapes on {} ranks, {}",
                                             labkit::name_of(mode), ranks, topology))};
  }
};
}  // namespace

std::unique_ptr<Scenario> parse_ddp_scenario(const ScenarioText& t) {
  if (t.fields.size() > 4) throw labkit::Error(fmt::format("'{}' is not ddp:RANKS:MODE[:TOPOLOGY]", t.text));
  auto s = std::make_unique<DdpScenario>();
  s->mode = labkit::parse_ddp_mode(t.fields[2]);
  s->topology = t.field_or(3, s->topology);
  return s;
}

}  // namespace viz
