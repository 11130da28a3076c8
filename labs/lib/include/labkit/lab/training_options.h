// labkit::lab::TrainingOptions — the options every training lab takes, each
// checked the same way everywhere; a lab gives its defaults and its words.
//
//   struct Options : lab::TrainingOptions {
//     Options() : TrainingOptions{.steps = 20, .batch = 16, .lr = 3e-3f} {}
//     ...
//   };
//   lab::add_training_options(app, o, {.batch = "global batch: sequences per step over all ranks"});
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace CLI {
class App;  // CLI11's, from <CLI/CLI.hpp> where options are added
}

namespace labkit {
struct RunOptions;  // labkit/run.h
struct Sequences;   // labkit/parallel/sequences.h
}

namespace labkit::lab {

struct TrainingOptions {
  int steps = 4;
  int batch = 8;
  float lr = 0.1f;
  std::uint64_t seed = 1337;
  std::string model = "tiny-gpt";  // labkit::gpt_preset's name
  std::string device = "cpu";  // where each rank's tensors live and its ops run (labkit::parse_device)
  std::string json;   // also write the lab's tables as JSON to this file
  bool bench = false;  // time the simulation instead
};

// What each option means in this lab, on its --help line. An empty `batch` or
// `bench` leaves that option to the lab.
struct TrainingWords {
  std::string batch = "sequences per step";
  int max_batch = 0;  // 0: no bound but the int's
  std::string lr = "learning rate";
  bool lr_says_its_default = false;  // `lr` gives the default (it depends on the optimizer): --help shows no other
  std::string seed = "initialisation, corpus and sampling";
  std::string json = "also write the table as JSON to this file";
  std::string bench;
  // The GPT presets follow; "" leaves --model out (the lab trains the tiny GPT).
  std::string model;
  std::string device = "where each rank's model trains";  // the devices follow; "" leaves --device out
};

// Adds --steps, --batch, --lr, --seed, --model, --device, --json and --bench, with `o`'s values as their defaults.
void add_training_options(CLI::App& app, TrainingOptions& o, const TrainingWords& words);

// A step reads `batch` x `accum` sequences of `corpus` over all its ranks, each
// at most once (a DistributedSampler's epoch, as the one-rank run it is checked
// against reads them): more than the corpus holds is an error that gives the
// largest --batch, before any rank starts.
void check_batch_fits_corpus(const Sequences& corpus, int batch, int accum = 1);

// The tiny GPT computes with real values, so --payload-free (`payload_free`)
// on its run is an error that names the lab's runs that take it, `studies`
// (its options: {"--what-if", "--sweep"}; none where the lab has none).
void refuse_payload_free(bool payload_free, const std::vector<std::string>& studies);

// A view that trains no GPT (`view`: "--what-if runs payload-free"): --model
// or --device other than their defaults, or a backend other than the
// simulator, is an error that says so.
void refuse_model_device_backend(const TrainingOptions& o, const RunOptions& run_options, const std::string& view);

// --trace where a view (`view`: "--sweep ranks=8..64") runs a simulation for
// each of its points, too many for a file each: an error that says so and
// what to trace instead (`instead`: "trace one point: --what-if MODEL").
void refuse_trace_of_many_runs(const RunOptions& run_options, const std::string& view, const std::string& instead);

// A lab whose shape fixes its ranks, `count` of them, one per `per` (the
// pipeline's stages, MoE's expert-parallel ranks), set by `option` ("--stages"):
// --ranks, where given, must be `count`, and under mpirun so must -np, checked
// before MPI starts rather than when a rank finds the group another size.
void check_ranks_of_shape(const RunOptions& run_options, int count, std::string_view option, std::string_view per);
// A data-parallel lab's --batch splits evenly over its ranks (each takes batch / ranks sequences).
void check_batch_splits(int batch, const RunOptions& run_options);

}  // namespace labkit::lab
