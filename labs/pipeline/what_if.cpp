// --what-if MODEL: the schedule at a real model's scale, payload-free. The
// same actions run on the simulator (parallel/pipeline_executor.h's
// play_payload_free): each chunk's layers take their FLOPs' time on the
// topology's GPU, each message carries b x s x h bf16 values and nothing
// else. The bubble, measured from the stages' timelines, beside its formula;
// what crosses between the stages beside the long guide's formula.
//
// --reading: the long guide's example (section 10.6, book/99-references.md:
// P = 8, M = 32, a batch of 512 sequences of 2048 tokens, h = 8192), its
// efficiency and P2P bytes by its formula, then executed with a model of that
// width (llama2-70b).
#include <cstdio>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "labkit/error.h"
#include "labkit/lab/option_checks.h"
#include "labkit/lab/output.h"
#include "labkit/lab/plot.h"
#include "labkit/lab/table.h"
#include "labkit/lab/what_if.h"
#include "labkit/memory.h"
#include "labkit/parallel/pipeline_executor.h"
#include "labkit/topology.h"
#include "labkit/units.h"
#include "pipeline.h"

namespace pipeline_lab {

namespace {

// --sweep's forms: the bubble against the micro-batches or the stages.
cli::Sweep parse_sweep(const std::string& text) {
  return cli::parse_sweep(text, {{"microbatches", 1, 512, true, ""}, {"stages", 1, 64, true, ""}});
}

// The long guide's count (section 10.6): each micro-batch sends its b x s x h
// activation forward and its gradient back across each of the P - 1
// boundaries. A chunked schedule crosses a boundary at every change of stage
// along its chunks: interleaved's PV - 1, ZB-V's 2(P - 1) (its turn stays on one stage).
double p2p_bytes(const Schedule& s, double message_bytes) {
  int crossings = 0;
  for (int c = 0; c + 1 < s.chunks(); ++c)
    crossings += s.stage_of_chunk[std::size_t(c)] != s.stage_of_chunk[std::size_t(c + 1)];
  return 2.0 * crossings * s.microbatches * message_bytes;
}

// A chunk's FLOPs for the model cut into `chunks` chunks, micro-batches of b sequences of seq.
PipeTimes chunk_flops(const memory::Architecture& arch, int chunks, double b, double seq) {
  const int layers = arch.layers / chunks;
  const memory::LayerFlops layer = memory::layer_flops(arch, b * seq, seq);
  return {layers * layer.forward, layers * layer.backward_input, layers * layer.backward_weight, 0};
}

// A chunk's FLOPs as seconds on the topology's GPU at --efficiency.
PipeTimes chunk_seconds(const PipeTimes& flops, const RunOptions& run_options) {
  const double per_second = find_topology(run_options.topology).device.peak_flops * run_options.efficiency;
  return {flops.forward / per_second, flops.backward_input / per_second, flops.backward_weight / per_second, 0};
}

struct Played {
  double bubble = 0, span = 0, sent = 0;
  double busiest = 0;  // the most any stage computed
  std::vector<std::vector<ScheduleRun::Slot>> slots;  // by stage (a run's step starts at time 0)
};

Played play(const Schedule& schedule, RunOptions run_options, const PipeTimes& flops, std::size_t message_bytes) {
  run_options.payload_free = true;
  run_options.ranks = schedule.stages;
  Played out;
  run(run_options, [&](Comm& comm) {
    const PipelineStep step = play_payload_free(comm, schedule, flops, message_bytes);
    struct Span {
      double start, end, sent_bytes;
    };
    // Instruments: untraced, free of virtual time.
    const auto spans = comm.gather_object(Span{step.start, step.end, double(step.sent_bytes)});
    const auto slots = comm.gather_objects(step.slots);
    if (comm.rank() != 0) return;
    std::vector<StageRun> stages;
    for (std::size_t r = 0; r < spans.size(); ++r) {
      stages.push_back({slots[r], spans[r].start, spans[r].end});
      out.sent += spans[r].sent_bytes;
      double busy = 0;
      for (const ScheduleRun::Slot& slot : stages.back().slots) busy += slot.end - slot.start;
      out.busiest = std::max(out.busiest, busy);
    }
    out.span = step_span(stages), out.bubble = measured_bubble(stages);
    for (const StageRun& stage : stages) out.slots.push_back(stage.slots);
  });
  return out;
}

}  // namespace

void add_what_if_options(CLI::App& app, Options& o) {
  lab::add_what_if(app, o.what_if, "a model preset (gpt3-175b, ...): the schedule at its scale, payload-free, its "
                                   "layers cut into the chunks");
  lab::add_what_if_seq(app, o.seq, "with --what-if: the sequence length (default: the model's learned context)");
  cli::add_parsed(app, "--sweep", o.sweep, parse_sweep,
      "with --what-if: microbatches=A..B or stages=A..B, doubling: each schedule's bubble, measured (with --plot "
      "drawn)");
  app.add_flag("--reading", o.reading, "the reading's example: P = 8, M = 32, its efficiency and P2P bytes, "
                                       "computed and executed");
}

namespace {

// The step's one row; --json adds the topologies' table to it.
lab::Table what_if_table() {
  std::vector<lab::Column> columns = step_columns("backward_input", "backward_weight");
  columns.insert(columns.end(), {{.header = "P2P/step", .key = "p2p_bytes", .width = 11},
                                 {.header = "formula", .key = "p2p_formula", .width = 11},
                                 {.key = "model"}});
  return lab::Table(std::move(columns));
}

// The activations between stages on each topology preset: stage s and s + 1
// on one node (its NVLink or PCIe) or, past a node's GPUs, across the network.
nlohmann::json print_topologies(const Schedule& schedule, const RunOptions& run_options, const PipeTimes& flops,
                                std::size_t message) {
  fmt::print("each topology: a message of b s h x 2 = {} between neighbouring stages, and the step\n",
             format_bytes(message));
  lab::Table table({{.header = "topology", .key = "topology", .width = 10, .align = lab::Align::left},
                    {.header = "inside a node", .key = "intra", .width = 14},
                    {.header = "across nodes", .key = "inter", .width = 14},
                    {.header = "step", .key = "t_step", .width = 9},
                    {.header = "bubble", .key = "bubble", .width = 7}});
  table.print_header();
  for (const std::string_view name : topology_presets()) {
    const Topology t = find_topology(name);
    RunOptions on = run_options;
    on.topology = name;
    on.trace.clear();  // --trace holds the step above
    const Played p = play(schedule, on, flops, message);
    const auto time = [&](const Link& l) { return l.alpha + double(message) / l.bandwidth; };
    const bool crosses = schedule.stages > t.devices_per_node;
    table.add({std::string(name), lab::seconds(time(t.intra)),
               crosses ? lab::seconds(time(t.inter)) : lab::Cell{nullptr, "(none)"}, lab::seconds(p.span),
               lab::percent(p.bubble)});
  }
  return table.json();
}

// --straggler: the step against the same pipeline without it.
nlohmann::json print_straggler(const Schedule& schedule, const RunOptions& run_options, const PipeTimes& flops,
                               std::size_t message, const Played& r) {
  RunOptions even = run_options;
  even.stragglers.clear();
  even.trace.clear();  // --trace holds the step with the straggler
  const Played without = play(schedule, even, flops, message);
  fmt::print("with --straggler: the step takes {}, {:.2f}x the even pipeline's {}; the slowest stage computes for {} "
             "of it and every other stage waits on it: a pipeline runs at its slowest stage's pace\n",
             format_seconds(r.span), r.span / without.span, format_seconds(without.span), format_seconds(r.busiest));
  return {{"t_step", r.span}, {"even_t_step", without.span}, {"slowdown", r.span / without.span},
          {"slowest_stage_compute", r.busiest}};
}

// The schedule at the model's scale: its row, each topology's step, the
// straggler's cost; the row's JSON with the rest in it.
nlohmann::json play_what_if(const Options& o, const RunOptions& run_options, const Schedule& given) {
  const memory::Architecture arch = memory::model_preset(o.what_if);
  const double seq = memory::what_if_seq(arch, o.seq), b = double(o.batch_or_default()) / given.microbatches;
  const PipeTimes flops = chunk_flops(arch, given.chunks(), b, seq);
  const std::size_t message = std::size_t(b * seq * arch.hidden * 2);
  const PipeTimes seconds = chunk_seconds(flops, run_options);
  // Made again for these times: ZB-V places its weight gradients by them.
  const Schedule schedule = given.name == "zbv" ? zbv_schedule(given.stages, given.microbatches, seconds) : given;
  fmt::print("pipeline --what-if {}: {} layers of h = {}, {} per chunk, micro-batches of b = {:g} x s = {:g}, bf16, "
             "compute at {:.0f}% of the GPU's peak on {}, payload-free ...\n", o.what_if, arch.layers, arch.hidden,
             arch.layers / given.chunks(), b, seq, 100 * run_options.efficiency, run_options.topology);
  std::fflush(stdout);
  const Played r = play(schedule, run_options, flops, message);
  const double p2p_formula = p2p_bytes(schedule, double(message));
  const bool split = schedule.splits_backward();
  lab::Table table = what_if_table();
  table.print_header();
  // Unsplit, the backward column prints the whole backward; the JSON keeps its two parts.
  table.add({schedule.name, schedule.stages, schedule.microbatches, schedule.virtual_stages,
             lab::seconds(seconds.forward),
             {seconds.backward_input,
              format_seconds(split ? seconds.backward_input : seconds.backward_input + seconds.backward_weight)},
             {seconds.backward_weight, split ? format_seconds(seconds.backward_weight) : "-"}, lab::seconds(r.span),
             lab::percent(r.bubble), lab::percent(bubble_formula(schedule, seconds)),
             lab::percent(validate(schedule, seconds).bubble),
             {r.sent, format_bytes(std::uint64_t(r.sent))}, {p2p_formula, format_bytes(std::uint64_t(p2p_formula))},
             o.what_if});
  fmt::print("(a chunk's times from its FLOPs, 2 per weight a token meets and 4 s h for attention, backward twice "
             "forward{}; the last stage's head is left out; P2P/step: what the stages sent, measured; formula: the "
             "reading's 2 b s h x 2 bytes per micro-batch and boundary, over the {} boundaries the chunks cross)\n",
             split ? ", the weights' part 2 per weight" : "",
             p2p_formula / (2.0 * schedule.microbatches * double(message)));
  nlohmann::json report = table.json()[0];
  report["seq"] = seq;
  report["micro_batch"] = b;
  report["message_bytes"] = message;
  report["topologies"] = print_topologies(schedule, run_options, flops, message);
  if (!run_options.stragglers.empty())
    report["straggler"] = print_straggler(schedule, run_options, flops, message, r);
  if (!o.plot.empty()) {
    plot_grid({{fmt::format("{} on {}: {} (bubble {:.1f}%), payload-free", schedule.name, o.what_if,
                            format_seconds(r.span), 100 * r.bubble),
                r.slots, schedule.microbatches}},
              "s", o.plot);
  }
  return report;
}

}  // namespace

int what_if(const Options& o, const RunOptions& run_options, const Schedule& schedule) {
  lab::write_json(o.json, play_what_if(o, run_options, schedule));
  return 0;
}

namespace {

// The sweep's rows as gnuplot's data, a row per value, a column per schedule
// (NaN where it cannot run) and the formula, in percent; drawn to --plot.
void plot_sweep(const Options& o, const nlohmann::json& rows, const std::vector<std::string_view>& names,
                const std::string& over_key) {
  std::string data;
  for (const nlohmann::json& row : rows) {
    data += fmt::format("{}", row[over_key].get<int>());
    for (const std::string_view name : names) {
      const nlohmann::json& bubble = row[std::string(name)];
      data += bubble.is_null() ? " NaN" : fmt::format(" {}", 100 * bubble.get<double>());
    }
    data += fmt::format(" {}\n", 100 * row["formula"].get<double>());
  }
  std::string plot = "plot $data using 1:7 with lines dt 2 lc rgb '#888888' title '(P-1)/(M+P-1)'";
  for (std::size_t i = 0; i < names.size(); ++i)
    plot += fmt::format(", '' using 1:{} with linespoints lw 2 title '{}'", i + 2, names[i]);
  lab::plot(o.plot, {.width = 800, .height = 450}, data,
            fmt::format("set logscale x 2\nset xlabel '{}'\nset ylabel 'bubble (%)'\n"
                        "set title '{}: the bubble, measured payload-free'\nset key top right\n{}\n",
                        over_key == "microbatches" ? "micro-batches M" : "stages P", o.what_if, plot));
}

}  // namespace

int sweep(const Options& o, const RunOptions& run_options) {
  const memory::Architecture arch = memory::model_preset(o.what_if);
  const double seq = memory::what_if_seq(arch, o.seq);
  const bool over_m = o.sweep.over == "microbatches";
  const std::vector<std::string_view> names = {"gpipe", "1f1b", "interleaved", "zb-h1", "zbv"};
  fmt::print("pipeline --what-if {} --sweep {}={:g}..{:g}: each schedule's bubble, measured payload-free, {} = {}, "
             "micro-batches of one {:g}-token sequence ...\n", o.what_if, o.sweep.over, o.sweep.from, o.sweep.to,
             over_m ? "P" : "M", over_m ? o.stages : o.microbatches, seq);
  std::fflush(stdout);
  std::vector<lab::Column> columns = {{.header = over_m ? "M" : "P", .key = o.sweep.over, .width = 6}};
  for (const std::string_view name : names)
    columns.push_back({.header = std::string(name), .key = std::string(name), .width = 12});
  columns.push_back({.header = "(P-1)/(M+P-1)", .key = "formula", .width = 14});
  lab::Table table(std::move(columns));
  table.print_header();
  for (int v = int(o.sweep.from); v <= o.sweep.to; v *= 2) {
    const int P = over_m ? o.stages : v, M = over_m ? v : o.microbatches;
    std::vector<lab::Cell> row = {v};
    for (const std::string_view name : names) {
      const int V = default_virtual(name);
      if (!schedule_fits(name, arch.layers, P, M)) {
        row.push_back({nullptr, "-"});
        continue;
      }
      const PipeTimes flops = chunk_flops(arch, P * V, 1, seq);
      const Schedule schedule = make_schedule(name, P, M, V, chunk_seconds(flops, run_options));
      row.push_back(lab::percent(play(schedule, run_options, flops, std::size_t(seq * arch.hidden * 2)).bubble));
    }
    row.push_back(lab::percent(double(P - 1) / (M + P - 1)));
    table.add(std::move(row));
  }
  fmt::print("(-: the schedule cannot cut the model's {} layers into P or 2P equal chunks, or interleaved's M is no "
             "multiple of P)\n", arch.layers);
  if (!o.plot.empty()) plot_sweep(o, table.json(), names, o.sweep.over);
  lab::write_json(o.json, {{"model", o.what_if}, {"over", o.sweep.over},
                           {over_m ? "stages" : "microbatches", over_m ? o.stages : o.microbatches}, {"seq", seq},
                           {"rows", table.json()}});
  return 0;
}

int readings_example(const RunOptions& run_options, const std::string& json) {
  const int P = 8, M = 32;
  const double batch = 512, seq = 2048, h = 8192, b = batch / M;
  const double bubble = (P - 1.0) / (M + P - 1), message = b * seq * h * 2;
  const double total = 2 * message * (P - 1) * M;
  fmt::print("the reading's example (section 10.6): P = {}, M = {}, batch {:g} x s = {:g}, h = {:g}, bf16: bubble "
             "(P-1)/(M+P-1) = {:.1f}%, efficiency {:.1f}% (it prints ~82%); P2P per step 2 x b s h x 2 bytes x (P-1) "
             "x M = {:.1f} GB ({}), {} per message\n", P, M, batch, seq, h, 100 * bubble, 100 * (1 - bubble),
             total / 1e9, format_bytes(std::uint64_t(total)), format_bytes(std::uint64_t(message)));
  Options o;
  o.what_if = "llama2-70b";  // h = 8192, 80 layers: 10 a stage
  o.stages = P, o.microbatches = M, o.batch = int(batch), o.seq = int(seq);
  const nlohmann::json reading = {{"stages", P}, {"microbatches", M}, {"batch", batch}, {"seq", seq}, {"hidden", h},
                                  {"bubble", bubble}, {"efficiency", 1 - bubble}, {"p2p_bytes", total},
                                  {"message_bytes", message}};
  lab::write_json(json, {{"reading", reading}, {"executed", play_what_if(o, run_options, one_f_one_b_schedule(P, M))}});
  return 0;
}

}  // namespace pipeline_lab
