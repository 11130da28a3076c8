#include "labkit/trace.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "labkit/output.h"

namespace labkit {

Trace::Trace(int ranks) : tracks_(ranks) {
  for (int r = 0; r < ranks; ++r) tracks_[r].rank = r;
}

namespace {
constexpr int kPid = 0;  // one process row; each rank is a thread (track) in it

// Every time is rounded once to whole nanoseconds, and each ts and dur is made
// from those integers. llround is monotone, so spans that nest or abut in
// seconds nest or abut exactly in the file: ts + dur of a span never passes the
// ts of the span after it (as seconds * 1e6 in doubles could, by an ulp, which
// keeps the first span open to the end of the trace in a viewer).
std::int64_t nanos(double seconds) { return std::llround(seconds * 1e9); }

// Chrome traces count microseconds: 3 decimals, which viewers read back to the nanosecond.
double micros(std::int64_t ns) { return double(ns) / 1e3; }
double micros(double) = delete;  // seconds go through nanos() first

std::string_view category(TraceEvent::Kind kind) {
  switch (kind) {
    case TraceEvent::Kind::collective: return "collective";
    case TraceEvent::Kind::send: case TraceEvent::Kind::recv: return "p2p";
    case TraceEvent::Kind::compute: return "compute";
    case TraceEvent::Kind::memory: return "memory";
    case TraceEvent::Kind::fault: return "fault";
  }
  return "";
}

nlohmann::json span(int tid, const TraceEvent& e) {
  nlohmann::json j = {{"name", e.name}, {"cat", category(e.kind)}, {"ph", "X"}, {"pid", kPid}, {"tid", tid},
                      {"ts", micros(nanos(e.start))}, {"dur", micros(nanos(e.end) - nanos(e.start))}};
  nlohmann::json args = nlohmann::json::object();
  if (e.kind == TraceEvent::Kind::send || e.kind == TraceEvent::Kind::recv) {
    args = {{"bytes", e.bytes}, {"peer", e.peer}, {"tag", e.tag}};
  } else if (e.kind == TraceEvent::Kind::collective) {
    args = {{"bytes", e.bytes}};
  }
  for (const auto& [key, value] : e.args) args[key] = value;
  j["args"] = std::move(args);
  return j;
}

// One end of a flow arrow: "s" just after the send starts, "f" just before the
// receive completes (the message is delivered then). A nanosecond inside the
// slice, so viewers bind each end to it and the arrow never points back in time.
nlohmann::json flow_end(int tid, const TraceEvent& e) {
  const std::int64_t start = nanos(e.start), end = nanos(e.end), inset = std::min<std::int64_t>(1, (end - start) / 2);
  const std::int64_t at = e.kind == TraceEvent::Kind::send ? start + inset : end - inset;
  nlohmann::json j = {{"name", "message"}, {"cat", "p2p"}, {"pid", kPid}, {"tid", tid},
                      {"ts", micros(at)}, {"id", e.flow}};
  j["ph"] = e.kind == TraceEvent::Kind::send ? "s" : "f";
  if (e.kind == TraceEvent::Kind::recv) j["bp"] = "e";
  return j;
}
}  // namespace

void Trace::write_chrome_json(std::ostream& out, const std::string& backend) const {
  nlohmann::json events = nlohmann::json::array();
  events.push_back({{"ph", "M"}, {"name", "process_name"}, {"pid", kPid}, {"tid", 0},
                    {"args", {{"name", "labkit " + backend}}}});
  // Rank r is thread r; its communication stream, where it has one, is thread
  // ranks + r, sorted just under it.
  const int ranks = int(tracks_.size());
  auto name_thread = [&](int tid, const std::string& name, int sort_index) {
    events.push_back({{"ph", "M"}, {"name", "thread_name"}, {"pid", kPid}, {"tid", tid}, {"args", {{"name", name}}}});
    events.push_back({{"ph", "M"}, {"name", "thread_sort_index"}, {"pid", kPid}, {"tid", tid},
                      {"args", {{"sort_index", sort_index}}}});
  };
  for (const TraceTrack& t : tracks_) {
    name_thread(t.rank, "rank " + std::to_string(t.rank), 2 * t.rank);
    if (std::any_of(t.events.begin(), t.events.end(), [](const TraceEvent& e) { return e.on_stream; }))
      name_thread(ranks + t.rank, "rank " + std::to_string(t.rank) + " / comm", 2 * t.rank + 1);
  }
  for (const TraceTrack& t : tracks_) {
    for (const TraceEvent& e : t.events) {
      const int tid = e.on_stream ? ranks + t.rank : t.rank;
      if (e.kind == TraceEvent::Kind::memory) {  // counters are per process in the format: name them per rank
        nlohmann::json args = nlohmann::json::object();
        for (const auto& [use, bytes] : e.counters) args[use] = bytes;
        events.push_back({{"name", "rank " + std::to_string(t.rank) + " memory"}, {"cat", "memory"}, {"ph", "C"},
                          {"pid", kPid}, {"tid", t.rank}, {"ts", micros(nanos(e.start))}, {"args", std::move(args)}});
        continue;
      }
      if (e.kind == TraceEvent::Kind::fault) {  // an instant on the rank's own track ("s": "t")
        events.push_back({{"name", e.name}, {"cat", "fault"}, {"ph", "i"}, {"s", "t"}, {"pid", kPid},
                          {"tid", t.rank}, {"ts", micros(nanos(e.start))}});
        continue;
      }
      events.push_back(span(tid, e));
      if ((e.kind == TraceEvent::Kind::send || e.kind == TraceEvent::Kind::recv) && e.flow)
        events.push_back(flow_end(tid, e));
    }
  }
  nlohmann::json doc = {{"displayTimeUnit", "ns"},
                        {"otherData", {{"backend", backend}, {"ranks", tracks_.size()}}},
                        {"traceEvents", std::move(events)}};
  out << doc.dump() << '\n';
}

void Trace::write_chrome_json(const std::string& path, const std::string& backend) const {
  std::ofstream out = create_file(path);
  write_chrome_json(out, backend);
}

}  // namespace labkit
