// Lab 7, context parallelism: --cp C. The tiny GPT's causal attention over
// its sequence split across C ranks, with ring attention
// (parallel/ring_attention.h): each rank keeps the queries of its positions
// and the K/V blocks travel the ring. Run under both layouts side by side:
// contiguous chunks, where the last rank's queries see every key and the
// first rank's only its own, and zig-zag, which evens the work out.
//
//   ./labkit lab tp --ranks 4 --cp 4
//   ./labkit lab tp --ranks 8 --cp 4 --tp 2     heads over tp, positions over cp
//   ./labkit lab tp --ranks 8 --cp 8 --seq 4096 --payload-free
//   --plot FILE   the two layouts' attention matrices, coloured by rank
//
// The ranks form a mesh dp x cp x tp: each rank takes its share of the batch
// (dp), of the heads (tp) and of the positions (cp). Every rank's output and
// gradients are checked against dense causal attention on the whole; the
// work each rank did, and the K/V bytes it sent, are read from the trace.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "labkit/cli.h"
#include "labkit/error.h"
#include "labkit/lab/bench.h"
#include "labkit/lab/output.h"
#include "labkit/lab/plot.h"
#include "labkit/lab/table.h"
#include "labkit/lab/verdict.h"
#include "labkit/ops.h"
#include "labkit/parallel/equivalence.h"
#include "labkit/parallel/mesh.h"
#include "labkit/parallel/ring_attention.h"
#include "labkit/units.h"
#include "tp.h"

namespace tp_lab {

namespace {

struct LayoutRun {
  SequenceLayout layout;
  std::vector<double> forward_seconds, backward_seconds;  // each rank's attention compute, from the trace
  double elapsed = 0;                                     // forward and backward, the slowest rank's
  double kv_forward = 0, kv_backward = 0, grads_backward = 0;  // rank 0's sends, bytes
  double out_vs_dense = 0, grads_vs_dense = 0;                 // the largest over the ranks
  std::string positions;                                       // rank 0's
  int ranks = 0, tp = 0, dp = 0;                               // the mesh, as the ranks built it
};

std::vector<float> normal_floats(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = normal(gen);
  return v;
}

// Rows [first, first + rows) of a (B, T, width) buffer, and of each row the
// columns [column, column + columns) of every one of its `parts` parts
// (q, k and v: parts = 3): a rank's batch rows and heads.
std::vector<float> slice(const std::vector<float>& whole, int T, int width, int first, int rows, int parts, int column,
                         int columns) {
  std::vector<float> out;
  const int part = width / parts;
  for (std::size_t row = std::size_t(first) * T; row < std::size_t(first + rows) * T; ++row)
    for (int p = 0; p < parts; ++p) {
      const auto at = whole.begin() + row * width + p * part + column;
      out.insert(out.end(), at, at + columns);
    }
  return out;
}

std::string describe(const std::vector<PositionRange>& ranges) {
  std::string out;
  for (const PositionRange& r : ranges)
    out += fmt::format("{}{}-{}", out.empty() ? "" : ", ", r.first, r.first + r.count - 1);
  return out;
}

double busiest_over_mean(const std::vector<double>& v) {
  const double mean = std::accumulate(v.begin(), v.end(), 0.0) / double(v.size());
  return mean > 0 ? *std::max_element(v.begin(), v.end()) / mean : 1.0;
}

// Dense causal attention on the whole batch, forward and backward, from
// seeded normal q, k, v and output gradients: what every rank's rows must equal.
struct DenseAttention {
  std::vector<float> qkv, dout, out, grads;
};
DenseAttention dense_attention(const AttentionShape& s, std::uint64_t seed) {
  const std::size_t BT = std::size_t(s.B) * s.T;
  DenseAttention d{.qkv = normal_floats(BT * 3 * s.C, seed), .dout = normal_floats(BT * s.C, seed + 1),
                   .out = std::vector<float>(BT * s.C), .grads = std::vector<float>(BT * 3 * s.C)};
  std::vector<float> preatt(BT * s.NH * s.T), att(preatt.size()), dpreatt(preatt.size()), datt(att.size());
  ops::attention_forward(d.out.data(), preatt.data(), att.data(), d.qkv.data(), s.B, s.T, s.C, s.NH);
  ops::attention_backward(d.grads.data(), dpreatt.data(), datt.data(), d.dout.data(), d.qkv.data(), att.data(), s.B,
                          s.T, s.C, s.NH);
  return d;
}

// Each rank's time in its attention blocks, and rank 0's K/V and gradient
// sends, forward (before `backward_started`) and backward.
void read_trace(LayoutRun& out, const Trace& trace, double backward_started) {
  for (const TraceTrack& track : trace.tracks()) {
    double forward = 0, backward = 0;
    for (const TraceEvent& e : track.events) {
      if (e.kind == TraceEvent::Kind::compute && e.name == "ring attention forward") forward += e.end - e.start;
      if (e.kind == TraceEvent::Kind::compute && e.name == "ring attention backward") backward += e.end - e.start;
      if (track.rank != 0 || e.kind != TraceEvent::Kind::send) continue;
      if (e.tag == RingAttention::kTag)
        (e.start < backward_started ? out.kv_forward : out.kv_backward) += double(e.bytes);
      if (e.tag == RingAttention::kTag + 1) out.grads_backward += double(e.bytes);
    }
    out.forward_seconds.push_back(forward);
    out.backward_seconds.push_back(backward);
  }
}

// The attention --cp splits: all the tiny GPT's heads over the whole batch and sequence.
AttentionShape whole_attention(const Options& o, const GptConfig& config) {
  return {.B = o.batch, .T = o.seq ? o.seq : config.max_seq, .C = config.channels, .NH = config.heads};
}

LayoutRun run_layout(SequenceLayout layout, const Options& o, RunOptions run_options, const GptConfig& config) {
  const AttentionShape s = whole_attention(o, config);
  run_options.keep_trace = true;
  LayoutRun out;
  out.layout = layout;
  const bool payload = !run_options.payload_free;
  // Computed once per process, inside the ranks (the simulator's share it).
  DenseAttention dense;
  double backward_started = 0;
  const RunResult result = run(run_options, [&](Comm& comm) {
    const int tp = o.tp ? o.tp : comm.size() / o.cp;
    Mesh mesh(comm, {{"dp", comm.size() / (tp * o.cp)}, {"cp", o.cp}, {"tp", tp}});
    const MeshCoord at = mesh.coord();
    const AttentionShape mine{.B = s.B / mesh.size("dp"), .T = s.T, .C = s.C / tp, .NH = s.NH / tp};
    RingAttention ring(mesh.group("cp"), layout, mine);
    // This rank's batch rows, heads and positions of a (B, T, width) buffer of `parts` parts.
    const auto mine_of = [&](const std::vector<float>& whole, int parts) {
      const std::vector<float> rows_and_heads =
          slice(whole, s.T, parts * s.C, at["dp"] * mine.B, mine.B, parts, at["tp"] * mine.C, mine.C);
      return shard_sequence(rows_and_heads, mine.B, s.T, parts * mine.C, layout, at["cp"], o.cp);
    };
    Tensor my_qkv, my_dout, my_out, my_grads;  // on --device; none payload-free (null data)
    if (payload) {
      if (dense.qkv.empty()) dense = dense_attention(s, o.seed);
      const std::vector<float> qkv = mine_of(dense.qkv, 3), dout = mine_of(dense.dout, 1);
      const DeviceKind where = parse_device(o.device);
      my_qkv = Tensor::from_host(qkv, {qkv.size()}, where), my_dout = Tensor::from_host(dout, {dout.size()}, where);
      my_out = Tensor({dout.size()}, where), my_grads = Tensor({qkv.size()}, where);
    }
    const double start = comm.now();
    ring.forward(my_qkv.data(), my_out.data());
    if (comm.rank() == 0) backward_started = comm.now();
    ring.backward(my_dout.data(), my_grads.data());
    struct Measured {
      double elapsed, out_vs_dense = 0, grads_vs_dense = 0;
    } measured{comm.now() - start};
    if (payload) {
      measured.out_vs_dense = relative_difference(my_out.to_host(), mine_of(dense.out, 1));
      measured.grads_vs_dense = relative_difference(my_grads.to_host(), mine_of(dense.grads, 3));
    }
    const std::vector<Measured> all = comm.gather_object(measured);  // an instrument: untraced, free of virtual time
    if (comm.rank() != 0) return;
    for (const Measured& m : all) {
      out.elapsed = std::max(out.elapsed, m.elapsed);
      out.out_vs_dense = std::max(out.out_vs_dense, m.out_vs_dense);
      out.grads_vs_dense = std::max(out.grads_vs_dense, m.grads_vs_dense);
    }
    out.positions = describe(positions_of(layout, 0, o.cp, s.T));
    out.ranks = comm.size(), out.tp = tp, out.dp = mesh.size("dp");
  });
  if (result.trace) read_trace(out, *result.trace, backward_started);
  return out;
}

// The zig-zag picture: the causal attention matrix in 2cp x 2cp chunks of
// the sequence (queries down, keys across; the upper triangle is masked), each
// cell coloured by the rank whose queries it is, one panel per layout.
void plot_layouts(const std::vector<LayoutRun>& runs, int cp, const std::string& path) {
  std::ostringstream data;
  for (const LayoutRun& r : runs) {
    for (int q = 0; q < 2 * cp; ++q) {
      const int owner = r.layout == SequenceLayout::contiguous ? q / 2 : std::min(q, 2 * cp - 1 - q);
      for (int k = 0; k <= q; ++k) data << k << ' ' << q << ' ' << owner << '\n';
    }
    data << "\n\n";  // a gnuplot index per layout
  }
  // One colour a rank (repeating past eight): a palette of exactly cp colours over the ranks.
  const char* colours[] = {"#1b9e77", "#d95f02", "#7570b3", "#e7298a", "#66a61e", "#e6ab02", "#a6761d", "#666666"};
  std::string palette;
  for (int r = 0; r < std::max(cp, 2); ++r) palette += fmt::format("{}{} '{}'", r ? ", " : "", r, colours[r % 8]);
  std::string panels;
  for (std::size_t i = 0; i < runs.size(); ++i)
    panels += fmt::format("set title '{}: the busiest rank does {:.2f}x the mean'\n"
                          "plot $data index {} using 1:2:(0.5):(0.5):3 with boxxyerror fs solid 0.9 border rgb "
                          "'#ffffff' lc palette notitle\n",
                          name_of(runs[i].layout), busiest_over_mean(runs[i].forward_seconds), i);
  lab::plot(path, {.width = 1000, .height = 500}, data.str(), fmt::format(
      "set multiplot layout 1,2 title 'causal attention over {} ranks, in 2 x {} chunks of the sequence: the rank "
      "that computes each block (upper triangle masked)'\n"
      "set size ratio -1\nset xrange [-0.5:{}]\nset yrange [{}:-0.5]\nset xlabel 'key chunk'\n"
      "set ylabel 'query chunk'\nset xtics 1\nset ytics 1\nset cbrange [-0.5:{}]\nset cbtics 1\n"
      "set cblabel 'rank'\nset palette maxcolors {}\nset palette defined ({})\n{}unset multiplot\n",
      cp, cp, 2 * cp - 0.5, 2 * cp - 0.5, cp - 0.5, std::max(cp, 2), palette, panels));
}

// One column list for the printed rows and the JSON; the work per rank is
// printed as its range and written whole, forward and backward. Rank 0's
// positions at T, zig-zag's two ranges at most, fit their column.
lab::Table layouts_table(int T) {
  using lab::Align;
  const int positions = std::max(20, int(fmt::format("0-{0}, {0}-{0}", T - 1).size()));
  return lab::Table({{.header = "layout", .key = "layout", .width = 11, .align = Align::left},
                     {.header = "rank 0 holds", .key = "rank0_positions", .width = positions},
                     {.header = "fwd work/rank min..max", .key = "forward_seconds_per_rank", .width = 22},
                     {.header = "busiest", .key = "busiest_over_mean", .width = 9},
                     {.header = "formula", .key = "busiest_formula", .width = 8},
                     {.header = "T_attn", .key = "t_attention", .width = 10},
                     {.header = "K/V fwd", .key = "kv_forward_bytes", .width = 10},
                     {.header = "formula", .key = "kv_forward_formula", .width = 10},
                     {.header = "K/V+dK/dV bwd", .key = "backward_bytes", .width = 11},
                     {.header = "formula", .key = "backward_formula", .width = 10},
                     {.header = "out", .key = "out_vs_dense", .width = 8},
                     {.header = "grads", .key = "grads_vs_dense", .width = 8},
                     {.key = "backward_seconds_per_rank"}});
}

// A layout's difference from dense attention, or "-" with null where the run was payload-free.
lab::Cell versus_dense(double difference, bool payload) {
  return payload ? lab::number(difference, "{:.1e}") : lab::Cell{nlohmann::json(), "-"};
}

}  // namespace

void add_context_parallel_options(CLI::App& app, Options& o) {
  app.add_option("--cp", o.cp, "context parallelism: the tiny GPT's attention over this many shards of the sequence "
                              "(ring attention), contiguous and zig-zag side by side")
      ->check(cli::at_least(1));
  app.add_option("--tp", o.tp, "with --cp: ranks that split the heads (default: --ranks over --cp)")
      ->check(cli::at_least(1));
}

int context_parallel(const Options& o, const RunOptions& run_options, const GptConfig& config) {
  const AttentionShape s = whole_attention(o, config);
  const bool payload = !run_options.payload_free;
  using Clock = std::chrono::steady_clock;
  const Clock::time_point started = Clock::now();
  std::vector<LayoutRun> runs;
  lab::TracePerRow traces(run_options);
  for (const SequenceLayout layout : {SequenceLayout::contiguous, SequenceLayout::zigzag}) {
    if (o.bench) fmt::print("running the {} layout ...\n", name_of(layout)), std::fflush(stdout);
    runs.push_back(run_layout(layout, o, traces.row(name_of(layout)), config));
  }
  const double wall = std::chrono::duration<double>(Clock::now() - started).count();
  if (runs[0].forward_seconds.empty()) return 0;  // a process of mpirun that ran another rank than 0
  const int tp = runs[0].tp, dp = runs[0].dp;
  fmt::print("tp --cp {}: ring attention over the tiny GPT's causal attention ({} heads of {} channels; batch {} x {} "
             "positions), {} ranks as dp {} x cp {} x tp {}: each rank its share of the batch, its heads and its "
             "positions; forward and backward{}\n",
             o.cp, s.NH, s.C / s.NH, s.B, s.T, runs[0].ranks, dp, o.cp, tp,
             payload ? ", against dense attention" : ", payload-free (sizes only: nothing to compare)");

  // A rank's K/V block: 2 b (s/cp) (h/tp) floats. Forward passes it cp - 1
  // times; backward passes it cp - 1 times and its gradients cp times (one
  // ring of one rank passes nothing: its block and gradients are home).
  const double block = 2.0 * (s.B / dp) * (s.T / o.cp) * (s.C / tp) * sizeof(float);
  const double forward_formula = (o.cp - 1) * block, backward_formula = o.cp == 1 ? 0 : (2 * o.cp - 1) * block;
  const double contiguous_formula = (2.0 * o.cp - 1) / o.cp;
  lab::Table table = layouts_table(s.T);
  table.print_header();
  bool ok = true;
  for (const LayoutRun& r : runs) {
    const auto [least, most] = std::minmax_element(r.forward_seconds.begin(), r.forward_seconds.end());
    const double formula = r.layout == SequenceLayout::contiguous ? contiguous_formula : 1.0;
    const double backward = r.kv_backward + r.grads_backward;
    const auto bytes = [](double b) { return lab::Cell{b, format_bytes(std::uint64_t(b))}; };
    table.add({std::string(name_of(r.layout)), r.positions,
               {r.forward_seconds, format_seconds(*least) + " .. " + format_seconds(*most)},
               lab::number(busiest_over_mean(r.forward_seconds), "{:.2f}"), lab::number(formula, "{:.2f}"),
               lab::seconds(r.elapsed), bytes(r.kv_forward), bytes(forward_formula), bytes(backward),
               bytes(backward_formula), versus_dense(r.out_vs_dense, payload),
               versus_dense(r.grads_vs_dense, payload), {r.backward_seconds, ""}});
    ok = ok && r.kv_forward == forward_formula && backward == backward_formula &&
         (!payload || (r.out_vs_dense <= 1e-5 && r.grads_vs_dense <= 1e-5));
  }
  fmt::print("(fwd work/rank: each rank's time in its attention blocks, from the trace; busiest: the busiest rank's "
             "over the mean, the wait every step of the ring pays; formula: contiguous (2cp - 1)/cp, the last rank's "
             "cp - 1/2 chunks of pairs against the mean's cp/2, zig-zag 1; T_attn: forward and backward, the "
             "slowest rank, paced by the ring's messages or, where the blocks outlast them (a long --seq), by the "
             "busiest rank; K/V fwd: rank 0's ring messages, (cp - 1) x 2 b (s/cp) (h/tp) x 4 bytes; bwd: K/V again "
             "and their gradients, which take one more hop home, (2cp - 1) x the block; out, grads: against dense "
             "causal attention, relative, 1e-5 passes)\n");
  traces.print("layout");
  const bool has_target = o.bench && o.cp == 8 && s.T == 4096 && !payload;  // ./labkit bench cp's first run
  if (o.bench)
    fmt::print("simulated both layouts in {} wall{}\n", format_seconds(wall),
               has_target ? " (target for cp 8 at s = 4096 payload-free: < 5 s)" : "");
  lab::Verdict verdict;
  verdict.require(ok, "a layout's output or gradients past 1e-5 of dense attention, or bytes off the formula");
  const int status = verdict.print(
      fmt::format("{}both layouts send K/V bytes = formula",
                  payload ? "equal to dense attention: every rank's output and gradients within 1e-05 under both "
                            "layouts; " : ""));
  nlohmann::json report = {{"cp", o.cp},          {"tp", tp},
                            {"dp", dp},            {"seq", s.T},
                            {"batch", s.B},        {"payload_free", !payload},
                            {"layouts", table.json()}, {"wall_seconds", wall},
                            {"verdict", verdict.json()}};
  if (has_target) report["targets"] = {{"wall_seconds", lab::target(wall, 5)}};
  lab::write_json(o.json, report);
  if (!o.plot.empty()) plot_layouts(runs, o.cp, o.plot);
  return status;
}

}  // namespace tp_lab
