// --step: ring allreduce on a few ranks, one step at a time: reduce-scatter,
// then all-gather, P - 1 steps each (Patarasuk and Yuan 2009, "Bandwidth optimal
// all-reduce algorithms for clusters of workstations"), drawn as chapter 2 draws
// 4 GPUs with their data split into 4 chunks. Nothing is
// drawn by hand: the simulator is deterministic, so the lab replays the same run
// and stops it at the end of each step to look at every rank's buffer.
#include <bit>
#include <map>

#include <fmt/format.h>

#include "labkit/algorithms.h"
#include "labkit/error.h"
#include "labkit/lab/table.h"
#include "labkit/units.h"
#include "ring_allreduce.h"

using namespace labkit;

namespace ring_lab {

namespace {
// Rank r contributes 1 << r to every chunk, so a chunk's sum is the set of ranks
// whose data it holds: 0b0110 is "1+2", all bits set is the full sum.
std::string contributors(std::int64_t bits, int p) {
  if (bits == (std::int64_t(1) << p) - 1) return "Σ";
  std::string out;
  for (int r = 0; r < p; ++r) {
    if (!(bits >> r & 1)) continue;
    if (!out.empty()) out += '+';
    out += std::to_string(r);
  }
  return out;
}

using State = std::vector<std::vector<std::int64_t>>;  // [rank][chunk]

// A row per rank, a column per chunk, `width` wide or as wide as its header
// (the last as wide as its text).
lab::Table grid(int p, int width) {
  std::vector<lab::Column> columns = {{.header = " ", .width = 6, .align = lab::Align::left}};
  for (int c = 0; c < p; ++c) {
    std::string header = fmt::format("chunk {}", c);
    const int wide = std::max(width, int(header.size()));
    columns.push_back({.header = std::move(header), .width = c + 1 < p ? wide : 0, .align = lab::Align::left, .gap = 2});
  }
  return lab::Table(std::move(columns), {.rows = "  "});
}

void print_state(const lab::Table& grid, const State& s) {
  const int p = int(s.size());
  for (int r = 0; r < p; ++r) {
    std::vector<lab::Cell> row = {fmt::format("rank {}", r)};
    for (int c = 0; c < p; ++c) row.push_back(contributors(s[r][c], p));
    grid.print_row(std::move(row));
  }
}
}  // namespace

int walk_ring(const RunOptions& base) {
  const int p = base.ranks;
  if (p < 2 || p > 8)
    throw Error(fmt::format("--ranks {}: --step draws every rank's chunks, from 2 to 8 ranks to fit a screen (--scale "
                            "walks a ring of thousands)", p));
  State buffers(p);
  auto rank_fn = [&](Comm& comm) {
    buffers[comm.rank()].assign(p, std::int64_t(1) << comm.rank());  // one element per chunk
    ring_all_reduce(comm, view_of(buffers[comm.rank()]), ReduceOp::sum);
  };

  // One full run, traced: a step ends when rank 0's receive of that step completes.
  RunOptions full = base;
  full.keep_trace = true;
  const RunResult whole = run(full, rank_fn);
  std::vector<double> step_ends;
  for (const TraceEvent& e : whole.trace->tracks()[0].events)
    if (e.kind == TraceEvent::Kind::recv) step_ends.push_back(e.end);

  const lab::Table table = grid(p, std::max(4, int(2 * p - 1)));
  fmt::print("ring allreduce on {} ranks: {} chunks per buffer; an entry lists whose data the chunk holds "
             "(Σ = everyone's)\n", p, p);
  table.print_header();
  fmt::print("start\n");
  State before(p);
  for (int r = 0; r < p; ++r) before[r].assign(p, std::int64_t(1) << r);
  print_state(table, before);

  // A step's phase, from what was sent: partial sums (reduce-scatter) or whole ones (all-gather).
  const std::int64_t everyone = (std::int64_t(1) << p) - 1;
  std::map<std::string, int> phase_steps;
  int chunks_sent = 0;
  for (std::size_t k = 0; k < step_ends.size(); ++k) {
    RunOptions partial = base;
    partial.stop_at = step_ends[k];
    partial.trace.clear();  // --trace records the full run above
    run(partial, rank_fn);
    // What rank r sent shows up as the chunk that changed at rank r+1.
    std::string sends;
    int whole = 0, sent = 0;
    for (int r = 0; r < p; ++r) {
      const int to = (r + 1) % p;
      for (int c = 0; c < p; ++c)
        if (buffers[to][c] != before[to][c]) {
          sends += fmt::format("{}{}→{}: chunk {}", sends.empty() ? "" : ", ", r, to, c);
          ++sent;
          whole += before[r][c] == everyone;
        }
    }
    chunks_sent += sent;
    const std::string phase = whole == 0 ? "reduce-scatter" : whole == sent ? "all-gather" : "a mixed";
    fmt::print("{} step {}/{} at {}  ({})\n", phase, ++phase_steps[phase], p - 1, format_seconds(step_ends[k]),
               sends);
    print_state(table, buffers);
    before = buffers;
  }
  for (const std::vector<std::int64_t>& chunks : buffers)
    for (std::int64_t chunk : chunks)
      if (chunk != everyone) {
        fmt::print("NOT ALL-REDUCED: a chunk is not Σ on every rank (./labkit grade ring_allreduce says where)\n");
        return 1;
      }
  if (chunks_sent != 2 * (p - 1) * p) {
    fmt::print("all-reduced, but the ranks sent {} chunks of n/P where the ring sends 2(P-1) = {} a rank\n",
               chunks_sent, 2 * (p - 1));
    return 1;
  }
  fmt::print("each rank sent 2(P-1) = {} chunks of n/P: 2(P-1)/P = {:.2f} of its buffer\n", 2 * (p - 1),
             2.0 * (p - 1) / p);
  return 0;
}

}  // namespace ring_lab
