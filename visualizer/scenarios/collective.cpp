#include "scenarios/collective.h"

#include <algorithm>
#include <bit>
#include <vector>

#include <fmt/format.h>
#include <imgui.h>

#include "labkit/algorithms.h"
#include "labkit/error.h"
#include "labkit/run.h"
#include "labkit/units.h"
#include "scenarios/scenarios.h"

namespace viz {

namespace {
// Every rank's buffer before the collective and after every delivery
// (ChunkHistory): one traced run finds the delivery times, then a run stopped
// at each one reads the buffers. The backend's own collective delivers no
// messages, and moves its data when the ranks meet, not when its time is
// spent: its buffers are shown as they start until it ends, then whole.
ChunkHistory chunk_history(const CollectiveScenario& s) {
  const labkit::Collective op = s.collective;
  const bool shown = op == labkit::Collective::all_reduce || op == labkit::Collective::all_gather ||
                     op == labkit::Collective::broadcast;
  if (!shown || s.ranks > 16 || s.bytes > (64u << 20)) return {};
  const int p = s.ranks;
  const std::size_t count = std::max<std::size_t>(s.bytes / 8 / p, 1) * p;  // i64 elements, P whole blocks
  std::vector<std::vector<std::int64_t>> buffers(p);
  const auto bit_of = [](int r) { return std::int64_t(1) << r; };  // rank r's data
  // Rank r's buffer as the collective starts: its bit where it has data.
  const auto fill = [&](int r) {
    if (op == labkit::Collective::all_gather) buffers[r].assign(count, 0);
    else if (op == labkit::Collective::broadcast) buffers[r].assign(count, r == 0 ? bit_of(r) : 0);
    else buffers[r].assign(count, bit_of(r));
  };
  auto rank_fn = [&](labkit::Comm& comm) {
    const int r = comm.rank();
    fill(r);
    std::vector<std::int64_t>& buf = buffers[r];
    if (op == labkit::Collective::all_gather) {
      std::vector<std::int64_t> block(count / p, bit_of(r));
      comm.all_gather(labkit::view_of(block), labkit::view_of(buf));
    } else if (op == labkit::Collective::broadcast) {
      comm.broadcast(labkit::view_of(buf), 0);
    } else {
      comm.all_reduce(labkit::view_of(buf), labkit::ReduceOp::sum);
    }
  };
  labkit::RunOptions o;
  o.ranks = p;
  o.topology = s.topology;
  o.algos = {fmt::format("{}={}", labkit::name_of(op), s.algorithm)};
  o.keep_trace = true;
  const labkit::RunResult whole = labkit::run(o, rank_fn);

  ChunkHistory h;
  h.everyone = (std::uint64_t(1) << p) - 1;
  h.times = {0};
  for (const labkit::TraceTrack& t : whole.trace->tracks())
    for (const labkit::TraceEvent& e : t.events)
      if (e.kind == labkit::TraceEvent::Kind::recv) h.times.push_back(e.end);
  if (h.times.size() == 1) h.times.push_back(whole.elapsed);  // the backend's own: no messages
  std::sort(h.times.begin(), h.times.end());
  h.times.erase(std::unique(h.times.begin(), h.times.end()), h.times.end());
  if (h.times.size() > 256) return {};
  o.keep_trace = false;
  for (double t : h.times) {
    if (t == 0) {
      for (int r = 0; r < p; ++r) fill(r);
    } else {
      o.stop_at = t;
      labkit::run(o, rank_fn);
    }
    auto& state = h.states.emplace_back(p, std::vector<std::uint64_t>(p));
    for (int r = 0; r < p; ++r)
      for (int c = 0; c < p; ++c)  // the first element of chunk c stands for the chunk
        state[r][c] = std::uint64_t(buffers[r][labkit::chunk_range(count, p, c).offset]);
  }
  return h;
}
}  // namespace

std::unique_ptr<Scenario> parse_collective_scenario(const ScenarioText& t) {
  auto s = std::make_unique<CollectiveScenario>();
  s->algorithm = t.fields[0];
  s->bytes = labkit::parse_bytes(t.fields[2]);
  if (t.fields.size() > 3) s->collective = labkit::parse_collective(t.fields[3]);
  if (s->collective != labkit::Collective::barrier && s->bytes / 4 < std::size_t(t.ranks))  // run(): f32 elements
    throw labkit::Error(fmt::format("'{}': {} holds no 4-byte element for each of {} ranks (at least {} B)", t.text,
                                    t.fields[2], t.ranks, 4 * t.ranks));
  s->topology = t.field_or(4, s->topology);
  labkit::check_algorithm(s->collective, s->algorithm);
  return s;
}

// Payload-free: each rank's sizes only, so any size runs at once.
ScenarioRun CollectiveScenario::run() const {
  labkit::RunOptions o = run_options();
  o.algos = {fmt::format("{}={}", labkit::name_of(collective), algorithm)};
  const labkit::Collective op = collective;
  const std::size_t count = bytes / 4;
  const labkit::RunResult r = labkit::run(o, [&](labkit::Comm& comm) {
    const std::size_t block = count / comm.size();
    const labkit::View whole = labkit::meta_view(block * comm.size(), labkit::DType::f32);
    const labkit::View part = labkit::meta_view(block, labkit::DType::f32);
    switch (op) {
      case labkit::Collective::all_gather: comm.all_gather(part, whole); break;
      case labkit::Collective::reduce_scatter: comm.reduce_scatter(whole, part, labkit::ReduceOp::sum); break;
      case labkit::Collective::all_to_all: comm.all_to_all(whole, whole); break;
      case labkit::Collective::all_to_allv: {
        const std::vector<std::size_t> blocks(comm.size(), block);
        comm.all_to_allv(whole, blocks, whole, blocks);
        break;
      }
      case labkit::Collective::gather: comm.gather(part, whole, 0); break;
      case labkit::Collective::scatter: comm.scatter(whole, part, 0); break;
      default: comm.run({op, {}, whole, labkit::ReduceOp::sum, 0});
    }
  });
  return {from_trace(*r.trace, fmt::format("{} {} on {} ranks, {}, {}", algorithm, labkit::name_of(collective), ranks,
                                           labkit::format_bytes(bytes), topology)),
          chunk_history(*this)};
}

void CollectiveScenario::draw_fields() {
  std::vector<std::string> collectives, algorithms = {"native"};
  for (labkit::Collective c : labkit::kCollectives)
    if (c != labkit::Collective::barrier) collectives.emplace_back(labkit::name_of(c));
  std::string name(labkit::name_of(collective));
  if (combo("collective", name, collectives)) {
    collective = labkit::parse_collective(name);
    algorithm = "native";
  }
  for (const labkit::Algorithm& a : labkit::all_algorithms())
    if (a.op == collective) algorithms.emplace_back(a.name);
  combo("algorithm", algorithm, algorithms);
  draw_ranks();
  int exponent = std::bit_width(bytes) - 1;  // sizes in powers of two
  if (ImGui::SliderInt("size", &exponent, 10, 30, labkit::format_bytes(bytes).c_str())) bytes = 1ull << exponent;
  draw_topology();
}

}  // namespace viz
