// The trace is Chrome Trace Event Format, checked by schema: what Perfetto's
// JSON importer needs (traceEvents with ph/pid/tid/ts, "X" spans with dur,
// "s"/"f" flow pairs with ids), plus labkit's own contract (one named track per
// rank, sends and receives with bytes and peer, each arrow from a send to its receive).
#include <map>
#include <sstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "harness.h"

using namespace labkit;
using nlohmann::json;

namespace {
json traced_run(int ranks) {
  auto run = test::simulate(ranks, [](Comm& c) {
    std::vector<float> buf(256, 1.0f);
    c.compute("forward", 1e9);
    c.track_memory(MemoryUse::activations, 4096);
    c.set_algorithm(Collective::all_reduce, "ring");
    c.all_reduce(view_of(buf), ReduceOp::sum);
    c.set_algorithm(Collective::all_reduce, "native");
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
      EXPECT_TRUE(e["args"].at("algo") == "ring" || e["args"]["algo"] == "native/tree") << e;
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
