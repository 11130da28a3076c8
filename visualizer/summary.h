// What the summary panel shows, computed once per trace rather than every frame.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "trace_model.h"

namespace viz {

// Fractions of the run; the first three add up to 1 (see summarize).
struct RankShare {
  double communicating;  // exposed: while the rank is not computing
  double computing;
  double idle;
  double hidden;  // in flight on the rank's stream while it computes
};
struct Summary {
  std::vector<RankShare> ranks;
  bool streams = false;  // some rank has a communication stream
  std::vector<std::pair<std::int64_t, std::pair<int, int>>> links;  // (bytes, (from, to)), busiest first
};
Summary summarize(const TraceModel& model);

}  // namespace viz
