#include "scenario.h"

#include <charconv>
#include <sstream>
#include <string_view>

#include <fmt/format.h>
#include <imgui.h>

#include "labkit/error.h"
#include "labkit/run.h"
#include "labkit/topology.h"
#include "scenarios/scenarios.h"

namespace viz {

namespace {
// What it simulates and lays out in seconds, not hours: a ring allreduce over
// 1024 ranks takes 15 s before its first frame on a laptop core (2M events),
// the 256 of ./labkit bench viz under a second. A lab's --trace of more ranks
// opens as a trace file.
constexpr int kMaxRanks = 1024;

// The kinds, by the first field of their text; any other first field names a
// collective's algorithm. A new kind is a file in scenarios/, its parser in
// scenarios/scenarios.h and a row here.
struct ScenarioKind {
  std::string_view name;
  std::size_t fewest_fields;  // "tp:4" needs no third
  std::unique_ptr<Scenario> (*parse)(const ScenarioText&);
};
constexpr ScenarioKind kCollective{"", 3, parse_collective_scenario};
constexpr ScenarioKind kLabSteps[] = {
    {"ddp", 3, parse_ddp_scenario}, {"fsdp", 3, parse_fsdp_scenario}, {"tp", 2, parse_tp_scenario},
    {"cp", 2, parse_cp_scenario},   {"pp", 3, parse_pp_scenario},     {"moe", 2, parse_moe_scenario},
};

const ScenarioKind& kind_named(std::string_view first_field) {
  for (const ScenarioKind& kind : kLabSteps)
    if (kind.name == first_field) return kind;
  return kCollective;
}
}  // namespace

std::unique_ptr<Scenario> parse_scenario(const std::string& text) {
  ScenarioText t{.text = text, .fields = {}};
  std::stringstream in(text);
  for (std::string field; std::getline(in, field, ':');) t.fields.push_back(field);
  const ScenarioKind& kind = kind_named(t.fields.empty() ? "" : t.fields[0]);
  if (t.fields.size() < kind.fewest_fields || t.fields.size() > 5)
    throw labkit::Error(fmt::format("'{}' is not ALGO:RANKS:SIZE[:COLLECTIVE[:TOPOLOGY]] (e.g. ring:8:1M)", text));
  if (!whole_number(t.fields[1], 1, kMaxRanks, t.ranks))
    throw labkit::Error(fmt::format("'{}': '{}' is not a rank count from 1 to {}", text, t.fields[1], kMaxRanks));
  std::unique_ptr<Scenario> s = kind.parse(t);
  s->ranks = t.ranks;
  labkit::find_topology(s->topology);  // throws, naming the presets
  return s;
}

bool whole_number(const std::string& text, int min, int max, int& value) {
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  return end == text.data() + text.size() && error == std::errc() && value >= min && value <= max;
}

labkit::RunOptions Scenario::run_options() const {
  labkit::RunOptions o;
  o.ranks = ranks;
  o.topology = topology;
  o.payload_free = true;
  o.keep_trace = true;
  return o;
}

void Scenario::draw_fields() {
  draw_ranks();
  draw_topology();
}

void Scenario::draw_ranks() { ImGui::SliderInt("ranks", &ranks, 2, 64); }

void Scenario::draw_topology() {
  std::vector<std::string> topologies;
  for (std::string_view t : labkit::topology_presets()) topologies.emplace_back(t);
  combo("topology", topology, topologies);
}

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

}  // namespace viz
