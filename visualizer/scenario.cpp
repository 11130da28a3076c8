#include "scenario.h"

#include <sstream>
#include <vector>

#include <fmt/format.h>

#include "labkit/error.h"
#include "labkit/run.h"
#include "labkit/units.h"

namespace viz {

Scenario parse_scenario(const std::string& text) {
  std::vector<std::string> parts;
  std::stringstream in(text);
  for (std::string part; std::getline(in, part, ':');) parts.push_back(part);
  if (parts.size() < 3 || parts.size() > 5)
    throw labkit::Error(fmt::format("--scenario '{}': expected ALGO:RANKS:SIZE[:COLLECTIVE[:TOPOLOGY]], e.g. ring:8:1M", text));
  Scenario s;
  s.algorithm = parts[0];
  try {
    s.ranks = std::stoi(parts[1]);
  } catch (const std::exception&) {
    throw labkit::Error(fmt::format("--scenario '{}': '{}' is not a rank count", text, parts[1]));
  }
  s.bytes = labkit::parse_bytes(parts[2]);
  if (parts.size() > 3) s.collective = parts[3];
  if (parts.size() > 4) s.topology = parts[4];
  return s;
}

TraceModel run_scenario(const Scenario& s) {
  labkit::RunOptions o;
  o.ranks = s.ranks;
  o.topology = s.topology;
  o.payload_free = true;
  o.keep_trace = true;
  o.algos = {s.collective + "=" + s.algorithm};
  const labkit::Collective op = labkit::parse_collective(s.collective);
  const std::size_t count = s.bytes / 4;
  const labkit::RunResult r = labkit::run(o, [&](labkit::Comm& comm) {
    const std::size_t block = count / comm.size();
    const labkit::View whole = labkit::sizes_only(block * comm.size(), labkit::DType::f32);
    const labkit::View part = labkit::sizes_only(block, labkit::DType::f32);
    switch (op) {
      case labkit::Collective::all_gather: comm.all_gather(part, whole); break;
      case labkit::Collective::reduce_scatter: comm.reduce_scatter(whole, part, labkit::ReduceOp::sum); break;
      case labkit::Collective::all_to_all: comm.all_to_all(whole, whole); break;
      case labkit::Collective::gather: comm.gather(part, whole, 0); break;
      case labkit::Collective::scatter: comm.scatter(whole, part, 0); break;
      default: comm.run({op, {}, whole, labkit::ReduceOp::sum, 0});
    }
  });
  return from_trace(*r.trace, fmt::format("{} {} on {} ranks, {}, {}", s.algorithm, s.collective, s.ranks,
                                          labkit::format_bytes(s.bytes), s.topology));
}

}  // namespace viz
