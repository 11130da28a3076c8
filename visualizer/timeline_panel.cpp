// Timeline: one track per rank, its communication stream's track right under
// it where it has one, spans drawn with ImDrawList on an InvisibleButton
// canvas (as imgui_demo's "Canvas"), idle time shaded, arrows from each send
// to its receive. A pipeline step's forwards and backwards take the grid's
// colours and short names (pipeline_panel.cpp). Wheel zooms around the mouse,
// drag pans.
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
  // Ticks 1, 2 or 5 times a power of ten apart: the closest that leaves each label its room.
  const double scale = (width - kLabelWidth) / span;
  const float room = ImGui::CalcTextSize("8.88 ms").x + 16;
  double step = std::pow(10.0, std::floor(std::log10(room / scale)));
  for (double multiple : {1.0, 2.0, 5.0, 10.0})
    if (multiple * step * scale >= room) {
      step *= multiple;
      break;
    }
  for (double t = std::ceil(start / step) * step; t <= start + span; t += step) {
    const float x = origin.x + kLabelWidth + float((t - start) * scale);
    dl->AddLine({x, origin.y + kRulerHeight - 5}, {x, origin.y + kRulerHeight}, IM_COL32(180, 180, 180, 255));
    const std::string label = labkit::format_seconds(t);
    if (x + 2 + ImGui::CalcTextSize(label.c_str()).x <= origin.x + width)  // no label cut at the right edge
      dl->AddText({x + 2, origin.y}, IM_COL32(180, 180, 180, 255), label.c_str());
  }
}

// The whole run in view, with a little room after its end.
void fit(App& app) {
  app.view_start = 0;
  app.view_span = app.model.end > 0 ? app.model.end * 1.02 : 1e-6;
}

// Where the canvas is on screen, the time window it shows and a track's height.
struct Canvas {
  ImDrawList* dl;
  ImVec2 origin, size;
  double start, end, scale;  // the window in seconds; pixels per second
  float row;
  int last_microbatch;       // a pipeline step's, for its cells' lightness; -1: no pipeline

  float x_of(double t) const { return origin.x + kLabelWidth + float((t - start) * scale); }
  float y_of(const Track& t) const { return origin.y + kRulerHeight + t.row * row; }
};

// Zoom with the wheel around the mouse, pan by dragging, fit with a double click.
void navigate(App& app, ImVec2 origin, double scale) {
  const ImGuiIO& io = ImGui::GetIO();
  const double mouse_t = app.view_start + (io.MousePos.x - origin.x - kLabelWidth) / scale;
  if (ImGui::IsItemHovered() && io.MouseWheel != 0) {
    const double factor = std::pow(0.8, io.MouseWheel);
    app.view_start = mouse_t - (mouse_t - app.view_start) * factor;
    app.view_span *= factor;
  }
  if (ImGui::IsItemActive() && ImGui::IsMouseDragging(ImGuiMouseButton_Left)) app.view_start -= io.MouseDelta.x / scale;
  if (ImGui::IsItemHovered() && ImGui::IsMouseDoubleClicked(ImGuiMouseButton_Left)) fit(app);
}

// A span's name where it fits, else its short name (a pipeline cell's "F3"), else nothing.
void draw_label(ImDrawList* dl, float x0, float x1, float y, ImU32 color, const std::string& name,
                const std::string& short_name) {
  for (const std::string* label : {&name, &short_name})
    if (!label->empty() && ImGui::CalcTextSize(label->c_str()).x + 6 <= x1 - x0) {
      dl->AddText({x0 + 3, y}, color, label->c_str());
      return;
    }
}

// A span's colour and short name: a pipeline schedule's cell as the grid draws
// it ("F3", "B3", "W3'"), every other span by its kind.
std::pair<ImU32, std::string> look_of(const Span& span, int last_microbatch) {
  if (span.kind == Kind::compute && last_microbatch >= 0)
    if (const auto cell = pipeline_cell(span.name))
      return {colors::of(cell->kind, last_microbatch > 0 ? double(cell->microbatch) / last_microbatch : 0),
              fmt::format("{}{}{}", "FBW"[int(cell->kind)], cell->microbatch, cell->later_chunk ? "'" : "")};
  return {colors::of(span.kind), ""};
}

// One track's label and the spans in the window; returns the span under the mouse, if any.
const Span* draw_track(const Canvas& c, const Track& track, double trace_end) {
  ImDrawList* dl = c.dl;
  const ImVec2 mouse = ImGui::GetIO().MousePos;
  const float y0 = c.y_of(track), y1 = y0 + c.row - 1;
  const bool nested_visible = c.row >= 10;  // below that, sends inside a collective are a pixel tall: skip them
  // A stream's label is indented under its rank's: "rank 3 / comm" would not fit.
  if (c.row >= 10)
    dl->AddText({c.origin.x + (track.stream ? 14 : 2), y0 + (c.row - 14) / 2}, IM_COL32(220, 220, 220, 255),
                track.stream ? "comm" : track.name.c_str());
  // Idle time is the gaps between a rank's top-level spans, shaded as they are
  // passed. A stream with nothing in flight is not a rank waiting: not shaded.
  double busy_until = std::max(0.0, c.start);
  auto idle_until = [&](double t) {
    if (t > busy_until && !track.stream) dl->AddRectFilled({c.x_of(busy_until), y0}, {c.x_of(t), y1}, colors::idle);
  };
  // Only the spans that can reach into the view: sorted by start, none longer than `longest`.
  auto first = std::lower_bound(track.spans.begin(), track.spans.end(), c.start - track.longest,
                                [](const Span& s, double t) { return s.start < t; });
  // A run of merged spans of one kind takes its colour (a stream's many small
  // allreduces read as one band of them); a mixed run is grey.
  float run_x0 = 0, run_x1 = -1;
  int run_count = 0;
  Kind run_kind = Kind::other;
  bool run_mixed = false;
  auto flush_run = [&] {
    if (run_count > 0)
      dl->AddRectFilled({run_x0, y0}, {std::max(run_x1, run_x0 + 1), y1}, run_mixed ? colors::merged : colors::of(run_kind));
    run_count = 0;
  };
  const Span* hovered = nullptr;
  for (auto it = first; it != track.spans.end() && it->start <= c.end; ++it) {
    if (it->end < c.start || (it->depth > 0 && !nested_visible)) continue;
    if (it->depth == 0) {
      idle_until(it->start);
      busy_until = std::max(busy_until, it->end);
    }
    const float x0 = std::max(c.x_of(it->start), c.origin.x + kLabelWidth), x1 = std::min(c.x_of(it->end), c.origin.x + c.size.x);
    if (it->kind == Kind::fault) {  // an instant: a line across the track, never merged away
      dl->AddLine({x0, y0}, {x0, y1}, colors::fault, 3);
      continue;
    }
    if (x1 - x0 < kMinVisible) {  // too narrow alone: merge with its neighbours
      if (run_count == 0 || x0 > run_x1 + kMinVisible) {
        flush_run();
        run_x0 = x0;
        run_kind = it->kind;
        run_mixed = false;
      }
      run_mixed = run_mixed || it->kind != run_kind;
      run_x1 = std::max(run_x1, x1);
      ++run_count;
      continue;
    }
    flush_run();
    // Point-to-point inside a collective: sends in the middle band, receives at the bottom.
    const bool p2p = it->kind == Kind::send || it->kind == Kind::recv;
    const float top = it->kind == Kind::send ? y0 + c.row * 0.4f : it->kind == Kind::recv ? y0 + c.row * 0.7f : y0;
    const float bottom = it->kind == Kind::send ? y0 + c.row * 0.7f : y1;
    const auto [color, short_name] = look_of(*it, c.last_microbatch);
    dl->AddRectFilled({x0, top}, {x1, bottom}, color);
    // A name, where no nested bands will cover it (nothing nests in compute);
    // dark on a pipeline cell's light colours, as in the grid.
    const float band = nested_visible && it->kind != Kind::compute ? c.row * 0.4f : c.row;
    if (band >= 13 && !p2p)
      draw_label(dl, x0, x1, y0 + (band - 13) / 2, short_name.empty() ? IM_COL32_WHITE : IM_COL32(0, 0, 0, 255), it->name,
                 short_name);
    if (mouse.x >= x0 && mouse.x < x1 && mouse.y >= top && mouse.y < bottom) hovered = &*it;
  }
  flush_run();
  idle_until(std::min(trace_end, c.end));
  return hovered;
}

// Arrows from send to receive, track to track, for the flows inside the view, if few enough to read.
void draw_arrows(const Canvas& c, const TraceModel& m) {
  std::size_t in_view = 0;
  for (const Flow& f : m.flows) in_view += f.delivered >= c.start && f.sent <= c.end;
  if (in_view <= kMaxArrows) {
    for (const Flow& f : m.flows)
      if (f.delivered >= c.start && f.sent <= c.end)
        c.dl->AddLine({c.x_of(f.sent), c.y_of(m.tracks[f.from_track]) + c.row * 0.7f},
                      {c.x_of(f.delivered), c.y_of(m.tracks[f.to_track]) + c.row * 0.7f}, colors::flow);
    return;
  }
  const std::string note = fmt::format("{} messages in view: zoom in to see their arrows", in_view);
  const ImVec2 text = ImGui::CalcTextSize(note.c_str()), corner{c.origin.x + c.size.x, c.origin.y + c.size.y};
  c.dl->AddRectFilled({corner.x - text.x - 8, corner.y - text.y - 4}, corner, IM_COL32(0, 0, 0, 200));
  c.dl->AddText({corner.x - text.x - 4, corner.y - text.y - 2}, IM_COL32_WHITE, note.c_str());
}

void draw_tooltip(const Span& span) {
  ImGui::BeginTooltip();
  ImGui::Text("%s", span.name.c_str());
  ImGui::Text("start %s, duration %s", labkit::format_seconds(span.start).c_str(),
              labkit::format_seconds(span.end - span.start).c_str());
  if (span.bytes) ImGui::Text("%s", labkit::format_bytes(span.bytes).c_str());
  if (span.peer >= 0) ImGui::Text("peer: rank %d", span.peer);
  if (!span.detail.empty()) ImGui::TextUnformatted(span.detail.c_str());
  ImGui::EndTooltip();
}
}  // namespace

void draw_timeline(App& app) {
  const TraceModel& m = app.model;
  ImGui::Begin("Timeline");
  if (app.view_span <= 0) fit(app);  // a new trace
  const ImVec2 origin = ImGui::GetCursorScreenPos();
  ImVec2 size = ImGui::GetContentRegionAvail();
  size.x = std::max(size.x, 100.0f);
  size.y = std::max(size.y, 60.0f);
  ImGui::InvisibleButton("canvas", size, ImGuiButtonFlags_MouseButtonLeft);
  navigate(app, origin, (size.x - kLabelWidth) / app.view_span);

  ImDrawList* dl = ImGui::GetWindowDrawList();
  // Thousands of axis-aligned boxes: antialiasing would triple their vertices for nothing.
  const ImDrawListFlags flags = dl->Flags;
  dl->Flags &= ~(ImDrawListFlags_AntiAliasedFill | ImDrawListFlags_AntiAliasedLines);
  dl->PushClipRect(origin, {origin.x + size.x, origin.y + size.y}, true);
  draw_ruler(dl, origin, size.x, app.view_start, app.view_span);
  const Canvas c{dl, origin, size, app.view_start, app.view_start + app.view_span, (size.x - kLabelWidth) / app.view_span,
                 std::clamp((size.y - kRulerHeight) / std::max<float>(m.tracks.size(), 1), 4.0f, 24.0f),
                 app.summary.pipeline_microbatches - 1};
  const Span* hovered = nullptr;
  for (const Track& track : m.tracks)
    if (c.y_of(track) <= origin.y + size.y)
      if (const Span* s = draw_track(c, track, m.end)) hovered = s;
  draw_arrows(c, m);
  dl->AddLine({c.x_of(app.cursor), origin.y}, {c.x_of(app.cursor), origin.y + size.y}, colors::cursor, 2);
  dl->PopClipRect();
  dl->Flags = flags;
  if (hovered) draw_tooltip(*hovered);
  ImGui::End();
}

}  // namespace viz
