// Pipeline grid (chapter 8): a pipeline schedule's step as the stages ran it,
// one row per rank, one cell per forward or backward (read back from its
// compute span's name, pipeline_cell): forward blue, backward or its input's
// part orange, the weights' part green, a later micro-batch lighter, its
// number inside where it fits (primed on a stage's later chunk); the time a
// stage computes nothing grey: the bubble. Live on the simulator with
// --scenario pp:4:zb-h1:8, or from any pipeline lab's --trace.
#include <algorithm>

#include <fmt/format.h>
#include <imgui.h>

#include "app.h"
#include "colors.h"

namespace viz {

namespace {

constexpr float kLabelWidth = 64, kRowHeight = 22;

}  // namespace

void draw_pipeline(App& app) {
  ImGui::Begin("Pipeline grid");
  const int last_microbatch = app.summary.pipeline_microbatches - 1;  // >= 0: the panel applies (panels.cpp)
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const ImVec2 origin = ImGui::GetCursorScreenPos();
  const float width = std::max(ImGui::GetContentRegionAvail().x, kLabelWidth + 100);
  const double scale = (width - kLabelWidth) / app.model.end;
  for (const Track& t : app.model.tracks) {
    if (t.stream) continue;
    const float y0 = origin.y + float(t.rank) * kRowHeight, y1 = y0 + kRowHeight - 2;
    dl->AddText({origin.x + 2, y0 + 3}, IM_COL32(220, 220, 220, 255), fmt::format("stage {}", t.rank).c_str());
    dl->AddRectFilled({origin.x + kLabelWidth, y0}, {origin.x + width, y1}, colors::idle);
    for (const Span& s : t.spans) {
      const auto cell = s.kind == Kind::compute ? pipeline_cell(s.name) : std::nullopt;
      if (!cell) continue;
      const float x0 = origin.x + kLabelWidth + float(s.start * scale), x1 = origin.x + kLabelWidth + float(s.end * scale);
      const double lightness = last_microbatch > 0 ? double(cell->microbatch) / last_microbatch : 0;
      dl->AddRectFilled({x0, y0}, {std::max(x1 - 1, x0 + 1), y1}, colors::of(cell->kind, lightness));
      const std::string label = fmt::format("{}{}", cell->microbatch, cell->later_chunk ? "'" : "");
      if (x1 - x0 > ImGui::CalcTextSize(label.c_str()).x + 4)
        dl->AddText({(x0 + x1 - ImGui::CalcTextSize(label.c_str()).x) / 2, y0 + 3}, IM_COL32(0, 0, 0, 255),
                    label.c_str());
    }
  }
  ImGui::Dummy({width, float(app.model.ranks) * kRowHeight});
  ImGui::TextDisabled("forward blue, backward (or its input's part) orange, weights' part green; later micro-batches "
                      "lighter; grey: the bubble");
  ImGui::End();
}

}  // namespace viz
