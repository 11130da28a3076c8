// The default view: one run on --ep ranks, what its routing did each step,
// the all-to-all bytes of each layer beside their formula, where the step's
// time went, and whether every rank ended with one rank's weights having
// dropped the same assignments.
#include <algorithm>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "labkit/lab/output.h"
#include "labkit/lab/table.h"
#include "labkit/lab/verdict.h"
#include "labkit/units.h"
#include "moe.h"

namespace moe_lab {

namespace {

void print_setup(const Options& o, int ep, const GptConfig& config) {
  const MoeConfig& m = o.moe;
  const int E = m.experts;
  fmt::print("moe: tiny-gpt with an MoE layer in each of its {} blocks: {} experts, top-{}, capacity factor {:g}, "
             "{} shared expert{}; ep {} ({} expert{} a rank), balance {}{}; {} sequences of {} tokens a step, {} a "
             "rank; {} step{}, sgd\n",
             config.layers, E, m.top_k, m.capacity_factor, m.shared_experts, m.shared_experts == 1 ? "" : "s", ep,
             E / ep, E / ep == 1 ? "" : "s", o.balance,
             m.balance == Balance::aux    ? fmt::format(" (alpha {:g})", m.aux_weight)
             : m.balance == Balance::bias ? fmt::format(" (gamma {:g})", m.bias_rate)
                                          : "",
             o.batch, config.max_seq, o.batch / ep, o.steps, o.steps == 1 ? "" : "s");
}

// The balance column: the auxiliary losses, every layer's summed; with bias,
// the widest spread of a layer's biases.
double balance_of(const StepRun& step, Balance b) {
  double balance = 0;
  for (const LayerStep& l : step.layers) {
    balance += l.stats.balance_loss;
    if (b == Balance::bias)
      balance = std::max(balance, double(*std::max_element(l.bias.begin(), l.bias.end()) -
                                         *std::min_element(l.bias.begin(), l.bias.end())));
  }
  return balance;
}

// Prints the routing of one step in `every` (at most about 20 rows) and the
// first; returns every step's, its layers' counts, capacity, balance loss and
// bias included: the JSON holds rows and fields the table does not print, so
// it is built beside the table, not from it.
nlohmann::json print_routing(const Options& o, const MoeRun& r) {
  const Balance b = o.moe.balance;
  lab::Table table({{.header = "step", .key = "step", .width = 5},
                    {.header = "loss", .key = "loss", .width = 8},
                    {.header = b == Balance::aux ? "aux loss" : b == Balance::bias ? "bias" : "-", .key = "balance",
                     .width = 9},
                    {.header = "dropped", .key = "dropped", .width = 8},
                    {.header = "max/mean", .key = "max_over_mean", .width = 9},
                    {.header = fmt::format("tokens per expert, layer 0 (capacity {})",
                                           r.steps[0].layers[0].stats.capacity),
                     .key = "chosen", .align = lab::Align::left, .gap = 2}});
  table.print_header();
  nlohmann::json steps = nlohmann::json::array();
  const std::size_t every = (r.steps.size() + 19) / 20;
  for (std::size_t s = 0; s < r.steps.size(); ++s) {
    const StepRun& step = r.steps[s];
    const double balance = balance_of(step, b), dropped = step.drop_rate(), worst = step.imbalance();
    if (s == 0 || (s + 1) % every == 0 || s + 1 == r.steps.size())
      table.add({s + 1, lab::number(step.loss, "{:.4f}"),
                 b == Balance::none ? lab::Cell{nullptr, "-"} : lab::number(balance, "{:.4f}"),
                 {dropped, fmt::format("{:.1f}%", 100 * dropped)}, lab::number(worst, "{:.2f}"),
                 {step.layers[0].stats.chosen, counts_text(step.layers[0].stats.chosen)}});
    nlohmann::json layers = nlohmann::json::array();
    for (const LayerStep& l : step.layers)
      layers.push_back({{"chosen", l.stats.chosen}, {"kept", l.stats.kept}, {"capacity", l.stats.capacity},
                        {"balance_loss", l.stats.balance_loss}, {"bias", l.bias}});
    steps.push_back({{"step", s + 1}, {"loss", step.loss}, {"dropped", dropped}, {"max_over_mean", worst},
                     {"layers", layers}});
  }
  fmt::print("({}loss: the cross-entropy, the mean over the batch; {}; dropped: the assignments past their expert's "
             "capacity, ceil(factor x k x tokens / E), every layer's mean; max/mean: the busiest expert's "
             "assignments over the fair share k x tokens / E, the worst layer's; tokens per expert: the assignments "
             "that chose each, before capacity)\n",
             every > 1 ? fmt::format("one step in {} and the first, --json holds each; ", every) : "",
             b == Balance::aux    ? "aux loss: alpha E sum_e f_e P_e, every layer's summed"
             : b == Balance::bias ? "bias: the spread of the experts' biases, the widest layer's"
                                  : "no balancing");
  return steps;
}

// The all-to-all per layer. Each assignment kept travels to its expert's rank
// and back, forward and backward (its gradients), unless the expert is on its
// own rank: with routing spread evenly, (ep - 1) / ep of them.
nlohmann::json print_traffic(const Options& o, const MoeRun& r, int ep, const GptConfig& config) {
  const int E = o.moe.experts, k = o.moe.top_k;
  const double tokens = double(o.batch) * config.max_seq, h = config.channels;
  const auto bytes = [](double b) { return format_bytes(std::uint64_t(b)); };
  fmt::print("the last step's all-to-all, each MoE layer, every rank's bytes summed (fp32 activations)\n");
  lab::Table table({{.header = "layer", .key = "layer", .width = 5},
                    {.header = "to experts", .key = "to_experts", .width = 11},
                    {.header = "from experts", .key = "from_experts", .width = 13},
                    {.header = "both", .width = 11},
                    {.header = "formula", .key = "formula_bytes", .width = 11},
                    {.header = "the reading's", .key = "reading_bytes", .width = 14}});
  table.print_header();
  for (std::size_t l = 0; l < r.traffic.size(); ++l) {
    const MoeLayer::Traffic& t = r.traffic[l];
    const double kept = 1 - r.steps.back().layers[l].stats.drop_rate();
    const double formula = 4.0 * k * kept * tokens * h * (ep - 1) / ep * sizeof(float);
    const double reading = 4.0 * tokens * h * (E - 1) / E * sizeof(float);
    table.add({l, {t.to_experts, bytes(double(t.to_experts))}, {t.from_experts, bytes(double(t.from_experts))},
               {t.to_experts + t.from_experts, bytes(double(t.to_experts + t.from_experts))}, {formula, bytes(formula)},
               {reading, bytes(reading)}});
  }
  fmt::print("(to experts: the dispatch forward and the outputs' gradients backward; from experts: the combine "
             "forward and the inputs' gradients backward; formula: 4 k (1 - dropped) B T h (ep-1)/ep x 4 bytes, "
             "routing spread evenly; the reading's: 4 B T h (E-1)/E, which counts one copy of each token (top-1) "
             "and E where the ranks are, ep)\n");
  return table.json();
}

// Each phase's time and share of the MoE layers'; returns them by name.
nlohmann::json print_phases(const MoeLayer::Phases& p, const RunOptions& run_options) {
  const double total = p.route + p.dispatch + p.experts + p.combine;
  fmt::print("time per phase, the last step, every layer's forward and backward, each the slowest rank's\n");
  lab::Table table({{.header = "phase", .key = "phase", .width = 10, .align = lab::Align::left},
                    {.header = "time", .key = "time", .width = 10},
                    {.header = "share", .key = "share", .width = 7}});
  table.print_header();
  nlohmann::json phases = nlohmann::json::object();
  for (const auto& [name, seconds] : {std::pair{"route", p.route}, std::pair{"dispatch", p.dispatch},
                                      std::pair{"experts", p.experts}, std::pair{"combine", p.combine}}) {
    table.add({name, lab::seconds(seconds), lab::number(total > 0 ? 100 * seconds / total : 0.0, "{:.1f}%")});
    phases[name] = seconds;
  }
  fmt::print("(route: the router, the top-k and the counts' all_gather; dispatch: the tokens to their experts and "
             "back the inputs' gradients; experts: their MLPs; combine: the outputs back, weighted by the gates, "
             "the shared experts, and the outputs' gradients to the experts)\n");
  lab::note_wall_clock(run_options);
  return phases;
}

}  // namespace

int report(const Options& o, const RunOptions& run_options, const Sequences& data, const GptConfig& config) {
  const MoeRun r = train(o, run_options, data, config);
  if (r.steps.empty()) return 0;  // a process of mpirun that ran another rank than 0
  const int ep = run_options.ranks;
  print_setup(o, ep, config);
  nlohmann::json json = {{"experts", o.moe.experts}, {"top_k", o.moe.top_k},
                         {"capacity_factor", o.moe.capacity_factor}, {"ep", ep}, {"balance", o.balance},
                         {"shared_experts", o.moe.shared_experts}, {"batch", o.batch}, {"seq", config.max_seq}};
  json["steps"] = print_routing(o, r);
  json["losses"] = nlohmann::json::array();
  for (const StepRun& step : r.steps) json["losses"].push_back(step.loss);
  json["traffic"] = print_traffic(o, r, ep, config);
  json["phases"] = print_phases(r.phases, run_options);
  if (!o.plot.empty()) {
    plot_heatmaps({{fmt::format("balance {}: tokens per expert, layer 0", o.balance), &r}}, o.plot);
  }
  const double limit = 1e-5;
  std::vector<double> losses;
  for (const StepRun& step : r.steps) losses.push_back(step.loss);
  lab::Verdict verdict;
  verdict.trained("", losses);
  verdict.within("a rank's weights", r.weights_vs_one_rank, limit);
  verdict.require(r.drops_unlike_one_rank == 0,
                  fmt::format("{} assignments kept on one side and dropped on the other", r.drops_unlike_one_rank));
  const int status = verdict.print(fmt::format("equal to one rank: every rank's weights within {:g} of one rank's on "
                                               "the whole batch after {} step{} ({:.1e}), the same assignments dropped",
                                               limit, o.steps, o.steps == 1 ? "" : "s", r.weights_vs_one_rank));
  json["weights_vs_one_rank"] = r.weights_vs_one_rank;
  json["drops_unlike_one_rank"] = r.drops_unlike_one_rank;
  json["verdict"] = verdict.json();
  lab::write_json(o.json, json);
  return status;
}

}  // namespace moe_lab
