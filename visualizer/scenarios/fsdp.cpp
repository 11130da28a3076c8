// An FSDP scenario, "fsdp:RANKS:STAGE[:PREFETCH[:TOPOLOGY]]" ("fsdp:16:3:both"):
// one ZeRO step of Llama-2 7B's shapes, the FSDP lab's --what-if: a sequence of
// 4096 tokens per GPU, its 6N FLOPs per token at half the device's peak.
#include <fmt/format.h>

#include "labkit/error.h"
#include "labkit/memory.h"
#include "labkit/parallel/data_parallel.h"
#include "labkit/parallel/fully_sharded.h"
#include "labkit/run.h"
#include "scenarios/scenarios.h"

namespace viz {

namespace {
struct FsdpScenario final : Scenario {
  int stage = 3;                   // ZeRO's 0 to 3
  std::string prefetch = "none";   // what stage 3 gathers ahead: as labkit::parse_prefetch names it

  // Each layer's gathers and reduce-scatters on the comm streams, beside its compute.
  ScenarioRun run() const override {
    const labkit::memory::Architecture llama = labkit::memory::model_preset("llama2-7b");
    const labkit::RunOptions options = run_options();
    const double compute = labkit::step_seconds_for(
        llama, 4096, labkit::find_topology(options.topology).device.peak_flops * options.efficiency);
    const labkit::RunResult r = labkit::run(options, [&](labkit::Comm& comm) {
      labkit::sharded_meta_step(comm, llama, compute, stage, {.prefetch = labkit::parse_prefetch(prefetch)});
    });
    return {from_trace(*r.trace, fmt::format("ZeRO stage {} step of Llama-2 7B's shapes on {} ranks, {}, prefetch {}",
                                             stage, ranks, topology, prefetch))};
  }
};
}  // namespace

std::unique_ptr<Scenario> parse_fsdp_scenario(const ScenarioText& t) {
  const std::string& stage = t.fields[2];
  if (t.fields.size() > 5 || stage.size() != 1 || stage[0] < '0' || stage[0] > '3')
    throw labkit::Error(fmt::format("'{}' is not fsdp:RANKS:STAGE[:PREFETCH[:TOPOLOGY]] (stage 0-3)", t.text));
  auto s = std::make_unique<FsdpScenario>();
  s->stage = stage[0] - '0';
  s->prefetch = t.field_or(3, s->prefetch);
  labkit::parse_prefetch(s->prefetch);  // throws, naming the choices
  s->topology = t.field_or(4, s->topology);
  return s;
}

}  // namespace viz
