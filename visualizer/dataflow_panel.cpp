// Data flow: the ranks on a ring (the ranks of one node on one shaded arc), the
// messages in flight at the cursor as dots travelling along their links, and,
// for a simulated scenario, each rank's buffer as chunks colored by whose data
// they hold. Play, pause, single step (to the next delivery) and speed; the
// scrubber is the timeline's cursor.
#include <algorithm>
#include <bit>
#include <cmath>
#include <vector>

#include <imgui.h>

#include "app.h"
#include "colors.h"
#include "labkit/topology.h"
#include "labkit/units.h"
#include "scenarios/collective.h"

namespace viz {

namespace {
void controls(App& app) {
  const double end = std::max(app.model.end, 1e-12);
  if (ImGui::Button(app.playing ? "pause" : "play")) app.playing = !app.playing;
  ImGui::SameLine();
  if (ImGui::Button("step")) {  // to the next delivery after the cursor
    double next = end;
    for (const Flow& f : app.model.flows)
      if (f.delivered > app.cursor + 1e-15) next = std::min(next, f.delivered);
    app.cursor = next;
    app.playing = false;
  }
  ImGui::SameLine();
  ImGui::SetNextItemWidth(100);
  ImGui::SliderFloat("speed", &app.speed, 0.1f, 10.0f, "%.1fx", ImGuiSliderFlags_Logarithmic);
  if (app.playing) {  // the whole trace in ten seconds at 1x
    app.cursor += ImGui::GetIO().DeltaTime * app.speed * end / 10;
    if (app.cursor >= end) {
      app.cursor = end;
      app.playing = false;
    }
  }
  float at = float(app.cursor / end);
  ImGui::SetNextItemWidth(-1);
  if (ImGui::SliderFloat("##scrubber", &at, 0, 1, labkit::format_seconds(app.cursor).c_str())) app.cursor = at * end;
}
ImU32 chunk_color(std::uint64_t bits, int rank, std::uint64_t everyone) {
  if (bits == 0) return colors::chunk_empty;
  if (bits == everyone) return colors::chunk_reduced;
  if (std::has_single_bit(bits)) return bits == (std::uint64_t(1) << rank) ? colors::chunk_own : colors::chunk_gathered;
  return colors::chunk_partial;
}

void legend(ImDrawList* dl, ImVec2 at) {
  const std::pair<ImU32, const char*> keys[] = {{colors::chunk_empty, "empty"},
                                                {colors::chunk_own, "own"},
                                                {colors::chunk_gathered, "another rank's"},
                                                {colors::chunk_partial, "partly reduced"},
                                                {colors::chunk_reduced, "fully reduced"}};
  for (auto [color, name] : keys) {
    dl->AddRectFilled(at, {at.x + 10, at.y + 10}, color);
    dl->AddText({at.x + 14, at.y - 2}, IM_COL32(200, 200, 200, 255), name);
    at.x += 24 + ImGui::CalcTextSize(name).x;
  }
}
}  // namespace

void draw_dataflow(App& app) {
  ImGui::Begin("Data flow");
  controls(app);
  const int ranks = app.model.ranks;  // a rank's stream is no node of its own
  ImDrawList* dl = ImGui::GetWindowDrawList();
  if (!app.chunks.times.empty()) {  // the key to the chunk colors, above the ring
    legend(dl, ImGui::GetCursorScreenPos());
    ImGui::Dummy({0, 16});
  }
  const ImVec2 origin = ImGui::GetCursorScreenPos(), size = ImGui::GetContentRegionAvail();
  const ImVec2 center{origin.x + size.x / 2, origin.y + size.y / 2};
  const float radius = std::max(20.0f, std::min(size.x, size.y) / 2 - 24);
  const float node = std::clamp(radius * 3.0f / std::max(ranks, 1), 3.0f, 14.0f);
  // A binomial tree rooted at rank 0 is drawn as a tree: rank r sits at depth
  // popcount(r) (the hops its data takes from rank 0), spread across its level;
  // anything else sits on a ring.
  const CollectiveScenario* collective = shown_collective(app);
  const bool tree = collective && collective->algorithm == "binomial_tree";
  std::vector<int> level_size(8 * sizeof(int) + 1, 0), index_in_level(ranks);
  for (int r = 0; r < ranks; ++r) index_in_level[r] = level_size[std::popcount(unsigned(r))]++;
  const int depth = tree ? std::bit_width(unsigned(std::max(ranks - 1, 1))) : 0;
  auto at = [&](int r) {
    if (tree) {
      const int level = std::popcount(unsigned(r));
      const float x = origin.x + size.x * (index_in_level[r] + 0.5f) / level_size[level];
      return ImVec2{x, origin.y + 24 + (size.y - 60) * level / std::max(depth, 1)};
    }
    const float angle = 2 * 3.14159265f * r / std::max(ranks, 1) - 3.14159265f / 2;
    return ImVec2{center.x + radius * std::cos(angle), center.y + radius * std::sin(angle)};
  };
  // Messages in flight at the cursor, from rank to rank (whichever of their
  // tracks sent them): a line for the link, a dot for the bytes.
  for (const Flow& f : app.model.flows) {
    if (app.cursor < f.sent || app.cursor >= f.delivered) continue;
    const ImVec2 a = at(f.from_rank), b = at(f.to_rank);
    const float u = float((app.cursor - f.sent) / std::max(f.delivered - f.sent, 1e-15));
    dl->AddLine(a, b, colors::send, 2);
    dl->AddCircleFilled({a.x + (b.x - a.x) * u, a.y + (b.y - a.y) * u}, std::max(2.0f, node / 3), colors::message);
  }
  // Nodes as groups: a shaded arc behind the ranks of each node.
  if (app.from_scenario && !tree) {
    const int per_node = labkit::find_topology(app.scenario->topology).devices_per_node;
    for (int first = 0; per_node < ranks && first < ranks; first += per_node) {
      const float a0 = 2 * 3.14159265f * (first - 0.4f) / ranks - 3.14159265f / 2;
      const float a1 = 2 * 3.14159265f * (std::min(first + per_node, ranks) - 0.6f) / ranks - 3.14159265f / 2;
      dl->PathArcTo(center, radius, a0, a1, std::max(4, 64 * per_node / ranks));
      dl->PathStroke(colors::node_group, 0, node * 3.2f);
    }
  }
  // Chunks: the state at the cursor is the last one recorded before it.
  const ChunkHistory& h = app.chunks;
  const std::size_t state = h.times.empty() ? 0
      : std::size_t(std::upper_bound(h.times.begin(), h.times.end(), app.cursor) - h.times.begin());
  if (state > 0) {
    const float cell = std::clamp(radius * 0.5f / ranks, 3.0f, 9.0f);
    for (int r = 0; r < ranks; ++r) {
      const ImVec2 c = at(r);
      const float x0 = c.x - cell * ranks / 2, y0 = c.y + node + 3;
      for (int k = 0; k < ranks; ++k)
        dl->AddRectFilled({x0 + k * cell, y0}, {x0 + (k + 1) * cell - 1, y0 + cell}, chunk_color(h.states[state - 1][r][k], r, h.everyone));
    }
  }
  for (int r = 0; r < ranks; ++r) {
    dl->AddCircleFilled(at(r), node, colors::rank_node);
    if (node >= 8) {
      const std::string label = std::to_string(r);
      const ImVec2 text = ImGui::CalcTextSize(label.c_str());
      dl->AddText({at(r).x - text.x / 2, at(r).y - text.y / 2}, IM_COL32_BLACK, label.c_str());
    }
  }
  ImGui::End();
}

}  // namespace viz
