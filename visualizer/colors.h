// One palette for every panel, so a send looks the same everywhere.
#pragma once

#include <imgui.h>

#include "summary.h"
#include "trace_model.h"

namespace viz::colors {

constexpr ImU32 collective = IM_COL32(70, 110, 200, 255);
constexpr ImU32 send = IM_COL32(60, 170, 90, 255);
constexpr ImU32 recv = IM_COL32(40, 150, 160, 255);
constexpr ImU32 compute = IM_COL32(220, 150, 50, 255);
constexpr ImU32 other = IM_COL32(150, 150, 150, 255);
constexpr ImU32 fault = IM_COL32(235, 50, 50, 255);
constexpr ImU32 idle = IM_COL32(45, 45, 50, 255);
constexpr ImU32 merged = IM_COL32(200, 200, 200, 255);  // a run of spans too narrow to draw apart
constexpr ImU32 flow = IM_COL32(240, 240, 240, 110);
constexpr ImU32 cursor = IM_COL32(255, 220, 0, 255);
constexpr ImU32 rank_node = IM_COL32(255, 64, 160, 255);  // unique: tests count rank nodes by it
constexpr ImU32 message = IM_COL32(255, 255, 255, 255);
// A chunk of a rank's buffer: whose data it holds.
constexpr ImU32 chunk_empty = IM_COL32(60, 60, 66, 255);
constexpr ImU32 chunk_own = IM_COL32(140, 140, 140, 255);
constexpr ImU32 chunk_gathered = IM_COL32(165, 105, 235, 255);
constexpr ImU32 chunk_partial = IM_COL32(90, 170, 255, 255);
constexpr ImU32 chunk_reduced = IM_COL32(80, 210, 110, 255);
constexpr ImU32 node_group = IM_COL32(255, 255, 255, 28);

// A pipeline schedule's forward blue, backward (or its input's part) orange,
// weights' part green, mixed toward white by `lightness` (a later micro-batch,
// up to 60%): the grid's colours, and the timeline's for the same spans.
inline ImU32 of(PipelineCell::Kind kind, double lightness) {
  const int base[3][3] = {{31, 119, 180}, {255, 127, 14}, {44, 160, 44}};
  const int* c = base[int(kind)];
  const auto mix = [&](int v) { return int(v + (255 - v) * 0.6 * lightness); };
  return IM_COL32(mix(c[0]), mix(c[1]), mix(c[2]), 255);
}

inline ImU32 of(Kind k) {
  switch (k) {
    case Kind::collective: return collective;
    case Kind::send: return send;
    case Kind::recv: return recv;
    case Kind::compute: return compute;
    case Kind::other: return other;
    case Kind::fault: return fault;
  }
  return other;
}

}  // namespace viz::colors
