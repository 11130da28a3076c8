// Train a tiny GPT on the kit's character corpus, on one rank (training.cpp).
//
//   ./labkit lab train --model tiny-gpt --steps 200
//
//   tiny-gpt: 104064 parameters, 2 layers, 64 channels, context 32, vocabulary 30
//   step     0/200  loss 3.4212  val 3.4082
//   step    20/200  loss 2.1288  val 2.1900
//   ...
//
// It ends with the run's throughput, its memory per rank and its model FLOPs
// utilization (mfu.cpp): on the simulated device and, with --mfu, on this one.
// The data-parallel, FSDP, tensor- and pipeline-parallel labs check their runs
// against this one. --checkpoint-every N saves the run, --resume goes on from
// it (--fail-rank 0 --at T stops one on purpose).
#include <fmt/format.h>

#include "labkit/cli.h"
#include "labkit/error.h"
#include "labkit/gpt.h"
#include "labkit/lab/main.h"
#include "train_lab.h"

using namespace labkit;
using namespace train_lab;

int main(int argc, char** argv) {
  CLI::App app{"Train a tiny GPT on one rank"};
  Options o;
  RunOptions run_options{.ranks = 1};
  lab::add_training_options(app, o, {.lr = "AdamW learning rate", .seed = "initialisation and corpus",
                                     .json = "also write the loss curve, the memory and the MFU as JSON",
                                     .model = "the GPT",
                                     .device = "where the model trains"});
  app.add_option("--print-every", o.print_every, "steps between loss lines")
      ->capture_default_str()->check(cli::at_least(1));
  app.add_option("--checkpoint", o.checkpoint, "the file --checkpoint-every writes and --resume reads")
      ->capture_default_str();
  app.add_option("--checkpoint-every", o.checkpoint_every, "save the run every N steps and after the last")
      ->check(cli::at_least(1));
  app.add_flag("--resume", o.resume, "go on from --checkpoint instead of from step 0");
  app.add_flag("--mfu", o.mfu, "also measure this device's peak FLOP/s and print the MFU here");
  add_run_options(app, run_options);
  return lab::run_main(app, argc, argv, [&] {
    if (app.count("--checkpoint") && !o.checkpoint_every && !o.resume)
      throw Error(fmt::format("--checkpoint {}: nothing writes or reads it without --checkpoint-every or --resume",
                              o.checkpoint));
    // Where it will be written, checked before training, as --json is.
    if (std::string path = o.checkpoint; o.checkpoint_every)
      if (const std::string why = cli::output_file()(path); !why.empty())
        throw Error(fmt::format("--checkpoint {}: {}", o.checkpoint, why));
    lab::refuse_payload_free(run_options.payload_free, {});
    if (o.mfu && o.device == "fenced")
      throw Error("--mfu --device fenced: the fenced device is slow on purpose (a test's); measure cpu or cuda");
    return train(o, run_options);
  });
}
