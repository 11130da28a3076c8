// Summary: algbw and busbw (nccl-tests' conventions), each rank's time split
// into communicating, computing and idle (and, with communication streams, the
// communication hidden under compute), and the bytes each link carried.
#include <algorithm>

#include <imgui.h>

#include "app.h"
#include "labkit/collective.h"
#include "labkit/cost_model.h"
#include "labkit/units.h"
#include "scenarios/collective.h"

namespace viz {

void draw_summary(App& app) {
  const TraceModel& m = app.model;
  ImGui::Begin("Summary");
  ImGui::TextWrapped("%s", m.source.c_str());
  ImGui::Text("%d ranks, %zu events, %s", m.ranks, m.events, labkit::format_seconds(m.end).c_str());
  if (!app.error.empty()) ImGui::TextColored({1, 0.4f, 0.4f, 1}, "%s", app.error.c_str());
  // A collective's bandwidths; a barrier moves no data, and has none.
  if (const CollectiveScenario* c = shown_collective(app);
      c && m.end > 0 && c->collective != labkit::Collective::barrier) {
    const double algbw = c->bytes / m.end / 1e9;
    const double factor = labkit::bus_bandwidth_factor(c->collective, m.ranks);
    ImGui::Text("algbw %.2f GB/s   busbw %.2f GB/s", algbw, algbw * factor);
  }
  const Summary& sum = app.summary;
  const ImGuiTableFlags flags = ImGuiTableFlags_ScrollY | ImGuiTableFlags_RowBg | ImGuiTableFlags_SizingFixedFit;
  if (ImGui::BeginTable("ranks", sum.streams ? 5 : 4, flags, {0, 160})) {
    ImGui::TableSetupColumn("rank");
    ImGui::TableSetupColumn("communicating");
    ImGui::TableSetupColumn("computing");
    ImGui::TableSetupColumn("idle");
    if (sum.streams) ImGui::TableSetupColumn("comm hidden");
    ImGui::TableHeadersRow();
    for (std::size_t r = 0; r < sum.ranks.size(); ++r) {
      const RankShare& share = sum.ranks[r];
      ImGui::TableNextRow();
      ImGui::TableNextColumn();
      ImGui::Text("%zu", r);
      for (double part : {share.communicating, share.computing, share.idle}) {
        ImGui::TableNextColumn();
        ImGui::Text("%.0f%%", 100 * part);
      }
      if (sum.streams) {
        ImGui::TableNextColumn();
        ImGui::Text("%.0f%%", 100 * share.hidden);
      }
    }
    ImGui::EndTable();
  }
  if (sum.streams)
    ImGui::TextWrapped("communicating: exposed, the rank waits for it; comm hidden: on the rank's stream while it "
                       "computes; a message counts while it travels, from when both its ends are posted to its "
                       "delivery (waiting for a peer is idle)");
  double most_computing = 0;
  for (const RankShare& share : sum.ranks) most_computing = std::max(most_computing, share.computing);
  if (most_computing > 0 && most_computing < 0.005)  // the tiny GPT's scenarios: its kernels round to 0%
    ImGui::TextWrapped("computing rounds to 0%%: this model's kernels take nanoseconds of the simulated GPU's time "
                       "against microseconds per message (the tiny GPT; a real model's shapes: the lab's --what-if)");
  const auto& busiest = app.summary.links;
  ImGui::Text("bytes per link (%zu links):", busiest.size());
  if (busiest.empty() && sum.native_collectives)  // costed whole by NCCL's model, with no messages to count
    ImGui::TextWrapped("  none sent point-to-point: native collectives are costed whole, not link by link");
  else if (busiest.empty())
    ImGui::TextUnformatted("  none: nothing was sent");
  for (std::size_t i = 0; i < std::min<std::size_t>(busiest.size(), 8); ++i)
    ImGui::Text("  %d -> %d  %s", busiest[i].second.first, busiest[i].second.second,
                labkit::format_bytes(busiest[i].first).c_str());
  ImGui::End();
}

}  // namespace viz
