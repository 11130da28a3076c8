// The tiny GPT trained data-parallel in each --mode, timed per step from rank
// 0's trace, and held against one rank training on the whole global batch:
// every mode must end with the same weights on every rank, and one rank's.
//
// naive allreduces every gradient after backward; bucketed packs them into
// PyTorch's buckets (1 MiB first, then --bucket-mb) and allreduces each after
// backward; overlap starts each bucket's allreduce the moment its last gradient
// is ready, while backward goes on. `model` is the overlap model
// T_fwd + max(T_bwd, T_comm) + T_opt.
#include <algorithm>

#include <fmt/format.h>

#include "ddp.h"
#include "labkit/lab/output.h"
#include "labkit/lab/table.h"
#include "labkit/lab/verdict.h"
#include "labkit/parallel/equivalence.h"

namespace ddp_lab {

namespace {

// Two tables, so that each fits a page: where the step's time goes, then
// whether the mode trained what one rank does. The JSON joins them, a row per mode.
lab::Table times_table() {
  using lab::Align;
  return lab::Table({{.header = "mode", .key = "mode", .width = 9, .align = Align::left},
                     {.header = "buckets", .key = "buckets", .width = 7},
                     {.header = "T_fwd", .key = "t_fwd", .width = 9},
                     {.header = "T_bwd", .key = "t_bwd", .width = 9},
                     {.header = "T_comm", .key = "t_comm", .width = 9},
                     {.header = "T_opt", .key = "t_opt", .width = 9},
                     {.header = "exposed", .key = "exposed", .width = 9},
                     {.header = "T_step", .key = "t_step", .width = 9},
                     {.header = "model", .key = "overlap_model", .width = 9}});
}

lab::Table one_rank_table() {
  using lab::Align;
  return lab::Table({{.header = "mode", .key = "mode", .width = 9, .align = Align::left},
                     {.header = "loss", .key = "loss", .width = 7},
                     {.header = "grads vs 1", .key = "gradients_vs_one_rank", .width = 12, .gap = 2},
                     {.header = "weights vs 1", .key = "weights_vs_one_rank", .width = 12},
                     {.header = "ranks agree", .key = "ranks_agree", .align = Align::left, .gap = 2},
                     {.key = "ranks"},
                     {.key = "gradients_limit"},
                     {.key = "weights_limit"},
                     {.key = "weights_fingerprint"}});
}

}  // namespace

int train_modes(const Options& o, const RunOptions& run_options, const std::vector<DdpMode>& modes,
                const Sequences& corpus, const GptConfig& config) {
  std::vector<ModeRun> runs;
  lab::TracePerRow traces(run_options, modes.size() > 1);
  for (DdpMode mode : modes) runs.push_back(train(o, traces.row(name_of(mode)), mode, corpus, config));
  if (runs.front().weights.empty()) return 0;  // a process of mpirun that ran another rank than 0

  // Each limit from what reordering one rank's sums does (rounding_limit): the
  // first gradients' grows with the batch, the weights' with the optimizer too.
  const OneRankRun one_rank = train_one_rank(o, corpus, config);
  const OneRankRun reversed = train_one_rank(o, corpus, config, true);
  const double reordered_grads = relative_difference(reversed.first_grads, one_rank.first_grads);
  const double reordered = relative_difference(reversed.weights, one_rank.weights);
  const double grad_limit = rounding_limit(reordered_grads), weight_limit = rounding_limit(reordered);
  fmt::print("ddp: {}, {}, {}, {}; times per step, from rank 0's trace\n", o.model, run_shape(o, runs.front().ranks),
             o.optimizer, run_options.backend == "sim" ? run_options.topology : "--backend " + run_options.backend);
  lab::Table times = times_table(), one_rank_vs = one_rank_table();
  times.print_header();
  for (const ModeRun& r : runs) {
    const StepTimes& t = r.per_step;
    const double model = t.forward + std::max(t.backward, t.comm) + t.optimizer;
    times.add({std::string(name_of(r.mode)), r.buckets, lab::seconds(t.forward), lab::seconds(t.backward),
               lab::seconds(t.comm), lab::seconds(t.optimizer), lab::seconds(t.exposed()), lab::seconds(t.step),
               lab::seconds(model)});
  }
  fmt::print("(model: the overlap model, T_fwd + max(T_bwd, T_comm) + T_opt)\n");
  lab::note_wall_clock(run_options, "; exposed: the step less its compute, so those waits too");
  one_rank_vs.print_header();
  lab::Verdict verdict;
  for (const ModeRun& r : runs) {
    const double grads = relative_difference(r.first_grads, one_rank.first_grads);
    const double weights = relative_difference(r.weights, one_rank.weights);
    const std::string mode(name_of(r.mode));
    verdict.trained(mode, r.losses);
    verdict.within(mode + ": first gradients", grads, grad_limit);
    verdict.within(mode + ": weights", weights, weight_limit);
    verdict.require(r.ranks_agree, mode + ": ranks' weights differ");
    one_rank_vs.add({mode, {r.losses, fmt::format("{:.4f}", r.losses.back())}, lab::number(grads, "{:.1e}"),
                     lab::number(weights, "{:.1e}"), lab::yes_no(r.ranks_agree), r.ranks, grad_limit, weight_limit,
                     fmt::format("{:016x}", r.fingerprint)});
  }
  fmt::print("(vs 1: ||x - x1|| / ||x1|| against one rank on the global batch; the first step's averaged "
             "gradients, the last weights)\n");
  traces.print("mode");
  const int status = verdict.print(fmt::format(
      "equal to one rank: gradients within {:.1e}, weights within {:.1e} ({}: {}x, at least 1e-6, what reversing "
      "each batch does to one rank's, {:.1e} and {:.1e}), every rank bit for bit the same",
      grad_limit, weight_limit, o.optimizer, kRoundingMargin, reordered_grads, reordered));
  nlohmann::json rows = times.json();
  for (std::size_t i = 0; i < rows.size(); ++i) rows[i].update(one_rank_vs.json()[i]);
  lab::write_json(o.json, {{"modes", rows}, {"verdict", verdict.json()}});
  if (!o.plot.empty()) {
    std::vector<std::pair<DdpMode, StepTimes>> steps;
    for (const ModeRun& r : runs) steps.emplace_back(r.mode, r.per_step);
    plot_step_bars(o.plot, fmt::format("DDP step of the tiny GPT on {} ranks", runs.front().ranks), steps);
  }
  return status;
}

}  // namespace ddp_lab
