// Data flow: the ranks on a ring, and the messages in flight at the cursor
// time as dots travelling along their links. Play, pause, single step (to the
// next delivery) and speed; the scrubber is the timeline's cursor.
#include <algorithm>
#include <cmath>

#include <imgui.h>

#include "app.h"
#include "colors.h"
#include "labkit/units.h"

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
}  // namespace

void draw_dataflow(App& app) {
  ImGui::Begin("Data flow");
  controls(app);
  const int ranks = int(app.model.tracks.size());
  const ImVec2 origin = ImGui::GetCursorScreenPos(), size = ImGui::GetContentRegionAvail();
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const ImVec2 center{origin.x + size.x / 2, origin.y + size.y / 2};
  const float radius = std::max(20.0f, std::min(size.x, size.y) / 2 - 24);
  const float node = std::clamp(radius * 3.0f / std::max(ranks, 1), 3.0f, 14.0f);
  auto at = [&](int r) {
    const float angle = 2 * 3.14159265f * r / std::max(ranks, 1) - 3.14159265f / 2;
    return ImVec2{center.x + radius * std::cos(angle), center.y + radius * std::sin(angle)};
  };
  // Messages in flight at the cursor: a line for the link, a dot for the bytes.
  for (const Flow& f : app.model.flows) {
    if (f.to_rank < 0 || app.cursor < f.sent || app.cursor >= f.delivered) continue;
    const ImVec2 a = at(f.from_rank), b = at(f.to_rank);
    const float u = float((app.cursor - f.sent) / std::max(f.delivered - f.sent, 1e-15));
    dl->AddLine(a, b, colors::send, 2);
    dl->AddCircleFilled({a.x + (b.x - a.x) * u, a.y + (b.y - a.y) * u}, std::max(2.0f, node / 3), colors::message);
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
