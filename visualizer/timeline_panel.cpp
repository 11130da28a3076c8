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
#include <string>

#include <fmt/format.h>
#include <imgui.h>

#include "app.h"
#include "colors.h"
#include "labkit/units.h"

namespace viz {

namespace {
constexpr float kLabelWidth = 64, kRulerHeight = 18, kMinVisible = 3;
constexpr float kLabelledRow = 12;  // the fewest pixels a row takes: its label fits, its sends and receives show
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
  const Summary& summary;    // its idle time, shaded

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
  // A stream's label is indented under its rank's, its name past "rank 3 / ": "comm", "comm 2".
  const std::size_t slash = track.name.find(" / ");
  const std::string label = track.stream && slash != std::string::npos ? track.name.substr(slash + 3) : track.name;
  dl->AddText({c.origin.x + (track.stream ? 14 : 2), y0 + (c.row - 14) / 2}, IM_COL32(220, 220, 220, 255),
              label.c_str());
  // Idle time is dark: the gaps between a rank's top-level spans, shaded as
  // they are passed, where the Summary counts the rank idle too (one waiting
  // on its stream's collective is communicating). A stream is not shaded.
  double busy_until = std::max(0.0, c.start);
  static const std::vector<std::pair<double, double>> none;
  const auto& idle = std::size_t(track.rank) < c.summary.ranks.size() ? c.summary.ranks[track.rank].idle_spans : none;
  auto idle_until = [&](double t) {
    if (track.stream || t <= busy_until) return;
    auto it = std::lower_bound(idle.begin(), idle.end(), busy_until,
                               [](const std::pair<double, double>& span, double at) { return span.second <= at; });
    for (; it != idle.end() && it->first < t; ++it)
      if (const double a = std::max(it->first, busy_until), b = std::min(it->second, t); b > a)
        dl->AddRectFilled({c.x_of(a), y0}, {c.x_of(b), y1}, colors::idle);
  };
  // Only the spans that can reach into the view: sorted by start, none longer than `longest`.
  auto first = std::lower_bound(track.spans.begin(), track.spans.end(), c.start - track.longest,
                                [](const Span& s, double t) { return s.start < t; });
  // A run of merged spans of one kind takes its colour (a stream's many small
  // allreduces read as one band of them); a mixed run is grey. A run of one
  // name, none nested, says how many it holds where it is wide enough ("backward x290").
  float run_x0 = 0, run_x1 = -1;
  int run_count = 0;
  Kind run_kind = Kind::other;
  bool run_mixed = false;
  const std::string* run_name = nullptr;  // its spans' name, or null where they differ or nest
  auto flush_run = [&] {
    if (run_count == 0) return;
    const float x1 = std::max(run_x1, run_x0 + 1);
    dl->AddRectFilled({run_x0, y0}, {x1, y1}, run_mixed ? colors::merged : colors::of(run_kind));
    if (run_count > 1 && run_name && c.row >= 13)
      draw_label(dl, run_x0, x1, y0 + (c.row - 13) / 2, IM_COL32_WHITE, fmt::format("{} x{}", *run_name, run_count),
                 fmt::format("x{}", run_count));
    run_count = 0;
  };
  const Span* hovered = nullptr;
  for (auto it = first; it != track.spans.end() && it->start <= c.end; ++it) {
    if (it->end < c.start) continue;
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
        run_name = it->depth == 0 ? &it->name : nullptr;
      }
      run_mixed = run_mixed || it->kind != run_kind;
      if (run_name && (*run_name != it->name || it->depth > 0)) run_name = nullptr;
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
    const float band = it->kind != Kind::compute ? c.row * 0.4f : c.row;
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
  // The wheel zooms; past the window's height the rows scroll by the scrollbar.
  ImGui::Begin("Timeline", nullptr, ImGuiWindowFlags_NoScrollWithMouse);
  if (app.view_span <= 0) fit(app);  // a new trace
  const ImVec2 origin = ImGui::GetCursorScreenPos();
  ImVec2 size = ImGui::GetContentRegionAvail();
  size.x = std::max(size.x, 100.0f);
  size.y = std::max(size.y, 60.0f);
  // Every row labelled: no fewer pixels than a label takes, the canvas taller than the window where need be.
  const float rows = float(std::max(m.rows, 1));
  const float row = std::clamp((size.y - kRulerHeight) / rows, kLabelledRow, 24.0f);
  size.y = std::max(size.y, kRulerHeight + row * rows);
  ImGui::InvisibleButton("canvas", size, ImGuiButtonFlags_MouseButtonLeft);
  navigate(app, origin, (size.x - kLabelWidth) / app.view_span);

  ImDrawList* dl = ImGui::GetWindowDrawList();
  // Thousands of axis-aligned boxes: antialiasing would triple their vertices for nothing.
  const ImDrawListFlags flags = dl->Flags;
  dl->Flags &= ~(ImDrawListFlags_AntiAliasedFill | ImDrawListFlags_AntiAliasedLines);
  dl->PushClipRect(origin, {origin.x + size.x, origin.y + size.y}, true);
  draw_ruler(dl, origin, size.x, app.view_start, app.view_span);
  const Canvas c{dl, origin, size, app.view_start, app.view_start + app.view_span, (size.x - kLabelWidth) / app.view_span,
                 row, app.summary.pipeline_microbatches - 1, app.summary};
  const Span* hovered = nullptr;
  const float top = ImGui::GetWindowPos().y, bottom = top + ImGui::GetWindowHeight();  // what the scroll shows
  for (const Track& track : m.tracks)
    if (track.row >= 0 && c.y_of(track) + row >= top && c.y_of(track) <= bottom)
      if (const Span* s = draw_track(c, track, m.end)) hovered = s;
  draw_arrows(c, m);
  dl->AddLine({c.x_of(app.cursor), origin.y}, {c.x_of(app.cursor), origin.y + size.y}, colors::cursor, 2);
  dl->PopClipRect();
  dl->Flags = flags;
  if (hovered) draw_tooltip(*hovered);
  ImGui::End();
}

}  // namespace viz
