// A tensor-parallel scenario, "tp:RANKS[:sp|-[:TOPOLOGY]]" ("tp:4:sp"): one
// forward and backward of the tiny GPT split over 1, 2 or 4 ranks (the tp lab),
// with sequence parallelism (sp) or without (-).
#include <vector>

#include <fmt/format.h>

#include "labkit/error.h"
#include "labkit/parallel/tensor_parallel_gpt.h"
#include "labkit/run.h"
#include "scenarios/scenarios.h"

namespace viz {

namespace {
struct TensorParallelScenario final : Scenario {
  bool sequence_parallel = false;

  // Each layer's compute between its allreduces (SP: all-gathers and reduce-scatters).
  ScenarioRun run() const override {
    labkit::RunOptions o = run_options();
    o.payload_free = false;  // the tiny GPT computes
    const labkit::GptConfig config = labkit::gpt_preset("tiny-gpt", 32);
    const int B = 4, T = config.max_seq;
    std::vector<int> tokens(std::size_t(B) * T);
    for (std::size_t i = 0; i < tokens.size(); ++i) tokens[i] = int(i * 7 % 32);
    const labkit::RunResult r = labkit::run(o, [&](labkit::Comm& comm) {
      labkit::TensorParallelGpt model(comm, labkit::Gpt(config, 1), sequence_parallel);
      model.forward(tokens, tokens, B, T);
      model.backward();
    });
    return {from_trace(*r.trace, fmt::format("tensor-parallel step of the tiny GPT on {} ranks{}, {}", ranks,
                                             sequence_parallel ? ", sequence parallel" : "", topology))};
  }
};
}  // namespace

std::unique_ptr<Scenario> parse_tp_scenario(const ScenarioText& t) {
  const bool heads_split = t.ranks == 1 || t.ranks == 2 || t.ranks == 4;  // the tiny GPT's 4 heads
  const std::string split = t.field_or(2, "-");
  if (t.fields.size() > 4 || !heads_split || (split != "sp" && split != "-"))
    throw labkit::Error(fmt::format("'{}' is not tp:RANKS[:sp|-[:TOPOLOGY]] (ranks 1, 2 or 4: the tiny GPT's 4 "
                                    "heads split whole)", t.text));
  auto s = std::make_unique<TensorParallelScenario>();
  s->sequence_parallel = split == "sp";
  s->topology = t.field_or(3, s->topology);
  return s;
}

}  // namespace viz
