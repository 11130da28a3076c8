// Lab 7: tensor parallelism. Megatron-LM's split of every layer over the
// ranks (parallel/tensor_parallel_gpt.h): attention by heads, the MLP by its
// hidden features, the vocabulary by rows; every rank sees the same batch.
//
//   ./labkit lab tp --ranks 4 --steps 10
//
//   tp: tiny-gpt (104064 parameters, 4 heads, vocabulary 30), 4 ranks, batch 4 x 32 tokens on every rank, ...
//      tp  heads  each rank keeps  padding         per layer  sent/layer     formula    T_step     loss ...
//       4    1/4      28256 (27%)        2      4 allreduces     192 KiB     192 KiB    126 us   2.8942 ...
//
// The ranks train the tiny GPT together and must end with the weights one rank
// reaches alone, each rank's slice of them (tensor_parallel.cpp); the table
// shows what a rank keeps and what the layers send, read from rank 0's trace,
// beside Megatron's formula, then layer 0's f and g (traffic.cpp) and rank 0's
// activations. --sp (sequence parallelism) makes each allreduce a
// reduce-scatter and an all-gather, the same bytes.
//
//   --what-if gpt3-175b   a layer's time with its allreduces inside a node and across nodes (what_if.cpp)
//   --cp 4                context parallelism: attention over sequence shards (context_parallel.cpp)
//   --bench               what the simulation costs in wall time (bench.cpp)
#include "labkit/error.h"
#include "labkit/lab/main.h"
#include "labkit/lab/option_checks.h"
#include "labkit/lab/training_options.h"
#include "labkit/lab/what_if.h"
#include "tp.h"

using namespace tp_lab;

int main(int argc, char** argv) {
  CLI::App app{"Lab 7: tensor parallelism: Megatron's split of the tiny GPT's layers over the ranks"};
  Options o;
  RunOptions run_options{.ranks = 4};
  app.add_flag("--sp", o.sp, "sequence parallelism: the norms and residuals on shards of the sequence, each "
                            "allreduce a reduce-scatter and an all-gather");
  lab::add_training_options(app, o, {.batch = "sequences per step, the same on every rank",
                                     .lr = "learning rate (SGD, momentum 0.9)",
                                     .bench = "time the simulation itself: the tensor-parallel steps on --ranks "
                                              "simulated ranks against the dense model's on one",
                                     .device = "where each rank's slices live and compute"});
  lab::add_what_if(app, o.what_if, "a model preset (gpt3-175b, ...): one layer's time with tensor parallelism "
                                   "inside a node and across nodes, payload-free");
  add_context_parallel_options(app, o);
  app.add_option("--plot", o.plot, "draw layer 0's timeline on rank 0 with Megatron's f and g (with --cp, the two "
                                  "layouts' attention matrices coloured by the rank that computes each block) to this "
                                  "file (.svg or .png)")->check(cli::figure_file());
  app.add_option("--seq", o.seq, "with --cp: the sequence length (default: the tiny GPT's context); with --what-if: "
                                "the layer's (default: the model's learned context)")
      ->check(cli::at_least(1));
  add_run_options(app, run_options);
  return lab::run_main(app, argc, argv, [&] {
    // What the run asked for does not read, refused by name: --what-if times a
    // real model's layer on topologies of its own rows; --cp runs attention
    // alone, no optimizer, over sends (no collective: --algo), and payload-free
    // draws no values; --bench draws nothing and times its runs untraced.
    if (!o.what_if.empty()) {
      cli::refuse_unread(app, "--what-if " + o.what_if,
                         {"--steps", "--batch", "--lr", "--seed", "--bench", "--topology", "--plot"});
      lab::refuse_trace_of_many_runs(run_options, "--what-if " + o.what_if,
                                     "trace the tensor-parallel GPT's steps (no --what-if)");
    } else if (o.cp) {
      std::vector<std::string> unread = {"--steps", "--lr", "--algo"};
      if (run_options.payload_free) unread.push_back("--seed");
      if (o.bench) unread.push_back("--trace");
      cli::refuse_unread(app, fmt::format("--cp {}{}{}", o.cp, run_options.payload_free ? " --payload-free" : "",
                                          o.bench ? " --bench" : ""), unread);
    } else if (o.bench) {
      cli::refuse_unread(app, "--bench", {"--plot", "--trace"});
    }
    const Sequences data = training_sequences(o.seed, gpt_preset("tiny-gpt", 1).max_seq);
    const GptConfig config = gpt_preset("tiny-gpt", data.tokens.vocab);
    check_options(o, run_options, config);
    if (o.cp) return context_parallel(o, run_options, config);
    if (!o.what_if.empty()) return what_if(o, run_options);
    lab::check_batch_fits_corpus(data, o.batch);
    if (o.bench) return bench(o, run_options, data, config);
    return tensor_parallel(o, run_options, data, config);
  });
}
