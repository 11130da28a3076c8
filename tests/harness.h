// Test harness: run a rank function on the simulator and keep its trace in memory.
#pragma once

#include <algorithm>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "labkit/comm.h"
#include "labkit/topology.h"
#include "labkit/trace.h"
#include "sim/engine.h"

namespace labkit::test {

struct SimRun {
  std::unique_ptr<Trace> trace;
  double elapsed = 0;
  std::uint64_t messages = 0;
};

inline SimRun simulate(int ranks, const std::function<void(Comm&)>& fn, const std::string& topology = "dgx-h100",
                       bool payload = true, sim::Network network = sim::Network::fair) {
  SimRun out{std::make_unique<Trace>(ranks)};
  sim::Engine engine({.ranks = ranks, .topology = find_topology(topology), .payload = payload,
                      .trace = out.trace.get(), .network = network});
  engine.run(fn);
  out.elapsed = engine.elapsed();
  out.messages = engine.messages();
  return out;
}

// What a run on `ranks` ranks throws (a labkit::Error's message), or "no error".
inline std::string error_of(int ranks, const std::function<void(Comm&)>& fn) {
  try {
    simulate(ranks, fn);
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

// The receives a rank made, in order.
inline std::vector<TraceEvent> recvs_of(const Trace& trace, int rank) {
  std::vector<TraceEvent> out;
  for (const TraceEvent& e : trace.tracks()[rank].events)
    if (e.kind == TraceEvent::Kind::recv) out.push_back(e);
  return out;
}

// When a rank copied device memory to the host (its reads: a step's loss),
// and when its last compute or collective ended: a step reads its loss only
// once its work is queued.
struct HostReads {
  std::vector<double> at;
  double work_ends = 0;
};
inline HostReads host_reads_of(const Trace& trace, int rank) {
  HostReads out;
  for (const TraceEvent& e : trace.tracks()[rank].events) {
    if (e.kind == TraceEvent::Kind::compute || e.kind == TraceEvent::Kind::collective)
      out.work_ends = std::max(out.work_ends, e.end);
    if (e.kind == TraceEvent::Kind::host_copy && e.name == "to host") out.at.push_back(e.start);
  }
  return out;
}

}  // namespace labkit::test
