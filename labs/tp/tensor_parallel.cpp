// Lab 7, the tiny GPT split over the ranks: trained with Megatron's tensor
// parallelism (Shoeybi et al. 2019), each rank's slice checked against the
// weights one rank reaches alone. The table shows what a rank keeps and what
// the layers send, read from rank 0's trace: per layer two allreduces of the
// B x T x C activations forward (after attention's and the MLP's row-parallel
// projections) and two backward (before each norm gets its gradient), beside
// the formula. Below it, layer 0's f and g (traffic.cpp), rank 0's activations
// beside the memory lab's estimate and Korthikanti's forms, and the long
// guide's GPT-3 example computed from the formula.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "labkit/lab/output.h"
#include "labkit/lab/table.h"
#include "labkit/lab/verdict.h"
#include "labkit/memory_tracker.h"
#include "labkit/optim.h"
#include "labkit/parallel/equivalence.h"
#include "labkit/parallel/sampler.h"
#include "labkit/parallel/tensor_parallel_gpt.h"
#include "labkit/parallel/training_loop.h"
#include "labkit/units.h"
#include "tp.h"

namespace tp_lab {

namespace {

// What a transformer layer's tensor parallelism sends per step, in bytes:
// 4 allreduces (2 forward, 2 backward; Shoeybi et al. 2019, Figure 4) of the
// b x s x h activations, each of which a ring allreduce sends 2(t-1)/t of
// from every rank (Patarasuk and Yuan 2009). Sequence parallelism
// (Korthikanti et al. 2022, section 4.2.2) sends the same as 4 all-gathers and
// 4 reduce-scatters, (t-1)/t each, and 2 all-gathers more: the norms' outputs
// gathered again in backward.
double ring_bytes_per_layer(double b, double s, double h, int t, double dtype_bytes, bool sp = false) {
  return (4 * 2.0 + (sp ? 2 : 0)) * (t - 1) / t * b * s * h * dtype_bytes;
}

// Rank 0's collectives of the b x s x h activations per layer, counted from
// its trace of the steps in [first, last), and what a ring sends for them: an
// allreduce 2(t-1)/t of its buffer from each rank, an all-gather or a
// reduce-scatter (t-1)/t of the larger one.
void count_collectives(TpRun& out, const TraceTrack& rank0, double first, double last, const Options& o,
                       const GptConfig& config) {
  const std::uint64_t activations = std::uint64_t(o.batch) * config.max_seq * config.channels * sizeof(float);
  const double t = out.ranks, ring = (t - 1) / t;
  for (const TraceEvent& e : rank0.events) {
    const bool in_the_steps = e.start >= first && e.start < last;
    if (e.kind != TraceEvent::Kind::collective || e.bytes != activations || !in_the_steps) continue;
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
}

// The korthikanti_ratio of the JSON: Korthikanti et al. 2022, Table 2's 16-bit
// activations a layer, sbh(34 + 5as/h), sbh(10 + 24/t + 5as/ht) with tensor
// parallelism and sbh(34/t + 5as/ht) with sequence parallelism too, at t
// ranks against one, for the tiny GPT's shapes.
double korthikanti_ratio(const GptConfig& config, int batch, int t, bool sp) {
  const auto per_layer = [&](int ranks, bool sequence_parallel) {
    return memory::activation_bytes_per_layer({.seq = double(config.max_seq), .micro_batch = double(batch),
                                               .hidden = double(config.channels), .heads = double(config.heads),
                                               .tp = ranks, .sequence_parallel = sequence_parallel});
  };
  return per_layer(t, sp) / per_layer(1, false);
}

// Rank 0's activations beside the memory lab's llm.c layout split as the
// model splits it, one rank's, and Korthikanti's 16-bit forms for the same shapes.
nlohmann::json print_activations(const TpRun& r, const Options& o, const GptConfig& config) {
  const memory::Architecture arch = architecture_of(config);
  const double estimate = memory::llmc_activation_bytes(arch, config.max_seq, o.batch, r.ranks, o.sp);
  const double one_rank = memory::llmc_activation_bytes(arch, config.max_seq, o.batch);
  const double ratio = korthikanti_ratio(config, o.batch, r.ranks, o.sp);
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

// The long guide's GPT-3 layer (book/99-references.md, its section 9.5: b = 1,
// s = 2048, h = 12288 as in Brown et al. 2020, T = 8, fp16), by its own
// formula, against what its comment and its case study say.
nlohmann::json print_guides_gpt3_layer() {
  const double per_layer = ring_bytes_per_layer(1, 2048, 12288, 8, 2);
  const double message = 1.0 * 2048 * 12288 * 2;
  fmt::print("the reading's GPT-3 layer (b = 1, s = 2048, h = 12288, T = 8, fp16): 4 x 2(T-1)/T x b s h x 2 bytes = "
             "{:.1f} MB sent by each rank per layer, {:.1f} GB over 96 layers; its comment says ~175 MB and 16.8 GB, "
             "half of what its own function returns (it drops the ring's factor 2). Its case study's ~400 MB per "
             "layer, 4 x 2 x {:.1f} MB, is the four messages at b = 2 as its formula lays them out, or, at the b = 1 "
             "of its pipeline line, the ring's 2(T-1)/T rounded up to 2\n",
             per_layer / 1e6, per_layer * 96 / 1e9, message / 1e6);
  return {{"sent_bytes_per_layer", per_layer}, {"sent_bytes_over_96_layers", per_layer * 96},
          {"its_comment_bytes_per_layer", 175e6}, {"its_comment_bytes_over_96_layers", 16.8e9},
          {"message_bytes", message}};
}

// One column list for the printed row and the JSON; heads is printed only.
lab::Table tp_table() {
  return lab::Table({{.header = "tp", .key = "tp", .width = 5},
                     {.header = "heads", .width = 6},
                     {.header = "each rank keeps", .key = "kept", .width = 16},
                     {.header = "padding", .key = "padded_vocab", .width = 8},
                     {.header = "per layer", .key = "allreduces_per_layer", .width = 17},
                     {.header = "sent/layer", .key = "sent_bytes_per_layer", .width = 11},
                     {.header = "formula", .key = "formula_bytes", .width = 11},
                     {.header = "T_step", .key = "t_step", .width = 9},
                     {.header = "loss", .key = "losses", .width = 8},
                     {.header = "weights vs dense", .key = "weights_vs_dense", .width = 16},
                     {.key = "parameters"},
                     {.key = "vocab"},
                     {.key = "sequence_parallel"},
                     {.key = "all_gathers_per_layer"},
                     {.key = "reduce_scatters_per_layer"}});
}

void print_table_notes(const TpRun& r, const Options& o, const GptConfig& config) {
  const std::uint64_t activations = std::uint64_t(o.batch) * config.max_seq * config.channels * sizeof(float);
  fmt::print("(heads: each rank's share of attention; padding: zero rows added to the vocabulary of {} so that "
             "it splits over {} ranks; per layer: rank 0's collectives of the b x s x h activations ({} x {} x {} "
             "fp32, {}), from its trace, less the embedding's and the head's{}; sent/layer: what a ring sends of "
             "them from each rank, 2(t-1)/t of an allreduce's buffer, (t-1)/t of an all-gather's or a "
             "reduce-scatter's; formula: Megatron's 4 allreduces of b s h, 4 x 2(t-1)/t x b s h x 4 bytes{})\n",
             config.vocab, r.ranks, o.batch, config.max_seq, config.channels, format_bytes(activations),
             o.sp ? "; sequence parallelism turns each allreduce into a reduce-scatter and an all-gather (AG, RS), "
                    "the same bytes, and gathers each norm's output again in backward, 2 AG more" : "",
             o.sp ? ", + 2 x (t-1)/t x b s h x 4 for those" : "");
}

}  // namespace

TpRun train(const Options& o, const RunOptions& run_options, const Sequences& data, const GptConfig& config,
            bool compare) {
  RunOptions traced = run_options;
  traced.keep_trace = true;
  TpRun out;
  const TrainingRun run = run_training(traced, [&](Comm& comm, RankTraining& training) {
    TensorParallelGpt model(comm, Gpt(config, o.seed, parse_device(o.device)), o.sp);
    SgdMomentum sgd{.lr = o.lr};
    // The same sequences on every rank, since tensor parallelism splits the model, not the data.
    const DistributedSampler sampler(data.count, 1, 0, o.seed);
    std::vector<int> x, y;
    training.steps(o.steps, [&](int s) {
      fill_batch(data, batch_of(sampler, s, o.batch), x, y);
      const float loss = model.forward(x, y, o.batch, config.max_seq);
      model.zero_grad();
      model.backward();
      const double started = comm.now();
      sgd.update(model.parameters(), model.gradients());
      comm.record_compute("optimizer", started, 4.0 * double(model.parameter_count()));
      return loss;
    });
    if (compare) {  // one rank, the whole model: the weights every rank's slice must equal
      const std::vector<float>& dense =
          training.one_rank([&] { return train_one_rank_sgd(config, data, o.seed, o.steps, o.batch, o.lr); });
      training.versus_one_rank(relative_difference(model.parameters().to_host(), model.slice_of_dense(dense)));
    }
    if (comm.rank() != 0) return;
    out.kept = model.parameter_count();
    out.padded_vocab = model.padded_vocab();
    out.activations = double(comm.memory().peak[std::size_t(MemoryUse::activations)]);
  });
  if (!run.on_rank_zero()) return out;
  out.ranks = run.ranks;
  out.losses.assign(run.losses[0].begin(), run.losses[0].end());  // every rank's: the allreduced model's loss
  out.weights_vs_dense = run.weights_vs_one_rank;
  count_collectives(out, run.trace->tracks()[0], run.start, run.end, o, config);
  out.step_seconds = run.seconds_per_step();
  out.layer = layer_traffic(run.trace->tracks()[0], o.sp, run.start);
  return out;
}

int tensor_parallel(const Options& o, const RunOptions& run_options, const Sequences& data, const GptConfig& config) {
  const TpRun r = train(o, run_options, data, config);
  if (r.losses.empty()) return 0;  // a process of mpirun that ran another rank than 0
  const std::size_t n = Gpt(config, o.seed).parameter_count();
  fmt::print("tp: tiny-gpt ({} parameters, {} heads, vocabulary {}), {} ranks, batch {} x {} tokens on every rank, "
             "{} step{}, sgd; per step, rank 0\n", n, config.heads, config.vocab, r.ranks, o.batch, config.max_seq,
             o.steps, o.steps == 1 ? "" : "s");
  const double formula = ring_bytes_per_layer(o.batch, config.max_seq, config.channels, r.ranks, sizeof(float), o.sp);
  const std::string collectives = o.sp ? fmt::format("{:g} AG + {:g} RS", r.gathers_per_layer, r.scatters_per_layer)
                                       : fmt::format("{:g} allreduces", r.allreduces_per_layer);
  lab::Table table = tp_table();
  table.print_header();
  table.add({{r.ranks, fmt::format("{}{}", r.ranks, o.sp ? " sp" : "")},
             fmt::format("{}/{}", config.heads / r.ranks, config.heads),
             {r.kept, fmt::format("{} ({:.0f}%)", r.kept, 100.0 * double(r.kept) / double(n))},
             {r.padded_vocab, fmt::format("{}", r.padded_vocab - config.vocab)},
             {r.allreduces_per_layer, collectives},
             {r.sent_per_layer, format_bytes(std::uint64_t(std::lround(r.sent_per_layer)))},
             {formula, format_bytes(std::uint64_t(std::lround(formula)))}, lab::seconds(r.step_seconds),
             {r.losses, fmt::format("{:.4f}", r.losses.back())}, lab::number(r.weights_vs_dense, "{:.1e}"), n,
             config.vocab, o.sp, r.gathers_per_layer, r.scatters_per_layer});
  print_table_notes(r, o, config);
  nlohmann::json report = table.json()[0];
  report["layer_traffic"] = print_layer_traffic(r.layer.places);
  fmt::print("(f: the identity forward, the sum of the input's gradient backward; g: the sum of the partial outputs "
             "forward, the identity backward. Sequence parallelism makes each sum a reduce-scatter into the "
             "rows and each identity an all-gather of them)\n");
  report["activations"] = print_activations(r, o, config);
  report["reading_gpt3_layer"] = print_guides_gpt3_layer();
  const double limit = 1e-5;
  const bool collectives_as_megatron = o.sp ? r.gathers_per_layer == 6 && r.scatters_per_layer == 4
                                            : r.allreduces_per_layer == 4;
  lab::Verdict verdict;
  verdict.trained("", r.losses);
  verdict.within("weights", r.weights_vs_dense, limit);
  verdict.require(collectives_as_megatron, fmt::format("{} per layer, where Megatron runs {}", collectives,
                                                       o.sp ? "6 AG + 4 RS" : "4 allreduces"));
  verdict.require(std::abs(r.sent_per_layer - formula) <= 1e-6 * formula,
                  fmt::format("sent {:.0f} bytes per layer, the formula {:.0f}", r.sent_per_layer, formula));
  const int status = verdict.print(fmt::format("equal to one rank: every rank's slice within {:g} of the dense "
                                               "model's weights, {} per layer, sent = formula", limit, collectives));
  if (!o.plot.empty()) plot_layer(r.layer, r.ranks, o.sp, o.plot);
  report["verdict"] = verdict.json();
  lab::write_json(o.json, report);
  return status;
}

}  // namespace tp_lab
