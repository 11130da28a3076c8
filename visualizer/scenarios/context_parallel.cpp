// A context-parallel scenario, "cp:RANKS[:contiguous|zigzag[:TOPOLOGY]]"
// ("cp:8:contiguous"): ring attention's forward and backward over a long
// sequence split across the ranks (the tp lab's --cp), payload-free.
#include <fmt/format.h>

#include "labkit/error.h"
#include "labkit/parallel/ring_attention.h"
#include "labkit/run.h"
#include "scenarios/scenarios.h"

namespace viz {

namespace {
// Long enough that each rank's attention blocks outlast the K/V messages, so
// that the contiguous layout's imbalance shows.
constexpr int kContextSequence = 65536;

struct ContextParallelScenario final : Scenario {
  labkit::SequenceLayout layout = labkit::SequenceLayout::zigzag;

  // Each step of the ring: a block's compute, the next block's message beside it.
  ScenarioRun run() const override {
    const labkit::RunResult r = labkit::run(run_options(), [&](labkit::Comm& comm) {
      labkit::RingAttention ring(comm, layout, {.B = 4, .T = kContextSequence, .C = 64, .NH = 4});
      ring.forward(nullptr, nullptr);
      ring.backward(nullptr, nullptr);
    });
    return {from_trace(*r.trace, fmt::format("ring attention over {} positions of the tiny GPT's heads on {} ranks, "
                                             "{} layout, {}", kContextSequence, ranks, labkit::name_of(layout),
                                             topology))};
  }
};
}  // namespace

std::unique_ptr<Scenario> parse_cp_scenario(const ScenarioText& t) {
  const std::string layout = t.field_or(2, "zigzag");
  if (t.fields.size() > 4 || (layout != "contiguous" && layout != "zigzag") || kContextSequence % (2 * t.ranks) != 0)
    throw labkit::Error(fmt::format("'{}' is not cp:RANKS[:contiguous|zigzag[:TOPOLOGY]] (ranks dividing {}: the "
                                    "zig-zag layout cuts the sequence into 2 x RANKS chunks)", t.text,
                                    kContextSequence / 2));
  auto s = std::make_unique<ContextParallelScenario>();
  s->layout = layout == "zigzag" ? labkit::SequenceLayout::zigzag : labkit::SequenceLayout::contiguous;
  s->topology = t.field_or(3, s->topology);
  return s;
}

}  // namespace viz
