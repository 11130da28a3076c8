// What the views' tables share (pipeline.h): shares printed as percentages,
// and a table's JSON without what it prints for the reader alone.
#include <fmt/format.h>

#include "pipeline.h"

namespace pipeline_lab {

lab::Cell percent(double share) { return {share, fmt::format("{:.1f}%", 100 * share)}; }

nlohmann::json json_rows(const lab::Table& table, std::initializer_list<std::string_view> printed_only) {
  nlohmann::json rows = table.json();
  for (nlohmann::json& row : rows) {
    for (const std::string_view key : printed_only) row.erase(std::string(key));
    for (auto cell = row.begin(); cell != row.end();) cell = cell->is_null() ? row.erase(cell) : std::next(cell);
  }
  return rows;
}

}  // namespace pipeline_lab
