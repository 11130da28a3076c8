#include <functional>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "ddp.h"
#include "labkit/error.h"
#include "labkit/lab/bench.h"
#include "labkit/lab/output.h"
#include "labkit/memory.h"

namespace ddp_lab {

// --bench: what the simulation itself costs, in wall time, side by side in one
// run. --steps steps of --model on --ranks simulated ranks (overlap mode,
// data-carrying) against one rank training on the same global batches: the
// same FLOPs, so the ratio is the simulator's overhead. Each is timed at
// --steps and at one step, and the difference kept: steps 2 to --steps, in
// their steady state, without building the model (once per rank) and the
// checks at the end. Then one payload-free Llama-2 7B step over 1024 ranks.
int bench(const Options& o, const RunOptions& run_options, const Sequences& corpus, const GptConfig& config) {
  if (o.steps < 2) throw Error(fmt::format("--steps {} with --bench: it times steps 2 to --steps", o.steps));
  Options one_step = o;
  one_step.steps = 1;
  const auto steady = [&](const std::string& what, const std::function<void(const Options&)>& train_for) {
    return lab::timed(what, [&] { train_for(o); }) - lab::timed("  then its first step alone, to subtract", [&] { train_for(one_step); });
  };
  const double many = steady(fmt::format("timing {} steps of {} on {} simulated ranks, overlap mode, global batch {}",
                                         o.steps, o.model, run_options.ranks, o.batch),
                             [&](const Options& run) { train(run, run_options, DdpMode::overlap, corpus, config); });
  const double one = steady("timing the same on one rank",
                            [&](const Options& run) { train_one_rank(run, corpus, config); });
  RunOptions big = run_options;
  big.ranks = 1024, big.payload_free = true;
  const MetaModel llama = meta_model(memory::model_preset("llama2-7b"), 2.0);
  const double what_if = lab::timed("timing one payload-free Llama-2 7B step on 1024 ranks, overlap mode", [&] {
    run(big, [&](Comm& comm) { meta_step(comm, llama, DdpMode::overlap); });
  });
  // Its JSON is the figures by name (below), not the table's rows.
  lab::Table table = lab::bench_table(44);
  table.print_header();
  table.add({fmt::format("1 rank, steps 2 to {}", o.steps), lab::seconds(one)});
  table.add({fmt::format("{} simulated ranks, steps 2 to {}, overlap", run_options.ranks, o.steps), lab::seconds(many)},
            fmt::format("{:.2f}x the one-rank run (target <= 1.5x)", many / one));
  table.add({"Llama-2 7B step, 1024 ranks, payload-free", lab::seconds(what_if)}, "(target < 10 s)");
  lab::write_json(o.json, {{"one_rank_seconds", one}, {"ranks", run_options.ranks}, {"simulated_seconds", many},
                           {"ratio", many / one}, {"llama2_7b_1024_ranks_seconds", what_if}});
  return 0;
}

}  // namespace ddp_lab
