// A sim run chosen in the UI or on the command line ("ring:8:1M"): which
// collective, algorithm, rank count, size and topology.
#pragma once

#include <cstdint>
#include <string>

#include "trace_model.h"

namespace viz {

struct Scenario {
  std::string collective = "all_reduce";
  std::string algorithm = "ring";
  int ranks = 8;
  std::uint64_t bytes = 1 << 20;
  std::string topology = "dgx-h100";
};

// "ALGO:RANKS:SIZE[:COLLECTIVE[:TOPOLOGY]]", e.g. "ring:8:1M"; throws on junk.
Scenario parse_scenario(const std::string& text);
// Runs it on the simulator (payload-free) and returns its trace.
TraceModel run_scenario(const Scenario& s);

}  // namespace viz
