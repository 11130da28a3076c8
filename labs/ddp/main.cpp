// Lab 5: data parallelism. Every rank holds the whole tiny GPT, reads its own
// shard of each global batch, and the ranks average their gradients before the
// optimizer, naively, in buckets, or overlapped with backward (modes.cpp):
//
//   ./labkit lab ddp --ranks 8 --steps 20
//
//   ddp: tiny-gpt, 8 ranks, global batch 16, 20 steps, adamw, dgx-h100; times per step, from rank 0's trace
//   mode      buckets     T_fwd     T_bwd    T_comm     T_opt   exposed    T_step     model
//   naive           1   27.0 ns   54.0 ns   20.2 us   2.53 ns   20.2 us   20.2 us   20.2 us
//
// The studies, payload-free at the scale of real runs (what_if.cpp): --what-if
// MODEL, --sweep ranks=A..B or bucket-mb=A..B, --volume; --bench what the
// simulation costs (bench.cpp); --compress bf16, powersgd:R or topk:F beside the
// uncompressed averaging (compression.cpp).
#include <algorithm>

#include <fmt/format.h>

#include "ddp.h"
#include "labkit/error.h"
#include "labkit/lab/main.h"
#include "labkit/lab/option_checks.h"
#include "labkit/lab/training_options.h"

using namespace ddp_lab;

namespace {

// Which run the options make, and the options it does not read, refused by
// name: the studies (--volume, --sweep, --what-if) train nothing, and each
// picks some of the cluster itself; training charges no --step-seconds.
void refuse_what_the_run_does_not_read(const CLI::App& app, const Options& o) {
  std::vector<std::string> unread = {"--steps",     "--batch",  "--lr",   "--seed",  "--accum",
                                     "--optimizer", "--warmup", "--clip", "--bench", "--compress"};
  const auto also = [&](std::initializer_list<std::string> more) { unread.insert(unread.end(), more); };
  std::string run;
  if (o.volume) {
    run = "--volume";
    also({"--what-if", "--sweep", "--mode", "--bucket-mb", "--first-bucket-mb", "--step-seconds", "--backend",
          "--topology", "--network", "--trace", "--algo", "--efficiency", "--straggler", "--fail-rank"});
  } else if (!o.sweep.over.empty()) {
    run = cli::sweep_flag(o.sweep);
    also({"--mode", "--efficiency"});
    if (o.sweep.over == "ranks") also({"--ranks", "--topology", "--bucket-mb", "--first-bucket-mb"});
    if (o.sweep.over == "bucket-mb") also({"--bucket-mb"});
  } else if (!o.what_if.empty()) {
    run = "--what-if " + o.what_if;
    also({"--efficiency"});
  } else {
    run = o.bench ? "--bench" : "a training run";
    unread = {"--step-seconds"};
    if (o.bench) also({"--mode", "--compress", "--trace", "--algo"});  // native collectives, overlap mode
  }
  cli::refuse_unread(app, run, unread);
  // Naive averaging reduces the whole gradient at once, in no bucket.
  if (!o.volume && o.sweep.over.empty() &&
      std::all_of(o.modes.begin(), o.modes.end(), [](const std::string& m) { return m == "naive"; }))
    cli::refuse_unread(app, "--mode naive (one all-reduce of the whole gradient)", {"--bucket-mb", "--first-bucket-mb"});
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Lab 5: data parallelism (DDP): naive, bucketed and overlapped gradient averaging"};
  Options o;
  RunOptions run_options{.ranks = 8};
  lab::add_training_options(app, o, {.batch = "global batch: sequences per step over all ranks",
                                     .seed = "initialisation, corpus and shuffling",
                                     .bench = "time the simulation: --ranks ranks against one rank on the same "
                                              "batches, and a payload-free 7B step on 1024 ranks",
                                     .model = "the GPT each rank holds"});
  app.add_option("--mode", o.modes, "naive, bucketed or overlap (several: a row each)")
      ->capture_default_str()->check(cli::one_of("mode", {"naive", "bucketed", "overlap"}));
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
  add_what_if_options(app, o);
  app.add_option("--plot", o.plot, "draw to this SVG or PNG (gnuplot): each mode's step as stacked bars; with "
                                   "--sweep its curves, with --compress both loss curves")->check(cli::figure_file());
  add_compress_option(app, o);
  add_run_options(app, run_options);
  return lab::run_main(app, argc, argv, [&] {
    refuse_what_the_run_does_not_read(app, o);
    if (!o.plot.empty() && (o.volume || o.bench))
      throw Error(fmt::format("--plot {}: --volume and --bench draw no plot", o.plot));
    if (o.what_if.empty() && o.sweep.over.empty())
      lab::refuse_payload_free(run_options.payload_free, {"--what-if", "--sweep"});
    else
      lab::refuse_model_device_backend(o, run_options, (o.what_if.empty() ? "--sweep" : "--what-if") +
                                                           std::string(" runs payload-free"));
    if (o.volume) {
      lab::refuse_model_device_backend(o, run_options, "--volume computes a formula");
      return volume(o, run_options.ranks);
    }
    std::vector<DdpMode> modes;
    for (const std::string& mode : o.modes) modes.push_back(parse_ddp_mode(mode));
    const bool compressing = o.compress.kind != Compression::none;
    if (compressing) check_compress_alone(app, o);
    if (!o.sweep.over.empty())
      lab::refuse_trace_of_many_runs(run_options, cli::sweep_flag(o.sweep),
                                     "trace one of its points: --what-if with that --ranks, --topology or --bucket-mb");
    if (o.sweep.over == "ranks") return sweep(o, run_options);
    if (o.sweep.over == "bucket-mb") return bucket_sweep(o, run_options);
    if (!o.what_if.empty()) return what_if(o, run_options, modes);
    lab::check_batch_splits(o.batch, run_options);
    const Sequences corpus = training_sequences(o.seed, gpt_preset(o.model, 1).max_seq);
    lab::check_batch_fits_corpus(corpus, o.batch, o.accum);
    const GptConfig config = gpt_preset(o.model, corpus.tokens.vocab);
    if (o.bench) return bench(o, run_options, corpus, config);
    if (compressing) return compare_compression(o, run_options, corpus, config);
    return train_modes(o, run_options, modes, corpus, config);
  });
}
