// Lab 6: FSDP and ZeRO. Data parallelism that splits the model state over the
// ranks instead of copying it to each (parallel/fully_sharded.h): stage 1 the
// optimizer state, stage 2 the gradients too, stage 3 the parameters too,
// gathered one unit (a block) at a time just before they compute.
//
//   ./labkit lab fsdp --ranks 8 --steps 10
//
// Each stage trains the tiny GPT on the same batches and must end with the same
// weights as one rank training on the whole global batch; the lab checks it.
// The table shows what one rank keeps of the model's N parameters (its shard,
// padded so that every rank's is the same size) and what it sends per step,
// read from rank 0's trace, beside ZeRO's 2N (stages 0-2) and 3N (stage 3),
// counted as parameters' worth: an allreduce is a reduce-scatter and an
// all-gather, N each. Below it, each stage's memory on rank 0, as the sharded
// step told the rank's tracker, beside the memory lab's estimate.
//
//   --what-if llama2-7b   each stage's memory per GPU and a payload-free step of a
//                         real model's shapes (--prefetch forward|backward|both)
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "labkit/cli.h"
#include "labkit/error.h"
#include "labkit/memory.h"
#include "labkit/optim.h"
#include "labkit/output.h"
#include "labkit/parallel/equivalence.h"
#include "labkit/parallel/fully_sharded.h"
#include "labkit/parallel/sampler.h"
#include "labkit/parallel/sequences.h"
#include "labkit/run.h"
#include "labkit/units.h"

using namespace labkit;

namespace {

struct Options {
  std::vector<int> stages = {0, 1, 2, 3};
  int steps = 10, batch = 16;
  std::string optimizer = "sgd";
  float lr = 0.05f;
  std::uint64_t seed = 1337;
  std::string json;
  std::string what_if;      // a model preset: its payload-free step per stage instead of the tiny GPT
  double step_seconds = 2;  // --what-if: compute per step
  std::string gpu = "h100-80g";
  double seq = 4096;        // --what-if: tokens per sequence, one sequence per GPU
  std::string recompute = "selective";
  std::string prefetch = "none";  // --what-if, stage 3: which pass gathers the next layer under the current one
};

// The optimizer over whatever this rank updates: the whole model, or its shard.
struct Optimizer {
  std::string name;
  SgdMomentum sgd;
  AdamW adamw;
  explicit Optimizer(const Options& o) : name(o.optimizer), sgd{.lr = o.lr}, adamw{.lr = o.lr} {}
  void update(std::span<float> params, std::span<const float> grads) {
    if (name == "sgd") return sgd.update(params, grads);
    adamw.update(params, grads);
  }
  std::size_t state_bytes() const { return name == "sgd" ? sgd.velocity.size() * sizeof(float) : adamw.state_bytes(); }
  const char* estimator_name() const { return name == "sgd" ? "momentum" : "adamw"; }  // memory::optimizers()
};

struct StageRun {
  int stage = 0, ranks = 0;
  std::size_t parameters = 0, shard = 0, padding = 0;  // elements: the model's, one rank's shard, all the padding
  double volume = 0;            // parameters' worth sent per step by rank 0, from its trace
  double formula = 0;           // ZeRO's: 2N, or 3N less the second gathers of the units kept whole
  double step_seconds = 0;
  std::vector<float> losses;    // the global batch's mean loss per step
  std::vector<float> weights;   // rank 0's gathered weights at the end (on the process that ran rank 0)
  bool ranks_agree = false;     // every rank gathered the same weights, bit for bit
  MemoryTracker memory;         // rank 0's, current and peak by use
  std::size_t largest_block = 0, kept = 0;  // elements of the largest block, and of the units kept whole at stage 3
};

// Parameters' worth a collective moves, from a trace event's bytes: an
// allreduce is a reduce-scatter and an all-gather of its buffer.
double parameters_moved(const TraceEvent& e) {
  return double(e.bytes) / sizeof(float) * (e.name == "all_reduce" ? 2 : 1);
}

StageRun train(const Options& o, RunOptions run_options, int stage, const Sequences& data, const GptConfig& config) {
  StageRun out;
  out.stage = stage;
  run_options.keep_trace = true;
  double first = 0, last = 0;
  const RunResult result = run(run_options, [&](Comm& comm) {
    if (o.batch % comm.size() != 0)
      fail(comm.who(), "fsdp", "--batch {} does not split over {} ranks: each rank takes batch / ranks sequences",
           o.batch, comm.size());
    const int b = o.batch / comm.size();
    Gpt model(config, o.seed);  // the same seed: every rank starts from the same weights, and keeps its shard
    FullyShardedGpt sharded(comm, model, stage);
    Optimizer optimizer(o);
    const DistributedSampler sampler(data.count, comm.size(), comm.rank(), o.seed);
    std::vector<int> x, y;
    std::vector<float> losses;
    const double start = comm.now();
    for (int s = 0; s < o.steps; ++s) {
      fill_batch(data, batch_of(sampler, s, b), x, y);
      losses.push_back(sharded.forward_backward(x, y, b, config.max_seq));
      const double started = comm.now();
      sharded.step([&](std::span<float> w, std::span<const float> g) { optimizer.update(w, g); });
      if (s == 0) comm.track_memory(MemoryUse::optimizer, std::int64_t(optimizer.state_bytes()));  // sized now
      comm.computed("optimizer", started, 12.0 * double(sharded.stage() == 0 ? model.parameter_count()
                                                                             : sharded.shard_parameters().size()));
    }
    const double end = comm.now();
    std::vector<float> weights = sharded.gather_parameters();
    // Instruments (untraced, free of virtual time): every rank's losses and weights on rank 0.
    const auto all_losses = comm.inspect(view_of(losses));
    const auto all_weights = comm.inspect(view_of(weights));
    if (comm.rank() != 0) return;
    first = start, last = end;
    out.ranks = comm.size();
    out.parameters = model.parameter_count();
    out.shard = sharded.shard_parameters().size();
    for (const FullyShardedGpt::Unit& u : sharded.units()) out.padding += u.layout.padding();
    // units(): the embeddings, the blocks, the final norm.
    const auto& units = sharded.units();
    for (std::size_t u = 1; u + 1 < units.size(); ++u)
      out.largest_block = std::max(out.largest_block, units[u].layout.count);
    out.kept = units.front().layout.count + units.back().layout.count;
    out.memory = comm.memory();
    const double kept = double(units.front().layout.padded() + units.back().layout.padded());
    const double padded = double(out.parameters + out.padding);
    out.formula = stage == 0 ? 2.0 * double(out.parameters) : stage < 3 ? 2 * padded : 3 * padded - kept;
    out.weights = std::move(weights);
    out.ranks_agree = std::all_of(all_weights.begin(), all_weights.end(),
                                  [&](const auto& w) { return std::equal(w.begin(), w.end(), out.weights.begin()); });
    for (int s = 0; s < o.steps; ++s) {
      double sum = 0;
      for (const auto& rank_losses : all_losses) sum += rank_losses[s];
      out.losses.push_back(float(sum / all_losses.size()));
    }
  });
  if (result.trace && !out.weights.empty()) {
    for (const TraceEvent& e : result.trace->tracks()[0].events)
      if (e.kind == TraceEvent::Kind::collective && e.start >= first && e.start < last)  // not the final gather
        out.volume += parameters_moved(e);
    out.volume /= o.steps;
    out.step_seconds = (last - first) / o.steps;
  }
  return out;
}

// One rank, no communication, on the whole global batch of every step: what
// every stage must equal.
std::vector<float> train_one_rank(const Options& o, const Sequences& data, const GptConfig& config) {
  Gpt model(config, o.seed);
  Optimizer optimizer(o);
  const DistributedSampler sampler(data.count, 1, 0, o.seed);
  std::vector<int> x, y;
  for (int s = 0; s < o.steps; ++s) {
    fill_batch(data, batch_of(sampler, s, o.batch), x, y);
    model.forward(x, y, o.batch, config.max_seq);
    model.zero_grad();
    model.backward();
    optimizer.update({model.parameters().data(), model.parameter_count()},
                     {model.gradients().data(), model.parameter_count()});
  }
  return model.parameters().to_host();
}

const char* kept(int stage) {
  static const char* what[] = {"a copy of everything", "1/P of the optimizer state", "1/P of optimizer, gradients",
                               "1/P of everything"};
  return what[stage];
}

// Rank 0's peak memory by use beside the memory lab's estimate for the same
// configuration (fp32 weights, gradients and states, no master copy), each
// difference said on its line.
nlohmann::json print_memory(const StageRun& r, const Options& o, const GptConfig& config) {
  memory::Plan plan;
  plan.precision = memory::Precision::fp32;
  plan.state = {memory::Precision::fp32, memory::Precision::fp32, memory::Precision::fp32, false};
  plan.optimizer = Optimizer(o).estimator_name();
  plan.zero = r.stage;
  plan.dp = r.ranks;
  plan.micro_batch = double(o.batch) / r.ranks;
  plan.seq = config.max_seq;
  const memory::Breakdown estimate = memory::estimate(architecture_of(config), plan, memory::gpu_preset("h100-80g"));
  auto estimated = [&](const std::string& component) {
    for (const memory::Line& l : estimate.lines)
      if (l.component == component) return l.bytes;
    return 0.0;
  };
  const std::string padded = fmt::format("the shard is padded to a multiple of P ({} elements in all)", r.padding);
  const std::string one_unit = fmt::format("whole while they compute: the embeddings and final norm ({} parameters) "
                                           "and a block ({})", r.kept, r.largest_block);
  struct Row {
    MemoryUse use;
    const char* estimator;
    std::string why;
  };
  const Row rows[] = {
      {MemoryUse::weights, "weights", r.stage == 3 && r.padding ? padded : ""},
      {MemoryUse::gradients, "gradients",
       r.stage >= 2 ? fmt::format("the shard{}, + whole: the embeddings' and final norm's through backward, a block's from its backward to "
                                  "its reduce-scatter", r.padding ? " (padded)" : "")
                    : ""},
      {MemoryUse::optimizer, "optimizer states", r.stage >= 1 && r.padding ? padded : ""},
      {MemoryUse::activations, "activations",
       "the estimate is Korthikanti et al.'s 16-bit 34 sbh + 5 as^2 b per layer; the tiny GPT keeps fp32 and "
       "llm.c's buffers (logits, probabilities, losses, their gradients)"},
      {MemoryUse::gathered, nullptr, r.stage == 3 ? one_unit + "; the estimator counts none" : ""},
  };
  fmt::print("stage {}: rank 0's peak memory by use (its tracker) beside the memory lab's estimate\n", r.stage);
  fmt::print("  {:<12} {:>10} {:>10} {:>10}\n", "use", "measured", "estimate", "off by");
  nlohmann::json out = nlohmann::json::array();
  for (const Row& row : rows) {
    const double measured = double(r.memory.peak[std::size_t(row.use)]);
    const double want = row.estimator ? estimated(row.estimator) : 0;
    fmt::print("  {:<12} {:>10} {:>10} {:>10}{}\n", name_of(row.use), format_bytes(std::uint64_t(measured)),
               row.estimator ? format_bytes(std::uint64_t(want)) : "-",
               want > 0 ? fmt::format("{:+.1f}%", 100 * (measured - want) / want) : "-",
               row.why.empty() ? "" : "  " + row.why);
    out.push_back({{"stage", r.stage}, {"use", name_of(row.use)}, {"measured_peak", measured}, {"estimate", want}});
  }
  fmt::print("  {:<12} {:>10}\n", "peak total", format_bytes(std::uint64_t(r.memory.peak_total)));
  return out;
}

// --what-if MODEL: each stage's memory per GPU (the memory lab's estimate:
// mixed-precision AdamW, 16 bytes per parameter before sharding) and a
// payload-free step of the model's shapes on --ranks GPUs, beside ZeRO's
// Figure 1 and the reading's FSDP bound. A model that does not fit even at
// stage 3 is refused first, with the GPUs it needs.
int what_if(const Options& o, RunOptions run_options) {
  const memory::Architecture arch = memory::model_preset(o.what_if);
  const memory::Gpu gpu = memory::gpu_preset(o.gpu);
  const int p = run_options.ranks;
  auto plan_for = [&](int stage) {
    memory::Plan plan;
    plan.zero = stage;
    plan.dp = p;
    plan.seq = o.seq;
    plan.recompute = memory::parse_recompute(o.recompute);
    return plan;
  };
  const memory::Breakdown sharded = memory::estimate(arch, plan_for(3), gpu);
  if (!sharded.fits()) {
    const int needed = memory::gpus_needed(arch, plan_for(3), gpu);
    throw Error(fmt::format("--what-if {} on --ranks {}: does not fit on {} even at stage 3, {} per GPU against {} "
                            "({} over); {}", o.what_if, p, gpu.name, format_bytes(std::uint64_t(sharded.total)),
                            format_bytes(std::uint64_t(gpu.bytes)), format_bytes(std::uint64_t(sharded.total - gpu.bytes)),
                            needed ? fmt::format("it needs --ranks {} or more", needed)
                                   : "no rank count will do: the activations do not shrink with data parallelism "
                                     "(a shorter --seq, or --recompute full)"));
  }
  const double n = memory::count_parameters(arch).total;
  fmt::print("fsdp --what-if {}: {:.2f}B parameters, {} ranks on {}, {} of compute per step; per GPU, mixed-precision "
             "AdamW, one sequence of {:g} tokens, {} recomputation, {}; stage 3 prefetching {} ...\n", o.what_if,
             n / 1e9, p, run_options.topology, format_seconds(o.step_seconds), o.seq, o.recompute, gpu.name,
             o.prefetch == "none" ? "nothing" : o.prefetch == "both" ? "in both passes" : "in " + o.prefetch);
  std::fflush(stdout);
  fmt::print("{:<5} {:>9} {:>9} {:>9} {:>11} {:>10} {:>5} {:>9} {:>9}\n", "stage", "weights", "gradients", "optimizer",
             "activations", "total", "fits", "T_step", "exposed");
  nlohmann::json rows = nlohmann::json::array();
  for (int stage : o.stages) {
    const memory::Breakdown b = memory::estimate(arch, plan_for(stage), gpu);
    auto line = [&](const char* component) {
      for (const memory::Line& l : b.lines)
        if (l.component == component) return l.bytes;
      return 0.0;
    };
    const double optimizer = line("master weights") + line("optimizer states");
    RunOptions payload_free = run_options;
    payload_free.payload_free = true;
    const double step = run(payload_free, [&](Comm& comm) {
      sharded_shaped_step(comm, arch, o.step_seconds, stage, parse_prefetch(o.prefetch));
    }).elapsed;
    fmt::print("{:<5} {:>9} {:>9} {:>9} {:>11} {:>10} {:>5} {:>9} {:>9}\n", stage,
               format_bytes(std::uint64_t(line("weights"))), format_bytes(std::uint64_t(line("gradients"))),
               format_bytes(std::uint64_t(optimizer)), format_bytes(std::uint64_t(line("activations"))),
               format_bytes(std::uint64_t(b.total)), b.fits() ? "yes" : "no", format_seconds(step),
               format_seconds(step - o.step_seconds));
    rows.push_back({{"stage", stage}, {"weights", line("weights")}, {"gradients", line("gradients")},
                    {"optimizer", optimizer}, {"activations", line("activations")}, {"total", b.total},
                    {"fits", b.fits()}, {"t_step", step}, {"exposed", step - o.step_seconds}});
  }
  fmt::print("(total: with the framework, communication buffers and a 20% margin, as the memory lab counts them; "
             "exposed: T_step less the {} of compute)\n", format_seconds(o.step_seconds));
  // ZeRO's Figure 1: 7.5B parameters, K = 12, Nd = 64.
  std::string figure;
  for (int stage = 0; stage <= 3; ++stage)
    figure += fmt::format("{}{:.1f}", stage ? ", " : "",
                          memory::model_state_bytes(7.5e9, {}, memory::find_optimizer("adam"), stage, 64).total() / 1e9);
  fmt::print("ZeRO's Figure 1 (7.5B parameters, 64 GPUs): model state {} GB per GPU at stages 0-3 (the paper: 120, "
             "31.4, 16.6, 1.9)\n", figure);
  double largest_layer = 0;
  for (const memory::WeightTensor& t : memory::layer_tensors(arch, 0)) largest_layer += t.count;
  fmt::print("the reading's FSDP bound 16N/P + 2N = {} counts the whole model gathered in bf16; FSDP gathers one "
             "layer at a time: 16N/P + two layers in bf16 (one computing, the next prefetched) = {}\n",
             format_bytes(std::uint64_t(16 * n / p + 2 * n)), format_bytes(std::uint64_t(16 * n / p + 2 * 2 * largest_layer)));
  if (!o.json.empty()) create_file(o.json) << rows.dump(2) << '\n';
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Lab 6: FSDP and ZeRO: data parallelism with the model state sharded, stage 0 (DDP) to 3"};
  cli::one_line_errors(app);
  Options o;
  RunOptions run_options;
  run_options.ranks = 8;
  app.add_option("--stage", o.stages, "ZeRO stage: 0 (DDP), 1 (optimizer state), 2 (and gradients), 3 (and "
                                      "parameters: FSDP); several: a row each")
      ->capture_default_str()->check(cli::in_range(0, 3));
  app.add_option("--steps", o.steps, "optimizer steps")->capture_default_str()->check(cli::at_least(1));
  app.add_option("--batch", o.batch, "global batch: sequences per step over all ranks")
      ->capture_default_str()->check(cli::at_least(1));
  app.add_option("--optimizer", o.optimizer, "sgd (momentum 0.9) or adamw")
      ->capture_default_str()->check(cli::one_of("optimizer", {"sgd", "adamw"}));
  app.add_option("--lr", o.lr, "learning rate")->capture_default_str()->check(cli::above(0.0f));
  app.add_option("--seed", o.seed, "initialisation, corpus and shuffling")
      ->capture_default_str()->check(cli::at_least(std::uint64_t(0)));
  app.add_option("--json", o.json, "also write the table as JSON to this file");
  app.add_option("--what-if", o.what_if, "a model preset (llama2-7b, ...): each stage's memory per GPU and a "
                                         "payload-free step of its shapes")
      ->check(cli::parsed_by([](const std::string& name) { memory::model_preset(name); }));
  app.add_option("--step-seconds", o.step_seconds, "--what-if: compute per step, in seconds")
      ->capture_default_str()->check(cli::above(0.0));
  app.add_option("--gpu", o.gpu, "--what-if: the GPU whose memory must hold it")
      ->capture_default_str()->check(cli::parsed_by([](const std::string& name) { memory::gpu_preset(name); }));
  app.add_option("--seq", o.seq, "--what-if: tokens per sequence (one sequence per GPU)")
      ->capture_default_str()->check(cli::at_least(1.0));
  app.add_option("--recompute", o.recompute, "--what-if: activation recomputation: none, selective or full")
      ->capture_default_str()->check(cli::one_of("recomputation", {"none", "selective", "full"}));
  app.add_option("--prefetch", o.prefetch, "--what-if, stage 3: gather the next layer under the current one's "
                                           "compute in the forward pass, the backward, or both (none: in front of it)")
      ->capture_default_str()->check(cli::one_of("prefetch", {"none", "forward", "backward", "both"}));
  add_run_options(app, run_options);
  CLI11_PARSE(app, argc, argv);

  try {
    if (o.prefetch != "none" && (o.what_if.empty() || std::find(o.stages.begin(), o.stages.end(), 3) == o.stages.end()))
      throw Error(fmt::format("--prefetch {}: does nothing here: only stage 3 gathers parameters before they compute, "
                              "and only --what-if runs it prefetched (for now)", o.prefetch));
    if (!o.what_if.empty()) return what_if(o, run_options);
    if (run_options.backend == "sim" && o.batch % run_options.ranks != 0)
      throw Error(fmt::format("--batch {} does not split over --ranks {}: each rank takes batch / ranks sequences",
                              o.batch, run_options.ranks));
    if (run_options.backend == "nccl")
      throw Error("--backend nccl: the sharded step keeps its shards in host memory (sim or mpi for now)");
    const Sequences data = training_sequences(o.seed, gpt_preset("tiny-gpt", 1).max_seq);
    const GptConfig config = gpt_preset("tiny-gpt", data.tokens.vocab);
    std::vector<StageRun> runs;
    for (int stage : o.stages) runs.push_back(train(o, run_options, stage, data, config));
    if (runs.front().weights.empty()) return 0;  // a process of mpirun that ran another rank than 0

    const std::vector<float> one_rank = train_one_rank(o, data, config);
    // SGD keeps the weights within rounding of one rank's; AdamW divides each
    // step by sqrt(v), so a gradient element that nearly cancels drifts further
    // (the DDP lab measures it).
    const double limit = o.optimizer == "sgd" ? 1e-6 : 1e-4;
    const StageRun& r0 = runs.front();
    fmt::print("fsdp: tiny-gpt ({} parameters), {} ranks, global batch {}, {} steps, {}; per step, rank 0\n",
               r0.parameters, r0.ranks, o.batch, o.steps, o.optimizer);
    fmt::print("{:<5} {:<28} {:>10} {:>8} {:>10} {:>10} {:>7} {:>9} {:>8} {:>13}  {}\n", "stage", "each rank keeps",
               "shard", "padding", "sent", "formula", "x N", "T_step", "loss", "weights vs 1", "ranks agree");
    nlohmann::json rows = nlohmann::json::array();
    bool all_equal = true;
    for (const StageRun& r : runs) {
      const double weights = relative_difference(r.weights, one_rank);
      all_equal = all_equal && weights <= limit && r.ranks_agree && std::abs(r.volume - r.formula) < 0.5;
      fmt::print("{:<5} {:<28} {:>10} {:>8} {:>10.0f} {:>10.0f} {:>6.2f}x {:>9} {:>8.4f} {:>13.1e}  {}\n", r.stage,
                 kept(r.stage), r.stage == 0 ? r.parameters : r.shard, r.stage == 0 ? 0 : r.padding, r.volume,
                 r.formula, r.volume / double(r.parameters), format_seconds(r.step_seconds), r.losses.back(),
                 weights, r.ranks_agree ? "yes" : "NO");
      rows.push_back({{"stage", r.stage}, {"ranks", r.ranks}, {"parameters", r.parameters}, {"shard", r.shard},
                      {"padding", r.padding}, {"sent_parameters_per_step", r.volume}, {"formula", r.formula},
                      {"t_step", r.step_seconds}, {"loss", r.losses}, {"weights_vs_one_rank", weights},
                      {"ranks_agree", r.ranks_agree}});
    }
    fmt::print("(shard: parameters one rank keeps, padded so every rank's is the same size; sent: parameters' worth "
               "per step, an allreduce counting 2N; formula: 2N, and 3N less the second gathers of the embeddings and final norm, kept whole through the step)\n");
    nlohmann::json memory_rows = nlohmann::json::array();
    for (const StageRun& r : runs)
      for (const nlohmann::json& row : print_memory(r, o, config)) memory_rows.push_back(row);
    if (all_equal)
      fmt::print("equal to one rank: weights within {:g} ({}), every rank bit for bit the same, sent = formula\n",
                 limit, o.optimizer);
    else
      fmt::print("MISMATCH: weights past {:g}, ranks that differ, or bytes off the formula\n", limit);
    if (!o.json.empty())
      create_file(o.json) << nlohmann::json{{"stages", rows}, {"memory", memory_rows}}.dump(2) << '\n';
    return all_equal ? 0 : 1;
  } catch (const std::exception& e) {
    std::fflush(stdout);
    fmt::print(stderr, "error: {}\n", e.what());
    return 1;
  }
}
