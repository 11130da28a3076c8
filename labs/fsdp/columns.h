// What this lab's tables need beside lab::Table: an indent before a table's
// first column, and a note printed after a row's last cell.
#pragma once

#include <cstdint>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "labkit/lab/table.h"
#include "labkit/units.h"

namespace fsdp_lab {

// Two spaces before the first column (a one-space column and its gap): a table
// printed under its own title line. Its cell in each row is "".
inline labkit::lab::Column indent() { return {.header = " ", .width = 1}; }

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


}  // namespace fsdp_lab
