// Lab 5: data parallelism. Every rank holds the whole tiny GPT, reads its own
// shard of each global batch, and the ranks average their gradients before the
// optimizer, in one of three ways (parallel/data_parallel.h):
//
//   ./labkit lab ddp --ranks 8 --steps 20
//
//   ddp: tiny-gpt, 8 ranks, global batch 16, 20 steps, adamw, dgx-h100; times per step, from rank 0's trace
//   mode      buckets     T_fwd     T_bwd    T_comm     T_opt   exposed    T_step     model    loss    grads vs 1 ...
//   naive           1   27.0 ns   54.0 ns   11.6 us   2.53 ns   11.6 us   11.6 us   11.6 us  ...
//
// naive allreduces every gradient after backward; bucketed packs them into
// PyTorch's buckets (1 MiB first, then --bucket-mb) and allreduces each after
// backward; overlap starts each bucket's allreduce the moment its last gradient
// is ready, while backward goes on. The times are measured from the executed
// run's trace (rank 0's track), per step, and `model` is the overlap model
// T_fwd + max(T_bwd, T_comm) + T_opt. Every mode ends with the same weights on
// every rank, and the same as one rank training on the whole global batch,
// which the lab checks after the run.
//
// The studies, payload-free at the scale of real runs:
//   --what-if llama2-7b   one step of a real model's shapes per mode, beside the reading's estimate
//   --sweep ranks=1..64   weak scaling on every topology preset (--plot draws it)
//   --sweep bucket-mb=1..1024  exposed communication against the bucket cap, and the optimum
//   --volume              the reading's DDP communication-volume table, computed
//   --bench               what the simulation costs in wall time (./labkit bench ddp)
//
// And gradient compression, beside the uncompressed averaging (compression.cpp):
//   --compress powersgd:2 bf16, PowerSGD or top-k: bytes, times and both loss curves
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <stdexcept>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "ddp.h"
#include "labkit/cli.h"
#include "labkit/device.h"
#include "labkit/error.h"
#include "labkit/memory.h"
#include "labkit/output.h"
#include "labkit/parallel/equivalence.h"
#include "labkit/units.h"

using namespace ddp_lab;

namespace {

// --sweep's forms: weak scaling over rank counts, or the bucket cap in MiB.
SweepRange parse_sweep(const std::string& text) {
  return cli::parse_sweep(text, {{"ranks", 1, 65536, true, ""}, {"bucket-mb", 0, 65536, false, " MiB"}});
}

// --compress replaces the averaging, so it takes no --mode, and trains the
// tiny GPT, so no payload-free study; its arithmetic reads host memory, which
// NCCL's collectives cannot send.
void check_compress_alone(const CLI::App& app, const Options& o, const RunOptions& run_options) {
  const std::string compress = "--compress " + name_of(o.compress);
  for (const char* other : {"--mode", "--what-if", "--sweep", "--volume", "--bench"})
    if (app.count(other))
      throw Error(fmt::format("{}: it replaces the gradient averaging with one compressed average per step after "
                              "backward, and takes no {}", compress, other));
  if (run_options.backend == "nccl")
    throw Error(fmt::format("{}: compresses in host memory, which --backend nccl cannot send (sim or mpi)", compress));
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Lab 5: data parallelism (DDP): naive, bucketed and overlapped gradient averaging"};
  cli::one_line_errors(app);
  Options o;
  RunOptions run_options;
  run_options.ranks = 8;
  app.add_option("--mode", o.modes, "naive, bucketed or overlap (several: a row each)")
      ->capture_default_str()->check(cli::one_of("mode", {"naive", "bucketed", "overlap"}));
  app.add_option("--steps", o.steps, "optimizer steps")->capture_default_str()->check(cli::at_least(1));
  app.add_option("--batch", o.batch, "global batch: sequences per step over all ranks")
      ->capture_default_str()->check(cli::at_least(1));
  app.add_option("--accum", o.accum, "micro-steps per step: gradients accumulate, and only the last micro-step "
                                     "communicates (no_sync); one rank checks against a batch accum times larger")
      ->capture_default_str()->check(cli::at_least(1));
  app.add_option("--bucket-mb", o.bucket_mb, "bucket cap in MiB after the first (DDP's bucket_cap_mb)")
      ->capture_default_str()->check(cli::above(0.0));
  app.add_option("--first-bucket-mb", o.first_bucket_mb, "the first bucket's cap in MiB")
      ->capture_default_str()->check(cli::above(0.0));
  app.add_option("--optimizer", o.optimizer, "adamw, sgd (momentum 0.9), lars or lamb (layer-wise trust ratios)")
      ->capture_default_str()->check(cli::one_of("optimizer", {"adamw", "sgd", "lars", "lamb"}));
  app.add_option("--warmup", o.warmup, "steps of linear learning-rate warmup (Goyal et al. 2017)")
      ->capture_default_str()->check(cli::at_least(0));
  app.add_option("--clip", o.clip, "clip the gradients' global norm to this (0: never)")
      ->capture_default_str()->check(cli::at_least(0.0));
  app.add_option("--device", o.device, "where each rank's model trains: cpu, or cuda (a GPU; with --backend nccl "
                                       "the allreduces run there too)")
      ->capture_default_str()->check(cli::parsed_by(parse_device));
  app.add_option("--lr", o.lr, "learning rate")->capture_default_str()->check(cli::above(0.0f));
  app.add_option("--seed", o.seed, "initialisation, corpus and shuffling")
      ->capture_default_str()->check(cli::at_least(std::uint64_t(0)));
  app.add_option("--json", o.json, "also write the table as JSON to this file")->check(cli::output_file());
  app.add_option("--what-if", o.what_if, "a model preset (llama2-7b, ...): one payload-free step of its shapes "
                                         "per mode, against the reading's estimate")
      ->check(cli::parsed_by([](const std::string& name) { memory::model_preset(name); }));
  app.add_option("--step-seconds", o.step_seconds, "--what-if: compute per step, in seconds")
      ->capture_default_str()->check(cli::above(0.0));
  app.add_flag("--volume", o.volume, "the reading's DDP communication-volume table, computed");
  app.add_option_function<std::string>(
         "--sweep", [&o](const std::string& t) { o.sweep = parse_sweep(t); },
         "ranks=A..B: weak scaling of the --what-if model (llama2-7b by default) on every topology preset; "
         "bucket-mb=A..B: its exposed communication against the bucket cap, beside an overhead model's optimum")
      ->check(cli::parsed_by([](const std::string& t) { parse_sweep(t); }));
  app.add_option("--plot", o.plot, "draw to this SVG or PNG (gnuplot): each mode's step as stacked bars; with "
                                   "--sweep its curves, with --compress both loss curves")->check(cli::figure_file());
  app.add_option_function<std::string>(
         "--compress", [&o](const std::string& t) { o.compress = parse_compression(t); },
         "none, bf16, powersgd:R or topk:F: average each step's gradients compressed, beside an uncompressed run "
         "(bytes, times and loss curves; --plot draws the curves)")
      ->check(cli::parsed_by([](const std::string& t) { parse_compression(t); }));
  app.add_flag("--bench", o.bench, "time the simulation: --ranks ranks against one rank on the same batches, "
                                   "and a payload-free 7B step on 1024 ranks");
  add_run_options(app, run_options);
  CLI11_PARSE(app, argc, argv);

  try {
    if (!o.plot.empty() && (o.volume || o.bench))
      throw Error(fmt::format("--plot {}: --volume and --bench draw no plot", o.plot));
    if (run_options.payload_free && o.what_if.empty() && o.sweep.over.empty())
      throw Error("--payload-free: the tiny GPT computes with real values (payload-free runs are --what-if's and "
                  "--sweep's)");
    if (o.volume) return volume(o, run_options.ranks);
    std::vector<DdpMode> modes;
    for (const std::string& mode : o.modes) modes.push_back(parse_ddp_mode(mode));
    const bool compressing = o.compress.kind != Compression::none;
    if (compressing) check_compress_alone(app, o, run_options);
    if (o.sweep.over == "ranks") return sweep(o, run_options);
    if (o.sweep.over == "bucket-mb") return bucket_sweep(o, run_options);
    if (!o.what_if.empty()) return what_if(o, run_options, modes);
    if (run_options.backend == "sim" && o.batch % run_options.ranks != 0)
      throw Error(fmt::format("--batch {} does not split over --ranks {}: each rank takes batch / ranks sequences",
                              o.batch, run_options.ranks));
    const Sequences corpus = training_sequences(o.seed, gpt_preset("tiny-gpt", 1).max_seq);
    const GptConfig config = gpt_preset("tiny-gpt", corpus.tokens.vocab);
    if (o.bench) return bench(o, run_options, corpus, config);
    if (compressing) {
      try {
        check_compression(o.compress, Gpt(config, o.seed).tensors(), "the tiny GPT");
      } catch (const std::invalid_argument& e) {
        throw Error(fmt::format("--compress {}: {}", name_of(o.compress), e.what()));
      }
      return compare_compression(o, run_options, corpus, config);
    }
    std::vector<ModeRun> runs;
    std::vector<std::string> traces;  // --trace: one file per mode where there are several
    for (DdpMode mode : modes) {
      RunOptions row = run_options;
      if (!row.trace.empty() && modes.size() > 1) traces.push_back(row.trace = row_file(row.trace, name_of(mode)));
      runs.push_back(train(o, row, mode, corpus, config));
    }
    if (runs.front().weights.empty()) return 0;  // a process of mpirun that ran another rank than 0

    const OneRank one_rank = train_one_rank(o, corpus, config);
    const double reordered = relative_difference(train_one_rank(o, corpus, config, true).weights, one_rank.weights);
    const double weight_limit = rounding_limit(reordered);
    fmt::print("ddp: tiny-gpt, {} ranks, global batch {}{}, {} steps, {}, {}; times per step, from rank 0's trace\n",
               runs.front().ranks, o.batch, o.accum > 1 ? fmt::format(" x {} micro-steps", o.accum) : "", o.steps,
               o.optimizer,
               run_options.backend == "sim" ? run_options.topology : "--backend " + run_options.backend);
    fmt::print("{:<9} {:>7} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>7}  {:>12} {:>12}  {}\n", "mode", "buckets",
               "T_fwd", "T_bwd", "T_comm", "T_opt", "exposed", "T_step", "model", "loss", "grads vs 1", "weights vs 1",
               "ranks agree");
    nlohmann::json rows = nlohmann::json::array();
    std::vector<std::string> failed;  // each criterion a mode missed, named
    for (const ModeRun& r : runs) {
      const StepTimes& t = r.per_step;
      const double model = t.forward + std::max(t.backward, t.comm) + t.optimizer;
      const double grads = relative_difference(r.first_grads, one_rank.first_grads);
      const double weights = relative_difference(r.weights, one_rank.weights);
      const std::string mode(name_of(r.mode));
      if (!(grads <= 1e-6)) failed.push_back(mode + ": " + failed_criterion("first gradients", grads, 1e-6));
      if (!(weights <= weight_limit)) failed.push_back(mode + ": " + failed_criterion("weights", weights, weight_limit));
      if (!r.ranks_agree) failed.push_back(mode + ": ranks' weights differ");
      fmt::print("{:<9} {:>7} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>7.4f}  {:>12.1e} {:>12.1e}  {}\n",
                 mode, r.buckets, format_seconds(t.forward), format_seconds(t.backward),
                 format_seconds(t.comm), format_seconds(t.optimizer), format_seconds(t.exposed()),
                 format_seconds(t.step), format_seconds(model), r.losses.back(), grads, weights,
                 r.ranks_agree ? "yes" : "NO");
      rows.push_back({{"mode", mode}, {"ranks", r.ranks}, {"buckets", r.buckets}, {"t_fwd", t.forward},
                      {"t_bwd", t.backward}, {"t_comm", t.comm}, {"t_opt", t.optimizer}, {"exposed", t.exposed()},
                      {"t_step", t.step}, {"overlap_model", model}, {"loss", r.losses},
                      {"gradients_vs_one_rank", grads}, {"weights_vs_one_rank", weights},
                      {"weights_limit", weight_limit}, {"ranks_agree", r.ranks_agree},
                      {"weights_fingerprint", fmt::format("{:016x}", r.fingerprint)}});
    }
    fmt::print("(vs 1: ||x - x1|| / ||x1|| against one rank on the global batch; the first step's averaged "
               "gradients, the last weights)\n");
    if (!traces.empty()) fmt::print("traces, one per mode: {}\n", fmt::join(traces, ", "));
    if (failed.empty())
      fmt::print("equal to one rank: gradients within 1e-6, weights within {:.1e} ({}: {}x, at least 1e-6, what "
                 "reversing each batch does to one rank's, {:.1e}), every rank bit for bit the same\n",
                 weight_limit, o.optimizer, kRoundingMargin, reordered);
    else
      fmt::print("MISMATCH: {}\n", fmt::join(failed, "; "));
    if (!o.json.empty()) create_file(o.json) << rows.dump(2) << '\n';
    if (!o.plot.empty()) {
      std::vector<std::pair<DdpMode, StepTimes>> steps;
      for (const ModeRun& r : runs) steps.emplace_back(r.mode, r.per_step);
      plot_step_bars(o.plot, fmt::format("DDP step of the tiny GPT on {} ranks", runs.front().ranks), steps);
    }
    return failed.empty() ? 0 : 1;
  } catch (const std::exception& e) {
    std::fflush(stdout);
    fmt::print(stderr, "error: {}\n", e.what());
    return 1;
  }
}
