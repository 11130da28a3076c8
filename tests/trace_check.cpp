// trace_check FILE...: what a viewer needs to draw a Chrome trace as labkit means
// it, checked in whole nanoseconds (the unit Perfetto reads times into):
//
//   - every ts and dur is a whole number of nanoseconds (3 decimals of microseconds);
//   - each "E" ends the "B" last begun on its track, with the same name and args
//     (speedscope matches them so), no earlier, and every "B" ends;
//   - no span has zero length (Perfetto sorts an "E" before a "B" at one time);
//   - on each track the spans ("B"/"E" pairs and "X") nest strictly: any two are
//     disjoint (abutting counts) or one lies inside the other, so no span stays
//     open past its end;
//   - every flow "s" has exactly one "f" with its id, no earlier than it, and each
//     end lies inside a span of its own track, which the arrow binds to.
//
// Prints each fault (the first 20 per file) and exits 1 if there is any.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace {

struct Span {
  std::int64_t start, end;
  std::string name;
};

struct FlowEnd {
  std::pair<int, int> track;  // pid, tid
  std::int64_t at;
};

class Checker {
 public:
  explicit Checker(std::string path) : path_(std::move(path)) {}

  void fault(const std::string& what) {
    if (faults_++ < 20) fmt::print(stderr, "{}: {}\n", path_, what);
  }

  // A time in microseconds to whole nanoseconds, or a fault if it is not one.
  // (Exact for traces shorter than a few hours: a double holds 1e13 ns to 1e-3.)
  std::int64_t nanos(const nlohmann::json& e, const char* key) {
    const double ns = e.at(key).get<double>() * 1e3;
    const std::int64_t whole = std::llround(ns);
    if (std::abs(ns - double(whole)) > 1e-3) fault(fmt::format("{} {} us is not a whole nanosecond: {}", key, e[key].dump(), e.dump()));
    return whole;
  }

  int check() {
    std::ifstream in(path_);
    if (!in) {
      fault("cannot open it");
      return faults_;
    }
    const nlohmann::json doc = nlohmann::json::parse(in);
    std::map<std::pair<int, int>, std::vector<Span>> tracks;
    std::map<std::pair<int, int>, std::vector<std::pair<const nlohmann::json*, std::int64_t>>> begun;  // not yet ended
    std::map<std::uint64_t, std::vector<FlowEnd>> starts, finishes;
    auto add = [&](std::pair<int, int> track, std::int64_t start, std::int64_t end, const std::string& name) {
      if (end == start)
        fault(fmt::format("tid {}: '{}' at {} ns has zero length (Perfetto sorts its end before its begin)",
                          track.second, name, start));
      tracks[track].push_back({start, end, name});
    };
    for (const nlohmann::json& e : doc.at("traceEvents")) {
      const std::string ph = e.at("ph");
      if (ph != "X" && ph != "B" && ph != "E" && ph != "s" && ph != "f") continue;
      const std::pair<int, int> track = {e.at("pid"), e.at("tid")};
      const std::int64_t ts = nanos(e, "ts");
      const std::string name = e.value("name", "");
      if (ph == "X") {
        add(track, ts, ts + nanos(e, "dur"), name);
      } else if (ph == "B") {
        begun[track].push_back({&e, ts});
      } else if (ph == "E") {
        auto& open = begun[track];
        if (open.empty()) {
          fault(fmt::format("tid {}: 'E' of '{}' at {} ns ends nothing", track.second, name, ts));
          continue;
        }
        const auto [b, start] = open.back();
        open.pop_back();
        if (b->value("name", "") != name || b->value("args", nlohmann::json()) != e.value("args", nlohmann::json()))
          fault(fmt::format("tid {}: 'E' at {} ns, {}, does not match the span last begun, {}", track.second, ts,
                            e.dump(), b->dump()));
        if (ts < start)
          fault(fmt::format("tid {}: '{}' ends at {} ns, before it begins at {} ns", track.second, name, ts, start));
        add(track, start, ts, name);
      } else {
        (ph == "s" ? starts : finishes)[e.at("id").get<std::uint64_t>()].push_back({track, ts});
      }
    }
    for (const auto& [track, open] : begun)
      for (const auto& [b, start] : open)
        fault(fmt::format("tid {}: '{}' begins at {} ns and never ends", track.second, b->value("name", ""), start));
    std::size_t spans = 0;
    for (auto& [track, list] : tracks) {
      nest(track, list);
      spans += list.size();
    }
    for (const auto& [id, s] : starts) {
      auto f = finishes.find(id);
      if (s.size() != 1 || f == finishes.end() || f->second.size() != 1) {
        fault(fmt::format("flow {} has {} start(s) and {} end(s), not one of each", id, s.size(),
                          f == finishes.end() ? 0 : f->second.size()));
        continue;
      }
      if (f->second[0].at < s[0].at)
        fault(fmt::format("flow {} arrives at {} ns, before it leaves at {} ns", id, f->second[0].at, s[0].at));
      for (const FlowEnd& end : {s[0], f->second[0]})
        if (!inside_a_span(tracks[end.track], end.at))
          fault(fmt::format("flow {}: the end at {} ns on tid {} lies in no span of its track", id, end.at,
                            end.track.second));
    }
    for (const auto& [id, f] : finishes)
      if (!starts.count(id)) fault(fmt::format("flow {} has an end but no start", id));
    if (!faults_)
      fmt::print("{}: {} spans on {} tracks nest strictly; {} flows pair, each end inside a span\n", path_, spans,
                 tracks.size(), starts.size());
    return faults_;
  }

 private:
  // Sorted by start, the enclosing span first; a stack holds the spans still
  // open. A span must end by the end of the innermost open one it starts in.
  void nest(std::pair<int, int> track, std::vector<Span>& spans) {
    std::sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) {
      return a.start != b.start ? a.start < b.start : a.end > b.end;
    });
    std::vector<const Span*> open;
    for (const Span& s : spans) {
      while (!open.empty() && open.back()->end <= s.start) open.pop_back();
      if (!open.empty() && s.end > open.back()->end)
        fault(fmt::format("tid {}: '{}' [{}, {}] ns starts inside '{}' [{}, {}] ns and ends after it", track.second,
                          s.name, s.start, s.end, open.back()->name, open.back()->start, open.back()->end));
      open.push_back(&s);
    }
  }

  static bool inside_a_span(const std::vector<Span>& spans, std::int64_t at) {
    for (const Span& s : spans)
      if (s.start <= at && at <= s.end) return true;
    return false;
  }

  std::string path_;
  int faults_ = 0;
};

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    fmt::print(stderr, "usage: trace_check TRACE.json...\n");
    return 2;
  }
  int faults = 0;
  for (int i = 1; i < argc; ++i) {
    try {
      faults += Checker(argv[i]).check();
    } catch (const std::exception& e) {
      fmt::print(stderr, "{}: not a Chrome trace: {}\n", argv[i], e.what());
      ++faults;
    }
  }
  return faults ? 1 : 0;
}
