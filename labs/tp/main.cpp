// Lab 7: tensor parallelism. Megatron-LM's split of every layer over the
// ranks (parallel/tensor_parallel_gpt.h): attention by heads, the MLP by its
// hidden features, the vocabulary by rows; every rank sees the same batch.
//
//   ./labkit lab tp --ranks 4 --steps 10
//
// The ranks train the tiny GPT together and must end with the weights one rank
// reaches alone, each rank's slice of them; the lab checks it. The table shows
// what a rank keeps and what the layers send, read from rank 0's trace: per
// layer two allreduces of the B x T x C activations forward (after attention's
// and the MLP's row-parallel projections) and two backward (before each norm
// gets its gradient), beside the formula, and the reading's GPT-3 example
// computed from it. With --sp (sequence parallelism) each allreduce is a
// reduce-scatter and an all-gather, the same bytes. Below the table, rank 0's
// activations beside the memory lab's estimate and Korthikanti's forms.
//
//   --what-if gpt3-175b   a layer's time with its allreduces inside a node and across nodes
//   --cp 4                context parallelism: attention over sequence shards (context_parallel.cpp)
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "labkit/cli.h"
#include "labkit/error.h"
#include "labkit/gpt.h"
#include "labkit/memory.h"
#include "labkit/memory_tracker.h"
#include "labkit/optim.h"
#include "labkit/output.h"
#include "labkit/parallel/equivalence.h"
#include "labkit/parallel/sampler.h"
#include "labkit/parallel/sequences.h"
#include "labkit/parallel/tensor_parallel_gpt.h"
#include "labkit/run.h"
#include "labkit/units.h"
#include "tp.h"

using namespace tp_lab;

namespace {

struct TpRun {
  int ranks = 0;
  std::size_t kept = 0;                // parameters rank 0 keeps
  int padded_vocab = 0;
  double step_seconds = 0;
  // Rank 0's collectives of the B x T x C activations per layer, and the bytes a ring sends for them.
  double allreduces_per_layer = 0, gathers_per_layer = 0, scatters_per_layer = 0, sent_per_layer = 0;
  std::vector<float> losses;
  double weights_vs_dense = 0;  // the largest over the ranks
  double activations = 0;       // rank 0's peak, as its tracker was told
  LayerTraffic layer;             // layer 0's f and g in the first step
};

// What a transformer layer's tensor parallelism sends per step, in bytes:
// 4 allreduces (2 forward, 2 backward) of the b x s x h activations, each of
// which a ring allreduce sends 2(t-1)/t of from every rank (the reading,
// section 9.5). Sequence parallelism sends the same as 4 all-gathers and 4
// reduce-scatters, (t-1)/t each, and 2 all-gathers more: the norms' outputs
// gathered again in backward.
double ring_bytes_per_layer(double b, double s, double h, int t, double dtype_bytes, bool sp = false) {
  return (4 * 2.0 + (sp ? 2 : 0)) * (t - 1) / t * b * s * h * dtype_bytes;
}

// The reading's GPT-3 layer (section 9.5: b = 1, s = 2048, h = 12288, T = 8,
// fp16), by its own formula, against what its comment and its case study say.
// Rank 0's activations beside the memory lab's llm.c layout split as the
// model splits it, one rank's, and Korthikanti's 16-bit forms for the same
// shapes (2022, Table 2: sbh(34 + 5as/h) a layer, sbh(10 + 24/t + 5as/ht)
// with tensor parallelism, sbh(34/t + 5as/ht) with sequence parallelism too).
nlohmann::json print_activations(const TpRun& r, const Options& o, const GptConfig& config) {
  const memory::Architecture arch = architecture_of(config);
  const double estimate = memory::llmc_activation_bytes(arch, config.max_seq, o.batch, r.ranks, o.sp);
  const double one_rank = memory::llmc_activation_bytes(arch, config.max_seq, o.batch);
  const auto korthikanti = [&](int t, bool sp) {
    return memory::activation_bytes_per_layer({.seq = double(config.max_seq), .micro_batch = double(o.batch),
                                               .hidden = double(config.channels), .heads = double(config.heads),
                                               .tp = t, .sequence_parallel = sp});
  };
  const double ratio = korthikanti(r.ranks, o.sp) / korthikanti(1, false);
  fmt::print("activations per rank: measured {} (rank 0's tracker), the memory lab's estimate {} ({:+.1f}%), one "
             "rank {}: {:.2f}x; Korthikanti's 16-bit form for the same shapes gives {:.2f}x\n",
             format_bytes(std::uint64_t(r.activations)), format_bytes(std::uint64_t(estimate)),
             100 * (r.activations - estimate) / estimate, format_bytes(std::uint64_t(one_rank)),
             r.activations / one_rank, ratio);
  if (o.sp)
    fmt::print("(sequence parallelism shrinks the norms and the residual stream to 1/t and keeps no whole B x T x h "
               "buffer: the partial sums and the gathered inputs share one scratch buffer, and backward gathers each "
               "norm's output again, as Megatron does; what stays above 1/t is that one buffer and the vocabulary's "
               "padding)\n");
  return {{"measured", r.activations}, {"estimate", estimate}, {"one_rank", one_rank},
          {"korthikanti_ratio", ratio}};
}

void print_readings_example() {
  const double per_layer = ring_bytes_per_layer(1, 2048, 12288, 8, 2);
  const double message = 1.0 * 2048 * 12288 * 2;
  fmt::print("the reading's GPT-3 layer (b = 1, s = 2048, h = 12288, T = 8, fp16): 4 x 2(T-1)/T x b s h x 2 bytes = "
             "{:.1f} MB sent by each rank per layer, {:.1f} GB over 96 layers; its comment says ~175 MB and 16.8 GB, "
             "half of what its own function returns (it drops the ring's factor 2). Its case study's ~400 MB per "
             "layer counts the four messages at b = 2 (4 x {:.1f} MB x 2), not what a ring sends\n",
             per_layer / 1e6, per_layer * 96 / 1e9, message / 1e6);
}

// compare: train the dense model too, and measure each rank's slice against it.
TpRun train(const Options& o, const RunOptions& run_options, const Sequences& data, const GptConfig& config,
            bool compare = true) {
  // One rank, the whole model: the weights every rank's slice must equal.
  // Trained once per process, by its first rank to finish (the simulator's
  // ranks share the process), after the ranks have started: all of the lab's
  // work runs inside its ranks.
  std::vector<float> dense;
  RunOptions traced = run_options;
  traced.keep_trace = true;
  TpRun out;
  double first = 0, last = 0;
  const RunResult result = run(traced, [&](Comm& comm) {
    TensorParallelGpt model(comm, Gpt(config, o.seed), o.sp);
    SgdMomentum sgd{.lr = o.lr};
    // The same sequences on every rank, since tensor parallelism splits the model, not the data.
    const DistributedSampler sampler(data.count, 1, 0, o.seed);
    std::vector<int> x, y;
    std::vector<float> losses;
    const double start = comm.now();
    for (int s = 0; s < o.steps; ++s) {
      fill_batch(data, batch_of(sampler, s, o.batch), x, y);
      losses.push_back(model.forward(x, y, o.batch, config.max_seq));
      model.zero_grad();
      model.backward();
      const double started = comm.now();
      sgd.update({model.parameters().data(), model.parameter_count()},
                 {model.gradients().data(), model.parameter_count()});
      comm.computed("optimizer", started, 4.0 * double(model.parameter_count()));
    }
    const double end = comm.now();
    if (compare && dense.empty()) {
      SgdMomentum dense_sgd{.lr = o.lr};
      dense = train_one_rank(config, data, o.seed, o.steps, o.batch,
                             [&](std::span<float> w, std::span<const float> g) { dense_sgd.update(w, g); });
    }
    std::vector<float> difference = {
        compare ? float(relative_difference(model.parameters().to_host(), model.slice_of_dense(dense))) : 0.0f};
    const auto all = comm.inspect(view_of(difference));  // an instrument: untraced, free of virtual time
    if (comm.rank() != 0) return;
    for (const auto& d : all) out.weights_vs_dense = std::max(out.weights_vs_dense, d[0]);
    out.ranks = comm.size();
    out.kept = model.parameter_count();
    out.padded_vocab = model.padded_vocab();
    out.activations = double(comm.memory().peak[std::size_t(MemoryUse::activations)]);
    out.losses = losses;
    first = start, last = end;
  });
  if (!result.trace || out.losses.empty()) return out;
  // A ring allreduce sends 2(t-1)/t of its buffer from each rank, an
  // all-gather or a reduce-scatter (t-1)/t of the larger one.
  const std::uint64_t activations = std::uint64_t(o.batch) * config.max_seq * config.channels * sizeof(float);
  const double t = out.ranks, ring = (t - 1) / t;
  for (const TraceEvent& e : result.trace->tracks()[0].events) {
    if (e.kind != TraceEvent::Kind::collective || e.bytes != activations || e.start < first || e.start >= last) continue;
    if (e.name == "all_reduce") out.allreduces_per_layer += 1, out.sent_per_layer += 2 * ring * double(e.bytes);
    if (e.name == "all_gather") out.gathers_per_layer += 1, out.sent_per_layer += ring * double(e.bytes);
    if (e.name == "reduce_scatter") out.scatters_per_layer += 1, out.sent_per_layer += ring * double(e.bytes);
  }
  // Not a layer's: the embedding's sum and the head's input (and their gradients).
  const auto per_layer = [&](double& count, double outside) { count = (count / o.steps - outside) / config.layers; };
  per_layer(out.allreduces_per_layer, o.sp ? 0 : 2);
  per_layer(out.gathers_per_layer, o.sp ? 2 : 0);
  per_layer(out.scatters_per_layer, o.sp ? 2 : 0);
  out.sent_per_layer = (out.sent_per_layer / o.steps - 4 * ring * double(activations)) / config.layers;
  out.step_seconds = (last - first) / o.steps;
  out.layer = layer_traffic(result.trace->tracks()[0], o.sp, first);
  return out;
}

// --bench, side by side in one run: --steps steps of the tiny GPT on one rank
// (no simulator) against the same steps on --ranks simulated tensor-parallel
// ranks, each computing its slice of every layer, the same batches.
int bench(const Options& o, const RunOptions& run_options, const Sequences& data, const GptConfig& config) {
  using Clock = std::chrono::steady_clock;
  const auto timed = [](const char* what, const std::function<void()>& work) {
    fmt::print("timing {} ...\n", what);
    std::fflush(stdout);
    const Clock::time_point start = Clock::now();
    work();
    return std::chrono::duration<double>(Clock::now() - start).count();
  };
  SgdMomentum sgd{.lr = o.lr};
  const double dense = timed("the dense model on one rank", [&] {
    train_one_rank(config, data, o.seed, o.steps, o.batch,
                   [&](std::span<float> w, std::span<const float> g) { sgd.update(w, g); });
  });
  const double split = timed("the same steps on the simulated tensor-parallel ranks",
                             [&] { train(o, run_options, data, config, false); });
  fmt::print("{:<48} {:>10}\n", "run", "wall");
  fmt::print("{:<48} {:>10}\n", fmt::format("dense, one rank, {} steps", o.steps), format_seconds(dense));
  fmt::print("{:<48} {:>10}  {:.2f}x the dense steps' (target <= 1.5x)\n",
             fmt::format("tensor parallel{}, {} ranks, {} steps", o.sp ? " + sp" : "", run_options.ranks, o.steps),
             format_seconds(split), split / dense);
  if (!o.json.empty())
    create_file(o.json) << nlohmann::json{{"ranks", run_options.ranks}, {"steps", o.steps}, {"sequence_parallel", o.sp},
                                          {"dense_seconds", dense}, {"tensor_parallel_seconds", split},
                                          {"ratio", split / dense}}
                               .dump(2)
                        << '\n';
  return 0;
}

// What the command line asks that cannot be, before any rank starts: the
// options that belong to another mode, and splits that do not divide. Under
// mpirun, where -np gives the ranks, the rank counts are checked inside.
void check_options(const Options& o, const RunOptions& run_options, const GptConfig& config) {
  const bool ranks_known = run_options.backend == "sim";
  const int ranks = run_options.ranks;
  if (o.cp == 0) {
    if (o.tp) throw Error("--tp goes with --cp; without it every rank is in the one tensor-parallel group: --ranks");
    if (o.seq && o.what_if.empty())
      throw Error("--seq goes with --cp or --what-if; the tensor-parallel GPT trains on its context of " +
                  std::to_string(config.max_seq));
    if (!o.what_if.empty() && !o.seq && memory::model_preset(o.what_if).positions == 0)
      throw Error(fmt::format("--what-if {}: the model has rotary positions and no fixed context: give --seq",
                              o.what_if));
    if (run_options.payload_free && o.what_if.empty())
      throw Error("--payload-free: the tensor-parallel GPT computes with real values (payload-free runs are --cp's "
                  "and --what-if's)");
    if (!o.what_if.empty()) {  // the what-if sizes the model's layer, not the tiny GPT, on tp counts of its own
      if (run_options.ranks_given)
        throw Error(fmt::format("--ranks {}: --what-if times its layer at tp 2 to 16, inside a node and across nodes, "
                                "each on as many ranks", ranks));
      if (o.sp) throw Error("--sp: --what-if times Megatron's 4 allreduces a layer, without sequence parallelism");
      return;
    }
    if (!ranks_known) return;
    if (const std::string no = tensor_parallel_refusal(architecture_of(config), ranks); !no.empty())
      throw Error(fmt::format("--ranks {}: {}", ranks, no));
    if (o.sp && config.max_seq % ranks != 0)
      throw Error(fmt::format("--sp --ranks {}: the sequence of {} does not split into {} equal shards",
                              ranks, config.max_seq, ranks));
    return;
  }
  if (o.sp || !o.what_if.empty())
    throw Error(fmt::format("--cp {} runs attention alone; {} belongs to the tensor-parallel GPT's run", o.cp,
                            o.sp ? "--sp" : "--what-if"));
  const int seq = o.seq ? o.seq : config.max_seq;
  if (seq % (2 * o.cp) != 0)
    throw Error(fmt::format("--cp {}: the zig-zag layout cuts the sequence into 2 x cp = {} chunks, two to a rank, and "
                            "a sequence of {} does not divide into them (--seq)", o.cp, 2 * o.cp, seq));
  if (!run_options.payload_free && seq > 4096)
    throw Error(fmt::format("--seq {}: dense attention to check against holds B x heads x {}^2 scores; above 4096 "
                            "add --payload-free", seq, seq));
  if (!ranks_known) return;
  if (o.cp > ranks) throw Error(fmt::format("--cp {} is more ranks than --ranks {}", o.cp, ranks));
  const int tp = o.tp ? o.tp : ranks / o.cp;
  if (std::int64_t(tp) * o.cp > ranks)
    throw Error(fmt::format("--tp {} x --cp {} = {} ranks, more than --ranks {}", tp, o.cp, tp * o.cp, ranks));
  if (ranks % (tp * o.cp) != 0)
    throw Error(fmt::format("--ranks {} is not a multiple of --tp {} x --cp {} = {} (the ranks beyond one tp x cp "
                            "grid are data-parallel copies of it)", ranks, tp, o.cp, tp * o.cp));
  if (const std::string no = tensor_parallel_refusal(architecture_of(config), tp); !no.empty())
    throw Error(fmt::format("--tp {}: {}", tp, no));
  if (const int dp = ranks / (tp * o.cp); o.batch % dp != 0)
    throw Error(fmt::format("--batch {}: the {} data-parallel copies (--ranks {} over tp {} x cp {}) each take an "
                            "equal share of it", o.batch, dp, ranks, tp, o.cp));
}

}  // namespace

namespace tp_lab {

std::string tensor_parallel_refusal(const memory::Architecture& a, int t) {
  const std::string model = a.name == "tiny-gpt" ? "the tiny GPT's" : a.name + "'s";
  const auto split = [&](int n, const char* what, const char* why) {
    return n % t == 0 ? std::string()
                      : fmt::format("{} {} {} do not split over {} tensor-parallel ranks ({})", model, n, what, t, why);
  };
  for (const std::string& no : {split(a.heads, "heads", "each rank takes whole heads"),
                                split(a.kv_heads, "kv heads", "each rank takes whole key-value groups"),
                                split(a.ffn, "MLP features", "the column-parallel layer's width")})
    if (!no.empty()) return no;
  return "";
}

}  // namespace tp_lab

int main(int argc, char** argv) {
  CLI::App app{"Lab 7: tensor parallelism: Megatron's split of the tiny GPT's layers over the ranks"};
  cli::one_line_errors(app);
  Options o;
  RunOptions run_options;
  run_options.ranks = 4;
  app.add_flag("--sp", o.sp, "sequence parallelism: the norms and residuals on shards of the sequence, each "
                            "allreduce a reduce-scatter and an all-gather");
  app.add_option("--steps", o.steps, "optimizer steps")->capture_default_str()->check(cli::at_least(1));
  app.add_option("--batch", o.batch, "sequences per step, the same on every rank")
      ->capture_default_str()->check(cli::at_least(1));
  app.add_option("--lr", o.lr, "learning rate (SGD, momentum 0.9)")->capture_default_str()->check(cli::above(0.0f));
  app.add_option("--seed", o.seed, "initialisation, corpus and sampling")
      ->capture_default_str()->check(cli::at_least(std::uint64_t(0)));
  app.add_option("--json", o.json, "also write the table as JSON to this file")->check(cli::output_file());
  app.add_option("--what-if", o.what_if, "a model preset (gpt3-175b, ...): one layer's time with tensor "
                                         "parallelism inside a node and across nodes, payload-free")
      ->check(cli::parsed_by([](const std::string& name) { memory::model_preset(name); }));
  app.add_flag("--bench", o.bench, "time the simulation itself: the tensor-parallel steps on --ranks simulated ranks "
                                   "against the dense model's on one");
  app.add_option("--cp", o.cp, "context parallelism: the tiny GPT's attention over this many shards of the sequence "
                              "(ring attention), contiguous and zig-zag side by side")
      ->check(cli::at_least(1));
  app.add_option("--tp", o.tp, "with --cp: ranks that split the heads (default: --ranks over --cp)")
      ->check(cli::at_least(1));
  app.add_option("--plot", o.plot, "draw layer 0's timeline on rank 0 with Megatron's f and g (with --cp, the two "
                                  "layouts' attention matrices coloured by the rank that computes each block) to this "
                                  "file (.svg or .png)")->check(cli::figure_file());
  app.add_option("--seq", o.seq, "with --cp: the sequence length (default: the tiny GPT's context); with --what-if: "
                                "the layer's (default: the model's learned context)")
      ->check(cli::at_least(1));
  add_run_options(app, run_options);
  CLI11_PARSE(app, argc, argv);

  try {
    const Sequences data = training_sequences(o.seed, gpt_preset("tiny-gpt", 1).max_seq);
    const GptConfig config = gpt_preset("tiny-gpt", data.tokens.vocab);
    if (run_options.backend == "nccl")
      throw Error("--backend nccl: the tensor-parallel model keeps its slices in host memory (sim or mpi for now)");
    check_options(o, run_options, config);
    if (o.cp)
      return context_parallel(o, run_options,
                              {.B = o.batch, .T = o.seq ? o.seq : config.max_seq, .C = config.channels,
                               .NH = config.heads});
    if (!o.what_if.empty()) return what_if(o, run_options);
    if (o.bench) return bench(o, run_options, data, config);
    const TpRun r = train(o, run_options, data, config);
    if (r.losses.empty()) return 0;  // a process of mpirun that ran another rank than 0
    const std::size_t n = Gpt(config, o.seed).parameter_count();
    const std::uint64_t activations = std::uint64_t(o.batch) * config.max_seq * config.channels * sizeof(float);
    const double limit = 1e-5;
    fmt::print("tp: tiny-gpt ({} parameters, {} heads, vocabulary {}), {} ranks, batch {} x {} tokens on every rank, "
               "{} step{}, sgd; per step, rank 0\n", n, config.heads, config.vocab, r.ranks, o.batch, config.max_seq,
               o.steps, o.steps == 1 ? "" : "s");
    const double formula =
        ring_bytes_per_layer(o.batch, config.max_seq, config.channels, r.ranks, sizeof(float), o.sp);
    const std::string collectives =
        o.sp ? fmt::format("{:g} AG + {:g} RS", r.gathers_per_layer, r.scatters_per_layer)
             : fmt::format("{:g} allreduces", r.allreduces_per_layer);
    fmt::print("{:>5} {:>6} {:>16} {:>8} {:>17} {:>11} {:>11} {:>9} {:>8} {:>16}\n", "tp", "heads", "each rank keeps",
               "padding", "per layer", "sent/layer", "formula", "T_step", "loss", "weights vs dense");
    fmt::print("{:>5} {:>6} {:>16} {:>8} {:>17} {:>11} {:>11} {:>9} {:>8.4f} {:>16.1e}\n",
               fmt::format("{}{}", r.ranks, o.sp ? " sp" : ""), fmt::format("{}/{}", config.heads / r.ranks, config.heads),
               fmt::format("{} ({:.0f}%)", r.kept, 100.0 * double(r.kept) / double(n)), r.padded_vocab - config.vocab,
               collectives, format_bytes(std::uint64_t(std::lround(r.sent_per_layer))),
               format_bytes(std::uint64_t(std::lround(formula))), format_seconds(r.step_seconds), r.losses.back(),
               r.weights_vs_dense);
    fmt::print("(heads: each rank's share of attention; padding: zero rows added to the vocabulary of {} so that "
               "it splits over {} ranks; per layer: rank 0's collectives of the b x s x h activations ({} x {} x {} "
               "fp32, {}), from its trace, less the embedding's and the head's{}; sent/layer: what a ring sends of "
               "them from each rank, 2(t-1)/t of an allreduce's buffer, (t-1)/t of an all-gather's or a "
               "reduce-scatter's; formula: Megatron's 4 allreduces of b s h, 4 x 2(t-1)/t x b s h x 4 bytes{})\n",
               config.vocab, r.ranks, o.batch, config.max_seq, config.channels, format_bytes(activations),
               o.sp ? "; sequence parallelism turns each allreduce into a reduce-scatter and an all-gather (AG, RS), "
                      "the same bytes, and gathers each norm's output again in backward, 2 AG more" : "",
               o.sp ? ", + 2 x (t-1)/t x b s h x 4 for those" : "");
    const nlohmann::json layer_traffic = print_layer_traffic(r.layer.places);
    fmt::print("(f: the identity forward, the sum of the input's gradient backward; g: the sum of the partial outputs "
               "forward, the identity backward. Sequence parallelism makes each sum a reduce-scatter into the "
               "rows and each identity an all-gather of them)\n");
    const nlohmann::json activation_memory = print_activations(r, o, config);
    print_readings_example();
    const bool collectives_as_megatron = o.sp ? r.gathers_per_layer == 6 && r.scatters_per_layer == 4
                                              : r.allreduces_per_layer == 4;
    std::vector<std::string> failed;  // each criterion missed, named
    if (!(r.weights_vs_dense <= limit)) failed.push_back(failed_criterion("weights", r.weights_vs_dense, limit));
    if (!collectives_as_megatron)
      failed.push_back(fmt::format("{} per layer, where Megatron runs {}", collectives,
                                   o.sp ? "6 AG + 4 RS" : "4 allreduces"));
    if (!(std::abs(r.sent_per_layer - formula) <= 1e-6 * formula))
      failed.push_back(fmt::format("sent {:.0f} bytes per layer, the formula {:.0f}", r.sent_per_layer, formula));
    if (failed.empty())
      fmt::print("equal to one rank: every rank's slice within {:g} of the dense model's weights, {} per layer, "
                 "sent = formula\n", limit, collectives);
    else
      fmt::print("MISMATCH: {}\n", fmt::join(failed, "; "));
    if (!o.plot.empty()) plot_layer(r.layer, r.ranks, o.sp, o.plot), fmt::print("wrote {}\n", o.plot);
    if (!o.json.empty())
      create_file(o.json) << nlohmann::json{{"tp", r.ranks}, {"parameters", n}, {"kept", r.kept},
                                            {"padded_vocab", r.padded_vocab}, {"vocab", config.vocab},
                                            {"sequence_parallel", o.sp},
                                            {"allreduces_per_layer", r.allreduces_per_layer},
                                            {"all_gathers_per_layer", r.gathers_per_layer},
                                            {"reduce_scatters_per_layer", r.scatters_per_layer},
                                            {"sent_bytes_per_layer", r.sent_per_layer}, {"formula_bytes", formula},
                                            {"t_step", r.step_seconds}, {"losses", r.losses},
                                            {"weights_vs_dense", r.weights_vs_dense},
                                            {"activations", activation_memory}, {"layer_traffic", layer_traffic}}
                                 .dump(2)
                          << '\n';
    return failed.empty() ? 0 : 1;
  } catch (const std::exception& e) {
    std::fflush(stdout);
    fmt::print(stderr, "error: {}\n", e.what());
    return 1;
  }
}
