// What this lab's tables need that lab::Table does not do yet (the library
// would take all four): a column printed but not written to the JSON, an
// indent before a table's first column, a note printed after a row's last
// cell, and bytes printed with their unit.
#pragma once

#include <cstdint>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "labkit/lab/table.h"
#include "labkit/units.h"

namespace fsdp_lab {

// The key of a column that is printed only; written() leaves it out.
inline constexpr const char* kPrintedOnly = "";

// Two spaces before the first column (a one-space column and its gap): a table
// printed under its own title line. Its cell in each row is "".
inline labkit::lab::Column indent() { return {.header = " ", .key = kPrintedOnly, .width = 1}; }

// A last column, right-aligned, whose cells may carry a note after them: its
// width moves into the texts (the header's here, each cell's in with_note) so
// that a note runs on unpadded.
inline labkit::lab::Column with_notes(labkit::lab::Column last) {
  last.header = fmt::format("{:>{}}", last.header, last.width);
  last.width = 0;
  return last;
}
inline labkit::lab::Cell with_note(labkit::lab::Cell cell, int width, const std::string& note) {
  cell.text = fmt::format("{:>{}}{}", cell.text, width, note.empty() ? "" : "  " + note);
  return cell;
}

// Bytes printed with their unit ("813 KiB"), written in bytes, as lab::seconds.
inline labkit::lab::Cell bytes(double count) { return {count, labkit::format_bytes(std::uint64_t(count))}; }

// The table's rows as JSON, without its printed-only columns.
inline nlohmann::json written(const labkit::lab::Table& table) {
  nlohmann::json rows = table.json();
  for (nlohmann::json& row : rows) row.erase(kPrintedOnly);
  return rows;
}

}  // namespace fsdp_lab
