// Run: edit the scenario's fields (a collective's: its algorithm, the rank
// count, the size and the topology) and simulate it live; or open a trace file.
#include <imgui.h>

#include "app.h"

namespace viz {

void draw_run(App& app) {
  ImGui::Begin("Run");
  if (!app.from_scenario)  // the fields below are the scenario "run" would simulate, not what is shown
    ImGui::TextWrapped("showing %s; run simulates this scenario in its place:", app.model.source.c_str());
  app.scenario->draw_fields();
  if (ImGui::Button("run")) {
    try {
      run_scenario(app);
    } catch (const std::exception& e) {
      app.error = e.what();
    }
  }
  // The path box takes the width the "open" button leaves.
  const ImGuiStyle& style = ImGui::GetStyle();
  ImGui::SetNextItemWidth(ImGui::GetContentRegionAvail().x - ImGui::CalcTextSize("open").x -
                          2 * style.FramePadding.x - style.ItemSpacing.x);
  ImGui::InputTextWithHint("##trace file", "a trace file (any lab's --trace)", app.trace_path.data(),
                           app.trace_path.size());
  ImGui::SameLine();
  if (ImGui::Button("open")) {
    try {
      show(app, load_chrome_trace(app.trace_path.data()));
    } catch (const std::exception& e) {
      app.error = e.what();
    }
  }
  ImGui::End();
}

}  // namespace viz
