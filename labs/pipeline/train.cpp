// The training view: the tiny GPT, deepened to --layers, cut into chunks of
// layers, one stage per rank, and trained by a schedule (parallel/
// pipeline_executor.h runs any of them). The stages must end with the weights
// one rank reaches on the same batches. The table shows the last step as it
// ran: each chunk's forward, backward and weight-gradient time, measured; the
// bubble measured from the stages' timelines (the share of P x the step's
// span in which a stage computes nothing) beside its formula at those times
// and the schedule played out at them with free messages; and what each stage
// keeps in flight.
#include <algorithm>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "labkit/gpt.h"
#include "labkit/lab/output.h"
#include "labkit/lab/table.h"
#include "labkit/lab/verdict.h"
#include "labkit/memory.h"
#include "labkit/optim.h"
#include "labkit/parallel/equivalence.h"
#include "labkit/parallel/pipeline_executor.h"
#include "labkit/parallel/sampler.h"
#include "labkit/parallel/training_loop.h"
#include "labkit/units.h"
#include "pipeline.h"

namespace pipeline_lab {

namespace {

// What a stage reports to rank 0 beside its losses and its slots: its step's
// span, activation sets and tracker peak.
struct StageSummary {
  double start, end;
  int activation_sets;
  double activation_peak;
};

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

// One value per stage, in stage order, space-separated: "4 3 2 1".
std::string stage_list(const std::vector<StageRun>& stages, const auto& value) {
  std::string out;
  for (const StageRun& s : stages) out += fmt::format("{}{}", out.empty() ? "" : " ", value(s));
  return out;
}

// The last step's one row; in flight and act/stage 0 are printed only: the
// JSON has them by stage, in per_stage.
lab::Table training_table() {
  std::vector<lab::Column> columns = step_columns("backward", "weights");
  columns.insert(columns.end(), {{.header = "in flight", .width = 13},
                                 {.header = "act/stage 0", .width = 12},
                                 {.header = "estimate", .key = "estimate", .width = 9},
                                 {.header = "loss", .key = "losses", .width = 8},
                                 {.header = "vs one rank", .key = "weights_vs_one_rank", .width = 12},
                                 {.key = "layers"},
                                 {.key = "batch"},
                                 {.key = "per_stage"}});
  return lab::Table(std::move(columns));
}

nlohmann::json per_stage(const std::vector<StageRun>& stages) {
  nlohmann::json out = nlohmann::json::array();
  for (const StageRun& s : stages)
    out.push_back({{"start", s.start}, {"end", s.end}, {"in_flight", s.activation_sets},
                   {"activation_bytes", s.activation_peak}});
  return out;
}

// What the table's columns mean, each stage's activations, and why the bubble measured exceeds the played one.
void print_notes(const Schedule& schedule, const RunOptions& run_options, const PipelineRun& r, const PipeTimes& t,
                 double measured, double played) {
  fmt::print("(forward, backward, weights: a chunk's mean time, measured{}; bubble: 1 - the stages' compute / (P x "
             "the step's span), measured from their timelines; formula: {} at the measured times; played: the "
             "schedule played out at them with free messages; in flight: the micro-batches each stage held at "
             "once; act/stage 0: its tracker's peak of activations and their gradients; estimate: the memory "
             "lab's for 1F1B's stage 0, min(M, P) micro-batches of L/P layers (P of them: one through all L), "
             "llm.c's buffers)\n",
             schedule.splits_backward() ? ", backward for the input alone" : "", bubble_formula_in_words(schedule));
  fmt::print("activations by stage, each tracker's peak: {} (the micro-batches each held at once, times a "
             "micro-batch's activations on its layers)\n",
             stage_list(r.stages, [](const StageRun& s) { return format_bytes(std::uint64_t(s.activation_peak)); }));
  lab::note_wall_clock(run_options);
  if (run_options.backend == "sim" && measured > played + 0.05)
    fmt::print("(the bubble measured is the schedule's and the messages' waits: the tiny GPT's chunks take {} beside "
               "messages of microseconds, so the pipe waits on the network. --what-if gpt3-175b runs the same "
               "schedule with a real model's layers)\n", format_seconds(t.forward));
}

}  // namespace

PipelineRun train(const Options& o, const RunOptions& run_options, const Sequences& data, const GptConfig& config,
                  const Schedule& schedule, bool compare) {
  const int B = o.batch_or_default(), T = config.max_seq;
  PipelineRun out;
  const TrainingRun run = run_training(run_options, [&](Comm& comm, RankTraining& training) {
    Gpt model(config, o.seed, parse_device(o.device));
    PipelineExecutor pipeline(comm, model, schedule);
    std::vector<SgdMomentum> sgd(pipeline.owned().size(), SgdMomentum{.lr = o.lr});
    // Every stage draws the same batches: the first stage embeds their tokens, the last scores their targets.
    const DistributedSampler sampler(data.count, 1, 0, o.seed);
    std::vector<int> x, y;
    PipelineStep step;
    training.steps(o.steps, [&](int s) {
      fill_batch(data, batch_of(sampler, s, B), x, y);
      step = pipeline.step(x, y, B, T);
      const double started = comm.now();
      std::size_t updated = 0;
      for (std::size_t i = 0; i < sgd.size(); ++i) {
        const ParameterRange r = pipeline.owned()[i];
        sgd[i].update(view_of(model.parameters()).slice(r.offset, r.count),
                      view_of(model.gradients()).slice(r.offset, r.count));
        updated += r.count;
      }
      comm.record_compute("optimizer", started, 4.0 * double(updated));
      return step.loss;
    });
    if (compare) {
      const std::vector<float>& one_rank = training.one_rank(
          [&] { return train_one_rank_sgd(config, data, o.seed, o.steps, B, o.lr, model.device().kind); });
      training.versus_one_rank(relative_difference(model.parameters().to_host(), one_rank, pipeline.owned()));
    }
    const StageSummary mine{step.start, step.end, step.activation_sets,
                            double(comm.memory().peak[std::size_t(MemoryUse::activations)])};
    // Instruments: untraced, free of virtual time.
    const std::vector<StageSummary> summaries = comm.gather_object(mine);
    const auto slots = comm.gather_objects(step.slots);
    if (comm.rank() != 0) return;
    for (std::size_t r = 0; r < summaries.size(); ++r) {
      const StageSummary& s = summaries[r];
      out.stages.push_back({slots[r], s.start, s.end, s.activation_sets, s.activation_peak});
    }
  });
  if (!run.on_rank_zero()) return out;
  out.weights_vs_one_rank = run.weights_vs_one_rank;
  out.losses = run.losses[std::size_t(schedule.stage_of_chunk.back())];  // the last stage scores the batch
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

int train_and_report(const Options& o, const RunOptions& run_options, const Sequences& data, const GptConfig& config,
                     const Schedule& schedule) {
  const int P = o.stages, M = o.microbatches, V = schedule.virtual_stages, B = o.batch_or_default();
  if (M < P && schedule.name != "naive")
    fmt::print("note: M = {} micro-batches for P = {} stages: the pipe never fills, and the bubble grows ({})\n", M, P,
               schedule.splits_backward() ? "the zero-bubble formulas hold from M = P on: none here"
                                          : "the formula column; 1F1B wants M >= P");
  const PipelineRun r = train(o, run_options, data, config, schedule);
  if (r.stages.empty()) return 0;  // a process of mpirun that ran another rank than 0

  const PipeTimes t = measured_times(r);
  const double measured = measured_bubble(r.stages), played = validate(schedule, t).bubble;
  const bool split = schedule.splits_backward();
  // The memory lab's estimate for 1F1B's first stage: min(M, P) micro-batches
  // of its L/P layers; P of them hold what one micro-batch does through every
  // layer (llm.c's buffers).
  const double estimate = memory::llmc_activation_bytes(architecture_of(config), config.max_seq, double(B) / M) *
                          std::min(M, P) / P;
  const int per_chunk = config.layers / (P * V);
  fmt::print("pipeline: tiny-gpt deepened to {} layers ({} parameters), {} stage{} x {} chunk{} of {} layer{}, "
             "{} micro-batches of {} x {} tokens, {}, {} step{}, sgd; the last step\n",
             config.layers, Gpt(config, o.seed).parameter_count(), P, P == 1 ? "" : "s", V, V == 1 ? "" : "s",
             per_chunk, per_chunk == 1 ? "" : "s", M, B / M, config.max_seq, schedule.name, o.steps,
             o.steps == 1 ? "" : "s");
  lab::Table table = training_table();
  table.print_header();
  table.add({schedule.name, P, M, V, lab::seconds(t.forward), lab::seconds(t.backward_input),
             split ? lab::seconds(t.backward_weight) : lab::Cell{nullptr, "-"}, lab::seconds(step_span(r.stages)),
             lab::percent(measured), lab::percent(bubble_formula(schedule, t)), lab::percent(played),
             stage_list(r.stages, [](const StageRun& s) { return s.activation_sets; }),
             format_bytes(std::uint64_t(r.stages[0].activation_peak)),
             {estimate, format_bytes(std::uint64_t(estimate))},
             {r.losses, fmt::format("{:.4f}", r.losses.back())}, lab::number(r.weights_vs_one_rank, "{:.1e}"),
             config.layers, B, {per_stage(r.stages), ""}});
  print_notes(schedule, run_options, r, t, measured, played);
  if (!o.plot.empty()) {
    std::vector<std::vector<ScheduleRun::Slot>> slots;
    for (const StageRun& s : r.stages) slots.push_back(s.slots);
    plot_grid({{fmt::format("{}: the tiny GPT's last step, as it ran (bubble {:.1f}%)", schedule.name, 100 * measured),
                slots, M}}, "s", o.plot);
  }
  const double limit = 1e-6;
  lab::Verdict verdict;
  verdict.trained("", r.losses);
  verdict.within("a stage's weights", r.weights_vs_one_rank, limit);
  const int status = verdict.print(fmt::format("equal to one rank: every stage's weights within {:g} of one rank's "
                                               "after {} step{}", limit, o.steps, o.steps == 1 ? "" : "s"));
  nlohmann::json report = table.json()[0];
  report["verdict"] = verdict.json();
  lab::write_json(o.json, report);
  return status;
}

}  // namespace pipeline_lab
