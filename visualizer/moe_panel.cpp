// MoE routing (chapter 9): what the routers did while the MoE GPT trained,
// one layer at a time. Left, the heatmap: a column per step, a row per
// expert, each cell the assignments the expert was chosen for over its fair
// share k x tokens / E, dark at none, brightest at twice fair, outlined red
// where the expert was past capacity and dropped the rest. Right, the chosen
// step's bars: each expert's kept assignments, its dropped ones red on top,
// the capacity a yellow line. Live with --scenario moe:4:none:40 (the
// collapse) against moe:4:bias:40 (its cure).
#include <algorithm>
#include <numeric>

#include <fmt/format.h>
#include <imgui.h>

#include "app.h"
#include "colors.h"

namespace viz {

namespace {

constexpr float kLabelWidth = 24, kLegendHeight = 20;

// Load over fair share to colour: the idle grey at 0, the compute orange at twice fair and above.
ImU32 load_color(double load) {
  const double t = std::clamp(load / 2, 0.0, 1.0);
  const ImVec4 from = ImGui::ColorConvertU32ToFloat4(colors::idle);
  const ImVec4 to = ImGui::ColorConvertU32ToFloat4(colors::compute);
  const auto mix = [&](float a, float b) { return a + (b - a) * float(t); };
  return ImGui::ColorConvertFloat4ToU32({mix(from.x, to.x), mix(from.y, to.y), mix(from.z, to.z), 1});
}

std::int64_t sum(const std::vector<std::int64_t>& v) { return std::accumulate(v.begin(), v.end(), std::int64_t(0)); }

void draw_heatmap(const App& app, ImVec2 origin, ImVec2 size, int step) {
  const RoutingHistory& h = app.routing;
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const int steps = int(h.steps.size()), experts = h.experts();
  const float cell_w = (size.x - kLabelWidth) / float(steps), cell_h = size.y / float(experts);
  for (int e = 0; e < experts; ++e)
    dl->AddText({origin.x, origin.y + cell_h * float(e) + (cell_h - ImGui::GetTextLineHeight()) / 2},
                IM_COL32(220, 220, 220, 255), fmt::format("{}", e).c_str());
  for (int s = 0; s < steps; ++s) {
    const labkit::RoutingStats& stats = h.steps[std::size_t(s)][std::size_t(app.routing_layer)];
    const double fair = double(sum(stats.chosen)) / experts;
    for (int e = 0; e < experts; ++e) {
      const ImVec2 a{origin.x + kLabelWidth + cell_w * float(s), origin.y + cell_h * float(e)};
      const ImVec2 b{a.x + std::max(cell_w - 1, 1.0f), a.y + cell_h - 1};
      dl->AddRectFilled(a, b, load_color(fair > 0 ? double(stats.chosen[std::size_t(e)]) / fair : 0));
      if (stats.chosen[std::size_t(e)] > stats.kept[std::size_t(e)]) dl->AddRect(a, b, colors::fault);
    }
  }
  const float x = origin.x + kLabelWidth + cell_w * float(step);
  dl->AddRect({x, origin.y}, {x + cell_w, origin.y + size.y}, colors::cursor, 0, 0, 2);
}

void draw_bars(const labkit::RoutingStats& stats, ImVec2 origin, ImVec2 size) {
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const int experts = int(stats.chosen.size());
  const double top = double(std::max(*std::max_element(stats.chosen.begin(), stats.chosen.end()), stats.capacity));
  const float bar_w = size.x / float(experts), bottom = origin.y + size.y;
  const auto y_of = [&](double v) { return bottom - float(v / top) * size.y; };
  for (int e = 0; e < experts; ++e) {
    const float x0 = origin.x + bar_w * float(e) + 1, x1 = x0 + std::max(bar_w - 3, 1.0f);
    dl->AddRectFilled({x0, y_of(double(stats.kept[std::size_t(e)]))}, {x1, bottom}, colors::collective);
    dl->AddRectFilled({x0, y_of(double(stats.chosen[std::size_t(e)]))}, {x1, y_of(double(stats.kept[std::size_t(e)]))},
                      colors::fault);
  }
  dl->AddLine({origin.x, y_of(double(stats.capacity))}, {origin.x + size.x, y_of(double(stats.capacity))},
              colors::cursor, 2);
}

}  // namespace

void draw_moe_routing(App& app) {
  ImGui::Begin("MoE routing");
  const RoutingHistory& h = app.routing;  // not empty: the panel applies (panels.cpp)
  const int last = int(h.steps.size()) - 1;
  if (app.routing_step < 0 || app.routing_step > last) app.routing_step = last;
  app.routing_layer = std::clamp(app.routing_layer, 0, h.layers() - 1);
  ImGui::SetNextItemWidth(120);
  ImGui::SliderInt("layer", &app.routing_layer, 0, h.layers() - 1);
  ImGui::SameLine();
  ImGui::SetNextItemWidth(240);
  int step = app.routing_step + 1;  // numbered from 1, as the lab prints its steps
  if (ImGui::SliderInt("step", &step, 1, last + 1)) app.routing_step = step - 1;
  const labkit::RoutingStats& stats = h.steps[std::size_t(app.routing_step)][std::size_t(app.routing_layer)];
  ImGui::SameLine();
  ImGui::TextUnformatted(fmt::format("{:.1f}% dropped, capacity {} (factor {:.2f}, top-{})", 100 * stats.drop_rate(),
                                     stats.capacity, h.capacity_factor, h.top_k)
                             .c_str());

  const ImVec2 origin = ImGui::GetCursorScreenPos(), avail = ImGui::GetContentRegionAvail();
  const float height = std::max(avail.y - kLegendHeight, 40.0f), heatmap_w = std::max(avail.x * 0.65f, 80.0f);
  draw_heatmap(app, origin, {heatmap_w, height}, app.routing_step);
  draw_bars(stats, {origin.x + heatmap_w + 12, origin.y}, {std::max(avail.x - heatmap_w - 12, 40.0f), height});
  ImGui::Dummy({avail.x, height});
  ImGui::TextDisabled("experts by steps: assignments over the fair share, dark none, bright twice fair, red outline "
                      "past capacity; bars: the step's kept (blue) and dropped (red), capacity yellow");
  ImGui::End();
}

}  // namespace viz
