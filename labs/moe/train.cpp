// The tiny GPT with an MoE layer in each block, trained on ep ranks, each on
// its consecutive share of every step's batch (parallel/moe_gpt.h); then one
// rank trains on the whole batch: every rank must end with that rank's
// weights, having dropped the same assignments.
#include <algorithm>
#include <numeric>
#include <string>
#include <tuple>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "labkit/error.h"
#include "labkit/lab/training_options.h"
#include "labkit/output.h"
#include "labkit/parallel/equivalence.h"
#include "labkit/parallel/moe_gpt.h"
#include "labkit/parallel/training_loop.h"
#include "moe.h"

namespace moe_lab {

namespace {

// What the ranks hold after training, gathered on rank 0 (instruments:
// untraced, free of virtual time): by rank, which of its assignments it kept
// (by step and layer), its dense weights and its experts.
struct Gathered {
  std::vector<std::vector<std::uint8_t>> kept;
  std::vector<std::vector<float>> dense, experts;
};

Gathered gather_weights(Comm& comm, MoeGpt& model, const std::vector<std::vector<std::uint8_t>>& kept) {
  std::vector<std::uint8_t> my_kept;
  for (const std::vector<std::uint8_t>& flags : kept) my_kept.insert(my_kept.end(), flags.begin(), flags.end());
  return {comm.gather_objects(my_kept), comm.gather_objects(model.dense().to_host()),
          comm.gather_objects(model.experts().to_host())};
}

// One rank on the whole batch, on the same batches, trained once the run is
// over, in a simulation of its own (outside the run's trace, clock and memory):
// the farthest rank's distance from its weights, and how many assignments one
// of them kept and the other dropped.
std::pair<double, std::int64_t> against_one_rank(const Options& o, const Sequences& data, const GptConfig& config,
                                                 const Gathered& ranks) {
  const int L = config.layers, ep = int(ranks.dense.size());
  double weights = 0;
  std::int64_t unlike = 0;
  run(RunOptions{.ranks = 1}, [&](Comm& alone) {
    progress_line("  training one rank, the reference to compare with");
    MoeTrainer trainer(alone, config, o.moe, data, o.batch, o.seed, o.lr, parse_device(o.device));
    MoeGpt& one = trainer.model();
    const std::size_t share = ranks.kept[0].size() / std::size_t(o.steps * L);  // a rank's assignments, a layer
    for (int s = 0; s < o.steps; ++s) {
      trainer.step(s);
      for (int l = 0; l < L; ++l) {
        const std::vector<std::uint8_t>& all = one.layer(l).routing().kept;
        for (int r = 0; r < ep; ++r)
          for (std::size_t a = 0; a < share; ++a)
            unlike += ranks.kept[r][std::size_t(s * L + l) * share + a] != all[r * share + a];
      }
    }
    progress_line("");
    const std::vector<float> dense = one.dense().to_host(), experts = one.experts().to_host();
    for (int r = 0; r < ep; ++r)
      weights = std::max({weights, relative_difference(ranks.dense[r], dense),
                          relative_difference(ranks.experts[r], MoeGpt::experts_of(experts, L, r, ep))});
  });
  return {weights, unlike};
}

// What a rank reports to rank 0 after the run, beside its losses.
struct RankReport {
  std::vector<MoeLayer::Traffic> traffic;  // by layer, the last step
  std::vector<MoeLayer::Phases> phases;    // by layer, the last step
};

// Every rank's report, on rank 0 (instruments: untraced, free of virtual time).
std::vector<RankReport> gather_reports(Comm& comm, const RankReport& mine) {
  const auto traffic = comm.gather_objects(mine.traffic);
  const auto phases = comm.gather_objects(mine.phases);
  std::vector<RankReport> all;
  for (std::size_t r = 0; r < traffic.size(); ++r) all.push_back({traffic[r], phases[r]});
  return all;
}

// The ranks' reports into the run: the bytes summed, and each phase's time on
// the rank slowest at it (every layer's summed).
void add_reports(MoeRun& out, const std::vector<RankReport>& all) {
  const std::size_t layers = all[0].traffic.size();
  out.traffic.assign(layers, {});
  for (const RankReport& r : all) {
    for (std::size_t l = 0; l < layers; ++l) {
      out.traffic[l].to_experts += r.traffic[l].to_experts;
      out.traffic[l].from_experts += r.traffic[l].from_experts;
    }
  }
  const auto slowest = [&](std::size_t l, double MoeLayer::Phases::*phase) {
    double most = 0;
    for (const RankReport& r : all) most = std::max(most, r.phases[l].*phase);
    return most;
  };
  for (std::size_t l = 0; l < layers; ++l)
    for (double MoeLayer::Phases::*phase : {&MoeLayer::Phases::route, &MoeLayer::Phases::dispatch,
                                            &MoeLayer::Phases::experts, &MoeLayer::Phases::combine})
      out.phases.*phase += slowest(l, phase);
}

}  // namespace

MoeRun train(const Options& o, const RunOptions& run_options, const Sequences& data, const GptConfig& config,
             bool compare) {
  const int L = config.layers;
  MoeRun out;
  Gathered ranks;  // on rank 0, with `compare`
  const TrainingRun run = run_training(run_options, [&](Comm& comm, RankTraining& training) {
    MoeTrainer trainer(comm, config, o.moe, data, o.batch, o.seed, o.lr, parse_device(o.device));
    MoeGpt& model = trainer.model();
    std::vector<std::vector<std::uint8_t>> kept;  // by step and layer: this rank's assignments'
    training.steps(o.steps, [&](int s) {
      const float loss = trainer.step(s);
      StepRun step;
      for (int l = 0; l < L; ++l) {
        kept.push_back(model.layer(l).routing().kept);
        const auto bias = model.layer(l).bias();
        step.layers.push_back({model.layer(l).stats(), {bias.begin(), bias.end()}});
      }
      if (comm.rank() == 0) out.steps.push_back(std::move(step));
      return loss;
    });
    RankReport mine;
    for (int l = 0; l < L; ++l) {
      mine.traffic.push_back(model.layer(l).traffic());
      mine.phases.push_back(model.layer(l).phases());
    }
    if (compare) {
      Gathered gathered = gather_weights(comm, model, kept);
      if (comm.rank() == 0) ranks = std::move(gathered);
    }
    const std::vector<RankReport> all = gather_reports(comm, mine);
    if (comm.rank() == 0) add_reports(out, all);
  });
  if (!run.on_rank_zero()) return out;
  // Each step's loss: the ranks' shares' mean, in rank order.
  for (const std::vector<double>& losses : run.losses)
    for (std::size_t s = 0; s < losses.size(); ++s) out.steps[s].loss += losses[s] / double(run.ranks);
  if (compare) std::tie(out.weights_vs_one_rank, out.drops_unlike_one_rank) = against_one_rank(o, data, config, ranks);
  return out;
}

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
  check(m, o.ep);  // the MoE layer's own rules (parallel/moe.h), before any rank starts: top-k, ep, capacity
  if (o.batch % o.ep)
    throw Error(fmt::format("--batch {}: it does not split into {} equal shares, one a rank (--ep)", o.batch, o.ep));
  lab::refuse_payload_free(run_options.payload_free, {"--what-if"});
  lab::check_ranks_of_shape(run_options, o.ep, "--ep", "expert-parallel rank");
}

std::string counts_text(const std::vector<std::int64_t>& counts) {
  std::string out;
  for (std::int64_t c : counts) out += fmt::format("{}{}", out.empty() ? "" : " ", c);
  return out;
}

double StepRun::drop_rate() const {
  double dropped = 0;
  for (const LayerStep& l : layers) dropped += l.stats.drop_rate() / double(layers.size());
  return dropped;
}

double StepRun::imbalance() const {
  double worst = 0;
  for (const LayerStep& l : layers) {
    const std::vector<std::int64_t>& c = l.stats.chosen;
    const std::int64_t all = std::accumulate(c.begin(), c.end(), std::int64_t(0));
    if (all) worst = std::max(worst, double(*std::max_element(c.begin(), c.end())) * double(c.size()) / double(all));
  }
  return worst;
}

}  // namespace moe_lab
