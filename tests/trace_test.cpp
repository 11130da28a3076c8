// The trace is Chrome Trace Event Format, checked by schema: what Perfetto's
// JSON importer needs (traceEvents with ph/pid/tid/ts, "X" spans with dur,
// "s"/"f" flow pairs with ids), plus labkit's own contract (one named track per
// rank, sends and receives with bytes and peer, each arrow from a send to its receive).
#include <cmath>
#include <map>
#include <sstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "harness.h"
#include "labkit/algorithms.h"

using namespace labkit;
using nlohmann::json;

namespace {
json traced_run(int ranks) {
  auto run = test::simulate(ranks, [](Comm& c) {
    std::vector<float> buf(256, 1.0f);
    c.compute("forward", 1e9);
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
    ASSERT_TRUE(ph == "X" || ph == "M" || ph == "s" || ph == "f" || ph == "C") << "unexpected phase " << e;
    if (ph == "C") {  // a counter: every value a number
      for (const auto& [key, value] : e.at("args").items()) EXPECT_TRUE(value.is_number()) << key;
    }
    if (ph == "M") {
      ASSERT_TRUE(e.at("args").is_object()) << e;
      continue;
    }
    ASSERT_TRUE(e.at("ts").is_number()) << e;
    EXPECT_GE(e["ts"].get<double>(), 0) << e;
    if (ph == "X") {
      ASSERT_TRUE(e.at("dur").is_number()) << e;
      EXPECT_GE(e["dur"].get<double>(), 0) << e;
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
    if (e["ph"] == "X") categories[e["cat"]]++;
    if (e["ph"] == "X" && e["cat"] == "p2p") {
      EXPECT_EQ(e.at("args").at("bytes"), 256);  // ring chunks: 1024 bytes / 4 ranks
      EXPECT_TRUE(e["args"].at("peer").is_number_integer());
    }
    if (e["ph"] == "X" && e["cat"] == "collective") {
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
// ts + dur of the first is the second's ts, to the nanosecond.
TEST(ChromeTrace, TimesAreWholeNanosecondsSoAbuttingSpansNeverOverlap) {
  Trace trace(2);
  using K = TraceEvent::Kind;
  trace.track(0)->events = {{K::collective, "all_reduce", 5e-6, 10.00016e-6},
                            {K::collective, "gather", 10.00016e-6, 12e-6},
                            {K::send, "send", 1e-6, 2.0000004e-6, 1, 0, 8, 7}};
  trace.track(1)->events.push_back({K::recv, "recv", 1.5e-6, 3.0000004e-6, 0, 0, 8, 7});
  std::ostringstream out;
  trace.write_chrome_json(out, "sim");
  using Range = std::pair<std::int64_t, std::int64_t>;  // [start, end] ns
  std::map<std::string, Range> spans;                    // by name
  std::map<std::string, std::int64_t> flow_ends;        // "s", "f" -> ns
  auto nanos = [](const json& us) {
    const double ns = us.get<double>() * 1e3;
    EXPECT_NEAR(ns, std::round(ns), 1e-6) << us << " us is not a whole nanosecond";
    return std::llround(ns);
  };
  const json doc = json::parse(out.str());
  for (const json& e : doc["traceEvents"]) {
    const std::string ph = e["ph"];
    if (ph == "X") spans[e["name"].get<std::string>()] = {nanos(e["ts"]), nanos(e["ts"]) + nanos(e["dur"])};
    if (ph == "s" || ph == "f") flow_ends[ph] = nanos(e["ts"]);
  }
  EXPECT_EQ(spans["all_reduce"], Range(5000, 10000));
  EXPECT_EQ(spans["gather"].first, spans["all_reduce"].second);
  EXPECT_EQ(spans["send"], Range(1000, 2000));  // 2000.4 ns rounds down
  EXPECT_EQ(flow_ends["s"], 1001) << "a nanosecond inside the send";
  EXPECT_EQ(flow_ends["f"], 2999) << "a nanosecond inside the receive, which ends at 3000 ns";
}
