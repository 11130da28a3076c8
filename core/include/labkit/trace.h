// The trace: what every backend records, and the contract between the runtime and
// everything that shows results. Written as Chrome Trace Event Format JSON
// (https://docs.google.com/document/d/1CvAClvFfyA5R-PhYUmn5OOQtYMH4h6I0nSsKchNAySU):
// one track per rank (and under it its communication stream, "rank 3 / comm",
// where it has work in flight beside its own, and more such lanes where that work
// overlaps), spans for collectives, sends, receives and compute as "B"/"E" pairs
// in whole nanoseconds that nest strictly on each track, "s"/"f" flow events
// that draw an arrow from each send to its receive, "C" counters of each rank's
// memory by use, and "i" instants where a rank failed and where it copied
// between the host and its device's memory (host_copy, with the bytes). Perfetto
// (ui.perfetto.dev), speedscope and chrome://tracing open it.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string>
#include <utility>
#include <vector>

namespace labkit {

struct TraceEvent {
  enum class Kind { collective, send, recv, compute, memory, fault, host_copy };
  Kind kind;
  std::string name;     // "all_reduce", "send", "recv", the compute region's name, "failed", "to host" or "to device"
  double start = 0;     // seconds
  double end = 0;
  int peer = -1;        // global rank of the other end (send/recv)
  int tag = 0;
  std::uint64_t bytes = 0;
  std::uint64_t flow = 0;  // send and recv of one message share it; 0: no arrow (a message lost to a failure)
  // Collectives: algo, dtype, counts, op, root, as (key, value) pairs in order.
  // An operation a failed rank left undone adds "error".
  std::vector<std::pair<std::string, std::string>> args = {};
  // Memory: the bytes held at `start`, by use (a Chrome counter event).
  std::vector<std::pair<std::string, double>> counters = {};
  // In flight beside the rank's own work: on its communication stream (a
  // non-blocking collective and its messages), or a message pending while the
  // rank computed. Drawn on a track under the rank, "rank 3 / comm".
  bool on_stream = false;
};

// A copy between the host and a rank's device memory, at `at` (labkit/device.h's observer).
inline TraceEvent host_copy_event(double at, std::uint64_t bytes, bool to_host) {
  return {TraceEvent::Kind::host_copy, to_host ? "to host" : "to device", at, at, -1, 0, bytes};
}

// One rank's events, in the order they ended.
struct TraceTrack {
  int rank = 0;
  std::vector<TraceEvent> events;
};

class Trace {
 public:
  explicit Trace(int ranks);
  TraceTrack* track(int rank) { return &tracks_.at(rank); }
  const std::vector<TraceTrack>& tracks() const { return tracks_; }

  void write_chrome_json(std::ostream& out, const std::string& backend) const;
  void write_chrome_json(const std::string& path, const std::string& backend) const;

 private:
  std::vector<TraceTrack> tracks_;
};

}  // namespace labkit
