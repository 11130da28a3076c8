// A collective scenario, "ALGO:RANKS:SIZE[:COLLECTIVE[:TOPOLOGY]]" ("ring:8:1M"):
// one call of a collective with one algorithm. The panels read its options
// (the summary's algbw and busbw, the data-flow view's tree).
#pragma once

#include <cstdint>
#include <string>

#include "labkit/collective.h"
#include "scenario.h"

namespace viz {

struct CollectiveScenario final : Scenario {
  labkit::Collective collective = labkit::Collective::all_reduce;
  std::string algorithm = "ring";  // as --algo names it: "native", "ring", "binomial_tree", ...
  std::uint64_t bytes = 1 << 20;

  ScenarioRun run() const override;
  void draw_fields() override;  // the collective, its algorithm, the ranks, the size and the topology
};

}  // namespace viz
