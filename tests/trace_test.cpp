// The trace is Chrome Trace Event Format, checked by schema: what Perfetto's
// JSON importer needs (traceEvents with ph/pid/tid/ts, "B"/"E" span pairs,
// "s"/"f" flow pairs with ids), plus labkit's own contract (one named track per
// rank, sends and receives with bytes and peer, each arrow from a send to its
// receive, spans that nest on every track, work in flight on tracks of its own).
#include <cmath>
#include <map>
#include <sstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "harness.h"
#include "labkit/algorithms.h"
#include "labkit/tensor.h"

using namespace labkit;
using nlohmann::json;

namespace {
json traced_run(int ranks) {
  auto run = test::simulate(ranks, [](Comm& c) {
    std::vector<float> buf(256, 1.0f);
    c.compute_flops("forward", 1e9);
    c.track_memory(MemoryUse::activations, 4096);
    use_algorithm(c, Collective::all_reduce, "ring");
    c.all_reduce(view_of(buf), ReduceOp::sum);
    c.set_algorithm(Collective::all_reduce, nullptr);
    c.all_reduce(view_of(buf), ReduceOp::avg);
  });
  std::ostringstream out;
  run.trace->write_chrome_json(out, "sim");
  return json::parse(out.str());
}

json written(const Trace& trace) {
  std::ostringstream out;
  trace.write_chrome_json(out, "sim");
  return json::parse(out.str());
}

std::int64_t nanos(const json& us) {
  const double ns = us.get<double>() * 1e3;
  EXPECT_NEAR(ns, std::round(ns), 1e-6) << us << " us is not a whole nanosecond";
  return std::llround(ns);
}

// The spans of a written trace: each "E" paired with the "B" last begun on its thread.
struct Drawn {
  std::string name;
  int tid;
  std::int64_t start, end;  // ns
  json begin, end_event;
};
std::vector<Drawn> spans_of(const json& doc) {
  std::map<int, std::vector<json>> begun;
  std::vector<Drawn> spans;
  for (const json& e : doc["traceEvents"]) {
    if (e["ph"] == "B") begun[e["tid"]].push_back(e);
    if (e["ph"] != "E") continue;
    std::vector<json>& open = begun[e["tid"]];
    EXPECT_FALSE(open.empty()) << "an end with nothing begun: " << e;
    if (open.empty()) continue;
    spans.push_back({e["name"], e["tid"], nanos(open.back()["ts"]), nanos(e["ts"]), open.back(), e});
    open.pop_back();
  }
  for (const auto& [tid, open] : begun) EXPECT_TRUE(open.empty()) << open.size() << " spans never end on tid " << tid;
  return spans;
}

std::map<int, std::string> thread_names(const json& doc) {
  std::map<int, std::string> names;
  for (const json& e : doc["traceEvents"])
    if (e["ph"] == "M" && e["name"] == "thread_name") names[e["tid"]] = e["args"]["name"];
  return names;
}
}  // namespace

TEST(ChromeTrace, MatchesTheTraceEventFormatSchema) {
  const json doc = traced_run(4);
  ASSERT_TRUE(doc.is_object());
  ASSERT_TRUE(doc.at("traceEvents").is_array());
  EXPECT_EQ(doc.at("displayTimeUnit"), "ns");
  for (const json& e : doc["traceEvents"]) {
    ASSERT_TRUE(e.at("ph").is_string()) << e;
    ASSERT_TRUE(e.at("name").is_string()) << e;
    ASSERT_TRUE(e.at("pid").is_number_integer()) << e;
    ASSERT_TRUE(e.at("tid").is_number_integer()) << e;
    const std::string ph = e["ph"];
    ASSERT_TRUE(ph == "B" || ph == "E" || ph == "M" || ph == "s" || ph == "f" || ph == "C") << "unexpected phase " << e;
    if (ph == "C") {  // a counter: every value a number
      for (const auto& [key, value] : e.at("args").items()) EXPECT_TRUE(value.is_number()) << key;
    }
    if (ph == "M") {
      ASSERT_TRUE(e.at("args").is_object()) << e;
      continue;
    }
    ASSERT_TRUE(e.at("ts").is_number()) << e;
    EXPECT_GE(e["ts"].get<double>(), 0) << e;
    if (ph == "B" || ph == "E") {
      ASSERT_TRUE(e.at("cat").is_string()) << e;
      ASSERT_TRUE(e.at("args").is_object()) << e;
    } else if (ph != "C") {
      ASSERT_TRUE(e.at("id").is_number_unsigned()) << e;
      EXPECT_LT(e["id"].get<std::uint64_t>(), 1ull << 53) << "flow ids must survive a JavaScript number";
      if (ph == "f") {
        EXPECT_EQ(e.at("bp"), "e") << e;
      }
    }
  }
}

TEST(ChromeTrace, HasANamedTrackPerRankAndSpansOfEveryKind) {
  const json doc = traced_run(4);
  std::map<int, std::string> names;
  std::map<std::string, int> categories;
  for (const json& e : doc["traceEvents"]) {
    if (e["ph"] == "M" && e["name"] == "thread_name") names[e["tid"]] = e["args"]["name"];
    if (e["ph"] == "B") categories[e["cat"]]++;
    if (e["ph"] == "B" && e["cat"] == "p2p") {
      EXPECT_EQ(e.at("args").at("bytes"), 256);  // ring chunks: 1024 bytes / 4 ranks
      EXPECT_TRUE(e["args"].at("peer").is_number_integer());
    }
    if (e["ph"] == "B" && e["cat"] == "collective") {
      // NCCL's tuning model runs 1 KiB on 4 GPUs of a node as a ring (LL): "native/ring".
      EXPECT_TRUE(e["args"].at("algo") == "ring" || e["args"]["algo"] == "native/ring") << e;
    }
  }
  ASSERT_EQ(names.size(), 4u);
  for (int r = 0; r < 4; ++r) EXPECT_EQ(names[r], "rank " + std::to_string(r));
  EXPECT_EQ(categories["collective"], 8);
  EXPECT_EQ(categories["compute"], 4);
  EXPECT_EQ(categories["p2p"], 4 * 2 * 3 * 2);  // 4 ranks x (send+recv) x 2(P-1) steps
}

// What a rank keeps on the host crosses by an explicit copy, and the trace shows
// each: an instant on the rank's track, with its bytes; memory that is the
// host's (the CPU device's) copies nothing.
TEST(ChromeTrace, EachCopyBetweenTheHostAndARanksDeviceIsAnInstantWithItsBytes) {
  auto run = test::simulate(2, [](Comm& c) {
    c.compute_seconds("forward", 1e-6 * (c.rank() + 1));
    const std::vector<float> values(std::size_t(4 + c.rank()), 1.0f);
    const Tensor on_device = Tensor::from_host(values, {values.size()}, DeviceKind::fenced);
    EXPECT_EQ(on_device.to_host(), values);
    EXPECT_EQ(Tensor::from_host(values, {values.size()}, DeviceKind::cpu).to_host(), values);
  });
  std::vector<std::tuple<int, std::string, double, std::uint64_t>> copies;
  const json doc = written(*run.trace);
  for (const json& e : doc["traceEvents"]) {
    if (e.value("cat", "") != "host copy") continue;
    EXPECT_EQ(e["ph"], "i") << e;
    EXPECT_EQ(e["s"], "t") << "on the rank's own track: " << e;
    copies.emplace_back(e["tid"], e["name"], e["ts"], e["args"]["bytes"]);
  }
  using Copy = std::tuple<int, std::string, double, std::uint64_t>;
  EXPECT_EQ(copies, (std::vector<Copy>{{0, "to device", 1.0, 16}, {0, "to host", 1.0, 16},
                                       {1, "to device", 2.0, 20}, {1, "to host", 2.0, 20}}));
}

TEST(ChromeTrace, EveryArrowGoesFromASendToItsReceive) {
  const json doc = traced_run(5);
  std::map<std::uint64_t, json> starts, finishes;
  for (const json& e : doc["traceEvents"]) {
    if (e["ph"] == "s") {
      EXPECT_TRUE(starts.emplace(e["id"], e).second) << "duplicate flow id " << e;
    } else if (e["ph"] == "f") {
      EXPECT_TRUE(finishes.emplace(e["id"], e).second) << "duplicate flow id " << e;
    }
  }
  ASSERT_EQ(starts.size(), 5u * 2 * 4);
  ASSERT_EQ(starts.size(), finishes.size());
  for (const auto& [id, s] : starts) {
    ASSERT_TRUE(finishes.count(id)) << "flow " << id << " starts but never ends";
    const int from = s["tid"], to = finishes[id]["tid"];
    EXPECT_EQ(to, (from + 1) % 5) << "a ring sends only to the right neighbour";
    EXPECT_LE(s["ts"].get<double>(), finishes[id]["ts"].get<double>()) << "an arrow must not point back in time";
  }
}

// Issue 14: a span ending at 10.00016 us, written as ts 5 and dur 5.00016 from
// seconds * 1e6, ended at 10.000160000000001 us, past the next span's ts, and a
// viewer kept it open to the end of the trace. Times are whole nanoseconds now:
// the first ends at the second's start, to the nanosecond.
TEST(ChromeTrace, TimesAreWholeNanosecondsSoAbuttingSpansNeverOverlap) {
  Trace trace(2);
  using K = TraceEvent::Kind;
  trace.track(0)->events = {{K::collective, "all_reduce", 5e-6, 10.00016e-6},
                            {K::collective, "gather", 10.00016e-6, 12e-6},
                            {K::send, "send", 1e-6, 2.0000004e-6, 1, 0, 8, 7}};
  trace.track(1)->events.push_back({K::recv, "recv", 1.5e-6, 3.0000004e-6, 0, 0, 8, 7});
  const json doc = written(trace);
  using Range = std::pair<std::int64_t, std::int64_t>;  // [start, end] ns
  std::map<std::string, Range> spans;                    // by name
  for (const Drawn& d : spans_of(doc)) spans[d.name] = {d.start, d.end};
  std::map<std::string, std::int64_t> flow_ends;  // "s", "f" -> ns
  for (const json& e : doc["traceEvents"])
    if (e["ph"] == "s" || e["ph"] == "f") flow_ends[e["ph"]] = nanos(e["ts"]);
  EXPECT_EQ(spans["all_reduce"], Range(5000, 10000));
  EXPECT_EQ(spans["gather"].first, spans["all_reduce"].second);
  EXPECT_EQ(spans["send"], Range(1000, 2000));  // 2000.4 ns rounds down
  EXPECT_EQ(flow_ends["s"], 1001) << "a nanosecond inside the send";
  EXPECT_EQ(flow_ends["f"], 2999) << "a nanosecond inside the receive, which ends at 3000 ns";
}

// Issue 37: as an "X" event (ts 39, dur 0.001) a span ended where a viewer adds
// the two in floating point, 39.001000000000005 us, past the next span's start
// at 39.001, and speedscope ended the wrong one. Each end is written now: the
// first span's end is the very number the second's begin is.
TEST(ChromeTrace, EachEndIsWrittenSoNoViewerAddsTimes) {
  Trace trace(1);
  using K = TraceEvent::Kind;
  trace.track(0)->events = {{K::collective, "all_gather", 39e-6, 39.001e-6},
                            {K::collective, "reduce_scatter", 39.001e-6, 40e-6}};
  json begin_of_first, end_of_first, begin_of_second;
  const json doc = written(trace);
  for (const json& e : doc["traceEvents"]) {
    if (e["ph"] == "B" && e["name"] == "all_gather") begin_of_first = e;
    if (e["ph"] == "E" && e["name"] == "all_gather") end_of_first = e;
    if (e["ph"] == "B" && e["name"] == "reduce_scatter") begin_of_second = e;
  }
  ASSERT_FALSE(end_of_first.is_null()) << "no end event for all_gather";
  ASSERT_FALSE(begin_of_second.is_null()) << "no begin event for reduce_scatter";
  EXPECT_EQ(end_of_first["ts"].get<double>(), begin_of_second["ts"].get<double>());
  EXPECT_EQ(end_of_first["args"], begin_of_first["args"]) << "speedscope matches an end to its begin by name and args";
}

// A region shorter than half a nanosecond rounds to zero length, which Perfetto
// and speedscope draw out of place: it is left out, with its arrow, and what
// surrounds it is drawn as before.
TEST(ChromeTrace, ASubNanosecondSpanIsLeftOutWithItsArrow) {
  Trace trace(2);
  using K = TraceEvent::Kind;
  trace.track(0)->events = {{K::compute, "route", 1e-6, 1.0000003e-6},
                            {K::compute, "forward", 1.0000003e-6, 2e-6},
                            {K::send, "send", 3e-6, 3.0000001e-6, 1, 0, 8, 7}};
  trace.track(1)->events.push_back({K::recv, "recv", 2e-6, 4e-6, 0, 0, 8, 7});
  const json doc = written(trace);
  std::vector<std::string> names;
  for (const Drawn& d : spans_of(doc)) names.push_back(d.name);
  EXPECT_EQ(names, (std::vector<std::string>{"forward", "recv"}));
  for (const json& e : doc["traceEvents"])
    EXPECT_TRUE(e["ph"] != "s" && e["ph"] != "f") << "an arrow from nothing: " << e;
}

// Issue 37: the pipeline's sends were drawn on the rank's own track, from when
// they were posted to when they were waited for, across the compute in between
// ("send tag 8" spanned the whole step), and partly over each other. A message
// pending while its rank computes is drawn on the rank's communication track;
// a blocking send stays on the rank's own.
TEST(ChromeTrace, AMessageInFlightWhileTheRankComputesIsDrawnBesideIt) {
  auto run = test::simulate(2, [](Comm& c) {
    std::vector<float> buf(1024, 1.0f);
    if (c.rank() == 0) {
      Request in_flight = c.isend(view_of(buf), 1, 1);
      c.compute_flops("forward", 1e9);
      in_flight.wait();
      c.send(view_of(buf), 1, 2);
    } else {
      c.compute_flops("forward", 2e9);
      c.recv(view_of(buf), 0, 1);
      c.recv(view_of(buf), 0, 2);
    }
  });
  const json doc = written(*run.trace);
  const std::map<int, std::string> names = thread_names(doc);
  std::map<std::pair<std::string, std::int64_t>, std::string> where;  // (name, tag) -> thread
  for (const Drawn& d : spans_of(doc))
    if (d.tid == 0 || d.tid == 2) where[{d.name, d.begin["args"].value("tag", -1)}] = names.at(d.tid);
  EXPECT_EQ((where[{"send", 1}]), "rank 0 / comm");
  EXPECT_EQ((where[{"forward", -1}]), "rank 0");
  EXPECT_EQ((where[{"send", 2}]), "rank 0");
}

// Two messages in flight at once overlap in time without nesting (each waits for
// its receiver): they go on two lanes under the rank, each of which nests.
TEST(ChromeTrace, OverlappingMessagesInFlightTakeALaneEach) {
  Trace trace(1);
  using K = TraceEvent::Kind;
  trace.track(0)->events = {{K::compute, "forward", 0, 10e-6},
                            {K::send, "send", 1e-6, 6e-6, 1, 8, 64, 0, {}, {}, true},
                            {K::send, "send", 4e-6, 9e-6, 1, 9, 64, 0, {}, {}, true}};
  const json doc = written(trace);
  const std::map<int, std::string> names = thread_names(doc);
  std::map<std::string, std::vector<std::int64_t>> tags_by_thread;
  for (const Drawn& d : spans_of(doc)) tags_by_thread[names.at(d.tid)].push_back(d.begin["args"].value("tag", -1));
  EXPECT_EQ(tags_by_thread["rank 0"], (std::vector<std::int64_t>{-1}));
  EXPECT_EQ(tags_by_thread["rank 0 / comm"], (std::vector<std::int64_t>{8}));
  EXPECT_EQ(tags_by_thread["rank 0 / comm 2"], (std::vector<std::int64_t>{9}));
}
