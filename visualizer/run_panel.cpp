// Run: pick a collective, an algorithm, the rank count, the size and the
// topology, and simulate it live; or open a trace file.
#include <imgui.h>

#include "app.h"
#include "labkit/algorithms.h"
#include "labkit/topology.h"
#include "labkit/units.h"

namespace viz {

namespace {
bool combo(const char* label, std::string& value, const std::vector<std::string>& options) {
  bool changed = false;
  if (ImGui::BeginCombo(label, value.c_str())) {
    for (const std::string& o : options)
      if (ImGui::Selectable(o.c_str(), o == value)) {
        value = o;
        changed = true;
      }
    ImGui::EndCombo();
  }
  return changed;
}
}  // namespace

void draw_run(App& app) {
  ImGui::Begin("Run");
  Scenario& s = app.scenario;
  std::vector<std::string> collectives, algorithms = {"native"}, topologies;
  for (labkit::Collective c : labkit::kCollectives)
    if (c != labkit::Collective::barrier) collectives.emplace_back(labkit::name_of(c));
  if (combo("collective", s.collective, collectives)) s.algorithm = "native";
  for (const labkit::Algorithm& a : labkit::all_algorithms())
    if (labkit::name_of(a.op) == s.collective) algorithms.emplace_back(a.name);
  combo("algorithm", s.algorithm, algorithms);
  ImGui::SliderInt("ranks", &s.ranks, 2, 64);
  int exponent = std::bit_width(s.bytes) - 1;  // sizes in powers of two
  if (ImGui::SliderInt("size", &exponent, 10, 30, labkit::format_bytes(s.bytes).c_str())) s.bytes = 1ull << exponent;
  for (std::string_view t : labkit::topology_presets()) topologies.emplace_back(t);
  combo("topology", s.topology, topologies);
  if (ImGui::Button("run")) {
    try {
      run_scenario(app);
    } catch (const std::exception& e) {
      app.error = e.what();
    }
  }
  ImGui::InputText("trace file", app.trace_path.data(), app.trace_path.size());
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
