// Lab 8: pipeline parallelism. The tiny GPT, deepened to --layers, is cut
// into chunks of layers, one stage per rank, and trained by a schedule: a list
// of actions per stage (parallel/pipeline_schedule.h) that one executor runs
// (parallel/pipeline_executor.h).
//
//   ./labkit lab pipeline --stages 4 --microbatches 8 --schedule 1f1b --steps 10
//
// The stages must end with the weights one rank reaches on the same batches;
// the lab checks it. The table shows the last step as it ran: each chunk's
// forward, backward and weight-gradient time, measured; the bubble measured
// from the stages' timelines (the share of P x the step's span in which a
// stage computes nothing) beside its formula at those times and the schedule
// played out at them with free messages; and what each stage keeps in flight.
#include <algorithm>
#include <cstdio>
#include <numeric>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "labkit/cli.h"
#include "labkit/error.h"
#include "labkit/gpt.h"
#include "labkit/memory.h"
#include "labkit/optim.h"
#include "labkit/output.h"
#include "labkit/parallel/equivalence.h"
#include "labkit/parallel/pipeline_executor.h"
#include "labkit/parallel/sampler.h"
#include "labkit/parallel/sequences.h"
#include "labkit/run.h"
#include "labkit/units.h"
#include "pipeline.h"

using namespace pipeline_lab;

namespace {

// What a stage reports to rank 0: its step's span, activation sets and
// tracker peak, its weights' distance from one rank's, then its losses, then
// its slots (op, micro-batch, chunk, start, end each).
constexpr std::size_t kSummary = 5;

}  // namespace

namespace pipeline_lab {

PipelineRun train(const Options& o, const RunOptions& run_options, const Sequences& data, const GptConfig& config,
                  const Schedule& schedule, bool compare) {
  const int B = o.batch_or_default(), T = config.max_seq;
  std::vector<float> one_rank;
  PipelineRun out;
  run(run_options, [&](Comm& comm) {
    Gpt model(config, o.seed);
    PipelineExecutor pipeline(comm, model, schedule);
    std::vector<SgdMomentum> sgd(pipeline.owned().size(), SgdMomentum{.lr = o.lr});
    // Every stage draws the same batches: the first stage embeds their tokens, the last scores their targets.
    const DistributedSampler sampler(data.count, 1, 0, o.seed);
    std::vector<int> x, y;
    std::vector<double> report(kSummary);
    PipelineStep step;
    for (int s = 0; s < o.steps; ++s) {
      fill_batch(data, batch_of(sampler, s, B), x, y);
      step = pipeline.step(x, y, B, T);
      report.push_back(step.loss);
      const double started = comm.now();
      for (std::size_t i = 0; i < sgd.size(); ++i) {
        const ParameterRange r = pipeline.owned()[i];
        sgd[i].update({model.parameters().data() + r.offset, r.count}, {model.gradients().data() + r.offset, r.count});
        comm.computed("optimizer", started, 4.0 * double(r.count));
      }
    }
    if (compare && one_rank.empty()) {  // once per process, by its first rank here
      SgdMomentum one_sgd{.lr = o.lr};
      one_rank = train_one_rank(config, data, o.seed, o.steps, B,
                                [&](std::span<float> w, std::span<const float> g) { one_sgd.update(w, g); });
    }
    report[0] = step.start, report[1] = step.end, report[2] = step.activation_sets;
    report[3] = double(comm.memory().peak[std::size_t(MemoryUse::activations)]);
    report[4] = compare ? relative_difference(model.parameters().to_host(), one_rank, pipeline.owned()) : 0;
    append_slots(report, step.slots);
    const auto all = comm.inspect(view_of(report));  // an instrument: untraced, free of virtual time
    if (comm.rank() != 0) return;
    for (const std::vector<double>& r : all) {
      StageRun& stage = out.stages.emplace_back();
      stage.start = r[0], stage.end = r[1], stage.activation_sets = int(r[2]), stage.activation_peak = r[3];
      out.weights_vs_one_rank = std::max(out.weights_vs_one_rank, r[4]);
      stage.slots = read_slots(r, kSummary + std::size_t(o.steps));
    }
    const std::size_t last_stage = std::size_t(schedule.stage_of_chunk.back());
    out.losses.assign(all[last_stage].begin() + kSummary, all[last_stage].begin() + std::ptrdiff_t(kSummary) + o.steps);
  });
  return out;
}

double step_span(const std::vector<StageRun>& stages) {
  double start = stages[0].start, end = stages[0].end;
  for (const StageRun& s : stages) start = std::min(start, s.start), end = std::max(end, s.end);
  return end - start;
}

double measured_bubble(const std::vector<StageRun>& stages) {
  double busy = 0;
  for (const StageRun& s : stages)
    for (const ScheduleRun::Slot& slot : s.slots) busy += slot.end - slot.start;
  return 1 - busy / (double(stages.size()) * step_span(stages));
}

}  // namespace pipeline_lab

namespace {

// Each kind of work's mean time over every stage's chunks: forward, backward
// (whole, or for the input alone) and weights (0 where the schedule has none).
PipeTimes measured_times(const PipelineRun& r) {
  double sum[3] = {}, count[3] = {};
  for (const StageRun& s : r.stages)
    for (const ScheduleRun::Slot& slot : s.slots) {
      const int k = slot.op == PipeOp::forward ? 0 : slot.op == PipeOp::backward_weight ? 2 : 1;
      sum[k] += slot.end - slot.start, count[k] += 1;
    }
  const auto mean = [&](int k) { return count[k] ? sum[k] / count[k] : 0.0; };
  return {mean(0), mean(1), mean(2), 0};
}

// --sweep's forms: the bubble against the micro-batches or the stages.
cli::Sweep parse_sweep(const std::string& text) {
  return cli::parse_sweep(text, {{"microbatches", 1, 512, true, ""}, {"stages", 1, 64, true, ""}});
}

// What the command line asks that cannot be, before any rank starts.
Schedule checked_schedule(const Options& o, const RunOptions& run_options, bool ranks_given, const GptConfig& config) {
  const int P = o.stages, M = o.microbatches, V = o.virtual_or_default();
  const bool tiny = o.what_if.empty();
  const int L = tiny ? config.layers : memory::model_preset(o.what_if).layers;
  const std::string model = tiny ? "--layers" : "--what-if " + o.what_if;
  if (P > L) throw Error(fmt::format("--stages {}: more stages than the model's {} layers ({})", P, L, model));
  if (L % P != 0)
    throw Error(fmt::format("--stages {}: the model's {} layers do not cut into {} equal stages ({})", P, L, P, model));
  if (!tiny && !o.seq && memory::model_preset(o.what_if).positions == 0)
    throw Error(fmt::format("--what-if {}: the model has rotary positions and no fixed context: give --seq", o.what_if));
  if (tiny && o.seq) throw Error("--seq goes with --what-if; the tiny GPT trains on its context of " +
                                 std::to_string(config.max_seq));
  if (tiny && run_options.payload_free)
    throw Error("--payload-free: the tiny GPT computes with real values (payload-free runs are --what-if's)");
  if ((L / P) % V != 0)
    throw Error(o.virtual_stages
                    ? fmt::format("--virtual {}: a stage's {} layers do not cut into {} equal chunks", V, L / P, V)
                    : fmt::format("--schedule {}: a stage's {} layers do not cut into the {} equal chunks it runs "
                                  "by default (--virtual)", o.schedule, L / P, V));
  if (const int B = o.batch_or_default(); B % M != 0)
    throw Error(fmt::format("--batch {}: it does not cut into {} equal micro-batches (--microbatches)", B, M));
  if (run_options.backend == "sim" && ranks_given && run_options.ranks != P)
    throw Error(fmt::format("--ranks {}: the pipeline runs one rank per stage, --stages {}", run_options.ranks, P));
  if (!o.schedule_file.empty()) {
    const Schedule s = read_schedule(o.schedule_file);
    try {
      validate(s);
    } catch (const Error& e) {
      throw Error(fmt::format("--schedule-file {}: {}", o.schedule_file, e.what()));
    }
    return s;
  }
  try {
    return make_schedule(o.schedule, P, M, V);
  } catch (const Error& e) {
    throw Error(fmt::format("--schedule {} --stages {} --microbatches {}{}: {}", o.schedule, P, M,
                            o.virtual_stages ? fmt::format(" --virtual {}", V) : "", e.what()));
  }
}

std::string stage_list(const std::vector<StageRun>& stages, const auto& value) {
  std::string out;
  for (const StageRun& s : stages) out += fmt::format("{}{}", out.empty() ? "" : " ", value(s));
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Lab 8: pipeline parallelism: the tiny GPT cut into stages and trained by a schedule"};
  cli::one_line_errors(app);
  Options o;
  RunOptions run_options;
  app.add_option("--stages", o.stages, "pipeline stages, one rank each (P)")
      ->capture_default_str()->check(cli::in_range(1, 64));
  app.add_option("--microbatches", o.microbatches, "micro-batches per step (M)")
      ->capture_default_str()->check(cli::in_range(1, 512));
  app.add_option("--schedule", o.schedule, "naive, gpipe, 1f1b, interleaved, zb-h1 or zbv")
      ->capture_default_str()
      ->check(CLI::IsMember(std::vector<std::string>(std::begin(kScheduleNames), std::end(kScheduleNames))));
  app.add_option("--schedule-file", o.schedule_file, "a schedule written by hand, one line per stage (see "
                                                   "labs/pipeline/schedules/), instead of --schedule")
      ->excludes("--schedule");
  app.add_option("--virtual", o.virtual_stages, "chunks per stage (V): interleaved's (default 2); zbv runs 2")
      ->check(cli::in_range(1, 64))
      ->excludes("--schedule-file");
  app.add_option("--steps", o.steps, "optimizer steps")->capture_default_str()->check(cli::at_least(1));
  app.add_option("--batch", o.batch, "sequences per step (default: two per micro-batch)")->check(cli::in_range(1, 4096));
  app.add_option("--layers", o.layers, "the tiny GPT's layers")->capture_default_str()->check(cli::in_range(1, 64));
  app.add_option("--lr", o.lr, "learning rate (SGD, momentum 0.9)")->capture_default_str()->check(cli::above(0.0f));
  app.add_option("--seed", o.seed, "initialisation, corpus and sampling")
      ->capture_default_str()->check(cli::at_least(std::uint64_t(0)));
  app.add_option("--json", o.json, "also write the table as JSON to this file")->check(cli::output_file());
  app.add_option("--what-if", o.what_if, "a model preset (gpt3-175b, ...): the schedule at its scale, payload-free, "
                                         "its layers cut into the chunks")
      ->check(cli::parsed_by([](const std::string& name) { memory::model_preset(name); }));
  app.add_option("--seq", o.seq, "with --what-if: the sequence length (default: the model's learned context)")
      ->check(cli::in_range(1, 1 << 20));
  app.add_option("--plot", o.plot, "draw the step's pipeline grid, stage by time (.svg or .png)")
      ->check(cli::figure_file());
  app.add_flag("--compare", o.compare, "every schedule at --stages and --microbatches played out side by side at "
                                       "--times: the bubble table, and with --plot their grids");
  app.add_option("--times", o.times, "with --compare: a stage's forward, backward for the input and for the weights, "
                                     "F:B:W")
      ->capture_default_str()->check(cli::parsed_by([](const std::string& text) { parse_times(text); }));
  app.add_flag("--bench", o.bench, "time the simulation itself: every schedule's steps on --stages simulated ranks "
                                   "against one rank's on the same batches, then GPT-3's interleaved step at P = 16, "
                                   "M = 128, payload-free");
  app.add_option_function<std::string>(
         "--sweep", [&o](const std::string& text) { o.sweep = parse_sweep(text); },
         "with --what-if: microbatches=A..B or stages=A..B, doubling: each schedule's bubble, measured (with --plot "
         "drawn)")
      ->check(cli::parsed_by([](const std::string& text) { parse_sweep(text); }));
  app.add_flag("--reading", o.reading, "the reading's example: P = 8, M = 32, its efficiency and P2P bytes, "
                                       "computed and executed");
  add_run_options(app, run_options);
  CLI11_PARSE(app, argc, argv);

  try {
    const Sequences data = training_sequences(o.seed, gpt_preset("tiny-gpt", 1).max_seq);
    GptConfig config = gpt_preset("tiny-gpt", data.tokens.vocab);
    config.layers = o.layers;
    if (run_options.backend == "nccl")
      throw Error("--backend nccl: the pipeline's stages keep the model in host memory (sim or mpi for now)");
    if (o.reading) return readings_example(run_options);
    if (!o.schedule_file.empty()) {  // its stages and micro-batches are the file's
      const Schedule s = read_schedule(o.schedule_file);
      for (const auto& [option, given, in_file] : {std::tuple{"--stages", o.stages, s.stages},
                                                   std::tuple{"--microbatches", o.microbatches, s.microbatches}})
        if (app.count(option) && given != in_file)
          throw Error(fmt::format("{} {}: --schedule-file {} has {}", option, given, o.schedule_file, in_file));
      o.stages = s.stages, o.microbatches = s.microbatches;
    }
    if (o.compare) return compare(o, parse_times(o.times));
    if (app.count("--times"))
      throw Error(fmt::format("--times {}: the stage times --compare plays the schedules at; a training run measures "
                              "its own (add --compare)", o.times));
    const Schedule schedule = checked_schedule(o, run_options, app.count("--ranks") > 0, config);
    if (!app.count("--ranks")) run_options.ranks = o.stages;
    if (!o.sweep.over.empty() && o.what_if.empty())
      throw Error("--sweep: the study runs a real model's schedules payload-free: add --what-if MODEL");
    if (!o.sweep.over.empty()) return sweep(o, run_options);
    if (!o.what_if.empty()) return what_if(o, run_options, schedule);
    if (o.bench) return bench(o, run_options, data, config);
    const int P = o.stages, M = o.microbatches, V = schedule.virtual_stages, B = o.batch_or_default();
    if (M < P && schedule.name != "naive")
      fmt::print("note: M = {} micro-batches for P = {} stages: the pipe never fills, and the bubble grows to "
                 "(P-1)/(M+P-1) = {:.1f}% (1F1B wants M >= P)\n", M, P, 100.0 * (P - 1) / (M + P - 1));
    const PipelineRun r = train(o, run_options, data, config, schedule);
    if (r.stages.empty()) return 0;  // a process of mpirun that ran another rank than 0

    const PipeTimes t = measured_times(r);
    const double measured = measured_bubble(r.stages), formula = bubble_formula(schedule, t);
    const double played = validate(schedule, t).bubble;
    const bool split = schedule.splits_backward();
    // The memory lab's estimate for 1F1B's first stage: P micro-batches of its
    // L/P layers, one micro-batch through every layer (llm.c's buffers).
    const double estimate = memory::llmc_activation_bytes(architecture_of(config), config.max_seq, double(B) / M);
    const double limit = 1e-6;
    fmt::print("pipeline: tiny-gpt deepened to {} layers ({} parameters), {} stage{} x {} chunk{} of {} layer{}, "
               "{} micro-batches of {} x {} tokens, {}, {} step{}, sgd; the last step\n",
               config.layers, Gpt(config, o.seed).parameter_count(), P, P == 1 ? "" : "s", V, V == 1 ? "" : "s",
               config.layers / (P * V), config.layers / (P * V) == 1 ? "" : "s", M, B / M, config.max_seq,
               schedule.name, o.steps, o.steps == 1 ? "" : "s");
    fmt::print("{:<12} {:>3} {:>4} {:>3} {:>9} {:>9} {:>9} {:>9} {:>7} {:>8} {:>7} {:>13} {:>12} {:>9} {:>8} {:>12}\n",
               "schedule", "P", "M", "V", "forward", "backward", "weights", "step", "bubble", "formula", "played",
               "in flight", "act/stage 0", "estimate", "loss", "vs one rank");
    const double span = step_span(r.stages);
    fmt::print("{:<12} {:>3} {:>4} {:>3} {:>9} {:>9} {:>9} {:>9} {:>6.1f}% {:>7.1f}% {:>6.1f}% {:>13} {:>12} {:>9} "
               "{:>8.4f} {:>12.1e}\n",
               schedule.name, P, M, V, format_seconds(t.forward), format_seconds(t.backward_input),
               split ? format_seconds(t.backward_weight) : "-", format_seconds(span), 100 * measured, 100 * formula,
               100 * played, stage_list(r.stages, [](const StageRun& s) { return s.activation_sets; }),
               format_bytes(std::uint64_t(r.stages[0].activation_peak)), format_bytes(std::uint64_t(estimate)),
               r.losses.back(), r.weights_vs_one_rank);
    fmt::print("(forward, backward, weights: a chunk's mean time, measured{}; bubble: 1 - the stages' compute / (P x "
               "the step's span), measured from their timelines; formula: {} at the measured times; played: the "
               "schedule played out at them with free messages; in flight: the micro-batches each stage held at "
               "once; act/stage 0: its tracker's peak of activations and their gradients; estimate: the memory "
               "lab's for 1F1B's stage 0, P micro-batches of L/P layers = one through all L, llm.c's buffers)\n",
               split ? ", backward for the input alone" : "",
               schedule.name == "naive" ? "(P-1)/P"
               : schedule.name == "interleaved" ? "(P-1)/(VM+P-1)"
               : schedule.name == "zb-h1" ? "(P-1)(F+max(B-W,0)) / (M(F+B+W) + (P-1)(F+max(B-W,0)))"
               : schedule.name == "zbv" ? "the fill alone, (P-1)F / (2M(F+B+W) + (P-1)F)"
               : schedule.name == "by hand" ? "none for a schedule written by hand"
                                        : "(P-1)/(M+P-1)");
    fmt::print("activations by stage, each tracker's peak: {} (the micro-batches each held at once, times a "
               "micro-batch's activations on its layers)\n",
               stage_list(r.stages, [](const StageRun& s) { return format_bytes(std::uint64_t(s.activation_peak)); }));
    if (run_options.backend != "sim")
      fmt::print("(times are wall clock here: every wait shows, the messages' and the processes' sharing the "
                 "machine's cores)\n");
    else if (measured > played + 0.05)
      fmt::print("(the bubble measured is the schedule's and the messages' waits: the tiny GPT's chunks take {} beside "
                 "messages of microseconds, so the pipe waits on the network. --what-if gpt3-175b runs the same "
                 "schedule with a real model's layers)\n", format_seconds(t.forward));
    if (!o.plot.empty()) {
      std::vector<std::vector<ScheduleRun::Slot>> slots;
      for (const StageRun& s : r.stages) slots.push_back(s.slots);
      plot_grid({{fmt::format("{}: the tiny GPT's last step, as it ran (bubble {:.1f}%)", schedule.name, 100 * measured),
                  slots, M}}, "s", o.plot);
      fmt::print("wrote {}\n", o.plot);
    }
    const bool equal = r.weights_vs_one_rank <= limit;
    if (equal)
      fmt::print("equal to one rank: every stage's weights within {:g} of one rank's after {} step{}\n", limit,
                 o.steps, o.steps == 1 ? "" : "s");
    else
      fmt::print("MISMATCH: {}\n", failed_criterion("a stage's weights", r.weights_vs_one_rank, limit));
    if (!o.json.empty()) {
      nlohmann::json stages = nlohmann::json::array();
      for (const StageRun& s : r.stages)
        stages.push_back({{"start", s.start}, {"end", s.end}, {"in_flight", s.activation_sets},
                          {"activation_bytes", s.activation_peak}});
      create_file(o.json) << nlohmann::json{{"schedule", schedule.name}, {"stages", P}, {"microbatches", M},
                                            {"virtual_stages", V}, {"layers", config.layers}, {"batch", B},
                                            {"forward", t.forward}, {"backward", t.backward_input},
                                            {"weights", split ? t.backward_weight : 0.0}, {"step", span},
                                            {"bubble", measured}, {"formula", formula}, {"played", played},
                                            {"estimate", estimate}, {"losses", r.losses},
                                            {"weights_vs_one_rank", r.weights_vs_one_rank}, {"per_stage", stages}}
                                 .dump(2)
                          << '\n';
    }
    return equal ? 0 : 1;
  } catch (const std::exception& e) {
    std::fflush(stdout);
    fmt::print(stderr, "error: {}\n", e.what());
    return 1;
  }
}
