// What a lab writes beside what it prints.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "labkit/run.h"

namespace labkit::lab {

// Writes `value` as JSON to `path` (--json), once under mpirun (output.h's quiet
// processes write nowhere); nothing where `path` is empty. Throws naming the
// path where the write fails, a full disk included.
void write_json(const std::string& path, const nlohmann::json& value);

// Under a real backend, a table of times says they are the wall clock's, with
// every wait in them (`more`: what that means for the table's own columns).
// Nothing on the simulator.
void note_wall_clock(const RunOptions& run_options, std::string_view more = "");

// --trace FILE where a view runs one simulation per row of its table (a mode,
// a stage, a way of balancing): each row's run writes a file of its own, FILE
// with the row's name in it (row_file), and print() lists them. With one row,
// or `several` false, the run writes FILE itself. One trace for all the rows
// would be the last run's alone.
class TracePerRow {
 public:
  explicit TracePerRow(const RunOptions& run_options, bool several = true);
  // run_options, tracing to the row's file.
  RunOptions row(std::string_view name);
  // "traces, one per `per`: FILE.a.json, FILE.b.json", where there were several.
  void print(std::string_view per) const;

 private:
  RunOptions run_options_;
  bool several_;
  std::vector<std::string> files_;
};

}  // namespace labkit::lab
