// Lab 6: FSDP and ZeRO. Data parallelism that splits the model state over the
// ranks instead of copying it to each (parallel/fully_sharded.h): stage 1 the
// optimizer state, stage 2 the gradients too, stage 3 the parameters too,
// gathered one unit (a block) at a time just before they compute.
//
//   ./labkit lab fsdp --ranks 8 --steps 10
//
//   fsdp: tiny-gpt (104064 parameters), 8 ranks, global batch 16, 10 steps, sgd; per step, rank 0
//   stage each rank keeps                   shard  padding       sent      bytes    formula     x N    T_step ...
//   0     a copy of everything             104064        0     208128    813 KiB     208128   2.00x   20.2 us ...
//   1     1/P of the optimizer state        13008        0     208128    813 KiB     208128   2.00x   26.8 us ...
//   ...
//
// Each stage must end with one rank's weights and send ZeRO's 2N or 3N
// (stages.cpp), with rank 0's memory beside the memory lab's estimate
// (memory.cpp). The studies, payload-free at the scale of real models:
//   --what-if llama2-7b   each stage's memory per GPU and a payload-free step of a
//                         real model's shapes (--prefetch forward|backward|both),
//                         beside ZeRO's Figure 1 (Rajbhandari et al. 2020) and the
//                         long guide's ZeRO table (what_if.cpp)
//   --sweep ranks=8..1024 the same on 8 to 1024 GPUs of every topology preset
//   --sweep hidden=256..16384 the layer size from which prefetching hides stage 3's gathers (prefetch.cpp)
// --bench what the simulation costs (bench.cpp).
#include <fmt/format.h>

#include "fsdp.h"
#include "labkit/lab/main.h"
#include "labkit/lab/option_checks.h"

using namespace fsdp_lab;

int main(int argc, char** argv) {
  CLI::App app{"Lab 6: FSDP and ZeRO: data parallelism with the model state sharded, stage 0 (DDP) to 3"};
  Options o;
  RunOptions run_options{.ranks = 8};
  run_options.lab_reads_topology = true;  // its nodes: hpZ's and qgZ's groups, what crosses "off node"
  add_sharding_options(app, o);
  lab::add_training_options(app, o, {.batch = "global batch: sequences per step over all ranks",
                                     .lr = fmt::format("learning rate (default {:g} with sgd, {:g} with adamw)",
                                                       kSgdLr, kAdamwLr),
                                     .lr_says_its_default = true,
                                     .seed = "initialisation, corpus and shuffling",
                                     .bench = "time the simulation itself: stage 3 against stage 0 on the tiny GPT, "
                                              "and a payload-free 70B stage-3 step on 1024 ranks",
                                     .model = "the GPT the ranks shard"});
  app.add_option("--optimizer", o.optimizer, "sgd (momentum 0.9) or adamw")
      ->capture_default_str()->check(cli::one_of("optimizer", {"sgd", "adamw"}));
  add_what_if_options(app, o);
  app.add_option("--plot", o.plot, "draw each stage's memory at rank 0's peak, stacked by use (with --sweep "
                                   "hidden: T_f and T_g over the hidden sizes), to this SVG or PNG (gnuplot)")
      ->check(cli::figure_file());
  add_run_options(app, run_options);
  return lab::run_main(app, argc, argv, [&] {
    refuse_what_the_run_does_not_read(app, o);
    if (!app.count("--lr")) o.lr = o.optimizer == "adamw" ? kAdamwLr : kSgdLr;
    check_sharding_options(o, run_options, app.count("--stage") > 0);
    if (!o.sweep.over.empty())
      lab::refuse_trace_of_many_runs(run_options, cli::sweep_flag(o.sweep),
                                     "trace one model's step: --what-if MODEL with its --ranks and --topology");
    if (o.sweep.over == "hidden") return prefetch_sweep(o, run_options);
    if (!o.sweep.over.empty()) return sweep(o, run_options);
    if (!o.what_if.empty()) return what_if(o, run_options);
    check_tiny_gpt_run(o, run_options);
    const Sequences data = training_sequences(o.seed, gpt_preset(o.model, 1).max_seq);
    lab::check_batch_fits_corpus(data, o.batch);
    const GptConfig config = gpt_preset(o.model, data.tokens.vocab);
    if (o.bench) return bench(o, run_options, data, config);
    return train_stages(o, run_options, data, config);
  });
}
