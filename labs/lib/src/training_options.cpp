#include "labkit/lab/training_options.h"

#include <fmt/format.h>

#include "labkit/cli.h"
#include "labkit/device.h"
#include "labkit/error.h"
#include "labkit/gpt.h"
#include "labkit/parallel/sequences.h"
#include "labkit/run.h"

namespace labkit::lab {

void add_training_options(CLI::App& app, TrainingOptions& o, const TrainingWords& words) {
  app.add_option("--steps", o.steps, "optimizer steps")->capture_default_str()->check(cli::at_least(1));
  if (!words.batch.empty())
    app.add_option("--batch", o.batch, words.batch)
        ->capture_default_str()
        ->check(words.max_batch ? cli::in_range(1, words.max_batch) : cli::at_least(1));
  CLI::Option* lr = app.add_option("--lr", o.lr, words.lr)->check(cli::above(0.0f));
  if (!words.lr_says_its_default) lr->capture_default_str();
  app.add_option("--seed", o.seed, words.seed)->capture_default_str()->check(cli::at_least(std::uint64_t(0)));
  if (!words.model.empty())
    app.add_option("--model", o.model, words.model + ": tiny-gpt (2 layers, 64 wide, context 32) or small-gpt "
                                                    "(4 layers, 512 wide, context 256: a GPU's size)")
        ->capture_default_str()
        ->check(cli::parsed_by([](const std::string& name) { gpt_preset(name, 1); }));
  if (!words.device.empty())
    app.add_option("--device", o.device, words.device + ": cpu; cuda (a GPU: the simulator's ranks share it, "
                                                        "--backend nccl gives each its own); or fenced (the CPU's "
                                                        "kernels on memory the host cannot touch: the GPU's path, "
                                                        "tested without one)")
        ->capture_default_str()
        ->check(cli::device());
  app.add_option("--json", o.json, words.json)->check(cli::output_file());
  if (!words.bench.empty()) app.add_flag("--bench", o.bench, words.bench);
}

void check_batch_fits_corpus(const Sequences& corpus, int batch, int accum) {
  const std::size_t per_step = std::size_t(batch) * std::size_t(accum);
  if (per_step <= corpus.count) return;
  const std::string flags =
      accum == 1 ? fmt::format("--batch {}", batch) : fmt::format("--batch {} --accum {}", batch, accum);
  throw Error(fmt::format("{}: a step reads {} sequences, more than the corpus's {} of {} tokens (a step reads each "
                          "at most once: --batch at most {}{})",
                          flags, per_step, corpus.count, corpus.T, corpus.count / std::size_t(accum),
                          accum == 1 ? "" : fmt::format(" at --accum {}", accum)));
}

void refuse_payload_free(bool payload_free, const std::vector<std::string>& studies) {
  if (!payload_free) return;
  if (studies.empty())
    throw Error("--payload-free: the lab trains its GPT with real values, and has no payload-free run (the other "
                "training labs' --what-if have)");
  std::string runs;
  for (std::size_t i = 0; i < studies.size(); ++i)
    runs += (i == 0 ? "" : i + 1 == studies.size() ? " and " : ", ") + studies[i] + "'s";
  throw Error("--payload-free: the tiny GPT computes with real values (payload-free runs are " + runs + ")");
}

void check_ranks_of_shape(const RunOptions& run_options, int count, std::string_view option, std::string_view per) {
  if (run_options.ranks_given && run_options.ranks != count)
    throw Error(fmt::format("--ranks {}: the lab runs one rank per {}, {} {}", run_options.ranks, per, option, count));
  // Under mpirun, --backend has set the ranks to -np (run.h).
  if (run_options.backend != "sim" && !run_options.ranks_given && run_options.ranks != count)
    throw Error(fmt::format("{0} {1}: the lab runs one process per {2}, and mpirun started {3} (-np {1}, or {0} {3}{4})",
                            option, count, per, run_options.ranks,
                            count < run_options.ranks ? fmt::format(", or --ranks {} to run on {} of them", count, count)
                                                      : ""));
}

void check_batch_splits(int batch, const RunOptions& run_options) {
  if (batch % run_options.ranks != 0)
    throw Error(fmt::format("--batch {} does not split over {} {}: each rank takes batch / ranks sequences", batch,
                            ranks_flag(run_options), run_options.ranks));
}

void refuse_model_device_backend(const TrainingOptions& o, const RunOptions& run_options, const std::string& view) {
  if (o.model != TrainingOptions{}.model) throw Error(fmt::format("--model {}: {}, with no GPT to train", o.model, view));
  if (o.device != "cpu") throw Error(fmt::format("--device {}: {}, with no tensors to place on a device", o.device, view));
  if (run_options.backend != "sim")
    throw Error(fmt::format("--backend {}: {}, with no bytes for real processes to send: the simulator runs it "
                            "(./labkit lab)", run_options.backend, view));
}

void refuse_trace_of_many_runs(const RunOptions& run_options, const std::string& view, const std::string& instead) {
  if (!run_options.trace.empty())
    throw Error(fmt::format("--trace {}: {} simulates a run for each of its rows, and a trace holds one run; {}",
                            run_options.trace, view, instead));
}

}  // namespace labkit::lab
