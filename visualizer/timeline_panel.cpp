// Timeline: one track per rank, spans drawn with ImDrawList on an
// InvisibleButton canvas (as imgui_demo's "Canvas"), idle time shaded, arrows
// from each send to its receive. Wheel zooms around the mouse, drag pans.
// At scale it draws only the visible time range and merges spans narrower than
// 3 pixels into one run that says how many it holds (Tracy's MinVisSize).
#include <algorithm>
#include <cmath>

#include <fmt/format.h>
#include <imgui.h>

#include "app.h"
#include "colors.h"
#include "labkit/units.h"

namespace viz {

namespace {
constexpr float kLabelWidth = 64, kRulerHeight = 18, kMinVisible = 3;
constexpr std::size_t kMaxArrows = 1000;  // more than this in view: zoom in to see them

void draw_ruler(ImDrawList* dl, ImVec2 origin, float width, double start, double span) {
  // A tick every power of ten that gives 5-15 ticks across the view.
  const double step = std::pow(10.0, std::floor(std::log10(span / 5)));
  const double scale = (width - kLabelWidth) / span;
  for (double t = std::ceil(start / step) * step; t <= start + span; t += step) {
    const float x = origin.x + kLabelWidth + float((t - start) * scale);
    dl->AddLine({x, origin.y + kRulerHeight - 5}, {x, origin.y + kRulerHeight}, IM_COL32(180, 180, 180, 255));
    dl->AddText({x + 2, origin.y}, IM_COL32(180, 180, 180, 255), labkit::format_seconds(t).c_str());
  }
}
}  // namespace

void draw_timeline(App& app) {
  const TraceModel& m = app.model;
  ImGui::Begin("Timeline");
  if (app.view_span <= 0) {
    app.view_start = 0;
    app.view_span = m.end > 0 ? m.end * 1.02 : 1e-6;
  }
  const ImVec2 origin = ImGui::GetCursorScreenPos();
  ImVec2 size = ImGui::GetContentRegionAvail();
  size.x = std::max(size.x, 100.0f);
  size.y = std::max(size.y, 60.0f);
  ImGui::InvisibleButton("canvas", size, ImGuiButtonFlags_MouseButtonLeft);
  const ImGuiIO& io = ImGui::GetIO();
  const double scale = (size.x - kLabelWidth) / app.view_span;
  const double mouse_t = app.view_start + (io.MousePos.x - origin.x - kLabelWidth) / scale;
  if (ImGui::IsItemHovered() && io.MouseWheel != 0) {  // zoom around the mouse
    const double factor = std::pow(0.8, io.MouseWheel);
    app.view_start = mouse_t - (mouse_t - app.view_start) * factor;
    app.view_span *= factor;
  }
  if (ImGui::IsItemActive() && ImGui::IsMouseDragging(ImGuiMouseButton_Left)) app.view_start -= io.MouseDelta.x / scale;
  if (ImGui::IsItemHovered() && ImGui::IsMouseDoubleClicked(ImGuiMouseButton_Left)) app.view_span = 0;  // fit

  ImDrawList* dl = ImGui::GetWindowDrawList();
  // Thousands of axis-aligned boxes: antialiasing would triple their vertices for nothing.
  const ImDrawListFlags flags = dl->Flags;
  dl->Flags &= ~(ImDrawListFlags_AntiAliasedFill | ImDrawListFlags_AntiAliasedLines);
  dl->PushClipRect(origin, {origin.x + size.x, origin.y + size.y}, true);
  draw_ruler(dl, origin, size.x, app.view_start, app.view_span);
  const int ranks = int(m.tracks.size());
  const float row = std::clamp((size.y - kRulerHeight) / std::max(ranks, 1), 4.0f, 24.0f);
  auto x_of = [&](double t) { return origin.x + kLabelWidth + float((t - app.view_start) * scale); };
  auto y_of = [&](int r) { return origin.y + kRulerHeight + r * row; };
  const double view_end = app.view_start + app.view_span;
  const Span* hovered = nullptr;
  const bool nested_visible = row >= 10;  // below that, sends inside a collective are a pixel tall: skip them

  for (int r = 0; r < ranks; ++r) {
    const Track& track = m.tracks[r];
    const float y0 = y_of(r), y1 = y0 + row - 1;
    if (y0 > origin.y + size.y) break;
    if (row >= 10) dl->AddText({origin.x + 2, y0 + (row - 14) / 2}, IM_COL32(220, 220, 220, 255), track.name.c_str());
    // Idle time is the gaps between top-level spans, shaded as they are passed.
    double busy_until = std::max(0.0, app.view_start);
    auto idle_until = [&](double t) {
      if (t > busy_until) dl->AddRectFilled({x_of(busy_until), y0}, {x_of(t), y1}, colors::idle);
    };
    // Only the spans that can reach into the view: sorted by start, none longer than `longest`.
    auto first = std::lower_bound(track.spans.begin(), track.spans.end(), app.view_start - track.longest,
                                  [](const Span& s, double t) { return s.start < t; });
    float run_x0 = 0, run_x1 = -1;
    int run_count = 0;
    auto flush_run = [&] {
      if (run_count > 0) dl->AddRectFilled({run_x0, y0}, {std::max(run_x1, run_x0 + 1), y1}, colors::merged);
      run_count = 0;
    };
    for (auto it = first; it != track.spans.end() && it->start <= view_end; ++it) {
      if (it->end < app.view_start || (it->depth > 0 && !nested_visible)) continue;
      if (it->depth == 0) {
        idle_until(it->start);
        busy_until = std::max(busy_until, it->end);
      }
      const float x0 = std::max(x_of(it->start), origin.x + kLabelWidth), x1 = std::min(x_of(it->end), origin.x + size.x);
      if (it->kind == Kind::fault) {  // an instant: a line across the track, never merged away
        dl->AddLine({x0, y0}, {x0, y1}, colors::fault, 3);
        continue;
      }
      if (x1 - x0 < kMinVisible) {  // too narrow alone: merge with its neighbours
        if (run_count == 0 || x0 > run_x1 + kMinVisible) {
          flush_run();
          run_x0 = x0;
        }
        run_x1 = std::max(run_x1, x1);
        ++run_count;
        continue;
      }
      flush_run();
      // Point-to-point inside a collective: sends in the middle band, receives at the bottom.
      const bool p2p = it->kind == Kind::send || it->kind == Kind::recv;
      const float top = it->kind == Kind::send ? y0 + row * 0.4f : it->kind == Kind::recv ? y0 + row * 0.7f : y0;
      const float bottom = it->kind == Kind::send ? y0 + row * 0.7f : y1;
      dl->AddRectFilled({x0, top}, {x1, bottom}, colors::of(it->kind));
      // A name, where no nested bands will cover it.
      const float band = nested_visible ? row * 0.4f : row;
      if (x1 - x0 > 40 && band >= 13 && !p2p) dl->AddText({x0 + 3, y0 + (band - 13) / 2}, IM_COL32_WHITE, it->name.c_str());
      if (io.MousePos.x >= x0 && io.MousePos.x < x1 && io.MousePos.y >= top && io.MousePos.y < bottom) hovered = &*it;
    }
    flush_run();
    idle_until(std::min(m.end, view_end));
  }
  // Arrows from send to receive, for the flows inside the view, if few enough to read.
  std::size_t in_view = 0;
  for (const Flow& f : m.flows) in_view += f.delivered >= app.view_start && f.sent <= view_end && f.to_rank >= 0;
  if (in_view <= kMaxArrows) {
    for (const Flow& f : m.flows)
      if (f.delivered >= app.view_start && f.sent <= view_end && f.to_rank >= 0)
        dl->AddLine({x_of(f.sent), y_of(f.from_rank) + row * 0.7f},
                    {x_of(f.delivered), y_of(f.to_rank) + row * 0.7f}, colors::flow);
  } else {
    const std::string note = fmt::format("{} messages in view: zoom in to see their arrows", in_view);
    const ImVec2 text = ImGui::CalcTextSize(note.c_str());
    dl->AddRectFilled({origin.x + size.x - text.x - 8, origin.y + size.y - text.y - 4}, {origin.x + size.x, origin.y + size.y},
                      IM_COL32(0, 0, 0, 200));
    dl->AddText({origin.x + size.x - text.x - 4, origin.y + size.y - text.y - 2}, IM_COL32_WHITE, note.c_str());
  }
  dl->AddLine({x_of(app.cursor), origin.y}, {x_of(app.cursor), origin.y + size.y}, colors::cursor, 2);
  dl->PopClipRect();
  dl->Flags = flags;

  if (hovered) {
    ImGui::BeginTooltip();
    ImGui::Text("%s", hovered->name.c_str());
    ImGui::Text("start %s, duration %s", labkit::format_seconds(hovered->start).c_str(),
                labkit::format_seconds(hovered->end - hovered->start).c_str());
    if (hovered->bytes) ImGui::Text("%s", labkit::format_bytes(hovered->bytes).c_str());
    if (hovered->peer >= 0) ImGui::Text("peer: rank %d", hovered->peer);
    if (!hovered->detail.empty()) ImGui::TextUnformatted(hovered->detail.c_str());
    ImGui::EndTooltip();
  }
  ImGui::End();
}

}  // namespace viz
