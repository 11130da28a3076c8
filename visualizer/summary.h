// What the summary panel shows, computed once per trace rather than every frame.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
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
  std::vector<std::pair<double, double>> idle_spans;  // (start, end), seconds, in order: the timeline shades them
};
struct Summary {
  std::vector<RankShare> ranks;
  bool streams = false;  // some rank has a communication stream
  bool native_collectives = false;  // some collective ran as the backend's own, with no messages to count
  std::vector<std::pair<std::int64_t, std::pair<int, int>>> links;  // (bytes, (from, to)), busiest first
  int pipeline_microbatches = 0;  // a pipeline step's micro-batches (its cells', pipeline_cell), 0 if none
};
Summary summarize(const TraceModel& model);

// A compute span of a pipeline schedule's step, read back from the name the
// executors give it (labkit::trace_name: "forward 3", "backward for the
// input 3'"): its kind, micro-batch, and whether it is on a stage's later chunk.
struct PipelineCell {
  enum class Kind { forward, backward, weights } kind;
  int microbatch;
  bool later_chunk;
};
std::optional<PipelineCell> pipeline_cell(std::string_view span_name);

}  // namespace viz
