// Lab 8: pipeline parallelism. The tiny GPT, deepened to --layers, is cut
// into chunks of layers, one stage per rank, and trained by a schedule: a list
// of actions per stage (parallel/pipeline_schedule.h) that one executor runs
// (parallel/pipeline_executor.h). It must end with one rank's weights (train.cpp):
//
//   ./labkit lab pipeline --stages 4 --microbatches 8 --schedule 1f1b --steps 10
//
//   pipeline: tiny-gpt deepened to 8 layers (403968 parameters), 4 stages x 1 chunk of 2 layers, ...
//   schedule       P    M   V   forward  backward   weights      step  bubble  formula  played     in flight  ...
//   1f1b           4    8   1   26.6 ns   53.3 ns         -   44.7 us   98.6%    27.3%   27.3%       4 3 2 1  ...
//
// The other views: --what-if MODEL the schedule at a real model's scale,
// payload-free, --sweep its bubble over M or P, --reading the long guide's
// example (what_if.cpp); --compare every schedule played out side by side
// (grid.cpp); --schedule-file one written by hand (schedule_file.cpp);
// --bench what the simulation costs (bench.cpp).
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "labkit/error.h"
#include "labkit/lab/main.h"
#include "labkit/lab/option_checks.h"
#include "pipeline.h"

using namespace pipeline_lab;

namespace {

// The options the run asked for does not read, refused by name: --reading
// plays the reading's own example, --compare plays schedules at --times with
// no simulated cluster, --what-if trains nothing and, with no tied embeddings
// to sum, calls no collective (--algo), its --sweep plays every schedule over
// the values it sweeps, --bench draws nothing.
void refuse_what_the_run_does_not_read(const CLI::App& app, const Options& o) {
  std::vector<std::string> unread = {"--steps", "--lr", "--seed", "--layers", "--bench"};  // training's
  const auto also = [&](std::initializer_list<std::string> more) { unread.insert(unread.end(), more); };
  std::string run;
  if (o.reading) {
    run = "--reading";
    also({"--stages", "--microbatches", "--schedule", "--schedule-file", "--virtual", "--batch", "--plot", "--seq",
          "--times", "--what-if", "--sweep", "--compare", "--ranks", "--algo"});
  } else if (o.compare) {
    run = "--compare";  // the built-in schedules, each at its default V
    also({"--schedule", "--schedule-file", "--virtual", "--batch", "--seq", "--what-if", "--sweep", "--backend",
          "--ranks", "--topology", "--network", "--trace", "--algo", "--payload-free", "--efficiency", "--straggler",
          "--deadlock-timeout", "--fail-rank"});
  } else if (!o.what_if.empty() && !o.sweep.over.empty()) {
    // Every schedule, each at its own V, on micro-batches of one sequence.
    run = cli::sweep_flag(o.sweep);
    also({"--algo", "--schedule", "--schedule-file", "--virtual", "--batch",
          o.sweep.over == "microbatches" ? "--microbatches" : "--stages"});
  } else if (!o.what_if.empty()) {
    run = "--what-if " + o.what_if;
    also({"--algo"});
  } else if (o.bench) {  // every schedule at its default V, native collectives
    run = "--bench";
    unread = {"--plot", "--trace", "--schedule", "--schedule-file", "--virtual", "--algo"};
  } else {
    return;
  }
  cli::refuse_unread(app, run, unread);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Lab 8: pipeline parallelism: the tiny GPT cut into stages and trained by a schedule"};
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
      ->check(CLI::ExistingFile)
      ->excludes("--schedule");
  app.add_option("--virtual", o.virtual_stages, "chunks per stage (V): interleaved's (default 2); zbv runs 2")
      ->check(cli::in_range(1, 64))
      ->excludes("--schedule-file");
  lab::add_training_options(app, o, {.batch = "", .lr = "learning rate (SGD, momentum 0.9)",
                                     .bench = "time the simulation itself: every schedule's steps on --stages "
                                              "simulated ranks against one rank's on the same batches, then GPT-3's "
                                              "interleaved step at P = 16, M = 128, payload-free"});
  app.add_option("--batch", o.batch, "sequences per step (default: two per micro-batch)")
      ->check(cli::in_range(1, 4096));
  app.add_option("--layers", o.layers, "the tiny GPT's layers")->capture_default_str()->check(cli::in_range(1, 64));
  app.add_option("--plot", o.plot, "draw the step's pipeline grid, stage by time (.svg or .png)")
      ->check(cli::figure_file());
  add_what_if_options(app, o);
  add_compare_options(app, o);
  add_run_options(app, run_options);
  return lab::run_main(app, argc, argv, [&] {
    refuse_what_the_run_does_not_read(app, o);
    const Sequences data = training_sequences(o.seed, gpt_preset("tiny-gpt", 1).max_seq);
    GptConfig config = gpt_preset("tiny-gpt", data.tokens.vocab);
    config.layers = o.layers;
    if (o.reading || o.compare)
      lab::refuse_model_device_backend(o, run_options,
                                       o.reading ? "--reading plays a schedule" : "--compare plays the schedules");
    if (o.reading) return readings_example(run_options, o.json);
    std::optional<Schedule> by_hand;
    if (!o.schedule_file.empty()) by_hand = adopt_schedule_file(app, o);
    if (o.compare) return compare(o, parse_times(o.times));
    if (app.count("--times"))
      throw Error(fmt::format("--times {}: the stage times --compare plays the schedules at; a training run measures "
                              "its own (add --compare)", o.times));
    const Schedule schedule = checked_schedule(o, run_options, config, by_hand);
    run_options.ranks = o.stages;
    if (!o.sweep.over.empty() && o.what_if.empty())
      throw Error("--sweep: the study runs a real model's schedules payload-free: add --what-if MODEL");
    if (!o.sweep.over.empty()) {
      lab::refuse_trace_of_many_runs(run_options, cli::sweep_flag(o.sweep),
                                     "trace one of its points: --what-if with that --microbatches or --stages");
      return sweep(o, run_options);
    }
    if (!o.what_if.empty()) return what_if(o, run_options, schedule);
    if (o.bench) return bench(o, run_options, data, config);
    return train_and_report(o, run_options, data, config, schedule);
  });
}
