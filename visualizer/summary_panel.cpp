// Summary: algbw and busbw (nccl-tests' conventions), each rank's time split
// into communicating, computing and idle, and the bytes each link carried.
#include <algorithm>
#include <map>

#include <imgui.h>

#include "app.h"
#include "labkit/collective.h"
#include "labkit/cost_model.h"
#include "labkit/units.h"

namespace viz {

namespace {
// Seconds covered by the union of the spans of the given kinds.
double covered(const Track& t, bool (*counts)(Kind)) {
  double total = 0, open_end = -1, open_start = 0;
  for (const Span& s : t.spans) {  // sorted by start
    if (!counts(s.kind)) continue;
    if (s.start > open_end) {
      if (open_end >= 0) total += open_end - open_start;
      open_start = s.start;
      open_end = s.end;
    } else {
      open_end = std::max(open_end, s.end);
    }
  }
  return open_end >= 0 ? total + open_end - open_start : total;
}
bool communicating(Kind k) { return k == Kind::collective || k == Kind::send || k == Kind::recv; }
bool computing(Kind k) { return k == Kind::compute; }
}  // namespace

Summary summarize(const TraceModel& m) {
  Summary s;
  const double end = std::max(m.end, 1e-300);
  for (const Track& t : m.tracks) s.ranks.push_back({covered(t, communicating) / end, covered(t, computing) / end});
  std::map<std::pair<int, int>, std::int64_t> per_link;
  for (const Flow& f : m.flows) per_link[{f.from_rank, f.to_rank}] += f.bytes;
  for (const auto& [link, bytes] : per_link) s.links.push_back({bytes, link});
  std::sort(s.links.rbegin(), s.links.rend());
  return s;
}

void draw_summary(App& app) {
  const TraceModel& m = app.model;
  ImGui::Begin("Summary");
  ImGui::TextWrapped("%s", m.source.c_str());
  ImGui::Text("%zu ranks, %zu events, %s", m.tracks.size(), m.events, labkit::format_seconds(m.end).c_str());
  if (!app.error.empty()) ImGui::TextColored({1, 0.4f, 0.4f, 1}, "%s", app.error.c_str());
  if (app.from_scenario && m.end > 0) {
    const double algbw = app.scenario.bytes / m.end / 1e9;
    const double factor = labkit::bus_bandwidth_factor(labkit::parse_collective(app.scenario.collective), int(m.tracks.size()));
    ImGui::Text("algbw %.2f GB/s   busbw %.2f GB/s", algbw, algbw * factor);
  }
  if (ImGui::BeginTable("ranks", 4, ImGuiTableFlags_ScrollY | ImGuiTableFlags_RowBg, {0, 160})) {
    ImGui::TableSetupColumn("rank");
    ImGui::TableSetupColumn("communicating");
    ImGui::TableSetupColumn("computing");
    ImGui::TableSetupColumn("idle");
    ImGui::TableHeadersRow();
    for (std::size_t r = 0; r < app.summary.ranks.size(); ++r) {
      const double comm = app.summary.ranks[r].communicating, comp = app.summary.ranks[r].computing;
      ImGui::TableNextRow();
      ImGui::TableNextColumn();
      ImGui::Text("%zu", r);
      ImGui::TableNextColumn();
      ImGui::Text("%.0f%%", 100 * comm);
      ImGui::TableNextColumn();
      ImGui::Text("%.0f%%", 100 * comp);
      ImGui::TableNextColumn();
      ImGui::Text("%.0f%%", 100 * std::max(0.0, 1 - comm - comp));
    }
    ImGui::EndTable();
  }
  const auto& busiest = app.summary.links;
  ImGui::Text("bytes per link (%zu links):", busiest.size());
  for (std::size_t i = 0; i < std::min<std::size_t>(busiest.size(), 8); ++i)
    ImGui::Text("  %d -> %d  %s", busiest[i].second.first, busiest[i].second.second,
                labkit::format_bytes(busiest[i].first).c_str());
  ImGui::End();
}

}  // namespace viz
