#include "labkit/trace.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <set>
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
    case TraceEvent::Kind::host_copy: return "host copy";
  }
  return "";
}

// A span as a begin ("B") and an end ("E") event, each with its own time as
// written. Not one "X" event: a viewer would compute its end as ts + dur in
// floating point, where decimal microseconds are not exact (39 + 0.001 is
// 39.001000000000005, past a span that starts at 39.001, and speedscope then
// ends the wrong span). The end repeats the name and args, by which speedscope
// matches it to its begin.
nlohmann::json span_end(int tid, const TraceEvent& e, bool begin) {
  nlohmann::json args = nlohmann::json::object();
  if (e.kind == TraceEvent::Kind::send || e.kind == TraceEvent::Kind::recv) {
    args = {{"bytes", e.bytes}, {"peer", e.peer}, {"tag", e.tag}};
  } else if (e.kind == TraceEvent::Kind::collective) {
    args = {{"bytes", e.bytes}};
  }
  for (const auto& [key, value] : e.args) args[key] = value;
  return {{"name", e.name}, {"cat", category(e.kind)}, {"ph", begin ? "B" : "E"}, {"pid", kPid}, {"tid", tid},
          {"ts", micros(nanos(begin ? e.start : e.end))}, {"args", std::move(args)}};
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

bool is_span(const TraceEvent& e) {
  return e.kind != TraceEvent::Kind::memory && e.kind != TraceEvent::Kind::fault && e.kind != TraceEvent::Kind::host_copy;
}

// A span shorter than half a nanosecond (a sub-nanosecond compute region, such
// as routing a few tokens) rounds to zero length. It is left out of the
// drawing, with its arrow if it has one: no viewer draws it where it belongs
// (Perfetto sorts an end before a begin at the same time, speedscope closes the
// next span's parent on it), and it lasts less than the file's resolution, so
// widening it to a nanosecond could cover its neighbour.
bool drawn(const TraceEvent& e) { return is_span(e) && nanos(e.end) > nanos(e.start); }

// Chrome's format draws a thread's spans as a stack: any two must nest or be
// disjoint (Perfetto moves one that partly overlaps to a track of its own and
// flags it; speedscope ends the wrong span). A rank does one thing at a time,
// so its own work nests; what is in flight beside it need not (two pipeline
// sends overlap while each waits for its receiver). That goes on lanes under
// the rank, each span on the first lane where it fits, by start and the longer
// first: lane 1 is the communication stream, further lanes hold what overlaps
// it. On a lane only a collective holds others (its own messages), and a
// message the other half of sendrecv's pair, posted with it: a message in
// flight is no part of another, and is not drawn inside one.
bool holds(const TraceEvent& outer, const TraceEvent& inner) {
  using K = TraceEvent::Kind;
  const bool pair =
      (outer.kind == K::recv && inner.kind == K::send) || (outer.kind == K::send && inner.kind == K::recv);
  return outer.kind == K::collective || (pair && outer.start == inner.start);
}

struct Lanes {
  std::vector<std::vector<const TraceEvent*>> spans{1};  // lane 0, the rank's own thread, even if idle
  std::vector<std::vector<const TraceEvent*>> open{1};   // per lane, the spans not yet ended

  // Whether `e` fits `lane` (closing the spans that end by its start), and if so, puts it there.
  bool place(std::size_t lane, const TraceEvent& e) {
    if (lane == spans.size()) spans.emplace_back(), open.emplace_back();
    std::vector<const TraceEvent*>& stack = open[lane];
    while (!stack.empty() && nanos(stack.back()->end) <= nanos(e.start)) stack.pop_back();
    if (!stack.empty() && (nanos(stack.back()->end) < nanos(e.end) || (lane > 0 && !holds(*stack.back(), e))))
      return false;
    stack.push_back(&e);
    spans[lane].push_back(&e);
    return true;
  }
};

// A rank's spans by thread: lane 0 its own work, lanes 1.. what was in flight beside it.
Lanes lay_out(const TraceTrack& t) {
  std::vector<const TraceEvent*> spans;
  for (const TraceEvent& e : t.events)
    if (drawn(e)) spans.push_back(&e);
  std::stable_sort(spans.begin(), spans.end(), [](const TraceEvent* a, const TraceEvent* b) {
    return nanos(a->start) != nanos(b->start) ? nanos(a->start) < nanos(b->start) : nanos(a->end) > nanos(b->end);
  });
  Lanes lanes;
  for (const TraceEvent* e : spans)
    for (std::size_t lane = e->on_stream ? 1 : 0; !lanes.place(lane, *e);) ++lane;
  return lanes;
}
}  // namespace

void Trace::write_chrome_json(std::ostream& out, const std::string& backend) const {
  nlohmann::json events = nlohmann::json::array();
  events.push_back({{"ph", "M"}, {"name", "process_name"}, {"pid", kPid}, {"tid", 0},
                    {"args", {{"name", "labkit " + backend}}}});
  std::vector<Lanes> layout;
  std::set<std::uint64_t> undrawn_flows;  // an arrow is drawn only where both its spans are
  for (const TraceTrack& t : tracks_) {
    layout.push_back(lay_out(t));
    for (const TraceEvent& e : t.events)
      if (is_span(e) && !drawn(e) && e.flow) undrawn_flows.insert(e.flow);
  }
  // Rank r's own work is thread r; its lane k, where it has one, thread k * ranks + r, sorted under it.
  const int ranks = int(tracks_.size());
  std::size_t most_lanes = 1;
  for (const Lanes& l : layout) most_lanes = std::max(most_lanes, l.spans.size());
  for (const TraceTrack& t : tracks_) {
    const Lanes& lanes = layout[t.rank];
    for (std::size_t lane = 0; lane < lanes.spans.size(); ++lane) {
      if (lane > 0 && lanes.spans[lane].empty()) continue;
      const int tid = int(lane) * ranks + t.rank;
      const std::string name = "rank " + std::to_string(t.rank) + (lane == 0   ? ""
                                                                   : lane == 1 ? " / comm"
                                                                               : " / comm " + std::to_string(lane));
      events.push_back({{"ph", "M"}, {"name", "thread_name"}, {"pid", kPid}, {"tid", tid}, {"args", {{"name", name}}}});
      events.push_back({{"ph", "M"}, {"name", "thread_sort_index"}, {"pid", kPid}, {"tid", tid},
                        {"args", {{"sort_index", t.rank * int(most_lanes) + int(lane)}}}});
    }
  }
  for (const TraceTrack& t : tracks_) {
    for (const TraceEvent& e : t.events) {
      if (e.kind == TraceEvent::Kind::memory) {  // counters are per process in the format: name them per rank
        nlohmann::json args = nlohmann::json::object();
        for (const auto& [use, bytes] : e.counters) args[use] = bytes;
        events.push_back({{"name", "rank " + std::to_string(t.rank) + " memory"}, {"cat", "memory"}, {"ph", "C"},
                          {"pid", kPid}, {"tid", t.rank}, {"ts", micros(nanos(e.start))}, {"args", std::move(args)}});
      } else if (e.kind == TraceEvent::Kind::fault || e.kind == TraceEvent::Kind::host_copy) {  // an instant on the rank's own track ("s": "t")
        nlohmann::json instant = {{"name", e.name}, {"cat", category(e.kind)}, {"ph", "i"}, {"s", "t"}, {"pid", kPid},
                                  {"tid", t.rank}, {"ts", micros(nanos(e.start))}};
        if (e.kind == TraceEvent::Kind::host_copy) instant["args"] = {{"bytes", e.bytes}};
        events.push_back(std::move(instant));
      }
    }
    const Lanes& lanes = layout[t.rank];
    for (std::size_t lane = 0; lane < lanes.spans.size(); ++lane) {
      const int tid = int(lane) * ranks + t.rank;
      // In the order a thread runs them: each span's end before the next span that starts after it.
      std::vector<const TraceEvent*> open;
      auto close_by = [&](std::int64_t ns) {
        for (; !open.empty() && nanos(open.back()->end) <= ns; open.pop_back())
          events.push_back(span_end(tid, *open.back(), false));
      };
      for (const TraceEvent* e : lanes.spans[lane]) {
        close_by(nanos(e->start));
        events.push_back(span_end(tid, *e, true));
        if (e->flow && !undrawn_flows.count(e->flow)) events.push_back(flow_end(tid, *e));
        open.push_back(e);
      }
      close_by(std::numeric_limits<std::int64_t>::max());
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
  finish_file(out, path);
}

}  // namespace labkit
