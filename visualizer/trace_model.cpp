#include "trace_model.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <fstream>
#include <map>
#include <optional>
#include <string_view>
#include <utility>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "labkit/error.h"

namespace viz {

namespace {
Kind kind_of(const std::string& cat, const std::string& name) {
  if (cat == "collective") return Kind::collective;
  if (cat == "compute") return Kind::compute;
  if (cat == "p2p") return name == "send" ? Kind::send : Kind::recv;
  return Kind::other;
}

// The rank whose communication stream a thread is, from the name labkit's
// trace writer gives it ("rank 3 / comm"); none for any other name.
std::optional<int> stream_of(const std::string& name) {
  constexpr std::string_view prefix = "rank ", suffix = " / comm";
  if (name.size() <= prefix.size() + suffix.size() || !name.starts_with(prefix) || !name.ends_with(suffix))
    return std::nullopt;
  const char *first = name.data() + prefix.size(), *last = name.data() + name.size() - suffix.size();
  int rank = -1;
  const auto [end, error] = std::from_chars(first, last, rank);
  if (error != std::errc() || end != last || rank < 0) return std::nullopt;
  return rank;
}

// labkit's layout: rank r is thread r, its stream thread ranks + r (and more
// lanes of work in flight, where it overlaps, k * ranks + r). So one
// thread named as a stream tells where the ranks end; with none (a trace
// without streams, or from another tool) every thread is a rank.
int ranks_in(const TraceModel& m) {
  for (int tid = 0; tid < int(m.tracks.size()); ++tid)
    if (const auto rank = stream_of(m.tracks[tid].name); rank && tid > *rank) return tid - *rank;
  return int(m.tracks.size());
}

// Which rank each track belongs to, and the timeline's order: each rank, then its stream.
void assign_ranks(TraceModel& m, int ranks) {
  for (int tid = 0; tid < int(m.tracks.size()); ++tid) {
    Track& t = m.tracks[tid];
    t.stream = tid >= ranks;
    t.rank = tid % ranks;  // a rank's stream is thread ranks + r, further lanes beside it k * ranks + r
    if (t.name.empty()) t.name = t.stream ? fmt::format("rank {} / comm", t.rank) : fmt::format("rank {}", t.rank);
    m.ranks = std::max(m.ranks, t.rank + 1);
  }
  // A stream lane with no span and no arrow (a thread id between two used ones) takes no row.
  std::vector<bool> shown(m.tracks.size());
  for (std::size_t tid = 0; tid < m.tracks.size(); ++tid)
    shown[tid] = !m.tracks[tid].stream || !m.tracks[tid].spans.empty();
  for (const Flow& f : m.flows) shown[std::size_t(f.from_track)] = shown[std::size_t(f.to_track)] = true;
  std::vector<int> order;
  for (int tid = 0; tid < int(m.tracks.size()); ++tid)
    if (shown[std::size_t(tid)]) order.push_back(tid);
    else m.tracks[std::size_t(tid)].row = -1;
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    return std::pair(m.tracks[a].rank, m.tracks[a].stream) < std::pair(m.tracks[b].rank, m.tracks[b].stream);
  });
  for (int row = 0; row < int(order.size()); ++row) m.tracks[order[row]].row = row;
  m.rows = int(order.size());
  for (Flow& f : m.flows) {
    f.from_rank = m.tracks[f.from_track].rank;
    f.to_rank = m.tracks[f.to_track].rank;
  }
}

void finish(TraceModel& m, int ranks) {
  assign_ranks(m, ranks);
  for (Track& t : m.tracks) {
    // By start; of two that start together, the enclosing one first: the longer,
    // or for equal spans the collective or compute region around its messages.
    auto encloses = [](Kind k) { return k == Kind::collective || k == Kind::compute; };
    std::sort(t.spans.begin(), t.spans.end(), [&](const Span& a, const Span& b) {
      if (a.start != b.start) return a.start < b.start;
      if (a.end != b.end) return a.end > b.end;
      return encloses(a.kind) && !encloses(b.kind);
    });
    double top_end = -1;
    for (Span& s : t.spans) {
      s.depth = s.start < top_end ? 1 : 0;
      if (s.depth == 0) top_end = s.end;
      t.longest = std::max(t.longest, s.end - s.start);
      m.end = std::max(m.end, s.end);
    }
    m.events += t.spans.size();
  }
}

// A time in microseconds, as written, to whole nanoseconds: labkit's traces hold
// whole nanoseconds (see core/src/trace.cpp), so one span's ts + dur equals the
// next one's ts when they abut, where the same sum in microsecond doubles may not.
std::int64_t nanos(const nlohmann::json& micros) {
  const double us = micros.get<double>();
  if (!(std::abs(us) < 4e15)) throw labkit::Error(fmt::format("time {} us is out of range", us));  // 126 years
  return std::llround(us * 1e3);
}

// An integer field of an event, or `fallback` when it has none. nlohmann would
// cast a float to the type (undefined beyond its range) or wrap a large integer;
// both are errors here.
template <class Int>
Int integer(const nlohmann::json& object, const char* key, std::optional<Int> fallback = std::nullopt) {
  if (fallback && !object.contains(key)) return *fallback;
  const nlohmann::json& v = object.at(key);
  if (v.is_number_unsigned() ? std::in_range<Int>(v.get<std::uint64_t>())
                             : v.is_number_integer() && std::in_range<Int>(v.get<std::int64_t>()))
    return v.get<Int>();
  throw labkit::Error(fmt::format("{} {} is not an integer in range", key, v.dump()));
}

Track& track(TraceModel& m, int tid) {
  if (tid >= int(m.tracks.size())) m.tracks.resize(tid + 1);
  return m.tracks[tid];
}
}  // namespace

TraceModel load_chrome_trace(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw labkit::Error(fmt::format("trace '{}': cannot open it", path));
  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(in);
  } catch (const nlohmann::json::parse_error& e) {
    throw labkit::Error(fmt::format("trace '{}': not valid JSON (byte {}): {}", path, e.byte, e.what()));
  } catch (const nlohmann::json::exception& e) {  // a number too large for a double
    throw labkit::Error(fmt::format("trace '{}': not valid JSON: {}", path, e.what()));
  }
  // Both forms of the format: {"traceEvents": [...]} and a bare array of events.
  const nlohmann::json* events = doc.is_array() ? &doc : doc.is_object() && doc.contains("traceEvents") ? &doc["traceEvents"] : nullptr;
  if (!events || !events->is_array())
    throw labkit::Error(fmt::format("trace '{}': no traceEvents array (is it a Chrome trace?)", path));
  TraceModel m;
  m.source = path;
  std::map<std::uint64_t, Flow> starts;                          // flow id -> its "s" end
  std::map<std::uint64_t, std::pair<int, double>> finishes;     // flow id -> its "f" end (any order)
  std::map<int, std::vector<std::pair<const nlohmann::json*, std::int64_t>>> begun;  // per tid, "B"s not yet ended
  // A span from its begin event (name, category, args) and its ends in nanoseconds.
  auto add_span = [&](int tid, const nlohmann::json& e, std::int64_t start_ns, std::int64_t end_ns) {
    const nlohmann::json args = e.value("args", nlohmann::json::object());
    const std::string name = e.value("name", ""), cat = e.value("cat", "");
    Span s{kind_of(cat, name), name, start_ns * 1e-9, end_ns * 1e-9, integer<std::int64_t>(args, "bytes", 0),
           integer<int>(args, "peer", -1), ""};
    if (args.contains("algo")) s.detail = fmt::format("algo {}", args["algo"].get<std::string>());
    if (args.contains("error"))  // with fmt: GCC 12 warns falsely (-Wrestrict) on "\n" + std::string here
      s.detail += fmt::format("{}{}", s.detail.empty() ? "" : "\n", args["error"].get<std::string>());
    track(m, tid).spans.push_back(std::move(s));
  };
  std::size_t index = 0;
  for (const nlohmann::json& e : *events) {
    ++index;
    try {
      const std::string ph = e.at("ph");
      const int tid = integer<int>(e, "tid", 0);
      if (tid < 0 || tid > 1 << 20) throw labkit::Error(fmt::format("tid {} is not a rank", tid));
      if (ph == "M") {
        if (e.value("name", "") == "thread_name") track(m, tid).name = e.at("args").at("name");
        continue;
      }
      const std::int64_t ts_ns = nanos(e.at("ts"));
      const double ts = ts_ns * 1e-9;
      if (ph == "X") {
        add_span(tid, e, ts_ns, ts_ns + (e.contains("dur") ? nanos(e["dur"]) : 0));
      } else if (ph == "B") {
        begun[tid].push_back({&e, ts_ns});
      } else if (ph == "E") {  // ends the span last begun on its thread, as the format nests them
        auto& open = begun[tid];
        if (open.empty()) throw labkit::Error(fmt::format("an end (\"E\") at {} us with no span begun on tid {}",
                                                          ts_ns * 1e-3, tid));
        add_span(tid, *open.back().first, open.back().second, ts_ns);
        open.pop_back();
      } else if (ph == "i" && e.value("cat", "") == "fault") {
        track(m, tid).spans.push_back({Kind::fault, e.value("name", ""), ts, ts, 0, -1, ""});
      } else if (ph == "s" || ph == "f") {
        track(m, tid);  // an arrow's ends are drawn on their tracks, spans or none
        if (ph == "s") starts[integer<std::uint64_t>(e, "id")] = Flow{tid, -1, ts, 0, 0};
        else finishes[integer<std::uint64_t>(e, "id")] = {tid, ts};
      }
    } catch (const std::exception& ex) {  // nlohmann's, or a value out of range
      throw labkit::Error(fmt::format("trace '{}': event {} is malformed: {}", path, index, ex.what()));
    }
  }
  for (auto& [id, flow] : starts) {  // an arrow missing either end is left out
    auto f = finishes.find(id);
    if (f == finishes.end()) continue;
    flow.to_track = f->second.first;
    flow.delivered = f->second.second;
    m.flows.push_back(flow);
  }
  finish(m, ranks_in(m));
  // An arrow's bytes are its send's: the send span that holds the arrow's start.
  for (Flow& f : m.flows)
    if (const Span* send = span_holding(m.tracks[std::size_t(f.from_track)], f.sent, Kind::send)) f.bytes = send->bytes;
  return m;
}

const Span* span_holding(const Track& t, double at, Kind kind) {
  auto it = std::upper_bound(t.spans.begin(), t.spans.end(), at, [](double x, const Span& s) { return x < s.start; });
  while (it != t.spans.begin() && (--it)->start >= at - t.longest)
    if (it->kind == kind && at <= it->end) return &*it;
  return nullptr;
}

TraceModel from_trace(const labkit::Trace& trace, std::string source) {
  TraceModel m;
  m.source = std::move(source);
  // As the trace file lays them out: rank r on track r, its communication stream on ranks + r.
  const int ranks = int(trace.tracks().size());
  // A message's send and receive share a flow id: its arrow runs from the
  // send's start to the receive's end, when it is delivered (as the file's
  // "s" and "f" events place them).
  std::map<std::uint64_t, Flow> messages;
  std::map<std::uint64_t, std::pair<int, double>> deliveries;  // flow id -> (the receive's track, its end)
  for (const labkit::TraceTrack& t : trace.tracks()) {
    track(m, t.rank);
    for (const labkit::TraceEvent& e : t.events) {
      using K = labkit::TraceEvent::Kind;
      if (e.kind == K::memory || e.kind == K::host_copy) continue;  // counters and the host's copies, not spans
      const int tid = e.on_stream ? ranks + t.rank : t.rank;
      Track& out = track(m, tid);
      const Kind kind = e.kind == K::collective ? Kind::collective
                        : e.kind == K::send   ? Kind::send
                        : e.kind == K::recv   ? Kind::recv
                        : e.kind == K::fault  ? Kind::fault
                                              : Kind::compute;
      std::string detail;
      for (const auto& [key, value] : e.args) detail += fmt::format("{}{} {}", detail.empty() ? "" : ", ", key, value);
      out.spans.push_back({kind, e.name, e.start, e.end, std::int64_t(e.bytes), e.peer, detail});
      if (e.kind == K::send && e.flow) messages[e.flow] = {tid, -1, e.start, 0, std::int64_t(e.bytes)};
      if (e.kind == K::recv && e.flow) deliveries[e.flow] = {tid, e.end};
    }
  }
  for (auto& [id, message] : messages) {  // a message lost to a failure has no arrow
    const auto delivered = deliveries.find(id);
    if (delivered == deliveries.end()) continue;
    message.to_track = delivered->second.first;
    message.delivered = delivered->second.second;
    m.flows.push_back(message);
  }
  for (const Flow& f : m.flows) track(m, f.to_track);  // an arrow's end has a track, spans or none
  finish(m, ranks);
  return m;
}

}  // namespace viz
