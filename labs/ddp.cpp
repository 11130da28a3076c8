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
//   --volume              the reading's DDP communication-volume table, computed
//   --bench               what the simulation costs in wall time (./labkit bench ddp)
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <tuple>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "labkit/cli.h"
#include "labkit/error.h"
#include "labkit/gpt.h"
#include "labkit/memory.h"
#include "labkit/optim.h"
#include "labkit/output.h"
#include "labkit/parallel/data_parallel.h"
#include "labkit/parallel/sampler.h"
#include "labkit/run.h"
#include "labkit/topology.h"
#include "labkit/units.h"

using namespace labkit;

namespace {

struct Options {
  std::vector<std::string> modes = {"naive", "bucketed", "overlap"};
  int steps = 20, batch = 16, accum = 1;
  double bucket_mb = 25, first_bucket_mb = 1;
  std::uint64_t seed = 1337;
  std::string optimizer = "adamw";
  int warmup = 0;   // steps of linear learning-rate warmup
  double clip = 0;  // clip the gradients' global norm to this (0: never)
  std::string device = "cpu";
  float lr = 3e-3f;
  std::string json;
  std::string what_if;       // a model preset: its payload-free step instead of the tiny GPT
  double step_seconds = 2;   // --what-if: compute per step
  bool volume = false;
  bool bench = false;
  int sweep_from = 0, sweep_to = 0;  // --sweep ranks=A..B
  std::string plot;
};

// "ranks=A..B": the rank counts A, 2A, 4A, ... up to B.
std::pair<int, int> parse_rank_sweep(const std::string& text) {
  int from = 0, to = 0;
  char tail = 0;
  if (std::sscanf(text.c_str(), "ranks=%d..%d%c", &from, &to, &tail) != 2 || from < 1 || to < from || to > 65536)
    throw std::invalid_argument("'" + text + "' is not ranks=A..B with 1 <= A <= B <= 65536");
  return {from, to};
}

// The kit's character corpus as sequences of T + 1 tokens (inputs and their
// next-token targets), cut without overlap from its first 90%.
struct Corpus {
  Tokens tokens;
  std::size_t sequences = 0;
};

Corpus make_corpus(std::uint64_t seed, int T) {
  Corpus c{character_tokens(synthetic_corpus(200000, seed))};
  c.sequences = (c.tokens.ids.size() * 9 / 10 - 1) / T;
  return c;
}

void fill_batch(const Corpus& c, const std::vector<std::size_t>& sequences, int T, std::vector<int>& x,
                std::vector<int>& y) {
  x.resize(sequences.size() * T), y.resize(sequences.size() * T);
  for (std::size_t b = 0; b < sequences.size(); ++b)
    for (int t = 0; t < T; ++t) {
      x[b * T + t] = c.tokens.ids[sequences[b] * T + t];
      y[b * T + t] = c.tokens.ids[sequences[b] * T + t + 1];
    }
}

struct ModeRun {
  DdpMode mode = DdpMode::naive;
  int ranks = 0, buckets = 0;
  StepTimes per_step;
  std::vector<float> losses;   // the global batch's mean loss, per step
  std::vector<float> first_grads;  // rank 0's averaged gradients of the first step
  std::vector<float> weights;      // rank 0's, at the end (on the process that ran rank 0)
  bool ranks_agree = false;    // every rank's weights bit for bit rank 0's
  std::uint64_t fingerprint = 0;  // of rank 0's weights: a repeated run must give the same
};

// The optimizer every rank applies to the same averaged gradients, with the
// reading's large-batch recipe around it: a linear warmup of the learning rate
// and clipping by the global norm. LARS and LAMB take the model's layers
// (Gpt::backward_order's pieces) as theirs.
struct Optimizer {
  std::string name;
  float lr;
  int warmup;
  double clip;
  AdamW adamw;
  SgdMomentum sgd;
  Lars lars;
  Lamb lamb;
  int steps = 0;
  explicit Optimizer(const Options& o)
      : name(o.optimizer), lr(o.lr), warmup(o.warmup), clip(o.clip), adamw{.lr = o.lr}, sgd{.lr = o.lr},
        lars{.lr = o.lr}, lamb{.lr = o.lr} {}

  void update(Gpt& model) {
    adamw.lr = sgd.lr = lars.lr = lamb.lr = warmup_lr(lr, ++steps, warmup);
    if (name == "adamw" && clip == 0) return adamw.update(model.parameters(), model.gradients());
    // The rest works in host memory: a model on a GPU goes there and back.
    std::vector<float> params = model.parameters().to_host(), grads = model.gradients().to_host();
    if (clip > 0) clip_by_global_norm(grads, clip);  // DDP: every rank holds the whole gradient
    const std::vector<ParameterRange> layers = model.backward_order();
    if (name == "adamw") adamw.update(params, grads);
    if (name == "sgd") sgd.update(params, grads);
    if (name == "lars") lars.update(params, grads, layers);
    if (name == "lamb") lamb.update(params, grads, layers);
    model.device().copy_from_host(model.parameters().data(), params.data(), params.size() * sizeof(float));
  }
};

std::uint64_t fingerprint(const std::vector<float>& w) {
  std::uint64_t h = 1469598103934665603ull;  // FNV-1a over the bits
  for (float f : w) {
    std::uint32_t bits;
    std::memcpy(&bits, &f, sizeof bits);
    h = (h ^ bits) * 1099511628211ull;
  }
  return h;
}

// Trains `o.steps` steps data-parallel in `mode` and measures them.
ModeRun train(const Options& o, RunOptions run_options, DdpMode mode, const Corpus& corpus, const GptConfig& config) {
  ModeRun out;
  out.mode = mode;
  run_options.keep_trace = true;
  double first = 0, last = 0;
  const RunResult result = run(run_options, [&](Comm& comm) {
    if (o.batch % comm.size() != 0)
      fail(comm.who(), "ddp",
           "--batch {} does not split over {} ranks: each rank takes batch / ranks sequences", o.batch, comm.size());
    const int T = config.max_seq, b = o.batch / comm.size();
    Gpt model(config, o.seed, parse_device(o.device));  // the same seed: the same weights on every rank
    Optimizer optimizer(o);
    DataParallel ddp(comm, model, mode,
                     {.first_bytes = std::size_t(o.first_bucket_mb * (1 << 20)),
                      .bytes = std::size_t(o.bucket_mb * (1 << 20))});
    const DistributedSampler sampler(corpus.sequences, comm.size(), comm.rank(), o.seed);
    std::vector<int> x, y;
    std::vector<float> losses;
    const double start = comm.now();
    for (int s = 0; s < o.steps; ++s) {
      float loss = 0;
      for (int m = 0; m < o.accum; ++m) {
        fill_batch(corpus, batch_of(sampler, s * o.accum + m, b), T, x, y);
        loss += ddp.forward_backward(x, y, b, T, m, o.accum) / o.accum;
      }
      losses.push_back(loss);
      if (s == 0 && comm.rank() == 0) out.first_grads = model.gradients().to_host();
      const double started = comm.now();
      optimizer.update(model);
      // It reads and writes each parameter's weight, gradient and state: about a dozen FLOPs apiece.
      comm.computed("optimizer", started, 12.0 * double(model.parameter_count()));
    }
    const double end = comm.now();
    // Instruments (untraced, free of virtual time): every rank's losses and fingerprint on rank 0.
    const auto all_losses = comm.inspect(view_of(losses));
    const std::vector<float> weights = model.parameters().to_host();
    const std::uint64_t print = fingerprint(weights);
    std::vector<std::int64_t> halves = {std::int64_t(print >> 32), std::int64_t(print & 0xffffffff)};  // exact as doubles
    const auto prints = comm.inspect(view_of(halves));
    if (comm.rank() != 0) return;
    first = start, last = end;
    out.ranks = comm.size();
    out.buckets = std::max<int>(1, int(ddp.buckets().size()));
    out.weights = weights;
    out.fingerprint = print;
    out.ranks_agree = std::all_of(prints.begin(), prints.end(), [&](const auto& p) { return p == prints[0]; });
    for (int s = 0; s < o.steps; ++s) {
      double sum = 0;
      for (const auto& rank_losses : all_losses) sum += rank_losses[s];
      out.losses.push_back(float(sum / all_losses.size()));
    }
  });
  if (result.trace && !out.weights.empty()) {
    out.per_step = step_times(result.trace->tracks()[0], first, last);
    for (double* t : {&out.per_step.forward, &out.per_step.backward, &out.per_step.optimizer, &out.per_step.comm,
                      &out.per_step.step})
      *t /= o.steps;
  }
  return out;
}

// One rank, no communication, on the whole global batch of every step: what
// every data-parallel run must equal. Its first step's gradients and its last weights.
struct OneRank {
  std::vector<float> first_grads, weights;
};
OneRank train_one_rank(const Options& o, const Corpus& corpus, const GptConfig& config) {
  OneRank out;
  Gpt model(config, o.seed, parse_device(o.device));
  Optimizer optimizer(o);
  const DistributedSampler sampler(corpus.sequences, 1, 0, o.seed);
  std::vector<int> x, y;
  for (int s = 0; s < o.steps; ++s) {
    fill_batch(corpus, batch_of(sampler, s, o.batch * o.accum), config.max_seq, x, y);
    model.forward(x, y, o.batch * o.accum, config.max_seq);
    model.zero_grad();
    model.backward();
    if (s == 0) out.first_grads = model.gradients().to_host();
    optimizer.update(model);
  }
  out.weights = model.parameters().to_host();
  return out;
}

// ||a - b|| / ||b||, the Euclidean norms: the difference relative to the whole
// vector, as numpy.linalg.norm compares them.
double relative_difference(const std::vector<float>& a, const std::vector<float>& b) {
  double diff = 0, norm = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    diff += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    norm += double(b[i]) * b[i];
  }
  return std::sqrt(diff / norm);
}

// --what-if MODEL: one data-parallel step of a real model's shapes, payload-free
// (sizes only), per mode, beside the reading's estimate T_comm = 2 (P-1)/P x G / B
// for G bytes of gradients over links of B bytes/s, and its efficiency
// T_compute / (T_compute + T_comm), which assumes nothing overlaps.
int what_if(const Options& o, RunOptions run_options, const std::vector<DdpMode>& modes) {
  const memory::Architecture arch = memory::model_preset(o.what_if);
  const ShapedModel model = shaped_model(arch, o.step_seconds);
  const BucketCaps caps{.first_bytes = std::size_t(o.first_bucket_mb * (1 << 20)),
                        .bytes = std::size_t(o.bucket_mb * (1 << 20))};
  run_options.payload_free = true;
  run_options.keep_trace = true;
  const Topology topology = find_topology(run_options.topology);
  const int p = run_options.ranks;
  const double grads = double(model.parameters()) * size_of(model.grad_dtype);
  const Link& link = p > topology.devices_per_node ? topology.inter : topology.intra;
  const double formula = 2.0 * (p - 1) / p * grads / link.bandwidth;
  fmt::print("ddp --what-if {}: {:.2f}B parameters, {} of bf16 gradients, {} ranks on {} ({:.0f} GB/s links), "
             "{} of compute per step\n", o.what_if, model.parameters() / 1e9, format_bytes(std::uint64_t(grads)), p,
             topology.name, link.bandwidth / 1e9, format_seconds(o.step_seconds));
  fmt::print("the reading's estimate: T_comm = 2 (P-1)/P x G / B = {}, efficiency {:.1f}% (no overlap)\n",
             format_seconds(formula), 100 * o.step_seconds / (o.step_seconds + formula));
  fmt::print("{:<9} {:>7} {:>10} {:>10} {:>10} {:>10} {:>11}\n", "mode", "buckets", "T_compute", "T_comm", "exposed",
             "T_step", "efficiency");
  nlohmann::json rows = nlohmann::json::array();
  for (DdpMode mode : modes) {
    double from = 0, to = 0;
    int buckets = 1;
    const RunResult r = run(run_options, [&](Comm& comm) {
      const double start = comm.now();
      shaped_step(comm, model, mode, caps);
      if (comm.rank() == 0) from = start, to = comm.now();
    });
    const StepTimes t = step_times(r.trace->tracks()[0], from, to);
    if (mode != DdpMode::naive) buckets = int(std::count_if(r.trace->tracks()[0].events.begin(),
                                                            r.trace->tracks()[0].events.end(), [](const TraceEvent& e) {
                                                              return e.kind == TraceEvent::Kind::collective;
                                                            }));
    // Scaling efficiency: compute over compute plus what communication adds.
    const double efficiency = t.compute() / (t.compute() + t.exposed());
    fmt::print("{:<9} {:>7} {:>10} {:>10} {:>10} {:>10} {:>10.1f}%\n", name_of(mode), buckets,
               format_seconds(t.compute()), format_seconds(t.comm), format_seconds(t.exposed()),
               format_seconds(t.step), 100 * efficiency);
    rows.push_back({{"mode", name_of(mode)}, {"buckets", buckets}, {"t_compute", t.compute()}, {"t_comm", t.comm},
                    {"exposed", t.exposed()}, {"t_step", t.step}, {"efficiency", efficiency},
                    {"formula_t_comm", formula}});
  }
  if (!o.json.empty()) create_file(o.json) << rows.dump(2) << '\n';
  return 0;
}

// --sweep ranks=A..B: weak scaling of one --what-if step (each rank keeps its
// compute: its share of the batch is fixed) on every topology preset, naive and
// overlapped: scaling efficiency T_compute / (T_compute + T_exposed), and the
// communication-to-computation ratio T_comm / T_compute.
int sweep(const Options& o, RunOptions run_options) {
  const std::string name = o.what_if.empty() ? "llama2-7b" : o.what_if;
  const ShapedModel model = shaped_model(memory::model_preset(name), o.step_seconds);
  const BucketCaps caps{.first_bytes = std::size_t(o.first_bucket_mb * (1 << 20)),
                        .bytes = std::size_t(o.bucket_mb * (1 << 20))};
  run_options.payload_free = true;
  run_options.keep_trace = true;
  std::vector<int> counts;
  for (int p = o.sweep_from; p <= o.sweep_to; p *= 2) counts.push_back(p);
  const std::vector<std::string_view> topologies = topology_presets();
  fmt::print("ddp --sweep: {} ({:.2f}B parameters, bf16 gradients), {} of compute per rank and step, ranks {}..{} "
             "on {} topologies ...\n", name, model.parameters() / 1e9, format_seconds(o.step_seconds), o.sweep_from,
             o.sweep_to, topologies.size());
  std::fflush(stdout);
  fmt::print("{:<10} {:>6} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10}\n", "topology", "ranks", "T_comm", "comm/comp",
             "naive", "overlap", "T_step", "exposed");
  nlohmann::json rows = nlohmann::json::array();
  for (std::string_view topology : topologies) {
    run_options.topology = std::string(topology);
    for (int p : counts) {
      run_options.ranks = p;
      StepTimes times[2];
      for (DdpMode mode : {DdpMode::naive, DdpMode::overlap}) {
        double from = 0, to = 0;
        const RunResult r = run(run_options, [&](Comm& comm) {
          const double start = comm.now();
          shaped_step(comm, model, mode, caps);
          if (comm.rank() == 0) from = start, to = comm.now();
        });
        times[mode == DdpMode::overlap] = step_times(r.trace->tracks()[0], from, to);
      }
      auto efficiency = [](const StepTimes& t) { return t.compute() / (t.compute() + t.exposed()); };
      const StepTimes &naive = times[0], &overlap = times[1];
      fmt::print("{:<10} {:>6} {:>10} {:>10.3f} {:>9.1f}% {:>9.1f}% {:>10} {:>10}\n", topology, p,
                 format_seconds(naive.comm), naive.comm / naive.compute(), 100 * efficiency(naive),
                 100 * efficiency(overlap), format_seconds(overlap.step), format_seconds(overlap.exposed()));
      rows.push_back({{"topology", topology}, {"ranks", p}, {"t_comm", naive.comm},
                      {"comm_to_compute", naive.comm / naive.compute()}, {"naive_efficiency", efficiency(naive)},
                      {"overlap_efficiency", efficiency(overlap)}, {"overlap_t_step", overlap.step},
                      {"overlap_exposed", overlap.exposed()}});
    }
  }
  fmt::print("(naive, overlap: scaling efficiency T_compute / (T_compute + T_exposed); T_step and exposed: overlap)\n");
  if (!o.json.empty()) create_file(o.json) << rows.dump(2) << '\n';
  if (!o.plot.empty()) {
    const std::string data = o.plot + ".dat";
    {
      std::ofstream out = create_file(data);
      for (std::string_view topology : topologies) {
        out << '"' << topology << "\"\n";
        for (const nlohmann::json& r : rows)
          if (r["topology"] == topology)
            out << r["ranks"] << ' ' << 100 * r["overlap_efficiency"].get<double>() << ' '
                << 100 * r["naive_efficiency"].get<double>() << '\n';
        out << "\n\n";
      }
    }
    run_gnuplot(fmt::format(
        "set terminal {} size 800,500 font 'sans,10' background '#ffffff'\n"
        "set output '{}'\nset termoption noenhanced\n"
        "set title 'DDP weak scaling, {}: overlapped (solid) and naive (dashed)'\n"
        "set logscale x 2\nset xlabel 'ranks'\nset ylabel 'scaling efficiency (%)'\nset yrange [0:105]\n"
        "set key bottom left\nset grid\n"
        "plot for [i=0:{}] '{}' index i using 1:2 with linespoints linecolor i+1 title columnheader(1), "
        "for [i=0:{}] '{}' index i using 1:3 with lines dashtype 2 linecolor i+1 notitle\n",
        gnuplot_terminal(o.plot), o.plot, name, topologies.size() - 1, data, topologies.size() - 1, data));
    std::remove(data.c_str());
  }
  return 0;
}

// --volume: the reading's DDP communication table (guide 7.4), each row
// computed: a ring allreduce sends 2 (P-1)/P x N x sizeof(dtype) bytes per rank
// per step, which the reading rounds to 2N x sizeof.
int volume(const Options& o, int ranks) {
  struct Row {
    const char* model;
    double params;
  };
  const Row rows[] = {{"ResNet-50", 25e6}, {"BERT-Large", 340e6}, {"GPT-2 XL", 1.5e9}, {"Llama-7B", 7e9},
                      {"Llama-70B", 70e9}};
  const double link = 200e9;  // the reading's column: 200 GB/s
  fmt::print("DDP communication per step and rank (the reading's 2N x sizeof; exactly 2 (P-1)/P N x sizeof: x{:.3f} "
             "at P = {})\n", 2.0 * (ranks - 1) / ranks / 2, ranks);
  fmt::print("{:<11} {:>7} {:>10} {:>10} {:>12} {:>15}\n", "model", "params", "fp32 GB", "fp16 GB", "@ 200 GB/s",
             fmt::format("fp16 GB, P = {}", ranks));
  nlohmann::json out = nlohmann::json::array();
  for (const Row& r : rows) {
    const double fp32 = 2 * r.params * 4, half = 2 * r.params * 2, exact = 2.0 * (ranks - 1) / ranks * r.params * 2;
    fmt::print("{:<11} {:>6.3g}B {:>10.3g} {:>10.3g} {:>12} {:>15.3g}\n", r.model, r.params / 1e9, fp32 / 1e9,
               half / 1e9, format_seconds(half / link), exact / 1e9);
    out.push_back({{"model", r.model}, {"params", r.params}, {"fp32_bytes", fp32}, {"half_bytes", half},
                   {"seconds_at_200GBps", half / link}, {"exact_half_bytes", exact}, {"ranks", ranks}});
  }
  if (!o.json.empty()) create_file(o.json) << out.dump(2) << '\n';
  return 0;
}

// --bench: what the simulation itself costs, in wall time, side by side in one
// run. --steps steps of the tiny GPT on --ranks simulated ranks (overlap mode,
// data-carrying) against one rank training on the same global batches: the
// same FLOPs, so the ratio is the simulator's overhead. Then one payload-free
// Llama-2 7B step over 1024 ranks.
int bench(Options o, const RunOptions& run_options, const Corpus& corpus, const GptConfig& config) {
  using Clock = std::chrono::steady_clock;
  auto seconds_since = [](Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); };
  fmt::print("timing {} steps of the tiny GPT on {} simulated ranks, overlap mode, global batch {} ...\n", o.steps,
             run_options.ranks, o.batch);
  std::fflush(stdout);
  Clock::time_point start = Clock::now();
  train(o, run_options, DdpMode::overlap, corpus, config);
  const double many = seconds_since(start);
  fmt::print("timing the same on one rank ...\n");
  std::fflush(stdout);
  start = Clock::now();
  train_one_rank(o, corpus, config);
  const double one = seconds_since(start);
  fmt::print("timing one payload-free Llama-2 7B step on 1024 ranks, overlap mode ...\n");
  std::fflush(stdout);
  RunOptions big = run_options;
  big.ranks = 1024, big.payload_free = true;
  const ShapedModel llama = shaped_model(memory::model_preset("llama2-7b"), 2.0);
  start = Clock::now();
  run(big, [&](Comm& comm) { shaped_step(comm, llama, DdpMode::overlap); });
  const double what_if = seconds_since(start);
  fmt::print("{:<44} {:>10}\n", "run", "wall");
  fmt::print("{:<44} {:>10}\n", fmt::format("1 rank, {} steps", o.steps), format_seconds(one));
  fmt::print("{:<44} {:>10}  {:.2f}x the one-rank run (target <= 1.5x)\n",
             fmt::format("{} simulated ranks, {} steps, overlap", run_options.ranks, o.steps), format_seconds(many),
             many / one);
  fmt::print("{:<44} {:>10}  (target < 10 s)\n", "Llama-2 7B step, 1024 ranks, payload-free", format_seconds(what_if));
  if (!o.json.empty())
    create_file(o.json) << nlohmann::json{{"one_rank_seconds", one}, {"ranks", run_options.ranks},
                                          {"simulated_seconds", many}, {"ratio", many / one},
                                          {"llama2_7b_1024_ranks_seconds", what_if}}.dump(2)
                        << '\n';
  return 0;
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
  app.add_option("--json", o.json, "also write the table as JSON to this file");
  app.add_option("--what-if", o.what_if, "a model preset (llama2-7b, ...): one payload-free step of its shapes "
                                         "per mode, against the reading's estimate")
      ->check(cli::parsed_by([](const std::string& name) { memory::model_preset(name); }));
  app.add_option("--step-seconds", o.step_seconds, "--what-if: compute per step, in seconds")
      ->capture_default_str()->check(cli::above(0.0));
  app.add_flag("--volume", o.volume, "the reading's DDP communication-volume table, computed");
  app.add_option_function<std::string>(
         "--sweep", [&o](const std::string& t) { std::tie(o.sweep_from, o.sweep_to) = parse_rank_sweep(t); },
         "ranks=A..B: weak scaling of the --what-if model (llama2-7b by default) on every topology preset")
      ->check(cli::parsed_by([](const std::string& t) { parse_rank_sweep(t); }));
  app.add_option("--plot", o.plot, "--sweep: draw scaling efficiency against ranks to this SVG or PNG (gnuplot)");
  app.add_flag("--bench", o.bench, "time the simulation: --ranks ranks against one rank on the same batches, "
                                   "and a payload-free 7B step on 1024 ranks");
  add_run_options(app, run_options);
  CLI11_PARSE(app, argc, argv);

  try {
    if (o.volume) return volume(o, run_options.ranks);
    std::vector<DdpMode> modes;
    for (const std::string& mode : o.modes) modes.push_back(parse_ddp_mode(mode));
    if (!o.plot.empty() && !o.sweep_to) throw Error("--plot " + o.plot + ": only --sweep draws a plot");
    if (o.sweep_to) return sweep(o, run_options);
    if (!o.what_if.empty()) return what_if(o, run_options, modes);
    if (run_options.backend == "sim" && o.batch % run_options.ranks != 0)
      throw Error(fmt::format("--batch {} does not split over --ranks {}: each rank takes batch / ranks sequences",
                              o.batch, run_options.ranks));
    const Corpus corpus = make_corpus(o.seed, gpt_preset("tiny-gpt", 1).max_seq);
    const GptConfig config = gpt_preset("tiny-gpt", corpus.tokens.vocab);
    if (o.bench) return bench(o, run_options, corpus, config);
    std::vector<ModeRun> runs;
    for (DdpMode mode : modes) runs.push_back(train(o, run_options, mode, corpus, config));
    if (runs.front().weights.empty()) return 0;  // a process of mpirun that ran another rank than 0

    const OneRank one_rank = train_one_rank(o, corpus, config);
    // The gradients must agree to rounding (each rank sums its shard, then the
    // ranks sum theirs: another order of the same sum). SGD and LARS keep the
    // weights as close; AdamW and LAMB divide each step by sqrt(v), so a
    // gradient element that nearly cancels, whose rounding noise is a fair part
    // of it, still moves its weight a full step, and the weights drift apart
    // faster, the more so the less stable the run (about 3e-6 after 10 steps at
    // the default rate, 2e-5 after 6 diverging ones at lr 0.01).
    const bool adam_like = o.optimizer == "adamw" || o.optimizer == "lamb";
    const double weight_limit = adam_like ? 1e-4 : 1e-6;
    fmt::print("ddp: tiny-gpt, {} ranks, global batch {}{}, {} steps, {}, {}; times per step, from rank 0's trace\n",
               runs.front().ranks, o.batch, o.accum > 1 ? fmt::format(" x {} micro-steps", o.accum) : "", o.steps,
               o.optimizer,
               run_options.backend == "sim" ? run_options.topology : "--backend " + run_options.backend);
    fmt::print("{:<9} {:>7} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>7}  {:>12} {:>12}  {}\n", "mode", "buckets",
               "T_fwd", "T_bwd", "T_comm", "T_opt", "exposed", "T_step", "model", "loss", "grads vs 1", "weights vs 1",
               "ranks agree");
    nlohmann::json rows = nlohmann::json::array();
    bool all_equal = true;
    for (const ModeRun& r : runs) {
      const StepTimes& t = r.per_step;
      const double model = t.forward + std::max(t.backward, t.comm) + t.optimizer;
      const double grads = relative_difference(r.first_grads, one_rank.first_grads);
      const double weights = relative_difference(r.weights, one_rank.weights);
      all_equal = all_equal && grads <= 1e-6 && weights <= weight_limit && r.ranks_agree;
      fmt::print("{:<9} {:>7} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>7.4f}  {:>12.1e} {:>12.1e}  {}\n",
                 name_of(r.mode), r.buckets, format_seconds(t.forward), format_seconds(t.backward),
                 format_seconds(t.comm), format_seconds(t.optimizer), format_seconds(t.exposed()),
                 format_seconds(t.step), format_seconds(model), r.losses.back(), grads, weights,
                 r.ranks_agree ? "yes" : "NO");
      rows.push_back({{"mode", name_of(r.mode)}, {"ranks", r.ranks}, {"buckets", r.buckets}, {"t_fwd", t.forward},
                      {"t_bwd", t.backward}, {"t_comm", t.comm}, {"t_opt", t.optimizer}, {"exposed", t.exposed()},
                      {"t_step", t.step}, {"overlap_model", model}, {"loss", r.losses},
                      {"gradients_vs_one_rank", grads}, {"weights_vs_one_rank", weights},
                      {"ranks_agree", r.ranks_agree}, {"weights_fingerprint", fmt::format("{:016x}", r.fingerprint)}});
    }
    fmt::print("(vs 1: ||x - x1|| / ||x1|| against one rank on the global batch; the first step's averaged "
               "gradients, the last weights)\n");
    if (all_equal)
      fmt::print("equal to one rank: gradients within 1e-6, weights within {:g} ({}), every rank bit for bit the same\n",
                 weight_limit, o.optimizer);
    else
      fmt::print("MISMATCH: gradients past 1e-6, weights past {:g}, or ranks that differ\n", weight_limit);
    if (!o.json.empty()) create_file(o.json) << rows.dump(2) << '\n';
    return all_equal ? 0 : 1;
  } catch (const std::exception& e) {
    std::fflush(stdout);
    fmt::print(stderr, "error: {}\n", e.what());
    return 1;
  }
}
