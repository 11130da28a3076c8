// labkit::cli::Sweep — a study's range on the command line, "NAME=A..B"
// (--sweep ranks=8..1024), apart from option_checks.h so that a lab's own
// header can hold one without pulling in CLI11, whose header costs seconds of
// every file that includes it.
#pragma once

#include <string>
#include <vector>

namespace labkit::cli {

// A study's range, "NAME=A..B" (--sweep ranks=8..1024): the names a lab
// allows, each with its bounds. A whole axis takes whole numbers from `min`;
// any other takes numbers above `min`. `to` at most `max`, `from` <= `to`.
struct SweepAxis {
  std::string name;
  double min, max;
  bool whole;
  std::string unit;  // " MiB": said after the bounds in the error
};
struct Sweep {
  std::string over;  // an axis name; empty: no sweep
  double from = 0, to = 0;
};
// Throws std::invalid_argument naming every allowed form.
Sweep parse_sweep(const std::string& text, const std::vector<SweepAxis>& axes);
// The option as given, for messages: "--sweep ranks=8..64".
std::string sweep_flag(const Sweep& sweep);

}  // namespace labkit::cli
