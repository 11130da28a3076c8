#include "labkit/lab/output.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "labkit/error.h"
#include "labkit/output.h"

namespace labkit::lab {

void write_json(const std::string& path, const nlohmann::json& value) {
  if (path.empty()) return;
  std::ofstream out = create_file(path);
  out << value.dump(2) << '\n';
  finish_file(out, path);
}

void note_wall_clock(const RunOptions& run_options, std::string_view more) {
  if (run_options.backend == "sim") return;
  fmt::print("(times are wall clock here: every wait shows, the messages' and the processes' sharing the machine's "
             "cores{})\n", more);
}

TracePerRow::TracePerRow(const RunOptions& run_options, bool several)
    : run_options_(run_options), several_(several && !run_options.trace.empty()) {}

RunOptions TracePerRow::row(std::string_view name) {
  RunOptions row = run_options_;
  if (several_) files_.push_back(row.trace = row_file(row.trace, name));
  return row;
}

void TracePerRow::print(std::string_view per) const {
  if (!files_.empty()) fmt::print("traces, one per {}: {}\n", per, fmt::join(files_, ", "));
}

}  // namespace labkit::lab
