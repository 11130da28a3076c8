// Lab 9: mixture of experts. The tiny GPT with an MoE layer where each block
// had its MLP (parallel/moe.h), its experts spread over --ep ranks, each rank
// training on its share of every step's batch (parallel/moe_gpt.h).
//
//   ./labkit lab moe --experts 8 --top-k 2 --capacity-factor 1.25 --ep 4 --balance aux --steps 10
//
// Every rank must end with the weights one rank reaches on the whole batch,
// having dropped the same assignments; the lab checks it. The tables show what
// the routing did each step (tokens per expert, drops, the balance loss or the
// bias), the all-to-all bytes of each layer beside their formula, and where
// the step's time went.
#include <algorithm>
#include <cstdio>
#include <numeric>
#include <string>
#include <tuple>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "labkit/cli.h"
#include "labkit/error.h"
#include "labkit/memory.h"
#include "labkit/optim.h"
#include "labkit/output.h"
#include "labkit/parallel/equivalence.h"
#include "labkit/parallel/moe_gpt.h"
#include "labkit/parallel/sampler.h"
#include "labkit/units.h"
#include "moe.h"

using namespace moe_lab;

namespace {

// One step of SGD with momentum, each of the model's two parts with its own.
float train_step(Comm& ep, MoeGpt& model, std::vector<SgdMomentum>& sgd, const std::vector<int>& x,
                 const std::vector<int>& y, int B, int T) {
  return model.train_step(ep, x, y, B, T, [&](std::span<float> w, std::span<const float> g) { sgd[0].update(w, g); },
                          [&](std::span<float> w, std::span<const float> g) { sgd[1].update(w, g); });
}

// One rank on the whole batch, beside this rank, alone (a group of its own),
// trained on the same batches: how far this rank's weights are from its, and
// how many of this rank's assignments one of them kept and the other dropped
// (`kept`: this rank's flags, by step and layer).
std::pair<double, double> against_one_rank(Comm& comm, const Options& o, const Sequences& data,
                                           const GptConfig& config, MoeGpt& model,
                                           const std::vector<std::vector<std::uint8_t>>& kept) {
  const std::unique_ptr<Comm> alone = comm.split(comm.rank(), 0);
  const DistributedSampler sampler(data.count, 1, 0, o.seed);
  std::vector<int> x, y;
  std::vector<SgdMomentum> sgd(2, SgdMomentum{.lr = o.lr});
  MoeGpt one(config, o.moe, 1, 0, o.seed);
  const int L = config.layers;
  double unlike = 0;
  for (int s = 0; s < o.steps; ++s) {
    fill_batch(data, batch_of(sampler, s, o.batch), x, y);
    train_step(*alone, one, sgd, x, y, o.batch, config.max_seq);
    for (int l = 0; l < L; ++l) {
      const std::vector<std::uint8_t>& all = one.layer(l).routing().kept;
      const std::vector<std::uint8_t>& mine = kept[std::size_t(s * L + l)];
      const std::size_t first = std::size_t(comm.rank()) * mine.size();
      for (std::size_t a = 0; a < mine.size(); ++a) unlike += mine[a] != all[first + a];
    }
  }
  const double weights = std::max(relative_difference(model.dense().to_host(), one.dense().to_host()),
                                  relative_difference(model.experts().to_host(),
                                                      model.experts_of(one.experts().to_host())));
  return {weights, unlike};
}

// What a rank reports to rank 0 after the run: its losses (by step), then
// for each layer its last step's traffic (2) and phases (4), then its weights'
// distance from one rank's and its drops unlike one rank's.
constexpr std::size_t kPerLayer = 6;

}  // namespace

namespace moe_lab {

MoeRun train(const Options& o, const RunOptions& run_options, const Sequences& data, const GptConfig& config,
             bool compare) {
  const int T = config.max_seq, L = config.layers;
  MoeRun out;
  run(run_options, [&](Comm& comm) {
    const int ep = comm.size(), share = o.batch / ep;
    const DistributedSampler sampler(data.count, 1, 0, o.seed);  // the whole batch, every rank alike
    std::vector<int> x, y;
    const auto batch = [&](int step, int first, int count) {
      const std::vector<std::size_t> all = batch_of(sampler, step, o.batch);
      fill_batch(data, {all.begin() + first, all.begin() + first + count}, x, y);
    };
    std::vector<SgdMomentum> sgd(2, SgdMomentum{.lr = o.lr});
    MoeGpt model(config, o.moe, ep, comm.rank(), o.seed);
    std::vector<double> report;
    std::vector<std::vector<std::uint8_t>> kept;  // by step and layer: this rank's assignments'
    for (int s = 0; s < o.steps; ++s) {
      batch(s, comm.rank() * share, share);
      report.push_back(train_step(comm, model, sgd, x, y, share, T));
      StepRun step;
      for (int l = 0; l < L; ++l) {
        kept.push_back(model.layer(l).routing().kept);
        const auto bias = model.layer(l).bias();
        step.layers.push_back({model.layer(l).stats(), {bias.begin(), bias.end()}});
      }
      if (comm.rank() == 0) out.steps.push_back(std::move(step));
    }
    for (int l = 0; l < L; ++l) {
      const MoeLayer::Traffic& t = model.layer(l).traffic();
      const MoeLayer::Phases& p = model.layer(l).phases();
      report.insert(report.end(), {double(t.to_experts), double(t.from_experts), p.route, p.dispatch, p.experts,
                                   p.combine});
    }

    const auto [weights, unlike] = compare ? against_one_rank(comm, o, data, config, model, kept) : std::pair{0.0, 0.0};
    report.push_back(weights);
    report.push_back(unlike);

    const auto all = comm.inspect(view_of(report));  // an instrument: untraced, free of virtual time
    if (comm.rank() != 0) return;
    out.traffic.assign(std::size_t(L), {});
    for (const std::vector<double>& r : all) {
      for (int s = 0; s < o.steps; ++s) out.steps[std::size_t(s)].loss += r[std::size_t(s)] / ep;
      for (int l = 0; l < L; ++l) {
        const double* v = &r[std::size_t(o.steps) + std::size_t(l) * kPerLayer];
        out.traffic[std::size_t(l)].to_experts += std::int64_t(v[0]);
        out.traffic[std::size_t(l)].from_experts += std::int64_t(v[1]);
      }
      out.weights_vs_one_rank = std::max(out.weights_vs_one_rank, r[r.size() - 2]);
      out.drops_unlike_one_rank += std::int64_t(r.back());
    }
    // Each phase's time on the rank slowest at it, every layer's summed.
    for (int l = 0; l < L; ++l)
      for (std::size_t phase = 0; phase < 4; ++phase) {
        double slowest = 0;
        for (const std::vector<double>& r : all)
          slowest = std::max(slowest, r[std::size_t(o.steps) + std::size_t(l) * kPerLayer + 2 + phase]);
        double* field[] = {&out.phases.route, &out.phases.dispatch, &out.phases.experts, &out.phases.combine};
        *field[phase] += slowest;
      }
  });
  return out;
}

}  // namespace moe_lab

namespace {

// What the command line asks that cannot be, or that would do nothing, before
// any rank starts.
void check_options(const Options& o, const RunOptions& run_options, const CLI::App& app) {
  const MoeConfig& m = o.moe;
  if (o.compare && app.count("--balance"))
    throw Error(fmt::format("--balance {}: --compare trains with every way of balancing (none, aux and bias) on the "
                            "same batches", o.balance));
  for (const auto& [option, value, balance, what] :
       {std::tuple{"--alpha", m.aux_weight, Balance::aux, "the auxiliary loss's weight"},
        std::tuple{"--gamma", m.bias_rate, Balance::bias, "the bias's step"}})
    if (app.count(option) && !o.compare && m.balance != balance)
      throw Error(fmt::format("{} {:g}: {}, which only --balance {} has; this run balances by {}", option, value, what,
                              name_of(balance), o.balance));
  if (m.top_k > m.experts)
    throw Error(fmt::format("--top-k {}: more than the {} experts (--experts): 1 to {}", m.top_k, m.experts,
                            m.experts));
  if (m.experts % o.ep)
    throw Error(fmt::format("--ep {}: it does not divide the {} experts (--experts): each rank holds experts / ep",
                            o.ep, m.experts));
  if (o.batch % o.ep)
    throw Error(fmt::format("--batch {}: it does not split into {} equal shares, one a rank (--ep)", o.batch, o.ep));
  if (run_options.payload_free) throw Error("--payload-free: the tiny GPT computes with real values");
  if (run_options.backend == "nccl")
    throw Error("--backend nccl: the MoE layer keeps its tokens and experts in host memory (sim or mpi for now)");
  if (run_options.backend == "sim" && app.count("--ranks") && run_options.ranks != o.ep)
    throw Error(fmt::format("--ranks {}: the lab runs one rank per expert-parallel rank, --ep {}", run_options.ranks,
                            o.ep));
}

}  // namespace

std::string moe_lab::counts_text(const std::vector<std::int64_t>& counts) {
  std::string out;
  for (std::int64_t c : counts) out += fmt::format("{}{}", out.empty() ? "" : " ", c);
  return out;
}

double moe_lab::StepRun::drop_rate() const {
  double dropped = 0;
  for (const LayerStep& l : layers) dropped += l.stats.drop_rate() / double(layers.size());
  return dropped;
}

double moe_lab::StepRun::imbalance() const {
  double worst = 0;
  for (const LayerStep& l : layers) {
    const std::vector<std::int64_t>& c = l.stats.chosen;
    const std::int64_t all = std::accumulate(c.begin(), c.end(), std::int64_t(0));
    if (all) worst = std::max(worst, double(*std::max_element(c.begin(), c.end())) * double(c.size()) / double(all));
  }
  return worst;
}

int main(int argc, char** argv) {
  CLI::App app{"Lab 9: mixture of experts: top-k routing with capacity, load balancing, expert parallelism"};
  cli::one_line_errors(app);
  Options o;
  RunOptions run_options;
  app.add_option("--experts", o.moe.experts, "experts in each MoE layer (E)")
      ->capture_default_str()->check(cli::in_range(1, 256));
  app.add_option("--top-k", o.moe.top_k, "experts each token goes to (k)")
      ->capture_default_str()->check(cli::in_range(1, 256));
  app.add_option("--capacity-factor", o.moe.capacity_factor,
                 "an expert takes at most this x the fair share, k x tokens / E; the rest are dropped")
      ->capture_default_str()->check(cli::above(0.0, 1e6));
  app.add_option("--ep", o.ep, "expert-parallel ranks: each holds E / ep experts and a share of the batch")
      ->capture_default_str()->check(cli::in_range(1, 256));
  app.add_option("--balance", o.balance, "none, aux (Switch's auxiliary loss) or bias (DeepSeek-V3's, loss-free)")
      ->capture_default_str()->check(cli::parsed_by([](const std::string& name) { parse_balance(name); }));
  app.add_option("--alpha", o.moe.aux_weight, "with --balance aux: the auxiliary loss's weight")
      ->capture_default_str()->check(cli::above(0.0, 1e3));
  app.add_option("--gamma", o.moe.bias_rate, "with --balance bias: the bias's step")
      ->capture_default_str()->check(cli::above(0.0, 1e3));
  app.add_option("--shared-experts", o.moe.shared_experts, "experts every token passes through besides its k")
      ->capture_default_str()->check(cli::in_range(0, 16));
  app.add_option("--steps", o.steps, "optimizer steps")->capture_default_str()->check(cli::in_range(1, 100000));
  app.add_option("--batch", o.batch, "sequences per step, split over the ranks")
      ->capture_default_str()->check(cli::in_range(1, 4096));
  app.add_option("--layers", o.layers, "the tiny GPT's blocks, each with an MoE layer")
      ->capture_default_str()->check(cli::in_range(1, 64));
  app.add_option("--lr", o.lr, "learning rate (SGD, momentum 0.9)")->capture_default_str()->check(cli::above(0.0f));
  app.add_option("--seed", o.seed, "initialisation, corpus and sampling")
      ->capture_default_str()->check(cli::at_least(std::uint64_t(0)));
  app.add_option("--json", o.json, "also write the tables as JSON to this file")->check(cli::output_file());
  app.add_option("--what-if", o.what_if, "a model preset with experts (mixtral-8x7b, deepseek-v3): one MoE layer at "
                                         "its scale on --ep ranks, payload-free, its experts in one node and one a "
                                         "node")
      ->check(cli::parsed_by([](const std::string& name) { memory::model_preset(name); }));
  app.add_option("--seq", o.seq, "with --what-if: the tokens of a sequence (default 4096)")
      ->check(cli::in_range(1, 1 << 20));
  app.add_option("--micro-batch", o.micro_batch, "with --what-if: the sequences a rank holds")
      ->capture_default_str()->check(cli::in_range(1, 1024));
  app.add_flag("--bench", o.bench, "time the simulation: the MoE GPT's steps on --ep ranks against the dense tiny "
                                   "GPT's on one (target 2x); with --what-if the layer's wall time");
  app.add_option("--plot", o.plot, "draw the routing heatmap, tokens per expert by step (.png or .svg)")
      ->check(cli::figure_file());
  app.add_option_function<std::string>(
         "--sweep", [&o](const std::string& text) { o.sweep = parse_sweep(text); },
         "capacity=A..B: each capacity factor from A to B, 0.25 apart, trained on the same batches: the assignments "
         "dropped and the MoE layers' time (with --plot drawn)")
      ->check(cli::parsed_by([](const std::string& text) { parse_sweep(text); }));
  app.add_flag("--compare", o.compare, "train with each way of balancing (none, aux, bias) on the same batches: a "
                                       "table, and with --plot their heatmaps side by side");
  add_run_options(app, run_options);
  CLI11_PARSE(app, argc, argv);

  try {
    if (!o.what_if.empty()) {
      if (app.count("--ranks"))
        throw Error("--ranks: --what-if simulates the ep group and the groups beside it on its nodes (set --ep)");
      return what_if(o, run_options);
    }
    if (app.count("--seq") || app.count("--micro-batch"))
      throw Error("--seq and --micro-batch go with --what-if; the tiny GPT trains on its context (--batch)");
    o.moe.balance = parse_balance(o.balance);
    check_options(o, run_options, app);
    if (!app.count("--ranks")) run_options.ranks = o.ep;
    const Sequences data = training_sequences(o.seed, gpt_preset("tiny-gpt", 1).max_seq);
    GptConfig config = gpt_preset("tiny-gpt", data.tokens.vocab);
    config.layers = o.layers;
    if (o.bench) return bench(o, run_options, data, config);
    if (o.compare) return compare_balance(o, run_options, data, config);
    if (!o.sweep.over.empty()) return sweep(o, run_options, data, config);
    const MoeRun r = train(o, run_options, data, config);
    if (r.steps.empty()) return 0;  // a process of mpirun that ran another rank than 0

    const MoeConfig& m = o.moe;
    const int E = m.experts, k = m.top_k, ep = run_options.ranks, T = config.max_seq, C = config.channels;
    fmt::print("moe: tiny-gpt with an MoE layer in each of its {} blocks: {} experts, top-{}, capacity factor {:g}, "
               "{} shared expert{}; ep {} ({} expert{} a rank), balance {}{}; {} sequences of {} tokens a step, {} a "
               "rank; {} step{}, sgd\n",
               config.layers, E, k, m.capacity_factor, m.shared_experts, m.shared_experts == 1 ? "" : "s", ep, E / ep,
               E / ep == 1 ? "" : "s", o.balance,
               m.balance == Balance::aux    ? fmt::format(" (alpha {:g})", m.aux_weight)
               : m.balance == Balance::bias ? fmt::format(" (gamma {:g})", m.bias_rate)
                                            : "",
               o.batch, T, o.batch / ep, o.steps, o.steps == 1 ? "" : "s");
    const char* balance_column = m.balance == Balance::aux ? "aux loss" : m.balance == Balance::bias ? "bias" : "-";
    fmt::print("{:>5} {:>8} {:>9} {:>8} {:>9}  tokens per expert, layer 0 (capacity {})\n", "step", "loss",
               balance_column, "dropped", "max/mean", r.steps[0].layers[0].stats.capacity);
    nlohmann::json steps = nlohmann::json::array(), losses = nlohmann::json::array();
    const std::size_t every = (r.steps.size() + 19) / 20;  // at most about 20 rows
    for (std::size_t s = 0; s < r.steps.size(); ++s) {
      const StepRun& step = r.steps[s];
      double balance = 0;
      for (const LayerStep& l : step.layers) {
        balance += l.stats.balance_loss;
        if (m.balance == Balance::bias)
          balance = std::max(balance, double(*std::max_element(l.bias.begin(), l.bias.end()) -
                                             *std::min_element(l.bias.begin(), l.bias.end())));
      }
      const double dropped = step.drop_rate(), worst = step.imbalance();
      if (s == 0 || (s + 1) % every == 0 || s + 1 == r.steps.size())
        fmt::print("{:>5} {:>8.4f} {:>9} {:>7.1f}% {:>9.2f}  {}\n", s + 1, step.loss,
                   m.balance == Balance::none ? "-" : fmt::format("{:.4f}", balance), 100 * dropped, worst,
                   counts_text(step.layers[0].stats.chosen));
      nlohmann::json layers = nlohmann::json::array();
      for (const LayerStep& l : step.layers)
        layers.push_back({{"chosen", l.stats.chosen}, {"kept", l.stats.kept}, {"capacity", l.stats.capacity},
                          {"balance_loss", l.stats.balance_loss}, {"bias", l.bias}});
      losses.push_back(step.loss);
      steps.push_back({{"step", s + 1}, {"loss", step.loss}, {"dropped", dropped}, {"max_over_mean", worst},
                       {"layers", layers}});
    }
    fmt::print("({}loss: the cross-entropy, the mean over the batch; {}; dropped: the assignments past their expert's "
               "capacity, ceil(factor x k x tokens / E), every layer's mean; max/mean: the busiest expert's "
               "assignments over the fair share k x tokens / E, the worst layer's; tokens per expert: the assignments "
               "that chose each, before capacity)\n",
               every > 1 ? fmt::format("one step in {} and the first, --json holds each; ", every) : "",
               m.balance == Balance::aux    ? "aux loss: alpha E sum_e f_e P_e, every layer's summed"
               : m.balance == Balance::bias ? "bias: the spread of the experts' biases, the widest layer's"
                                            : "no balancing");

    // The all-to-all per layer. Each assignment kept travels to its expert's
    // rank and back, forward and backward (its gradients), unless the expert is
    // on its own rank: with routing spread evenly, (ep - 1) / ep of them.
    const double tokens = double(o.batch) * T;
    fmt::print("the last step's all-to-all, each MoE layer, every rank's bytes summed (fp32 activations)\n");
    fmt::print("{:>5} {:>11} {:>13} {:>11} {:>11} {:>14}\n", "layer", "to experts", "from experts", "both",
               "formula", "the reading's");
    nlohmann::json traffic = nlohmann::json::array();
    for (std::size_t l = 0; l < r.traffic.size(); ++l) {
      const MoeLayer::Traffic& t = r.traffic[l];
      const double kept = 1 - r.steps.back().layers[l].stats.drop_rate();
      const double formula = 4.0 * k * kept * tokens * C * (ep - 1) / ep * sizeof(float);
      const double reading = 4.0 * tokens * C * (E - 1) / E * sizeof(float);
      fmt::print("{:>5} {:>11} {:>13} {:>11} {:>11} {:>14}\n", l, format_bytes(std::uint64_t(t.to_experts)),
                 format_bytes(std::uint64_t(t.from_experts)),
                 format_bytes(std::uint64_t(t.to_experts + t.from_experts)),
                 format_bytes(std::uint64_t(formula)), format_bytes(std::uint64_t(reading)));
      traffic.push_back({{"layer", l}, {"to_experts", t.to_experts}, {"from_experts", t.from_experts},
                         {"formula", formula}, {"reading", reading}});
    }
    fmt::print("(to experts: the dispatch forward and the outputs' gradients backward; from experts: the combine "
               "forward and the inputs' gradients backward; formula: 4 k (1 - dropped) B T h (ep-1)/ep x 4 bytes, "
               "routing spread evenly; the reading's: 4 B T h (E-1)/E, which counts one copy of each token (top-1) "
               "and E where the ranks are, ep)\n");

    const MoeLayer::Phases& p = r.phases;
    const double total = p.route + p.dispatch + p.experts + p.combine;
    fmt::print("time per phase, the last step, every layer's forward and backward, each the slowest rank's\n");
    fmt::print("{:<10} {:>10} {:>7}\n", "phase", "time", "share");
    const std::pair<const char*, double> phases[] = {
        {"route", p.route}, {"dispatch", p.dispatch}, {"experts", p.experts}, {"combine", p.combine}};
    for (const auto& [name, seconds] : phases)
      fmt::print("{:<10} {:>10} {:>6.1f}%\n", name, format_seconds(seconds), total > 0 ? 100 * seconds / total : 0.0);
    fmt::print("(route: the router, the top-k and the counts' all_gather; dispatch: the tokens to their experts and "
               "back the inputs' gradients; experts: their MLPs; combine: the outputs back, weighted by the gates, "
               "the shared experts, and the outputs' gradients to the experts)\n");
    if (run_options.backend != "sim")
      fmt::print("(times are wall clock here: every wait shows, the messages' and the processes' sharing the "
                 "machine's cores)\n");

    if (!o.plot.empty()) {
      plot_heatmaps({{fmt::format("balance {}: tokens per expert, layer 0", o.balance), &r}}, o.plot);
      fmt::print("wrote {}\n", o.plot);
    }
    const double limit = 1e-5;
    std::vector<std::string> failed;  // each criterion missed, named
    if (!(r.weights_vs_one_rank <= limit))
      failed.push_back(failed_criterion("a rank's weights", r.weights_vs_one_rank, limit));
    if (r.drops_unlike_one_rank != 0)
      failed.push_back(fmt::format("{} assignments kept on one side and dropped on the other",
                                   r.drops_unlike_one_rank));
    if (failed.empty())
      fmt::print("equal to one rank: every rank's weights within {:g} of one rank's on the whole batch after {} "
                 "step{} ({:.1e}), the same assignments dropped\n",
                 limit, o.steps, o.steps == 1 ? "" : "s", r.weights_vs_one_rank);
    else
      fmt::print("MISMATCH: {}\n", fmt::join(failed, "; "));
    if (!o.json.empty())
      create_file(o.json) << nlohmann::json{{"experts", E}, {"top_k", k}, {"capacity_factor", m.capacity_factor},
                                            {"ep", ep}, {"balance", o.balance}, {"shared_experts", m.shared_experts},
                                            {"batch", o.batch}, {"seq", T}, {"losses", losses}, {"steps", steps},
                                            {"traffic", traffic},
                                            {"phases", {{"route", p.route}, {"dispatch", p.dispatch},
                                                        {"experts", p.experts}, {"combine", p.combine}}},
                                            {"weights_vs_one_rank", r.weights_vs_one_rank},
                                            {"drops_unlike_one_rank", r.drops_unlike_one_rank}}
                                 .dump(2)
                          << '\n';
    return failed.empty() ? 0 : 1;
  } catch (const std::exception& e) {
    std::fflush(stdout);
    fmt::print(stderr, "error: {}\n", e.what());
    return 1;
  }
}
