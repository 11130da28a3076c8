// Lab 8: pipeline parallelism. One file per view of it:
//   main.cpp     the options, and which view runs
//   checks.cpp   what the command line asks that cannot be, refused before any rank starts
//   train.cpp    the tiny GPT cut into stages, trained by a schedule, equal to one rank;
//                the bubble and the activations each stage keeps, measured beside their formulas
//   what_if.cpp  --what-if: the schedule at a real model's scale, payload-free, on each topology; --sweep
//                over M or P; --reading: the long guide's example (section 10.6)
//   grid.cpp     the pipeline grid (--plot); --compare: every schedule played out side by side
//   schedule_file.cpp  --schedule-file: a schedule written by hand
//   bench.cpp    --bench: what the simulation costs
//   report.cpp   what the views' tables share: their columns, and a table's JSON less what it plots
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "labkit/gpt.h"
#include "labkit/lab/sweep.h"
#include "labkit/lab/table.h"
#include "labkit/lab/training_options.h"
#include "labkit/parallel/pipeline_schedule.h"
#include "labkit/parallel/sequences.h"
#include "labkit/run.h"

namespace pipeline_lab {

using namespace labkit;

// --steps, --batch (0: two sequences per micro-batch), --lr, --seed, --json, --bench, and the lab's own.
struct Options : lab::TrainingOptions {
  Options() : TrainingOptions{.steps = 10, .batch = 0, .lr = 0.05f} {}
  int stages = 4, microbatches = 8, virtual_stages = 0;  // virtual 0: the schedule's own (2 for interleaved and zbv)
  std::string schedule = "1f1b";
  std::string schedule_file;  // a schedule written by hand (schedules/*.txt), instead of --schedule
  int layers = 8;             // the tiny GPT, deepened to be cut into stages
  std::string what_if;  // a model preset: the schedule at its scale, payload-free, instead of the tiny GPT
  int seq = 0;          // with --what-if: the sequence length (0: the model's context)
  bool reading = false; // the long guide's P = 8, M = 32 example
  std::string plot;     // the grid of the step (.svg or .png)
  bool compare = false; // every schedule played out at --times
  std::string times = "1:1:1";  // with --compare: a stage's forward, backward for the input, for the weights
  cli::Sweep sweep;     // with --what-if: microbatches=A..B or stages=A..B, doubling
  int virtual_or_default() const {
    return virtual_stages ? virtual_stages : default_virtual(schedule);
  }
  int batch_or_default() const { return batch ? batch : 2 * microbatches; }
};

// One stage's step as it ran (the last step), gathered on rank 0.
struct StageRun {
  std::vector<ScheduleRun::Slot> slots;
  double start = 0, end = 0;
  int activation_sets = 0;
  double activation_peak = 0;  // bytes, the stage's tracker
};

// A schedule written by hand: one line per stage, "S: F0 F1 B0 ...", each
// action F (forward), B (backward), I and W (a backward's input and weights
// parts) on the micro-batch its number names; the sends and receives go in
// where the work needs them (add_forward, add_backward). Throws naming the
// line and the token; validate() judges the result.
Schedule read_schedule(const std::string& path);
// --schedule-file's schedule, whose stages and micro-batches become the run's:
// --stages and --microbatches, where given, must be the file's.
Schedule adopt_schedule_file(const CLI::App& app, Options& o);

// The schedule the run asks for (`by_hand`, or --schedule's), refused with the
// option to blame where it cannot run on the model, the batch or the ranks.
Schedule checked_schedule(const Options& o, const RunOptions& run_options, const GptConfig& config,
                          const std::optional<Schedule>& by_hand);

// One panel of the grid: a schedule's step, each stage's forwards and backwards as they ran.
struct GridPanel {
  std::string title;
  std::vector<std::vector<ScheduleRun::Slot>> slots;  // by stage
  int microbatches = 1;
  bool own_axis = false;  // its time axis its own, not the other panels' (naive's, many times longer)
};
void plot_grid(const std::vector<GridPanel>& panels, const std::string& time_unit, const std::string& path);
PipeTimes parse_times(const std::string& text);  // "F:B:W", each > 0 (W may be 0)
void add_compare_options(CLI::App& app, Options& o);  // --compare, --times
int compare(const Options& o, const PipeTimes& times);

void add_what_if_options(CLI::App& app, Options& o);  // --what-if, --seq, --sweep, --reading
int what_if(const Options& o, const RunOptions& run_options, const Schedule& schedule);
int readings_example(const RunOptions& run_options, const std::string& json);  // --reading, its row to --json
int sweep(const Options& o, const RunOptions& run_options);

// The tiny GPT trained by `schedule` on its stages; compare: train one rank too, and measure each stage against it.
struct PipelineRun {
  std::vector<StageRun> stages;
  std::vector<double> losses;      // by step, the mean over the batch
  double weights_vs_one_rank = 0;  // the largest over the stages
};

// The step's span, the first stage's start to the last one's end; and the
// bubble as the stages ran it: 1 - (their compute) / (P x the span).
double step_span(const std::vector<StageRun>& stages);
double measured_bubble(const std::vector<StageRun>& stages);

PipelineRun train(const Options& o, const RunOptions& run_options, const Sequences& data, const GptConfig& config,
                  const Schedule& schedule, bool compare = true);
// The training view: train(), its last step's table, and the verdict against one rank (its exit status).
int train_and_report(const Options& o, const RunOptions& run_options, const Sequences& data, const GptConfig& config,
                     const Schedule& schedule);
int bench(const Options& o, const RunOptions& run_options, const Sequences& data, const GptConfig& config);

// The columns the training view and --what-if share: the schedule, its shape,
// a chunk's times, the step, and its bubble measured, by formula and played out.
std::vector<lab::Column> step_columns(const std::string& backward_key, const std::string& weights_key);

}  // namespace pipeline_lab
