// What the visualizer shows: a Chrome trace (from any backend, or from a live
// sim run) turned into tracks of spans and the flows between them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "labkit/trace.h"

namespace viz {

enum class Kind { collective, send, recv, compute, other, fault };  // fault: an instant, where a rank failed

struct Span {
  Kind kind;
  std::string name;
  double start = 0, end = 0;  // seconds
  std::int64_t bytes = 0;
  int peer = -1;
  std::string detail;  // algorithm and counts, or the error a failure caused, for the tooltip
  int depth = 0;       // 0: top level; 1: inside another span (a send inside its collective)
};

// A message: drawn from track to track on the timeline, from rank to rank in
// the data-flow view (a stream's track belongs to its rank).
struct Flow {
  int from_track, to_track;
  double sent, delivered;  // seconds
  std::int64_t bytes;
  int from_rank = -1, to_rank = -1;  // the tracks' ranks, filled in once every track is known
};

// A rank's own work, or its communication stream: the non-blocking collectives
// in flight while the rank computes ("rank 3 / comm" in a trace file).
struct Track {
  std::string name;
  int rank = 0;
  bool stream = false;
  int row = 0;              // top to bottom in the timeline: each rank, then its stream; -1: an empty lane, not drawn
  std::vector<Span> spans;  // sorted by start
  double longest = 0;       // the longest span, to find what overlaps a time window
};

struct TraceModel {
  std::string source;  // file name or scenario
  std::vector<Track> tracks;  // indexed by the trace's thread id (tid)
  int ranks = 0;              // ranks, not counting their streams
  int rows = 0;               // the timeline's rows: every rank's track, and each stream lane with something on it
  std::vector<Flow> flows;
  double end = 0;  // the last span's end
  std::size_t events = 0;
};

// Reads a Chrome Trace Event Format file; throws labkit::Error naming the file
// and what is wrong (not JSON, no traceEvents, an event without ts) instead of crashing.
TraceModel load_chrome_trace(const std::string& path);
TraceModel from_trace(const labkit::Trace& trace, std::string source);

// The span of `kind` on track `t` that holds the instant `at` (a message's
// send, holding its arrow's start), or null.
const Span* span_holding(const Track& t, double at, Kind kind);

}  // namespace viz
