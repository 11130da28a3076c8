// The visualizer's model: the trace loader reads what every backend writes and
// rejects malformed files with a message that names the file and the fault;
// the chunk history records whose data each chunk holds after every delivery.
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

#include "harness.h"
#include "labkit/error.h"
#include "scenario.h"
#include "trace_model.h"

using namespace labkit;

namespace {
std::string write(const std::string& name, const std::string& text) {
  const std::string path = ::testing::TempDir() + "/" + name;
  std::ofstream(path) << text;
  return path;
}

std::string error_loading(const std::string& path) {
  try {
    viz::load_chrome_trace(path);
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}
}  // namespace

TEST(VizTrace, ReadsALabTraceWithItsSpansAndArrows) {
  auto run = test::simulate(4, [](Comm& c) {
    std::vector<float> buf(64, 1.0f);
    c.set_algorithm(Collective::all_reduce, "ring");
    c.compute("forward", 1e9);
    c.all_reduce(view_of(buf), ReduceOp::sum);
  });
  std::ostringstream json;
  run.trace->write_chrome_json(json, "sim");
  const viz::TraceModel m = viz::load_chrome_trace(write("lab.json", json.str()));
  ASSERT_EQ(m.tracks.size(), 4u);
  EXPECT_EQ(m.tracks[2].name, "rank 2");
  EXPECT_EQ(m.events, 4u * (1 + 1 + 2 * 3 * 2));  // compute, all_reduce, 6 sends and 6 receives per rank
  EXPECT_EQ(m.flows.size(), 4u * 6);
  for (const viz::Flow& f : m.flows) {
    EXPECT_EQ(f.to_rank, (f.from_rank + 1) % 4);
    EXPECT_EQ(f.bytes, 64);  // a ring chunk: 64 floats / 4 ranks
  }
  EXPECT_NEAR(m.end, run.elapsed, 0.5e-9);  // the file holds whole nanoseconds
  const viz::TraceModel direct = viz::from_trace(*run.trace, "direct");
  EXPECT_EQ(direct.events, m.events);
  EXPECT_EQ(direct.flows.size(), m.flows.size());
}

TEST(VizTrace, ShowsWhereARankFailedAndWhatThatCutShort) {
  Trace trace(2);
  sim::Engine engine({.ranks = 2, .topology = find_topology("dgx-h100"), .trace = &trace, .fail_rank = 1, .fail_at = 3e-6});
  EXPECT_THROW(engine.run([](Comm& c) {
    std::vector<float> x(4);
    if (c.rank() == 1) c.compute_for("work", 5e-6);
    c.rank() == 0 ? c.recv(view_of(x), 1) : c.send(view_of(x), 0);
  }), RankFailedError);
  std::ostringstream json;
  trace.write_chrome_json(json, "sim");
  const viz::TraceModel m = viz::load_chrome_trace(write("failed.json", json.str()));
  ASSERT_EQ(m.tracks.size(), 2u);
  ASSERT_EQ(m.tracks[1].spans.size(), 1u);
  EXPECT_EQ(m.tracks[1].spans[0].kind, viz::Kind::fault);
  EXPECT_DOUBLE_EQ(m.tracks[1].spans[0].start, 3e-6);
  ASSERT_EQ(m.tracks[0].spans.size(), 1u);
  EXPECT_EQ(m.tracks[0].spans[0].kind, viz::Kind::recv);
  EXPECT_EQ(m.tracks[0].spans[0].detail, "rank 0: recv(from=1, tag=0): rank 1 failed at t = 3.00 us");
  EXPECT_TRUE(m.flows.empty());  // the message was never sent
  EXPECT_EQ(viz::from_trace(trace, "direct").tracks[1].spans.at(0).kind, viz::Kind::fault);
}

TEST(VizTrace, RejectsMalformedFilesWithAClearError) {
  EXPECT_NE(error_loading(write("cut.json", R"({"traceEvents": [{"ph": "X", )")).find("not valid JSON"),
            std::string::npos);
  EXPECT_NE(error_loading(write("other.json", R"({"events": []})")).find("no traceEvents array"), std::string::npos);
  EXPECT_NE(error_loading(write("huge.json", R"([{"ph": "X", "ts": 1e400}])")).find("not valid JSON"),  // fuzz_trace
            std::string::npos);
  const std::string no_ts = error_loading(write("nots.json", R"({"traceEvents": [{"ph": "X", "tid": 0}]})"));
  EXPECT_NE(no_ts.find("event 1 is malformed"), std::string::npos) << no_ts;
  EXPECT_NE(error_loading(::testing::TempDir() + "/missing.json").find("cannot open"), std::string::npos);
}

// Spans that abut in the file stay side by side: ts + dur of the first is read
// in whole nanoseconds, as written, so it is not 10.000160000000001 us (the sum
// in microsecond doubles), past the second's start, which would nest it.
TEST(VizTrace, AbuttingSpansStaySideBySide) {
  const viz::TraceModel m = viz::load_chrome_trace(write("abut.json", R"([
    {"ph": "X", "name": "all_reduce", "cat": "collective", "tid": 0, "ts": 5, "dur": 5.00016},
    {"ph": "X", "name": "gather", "cat": "collective", "tid": 0, "ts": 10.00016, "dur": 2}])"));
  ASSERT_EQ(m.tracks.at(0).spans.size(), 2u);
  EXPECT_EQ(m.tracks[0].spans[0].end, m.tracks[0].spans[1].start);
  EXPECT_EQ(m.tracks[0].spans[1].depth, 0) << "gather drawn inside all_reduce";
}

// Found by fuzz_trace (fuzz/corpus/trace/crash-arrow-from-a-rank-without-spans): an arrow from a rank
// with no span of its own read past the end of the tracks.
TEST(VizTrace, AnArrowFromARankWithoutSpansGetsATrack) {
  const viz::TraceModel m = viz::load_chrome_trace(write("arrow.json", R"([
    {"ph": "X", "name": "recv", "cat": "p2p", "tid": 0, "ts": 0, "dur": 2},
    {"ph": "s", "id": 9, "tid": 2, "ts": 0}, {"ph": "f", "id": 9, "tid": 0, "ts": 1, "bp": "e"}])"));
  ASSERT_EQ(m.tracks.size(), 3u);
  EXPECT_TRUE(m.tracks[2].spans.empty());
  ASSERT_EQ(m.flows.size(), 1u);
  EXPECT_EQ(m.flows[0].from_rank, 2);
  EXPECT_EQ(m.flows[0].bytes, 0) << "no send span holds the arrow's start";
}

TEST(VizTrace, RejectsNumbersOutOfRange) {
  const std::string far = error_loading(write("far.json", R"([{"ph": "X", "tid": 0, "ts": 1e300, "dur": 1}])"));
  EXPECT_NE(far.find("event 1 is malformed: time 1e+300 us is out of range"), std::string::npos) << far;
  // Found by fuzz_trace (crash-flow-id-beyond-2-to-the-64): a float cast to an integer type.
  const std::string id = error_loading(write("id.json", R"([{"ph": "s", "tid": 0, "ts": 1, "id": 7.8e19}])"));
  EXPECT_NE(id.find("id 7.8e+19 is not an integer in range"), std::string::npos) << id;
  const std::string tid = error_loading(write("tid.json", R"([{"ph": "X", "tid": 4294967296, "ts": 1}])"));
  EXPECT_NE(tid.find("tid 4294967296 is not an integer in range"), std::string::npos) << tid;
}

TEST(VizTrace, AcceptsTheBareArrayForm) {
  const viz::TraceModel m = viz::load_chrome_trace(
      write("bare.json", R"([{"ph": "X", "name": "step", "cat": "compute", "tid": 1, "ts": 0, "dur": 5}])"));
  ASSERT_EQ(m.tracks.size(), 2u);
  EXPECT_EQ(m.tracks[1].spans.at(0).kind, viz::Kind::compute);
  EXPECT_DOUBLE_EQ(m.end, 5e-6);
}

TEST(VizChunks, RingAllReduceReducesOneChunkPerRankThenGathersThem) {
  const viz::ChunkHistory h = viz::chunk_history(viz::parse_scenario("ring:4:1K"));
  ASSERT_EQ(h.times.size(), 1u + 2 * 3);  // the start, then 2(P-1) steps (every rank in step)
  for (int r = 0; r < 4; ++r)
    for (int c = 0; c < 4; ++c) {
      EXPECT_EQ(h.states[0][r][c], 1u << r) << "at the start every chunk is its rank's own";
      EXPECT_EQ(h.states[3][r][c] == h.everyone, c == (r + 1) % 4) << "after reduce-scatter rank " << r
                                                                    << " holds the full sum of chunk r+1 only";
      EXPECT_EQ(h.states.back()[r][c], h.everyone) << "at the end everyone has everything";
    }
}

TEST(VizChunks, AllGatherFillsEveryBlockWithItsRanksData) {
  const viz::ChunkHistory h = viz::chunk_history(viz::parse_scenario("ring:5:1K:all_gather"));
  ASSERT_FALSE(h.states.empty());
  for (int r = 0; r < 5; ++r)
    for (int c = 0; c < 5; ++c) EXPECT_EQ(h.states.back()[r][c], 1u << c);
  EXPECT_TRUE(viz::chunk_history(viz::parse_scenario("pairwise:4:1K:all_to_all")).states.empty());
  EXPECT_THROW(viz::parse_scenario("ring:eight:1M"), Error);
}
