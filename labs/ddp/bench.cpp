#include <algorithm>
#include <functional>
#include <limits>
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
// data-carrying) against one rank training on the same global batches, twice:
// in one forward and backward a step, and in the ranks' own kernels one after
// another (a micro-step for each rank's, --ranks x --accum of them, gradients
// accumulated). The ratio to the second is the simulation's own cost (the
// target); the first adds what smaller kernels leave of a GPU idle. Each is
// timed at --steps and at one step, and the difference kept: steps 2 to
// --steps, in their steady state, without building the model (once per rank)
// and the checks at the end. The one step is timed three times and the fastest
// kept: a run the machine slowed would take too much away, even more than the
// steps took. Then one payload-free Llama-2 7B step over 1024 ranks.
int bench(const Options& o, const RunOptions& run_options, const Sequences& corpus, const GptConfig& config) {
  lab::refuse_what_the_bench_cannot_time(run_options, o.device);
  if (o.steps < 2) throw Error(fmt::format("--steps {} with --bench: it times steps 2 to --steps", o.steps));
  const int ranks = run_options.ranks;
  const int micro_steps = ranks * o.accum;  // each of a rank's (micro-)steps, on one rank
  Options one_step = o;
  one_step.steps = 1;
  const auto steady = [&](const std::string& what, const std::function<void(const Options&)>& train_for) {
    const double all = lab::timed(what, [&] { train_for(o); });
    double first = std::numeric_limits<double>::infinity();
    for (int i = 1; i <= 3; ++i) {
      const std::string alone = fmt::format("  then its first step alone ({} of 3), to subtract the fastest", i);
      first = std::min(first, lab::timed(alone, [&] { train_for(one_step); }));
    }
    if (all <= first)
      throw Error(fmt::format("--bench: {} steps took {:.1f} ms, and the first alone {:.1f} ms: this machine's noise "
                              "is larger than steps 2 to {}; run more --steps",
                              o.steps, all * 1e3, first * 1e3, o.steps));
    return all - first;
  };
  const double many = steady(fmt::format("timing {} steps of {} on {} simulated ranks, overlap mode, global batch {}",
                                         o.steps, o.model, ranks, o.batch),
                             [&](const Options& run) { train(run, run_options, DdpMode::overlap, corpus, config); });
  const double one = steady("timing the same on one rank, the global batch in one step",
                            [&](const Options& run) { train_one_rank(run, corpus, config); });
  const double same_kernels =
      steady(fmt::format("timing the same on one rank, in {} micro-step{} of {}", micro_steps,
                         micro_steps == 1 ? "" : "s", o.batch / ranks),
             [&](const Options& run) { train_one_rank(run, corpus, config, /*reversed=*/false, micro_steps); });
  RunOptions big = run_options;
  big.ranks = 1024, big.payload_free = true;
  const MetaModel llama = meta_model(memory::model_preset("llama2-7b"), 2.0);
  const double what_if = lab::timed("timing one payload-free Llama-2 7B step on 1024 ranks, overlap mode", [&] {
    run(big, [&](Comm& comm) { meta_step(comm, llama, DdpMode::overlap); });
  });
  // Its JSON is the figures by name (below), not the table's rows.
  lab::Table table = lab::bench_table(48);
  table.print_header();
  table.add({fmt::format("1 rank, batch {}, steps 2 to {}", o.batch * o.accum, o.steps), lab::seconds(one)});
  table.add({fmt::format("1 rank, {} micro-step{} of {}, steps 2 to {}", micro_steps, micro_steps == 1 ? "" : "s",
                         o.batch / ranks, o.steps),
             lab::seconds(same_kernels)});
  table.add({fmt::format("{} simulated ranks of {}, steps 2 to {}, overlap", ranks, o.batch / ranks, o.steps),
             lab::seconds(many)},
            fmt::format("{:.2f}x the micro-steps' (target <= 1.5x), {:.2f}x batch {}'s", many / same_kernels,
                        many / one, o.batch * o.accum));
  table.add({"Llama-2 7B step, 1024 ranks, payload-free", lab::seconds(what_if)}, "(target < 10 s)");
  lab::write_json(o.json, {{"one_rank_seconds", one}, {"one_rank_micro_steps_seconds", same_kernels},
                           {"ranks", ranks}, {"simulated_ranks_seconds", many}, {"ratio", many / same_kernels},
                           {"ratio_to_one_batch", many / one}, {"llama2_7b_1024_ranks_seconds", what_if},
                           {"targets", {{"ratio", lab::target(many / same_kernels, 1.5)},
                                        {"llama2_7b_1024_ranks_seconds", lab::target(what_if, 10)}}}});
  return 0;
}

}  // namespace ddp_lab
