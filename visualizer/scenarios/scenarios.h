// The scenario kinds, one file each beside this one, and what their parsers
// share. scenario.cpp's table lists them by the first field of their text.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "scenario.h"

namespace viz {

// A scenario's text cut at ':' with its rank count read, for its kind's parser:
// "fsdp:16:3:both" is fields {fsdp, 16, 3, both} and 16 ranks.
struct ScenarioText {
  std::string text;
  std::vector<std::string> fields;
  int ranks = 0;
  // fields[i] when the text has it, else `otherwise`.
  std::string field_or(std::size_t i, std::string otherwise) const {
    return fields.size() > i ? fields[i] : std::move(otherwise);
  }
};

// Each kind's parser: its typed options from the text, or a labkit::Error
// naming the text and the form it should take.
std::unique_ptr<Scenario> parse_collective_scenario(const ScenarioText& t);  // collective.cpp: "ring:8:1M"
std::unique_ptr<Scenario> parse_ddp_scenario(const ScenarioText& t);         // ddp.cpp: "ddp:8:overlap"
std::unique_ptr<Scenario> parse_fsdp_scenario(const ScenarioText& t);        // fsdp.cpp: "fsdp:16:3:both"
std::unique_ptr<Scenario> parse_tp_scenario(const ScenarioText& t);          // tensor_parallel.cpp: "tp:4:sp"
std::unique_ptr<Scenario> parse_cp_scenario(const ScenarioText& t);          // context_parallel.cpp: "cp:8"
std::unique_ptr<Scenario> parse_pp_scenario(const ScenarioText& t);          // pipeline.cpp: "pp:4:zb-h1:8"
std::unique_ptr<Scenario> parse_moe_scenario(const ScenarioText& t);         // moe.cpp: "moe:4:none:40"

// `text` is a whole number from min to max (no sign, no trailing junk): into value.
bool whole_number(const std::string& text, int min, int max, int& value);

// A Dear ImGui combo box choosing `value` among `options`; true when it changed.
bool combo(const char* label, std::string& value, const std::vector<std::string>& options);

}  // namespace viz
