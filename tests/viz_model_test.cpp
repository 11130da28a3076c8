// The visualizer's model: the trace loader reads what every backend writes and
// rejects malformed files with a message that names the file and the fault;
// the chunk history records whose data each chunk holds after every delivery;
// the summary splits each rank's time and says what overlap hid.
#include <algorithm>
#include <fstream>
#include <numeric>
#include <sstream>

#include <gtest/gtest.h>

#include "harness.h"
#include "labkit/algorithms.h"
#include "labkit/error.h"
#include "labkit/memory.h"
#include "labkit/parallel/pipeline_schedule.h"
#include "scenario.h"
#include "summary.h"
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

// 4 ranks start an all_reduce by the ring on their communication streams,
// compute for `backward` seconds while it is in flight, then wait for it.
test::SimRun overlapped_ring(double backward) {
  return test::simulate(4, [backward](Comm& c) {
    std::vector<float> grads(64);
    for (std::size_t i = 0; i < grads.size(); ++i) grads[i] = float(100 * c.rank() + i);
    use_algorithm(c, Collective::all_reduce, "ring");
    Request r = c.i_all_reduce(view_of(grads), ReduceOp::sum);
    c.compute_seconds("backward", backward);
    r.wait();
  });
}

// What the file and the in-memory trace must both show of overlapped_ring:
// 4 ranks, not 8; each stream's track right under its rank's; the ring's
// messages on the streams, and from rank to rank.
void expect_streams_under_their_ranks(const viz::TraceModel& m) {
  ASSERT_EQ(m.ranks, 4) << "a stream is no rank";
  ASSERT_EQ(m.tracks.size(), 8u) << "a track per rank and one per stream";
  for (int r = 0; r < 4; ++r) {
    const viz::Track &own = m.tracks[r], &stream = m.tracks[4 + r];
    EXPECT_EQ(own.rank, r);
    EXPECT_FALSE(own.stream) << "rank " << r;
    EXPECT_EQ(own.row, 2 * r);
    EXPECT_EQ(stream.rank, r);
    EXPECT_TRUE(stream.stream) << "rank " << r;
    EXPECT_EQ(stream.row, 2 * r + 1) << "rank " << r << "'s stream is not right under it";
    EXPECT_EQ(stream.name, "rank " + std::to_string(r) + " / comm");
    ASSERT_EQ(own.spans.size(), 1u) << "rank " << r << " only computes on its own track";
    EXPECT_EQ(own.spans[0].kind, viz::Kind::compute);
    EXPECT_EQ(stream.spans.size(), 1u + 2 * 3 * 2) << "rank " << r << ": the all_reduce, 6 sends and 6 receives";
  }
  ASSERT_EQ(m.flows.size(), 4u * 6);
  for (const viz::Flow& f : m.flows) {
    EXPECT_TRUE(m.tracks[f.from_track].stream && m.tracks[f.to_track].stream) << "stream to stream";
    EXPECT_EQ(f.from_rank, f.from_track - 4);
    EXPECT_EQ(f.to_rank, (f.from_rank + 1) % 4) << "from rank " << f.from_rank;
  }
}
}  // namespace

TEST(VizTrace, ReadsALabTraceWithItsSpansAndArrows) {
  auto run = test::simulate(4, [](Comm& c) {
    std::vector<float> buf(64, 1.0f);
    use_algorithm(c, Collective::all_reduce, "ring");
    c.compute_flops("forward", 1e9);
    c.all_reduce(view_of(buf), ReduceOp::sum);
  });
  std::ostringstream json;
  run.trace->write_chrome_json(json, "sim");
  const viz::TraceModel m = viz::load_chrome_trace(write("lab.json", json.str()));
  ASSERT_EQ(m.tracks.size(), 4u);
  EXPECT_EQ(m.ranks, 4);
  EXPECT_EQ(m.tracks[2].name, "rank 2");
  EXPECT_FALSE(m.tracks[2].stream);
  EXPECT_EQ(m.tracks[2].row, 2);
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

TEST(VizTrace, ReadsEachStreamAsATrackOfItsRank) {
  const test::SimRun run = overlapped_ring(1e-3);
  std::ostringstream json;
  run.trace->write_chrome_json(json, "sim");
  expect_streams_under_their_ranks(viz::load_chrome_trace(write("streams.json", json.str())));
}

// Messages in flight that overlap each other are written on lanes under the
// rank ("rank 1 / comm", "rank 1 / comm 2", thread k * ranks + r): each belongs to its rank.
TEST(VizTrace, ReadsEachLaneOfWorkInFlightAsATrackOfItsRank) {
  Trace trace(2);
  using K = TraceEvent::Kind;
  trace.track(1)->events = {{K::compute, "forward", 0, 10e-6},
                            {K::send, "send", 1e-6, 6e-6, 0, 8, 64, 0, {}, {}, true},
                            {K::send, "send", 4e-6, 9e-6, 0, 9, 64, 0, {}, {}, true}};
  trace.track(0)->events = {{K::compute, "forward", 0, 10e-6}};
  std::ostringstream json;
  trace.write_chrome_json(json, "sim");
  const viz::TraceModel m = viz::load_chrome_trace(write("lanes.json", json.str()));
  EXPECT_EQ(m.ranks, 2);
  ASSERT_EQ(m.tracks.size(), 6u);  // threads 0 1, 2 3 (streams), 4 5 (second lanes); rank 0 has no lanes
  EXPECT_EQ(m.tracks[5].name, "rank 1 / comm 2");
  EXPECT_EQ(m.tracks[5].rank, 1);
  EXPECT_TRUE(m.tracks[5].stream);
  EXPECT_EQ(m.tracks[5].row, 3) << "under rank 1 and its stream";
  EXPECT_EQ(m.tracks[2].row, -1) << "rank 0's stream, empty, takes no row";
  EXPECT_EQ(m.tracks[4].row, -1) << "nor its second lane";
  EXPECT_EQ(m.rows, 4);
  EXPECT_EQ(m.tracks[3].spans.size() + m.tracks[5].spans.size(), 2u);
}

TEST(VizTrace, KeepsEachStreamWithItsRankFromMemory) {
  expect_streams_under_their_ranks(viz::from_trace(*overlapped_ring(1e-3).trace, "direct"));
}

// A trace from another tool: thread ids far apart, names of its own. Every
// thread is a rank, as before streams, gaps included.
TEST(VizTrace, ThreadsOfAnotherToolAreRanks) {
  const viz::TraceModel m = viz::load_chrome_trace(write("tool.json", R"([
    {"ph": "M", "name": "thread_name", "tid": 7, "args": {"name": "worker / comm"}},
    {"ph": "X", "name": "step", "cat": "compute", "tid": 7, "ts": 0, "dur": 5},
    {"ph": "X", "name": "load", "tid": 2, "ts": 1, "dur": 2}])"));
  ASSERT_EQ(m.tracks.size(), 8u);
  EXPECT_EQ(m.ranks, 8);
  for (int tid = 0; tid < 8; ++tid) {
    EXPECT_FALSE(m.tracks[tid].stream) << "tid " << tid;
    EXPECT_EQ(m.tracks[tid].rank, tid);
    EXPECT_EQ(m.tracks[tid].row, tid);
  }
  EXPECT_EQ(m.tracks[7].name, "worker / comm");
}

TEST(VizTrace, ShowsWhereARankFailedAndWhatThatCutShort) {
  Trace trace(2);
  sim::Engine engine({.ranks = 2, .topology = find_topology("dgx-h100"), .trace = &trace, .fail_rank = 1, .fail_at = 3e-6});
  EXPECT_THROW(engine.run([](Comm& c) {
    std::vector<float> x(4);
    if (c.rank() == 1) c.compute_seconds("work", 5e-6);
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
  EXPECT_EQ(m.ranks, 2);
  EXPECT_EQ(m.tracks[1].spans.at(0).kind, viz::Kind::compute);
  EXPECT_DOUBLE_EQ(m.end, 5e-6);
}

// A ring hidden under 1 ms of backward is no exposed communication; under
// 1 us of it, all but that microsecond is.
TEST(VizSummary, CountsOnlyTheCommunicationComputeDoesNotHide) {
  for (double backward : {1e-3, 1e-6}) {
    const test::SimRun run = overlapped_ring(backward);
    const viz::TraceModel m = viz::from_trace(*run.trace, "direct");
    const viz::Summary s = viz::summarize(m);
    EXPECT_TRUE(s.streams);
    ASSERT_EQ(s.ranks.size(), 4u);
    for (int r = 0; r < 4; ++r) {
      const viz::Span& all_reduce = m.tracks[4 + r].spans.at(0);
      ASSERT_EQ(all_reduce.kind, viz::Kind::collective);
      const double ring = all_reduce.end - all_reduce.start, hidden = std::min(ring, backward);
      const viz::RankShare& share = s.ranks[r];
      EXPECT_NEAR(share.computing, backward / m.end, 1e-9) << "rank " << r << ", backward " << backward;
      EXPECT_NEAR(share.hidden, hidden / m.end, 1e-9) << "rank " << r << ", backward " << backward;
      EXPECT_NEAR(share.communicating, (ring - hidden) / m.end, 1e-9) << "rank " << r << ", backward " << backward;
      EXPECT_NEAR(share.communicating + share.computing + share.idle, 1, 1e-9) << "rank " << r;
    }
    ASSERT_EQ(s.links.size(), 4u);
    for (const auto& [bytes, link] : s.links) EXPECT_EQ(link.second, (link.first + 1) % 4) << "a ring link between ranks";
  }
}

// labkit's collectives run as messages, and the rule is theirs: a rank waiting
// for its data is idle. A binomial tree's broadcast: the root sends in every
// round; rank 1, its last child, receives in the third round only.
TEST(VizSummary, ALabkitCollectiveCountsItsMessagesNotItsWaits) {
  const viz::Summary s = viz::summarize(viz::parse_scenario("binomial_tree:8:1M:broadcast")->run().trace);
  ASSERT_EQ(s.ranks.size(), 8u);
  EXPECT_GT(s.ranks[0].communicating, 0.99);
  EXPECT_NEAR(s.ranks[1].communicating, 1.0 / 3, 0.02);
  EXPECT_NEAR(s.ranks[1].idle, 2.0 / 3, 0.02);
  EXPECT_FALSE(s.native_collectives) << "every collective here ran as messages";
}

TEST(VizSummary, ATraceWithoutStreamsHidesNothing) {
  const test::SimRun run = test::simulate(2, [](Comm& c) {
    std::vector<float> x(8);
    c.compute_seconds("forward", 2e-6);
    c.all_reduce(view_of(x), ReduceOp::sum);
  });
  const viz::Summary s = viz::summarize(viz::from_trace(*run.trace, "direct"));
  EXPECT_FALSE(s.streams);
  EXPECT_TRUE(s.native_collectives) << "the backend's own all_reduce, with no messages";
  ASSERT_EQ(s.ranks.size(), 2u);
  for (const viz::RankShare& share : s.ranks) {
    EXPECT_EQ(share.hidden, 0);
    EXPECT_NEAR(share.computing, 2e-6 / run.elapsed, 1e-9);
    EXPECT_NEAR(share.communicating, 1 - 2e-6 / run.elapsed, 1e-9);
  }
}

TEST(VizChunks, RingAllReduceReducesOneChunkPerRankThenGathersThem) {
  const viz::ChunkHistory h = viz::parse_scenario("ring:4:1K")->run().chunks;
  ASSERT_EQ(h.times.size(), 1u + 2 * 3);  // the start, then 2(P-1) steps (every rank in step)
  for (int r = 0; r < 4; ++r)
    for (int c = 0; c < 4; ++c) {
      EXPECT_EQ(h.states[0][r][c], 1u << r) << "at the start every chunk is its rank's own";
      EXPECT_EQ(h.states[3][r][c] == h.everyone, c == (r + 1) % 4) << "after reduce-scatter rank " << r
                                                                    << " holds the full sum of chunk r+1 only";
      EXPECT_EQ(h.states.back()[r][c], h.everyone) << "at the end everyone has everything";
    }
}

// The backend's own collective moves its data when the ranks meet; the view
// shows it as it costs: the ranks' own data until it ends, the sum after.
TEST(VizChunks, ANativeCollectiveIsWholeAtItsEndNotItsStart) {
  const viz::ChunkHistory h = viz::parse_scenario("native:4:1K")->run().chunks;
  ASSERT_EQ(h.times.size(), 2u);
  EXPECT_EQ(h.times[0], 0);
  EXPECT_GT(h.times[1], 0);
  for (int r = 0; r < 4; ++r)
    for (int c = 0; c < 4; ++c) {
      EXPECT_EQ(h.states[0][r][c], 1u << r) << "at the start every chunk is its rank's own";
      EXPECT_EQ(h.states[1][r][c], h.everyone) << "at its end everyone has everything";
    }
}

TEST(VizChunks, AllGatherFillsEveryBlockWithItsRanksData) {
  const viz::ChunkHistory h = viz::parse_scenario("ring:5:1K:all_gather")->run().chunks;
  ASSERT_FALSE(h.states.empty());
  for (int r = 0; r < 5; ++r)
    for (int c = 0; c < 5; ++c) EXPECT_EQ(h.states.back()[r][c], 1u << c);
  EXPECT_TRUE(viz::parse_scenario("pairwise:4:1K:all_to_all")->run().chunks.states.empty());
  EXPECT_THROW(viz::parse_scenario("ring:eight:1M"), Error);
}

// The scenario table finds a kind by the text's first field (any other names a
// collective's algorithm): each kind reads its own fields, takes the shared
// ranks and topology, and names its own form when the text is wrong. The Run
// panel edits a parsed scenario in place, and its next run uses the edit.
TEST(VizScenario, EachKindReadsItsOwnFormFromTheTable) {
  const auto error = [](const std::string& text) -> std::string {
    try {
      viz::parse_scenario(text);
    } catch (const std::exception& e) {
      return e.what();
    }
    return "parsed";
  };
  EXPECT_EQ(error("ddp:8"), "'ddp:8' is not ALGO:RANKS:SIZE[:COLLECTIVE[:TOPOLOGY]] (e.g. ring:8:1M)");  // no mode
  EXPECT_EQ(error("ddp:8:overlap:dgx-h100:x"), "'ddp:8:overlap:dgx-h100:x' is not ddp:RANKS:MODE[:TOPOLOGY]");
  EXPECT_EQ(error("fsdp:8:4"), "'fsdp:8:4' is not fsdp:RANKS:STAGE[:PREFETCH[:TOPOLOGY]] (stage 0-3)");
  EXPECT_EQ(error("moe:0"), "'moe:0': '0' is not a rank count from 1 to 1024");
  EXPECT_EQ(error("ring:8:0"), "'ring:8:0': 0 holds no 4-byte element for each of 8 ranks (at least 32 B)");
  EXPECT_EQ(error("pp:4:1f1b:x"), "'pp:4:1f1b:x': 'x' is not a micro-batch count from 1 to 1024");
  for (const char* two_fields : {"tp:4", "cp:8", "moe:4"}) EXPECT_EQ(error(two_fields), "parsed") << two_fields;
  for (const char* nowhere : {"ring:8:1M:all_reduce:nowhere", "ddp:8:overlap:nowhere", "fsdp:8:3:none:nowhere",
                              "tp:4:sp:nowhere", "cp:8:zigzag:nowhere", "pp:4:1f1b:8:nowhere", "moe:4:aux:20:nowhere"})
    EXPECT_EQ(error(nowhere).rfind("unknown topology 'nowhere'", 0), 0u) << nowhere;

  const std::unique_ptr<viz::Scenario> ring = viz::parse_scenario("ring:8:1M");
  EXPECT_EQ(ring->run().trace.source, "ring all_reduce on 8 ranks, 1 MiB, dgx-h100");
  ring->ranks = 4;  // as the Run panel's fields do
  ring->topology = "ib-ndr";
  EXPECT_EQ(ring->run().trace.source, "ring all_reduce on 4 ranks, 1 MiB, ib-ndr");
  const std::unique_ptr<viz::Scenario> pipeline = viz::parse_scenario("pp:4:1f1b:8");
  pipeline->ranks = 2;
  EXPECT_EQ(pipeline->run().trace.ranks, 2);
}

TEST(VizScenario, DdpStepShowsItsBucketsHiddenUnderBackward) {
  const viz::ScenarioRun run = viz::parse_scenario("ddp:16:overlap:ib-ndr")->run();
  EXPECT_EQ(run.trace.source, "DDP step (overlap) of Llama-2 7B's shapes on 16 ranks, ib-ndr");
  const viz::Summary overlapped = viz::summarize(run.trace);
  const viz::Summary naive = viz::summarize(viz::parse_scenario("ddp:16:naive:ib-ndr")->run().trace);
  ASSERT_EQ(overlapped.ranks.size(), 16u);
  for (int r = 0; r < 16; ++r) {
    // On a GPU per node the step's allreduces take a fifth of the naive step: hidden when overlapped, exposed when not.
    EXPECT_GT(overlapped.ranks[r].hidden, 0.2) << "rank " << r;
    EXPECT_LT(overlapped.ranks[r].communicating, 0.01) << "rank " << r;
    EXPECT_EQ(naive.ranks[r].hidden, 0) << "rank " << r;
    EXPECT_GT(naive.ranks[r].communicating, 0.15) << "rank " << r;
  }
  EXPECT_TRUE(run.chunks.states.empty());
  EXPECT_THROW(viz::parse_scenario("ddp:8:eager"), std::exception);
}

// A stage-3 step across two nodes: without prefetch every layer's gather waits
// in front of its compute; prefetched in both passes, the gathers run under it.
TEST(VizScenario, FsdpStepShowsItsGathersHiddenWhenPrefetched) {
  const viz::ScenarioRun run = viz::parse_scenario("fsdp:16:3:both")->run();
  EXPECT_EQ(run.trace.source, "ZeRO stage 3 step of Llama-2 7B's shapes on 16 ranks, dgx-h100, prefetch both");
  const viz::Summary prefetched = viz::summarize(run.trace);
  const viz::Summary exposed = viz::summarize(viz::parse_scenario("fsdp:16:3")->run().trace);
  ASSERT_EQ(prefetched.ranks.size(), 16u);
  EXPECT_GT(prefetched.ranks[0].hidden, exposed.ranks[0].hidden);
  EXPECT_LT(prefetched.ranks[0].communicating, exposed.ranks[0].communicating);
  EXPECT_TRUE(run.chunks.states.empty());
  EXPECT_THROW(viz::parse_scenario("fsdp:8:4"), std::exception);
  EXPECT_THROW(viz::parse_scenario("fsdp:8:3:sideways"), std::exception);
}

// A pipeline step's bubble is waiting on a peer, not communicating: each
// stage's receives count from their message's send, so what is neither
// compute nor the messages' flight (48 MiB at NVLink's 450 GB/s, some 0.1 ms a
// message of a 12 s step) is idle. The receives posted early once made rank 0
// 27% communicating and every rank some 70% "hidden".
TEST(VizScenario, APipelinesBubbleIsIdleNotCommunication) {
  const viz::TraceModel m = viz::parse_scenario("pp:4:1f1b:8")->run().trace;
  const viz::Summary s = viz::summarize(m);
  ASSERT_EQ(s.ranks.size(), 4u);
  for (int r = 0; r < 4; ++r) {
    const viz::RankShare& share = s.ranks[std::size_t(r)];
    EXPECT_LT(share.communicating, 0.01) << "rank " << r;
    EXPECT_LT(share.hidden, 0.01) << "rank " << r;
    EXPECT_NEAR(share.idle, 0.273, 0.01) << "rank " << r;  // the lab's bubble, (P-1)/(M+P-1) = 3/11
    double shaded = 0;  // the timeline's dark time is the same idle
    for (const auto& [start, end] : share.idle_spans) shaded += end - start;
    EXPECT_NEAR(shaded / m.end, share.idle, 1e-9) << "rank " << r;
  }
}

// A tensor-parallel step: every rank computes its slice of each layer and
// waits at each of its collectives; sequence parallelism more than doubles their count.
TEST(VizScenario, TensorParallelStepShowsEachLayersCollectives) {
  const auto collectives = [](const viz::TraceModel& m, const std::string& name) {  // rank 0's
    std::size_t n = 0;
    for (const viz::Track& track : m.tracks)
      if (track.rank == 0 && !track.stream)
        for (const viz::Span& span : track.spans) n += span.kind == viz::Kind::collective && span.name == name;
    return n;
  };
  const viz::TraceModel sp = viz::parse_scenario("tp:4:sp")->run().trace;
  const viz::TraceModel plain = viz::parse_scenario("tp:4")->run().trace;
  EXPECT_EQ(sp.source, "tensor-parallel step of the tiny GPT on 4 ranks, sequence parallel, dgx-h100");
  EXPECT_EQ(plain.source, "tensor-parallel step of the tiny GPT on 4 ranks, dgx-h100");
  EXPECT_EQ(collectives(plain, "all_reduce"), 4u * 2 + 2 + 2);  // 4 a layer, the embedding and head's, softmax's 2
  EXPECT_EQ(collectives(sp, "all_gather"), 6u * 2 + 2);  // and each norm's output again in backward
  EXPECT_EQ(collectives(sp, "reduce_scatter"), 4u * 2 + 2);
  const viz::Summary summary = viz::summarize(sp);
  ASSERT_EQ(summary.ranks.size(), 4u);
  EXPECT_GT(summary.ranks[0].computing, 0);
  EXPECT_GT(summary.ranks[0].communicating, 0);
  EXPECT_THROW(viz::parse_scenario("tp:3"), std::exception);
  EXPECT_THROW(viz::parse_scenario("tp:4:sideways"), std::exception);
}

// Ring attention: under a causal mask the contiguous layout's ranks compute
// unequal shares, so the ring waits on the busiest; zig-zag evens them out.
TEST(VizScenario, RingAttentionShowsTheContiguousLayoutsImbalance) {
  const auto computing = [](const viz::TraceModel& m) {
    std::vector<double> seconds;
    for (const viz::RankShare& r : viz::summarize(m).ranks) seconds.push_back(r.computing);
    return seconds;
  };
  const viz::TraceModel contiguous = viz::parse_scenario("cp:8:contiguous")->run().trace;
  const viz::TraceModel zigzag = viz::parse_scenario("cp:8")->run().trace;
  EXPECT_EQ(contiguous.source, "ring attention over 65536 positions of the tiny GPT's heads on 8 ranks, contiguous "
                               "layout, dgx-h100");
  EXPECT_EQ(zigzag.source, "ring attention over 65536 positions of the tiny GPT's heads on 8 ranks, zig-zag layout, "
                           "dgx-h100");
  const std::vector<double> uneven = computing(contiguous), even = computing(zigzag);
  ASSERT_EQ(uneven.size(), 8u);
  EXPECT_GT(uneven[7], 10 * uneven[0]);  // the last rank's queries see every key, the first's only its own
  EXPECT_NEAR(even[7], even[0], 1e-9 * even[0]);
  EXPECT_GT(contiguous.end, 1.5 * zigzag.end);
  EXPECT_THROW(viz::parse_scenario("cp:3"), std::exception);
  EXPECT_THROW(viz::parse_scenario("cp:8:sideways"), std::exception);
}

// A pipeline step: each stage's track computes M forwards and M backwards (ZB-H1:
// M input and M weight gradients) and idles for the bubble, 1F1B's (P-1)/(M+P-1)
// of the step, ZB-H1's (P-1)(F+B-W) beside M(F+B+W) (GPT-3's layers: B = 2F - W).
TEST(VizScenario, APipelineStepShowsEachStagesBubble) {
  const auto idle = [](const std::string& text) {
    const viz::TraceModel m = viz::parse_scenario(text)->run().trace;
    double computing = 0;  // shares of the run
    for (const viz::RankShare& r : viz::summarize(m).ranks) computing += r.computing;
    return 1 - computing / m.ranks;
  };
  EXPECT_EQ(viz::parse_scenario("pp:4:1f1b:8")->run().trace.source,
            "1f1b pipeline step of GPT-3 on 4 stages, 8 micro-batches of 2 x 2048 tokens, dgx-h100");
  EXPECT_NEAR(idle("pp:4:1f1b:8"), 3.0 / 11, 0.01);
  const labkit::memory::LayerFlops f =
      labkit::memory::layer_flops(labkit::memory::model_preset("gpt3-175b"), 2048, 2048);
  const double zb_idle = 3 * (f.forward + f.backward_input - f.backward_weight);
  EXPECT_NEAR(idle("pp:4:zb-h1:8"), zb_idle / (8 * f.total() + zb_idle), 0.01);
  EXPECT_THROW(viz::parse_scenario("pp:5:1f1b"), std::exception);      // 96 layers in 5 stages
  EXPECT_THROW(viz::parse_scenario("pp:4:sideways"), std::exception);
  EXPECT_THROW(viz::parse_scenario("pp:4:interleaved:6"), std::exception);  // M not a multiple of P
}

// The pipeline grid reads each compute span's cell back from its name, as the
// executors write it; anything else is no cell.
TEST(VizPipelineGrid, CellsAreReadBackFromTheExecutorsNames) {
  const labkit::Schedule s = labkit::zbv_schedule(2, 4);
  const auto forward = viz::pipeline_cell(labkit::trace_name(s, {labkit::PipeOp::forward, 3, 2}));
  ASSERT_TRUE(forward);
  EXPECT_EQ(forward->kind, viz::PipelineCell::Kind::forward);
  EXPECT_EQ(forward->microbatch, 3);
  EXPECT_TRUE(forward->later_chunk);  // chunk 2 of stage 1's two
  const auto weights = viz::pipeline_cell(labkit::trace_name(s, {labkit::PipeOp::backward_weight, 0, 1}));
  ASSERT_TRUE(weights);
  EXPECT_EQ(weights->kind, viz::PipelineCell::Kind::weights);
  EXPECT_FALSE(weights->later_chunk);
  EXPECT_EQ(viz::pipeline_cell(labkit::trace_name(s, {labkit::PipeOp::backward_input, 1, 0}))->kind,
            viz::PipelineCell::Kind::backward);
  for (const char* other : {"optimizer", "forward", "forward x", "column-parallel 2", "backward -1"})
    EXPECT_FALSE(viz::pipeline_cell(other)) << other;
  // Every compute span of a pipeline scenario is a cell: M forwards and M backwards per stage
  // (its sends, in flight while it computes, are on the stage's stream).
  const viz::TraceModel m = viz::parse_scenario("pp:4:1f1b:8")->run().trace;
  for (const viz::Track& t : m.tracks) {
    if (t.stream) continue;
    int cells = 0;
    for (const viz::Span& span : t.spans) cells += span.kind == viz::Kind::compute && viz::pipeline_cell(span.name);
    EXPECT_EQ(cells, 16) << t.name;
  }
}

// The MoE scenario trains the lab's MoE GPT: its history holds every step's
// routing of both layers, the group's assignments (k x batch x T a layer);
// unbalanced, the routers collapse and drop most of them, while the bias
// keeps the experts near their fair share. The timeline shows the tokens'
// all-to-alls between the ranks.
TEST(VizScenario, MoeTrainingRecordsEveryStepsRoutingAndItsCollapse) {
  const viz::ScenarioRun none = viz::parse_scenario("moe:4:none:20")->run();
  EXPECT_EQ(none.trace.source,
            "the MoE GPT (8 experts, top-2, none balancing) trained 20 steps on 4 ep ranks, dgx-h100");
  const viz::RoutingHistory& collapsed = none.routing;
  const viz::RoutingHistory balanced = viz::parse_scenario("moe:4:bias:20")->run().routing;
  const viz::TraceModel& m = none.trace;
  ASSERT_EQ(collapsed.steps.size(), 20u);
  ASSERT_EQ(collapsed.layers(), 2);
  ASSERT_EQ(collapsed.experts(), 8);
  for (const auto& step : collapsed.steps)
    for (const labkit::RoutingStats& layer : step)
      EXPECT_EQ(std::accumulate(layer.chosen.begin(), layer.chosen.end(), std::int64_t(0)), 2 * 8 * 32);  // k B T
  EXPECT_GT(collapsed.steps.back()[0].drop_rate(), 0.4);
  EXPECT_LT(balanced.steps.back()[0].drop_rate(), collapsed.steps.back()[0].drop_rate() / 2);

  const auto streams = std::count_if(m.tracks.begin(), m.tracks.end(), [](const viz::Track& t) { return t.stream; });
  ASSERT_EQ(m.tracks.size() - std::size_t(streams), 4u);
  int exchanges = 0;
  for (const viz::Span& span : m.tracks[0].spans) exchanges += span.name.find("all_to_allv") != std::string::npos;
  EXPECT_GE(exchanges, 2 * 2 * 4) << "at least 2 steps x 2 layers x dispatch and combine x forward and backward";
  EXPECT_TRUE(viz::parse_scenario("ring:4:1K")->run().routing.steps.empty());
  for (const char* bad : {"moe:3", "moe:4:fair", "moe:4:aux:0", "moe:4:aux:many", "moe:2:aux:4:nowhere"})
    EXPECT_THROW(viz::parse_scenario(bad), std::exception) << bad;
}
