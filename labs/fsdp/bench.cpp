// Lab 6's benchmark: what the sharded simulation itself costs, in wall time.

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "fsdp.h"
#include "labkit/lab/bench.h"
#include "labkit/lab/output.h"
#include "labkit/memory.h"
#include "labkit/parallel/fully_sharded.h"

namespace fsdp_lab {

// --bench, side by side in one run: --steps steps of --model on --ranks
// simulated ranks at stage 3 (a gather per block, twice, and a reduce-scatter)
// against stage 0 (DDP: one allreduce), data-carrying, the same batches; then
// one payload-free stage-3 step of Llama-2 70B's shapes over 1024 ranks.
int bench(const Options& o, const RunOptions& run_options, const Sequences& data, const GptConfig& config) {
  lab::refuse_what_the_bench_cannot_time(run_options, o.device);
  auto timed = [&](int stage) {
    return lab::timed(fmt::format("timing {} steps of {} on {} simulated ranks at stage {}", o.steps,
                                  o.model, run_options.ranks, stage),
                      [&] { train(o, run_options, stage, data, config); });
  };
  const double ddp = timed(0), sharded = timed(3);
  RunOptions big = run_options;
  big.ranks = 1024, big.payload_free = true;
  const memory::Architecture llama = memory::model_preset("llama2-70b");
  const double what_if = lab::timed("timing one payload-free stage-3 step of Llama-2 70B on 1024 ranks", [&] {
    run(big, [&](Comm& comm) { sharded_meta_step(comm, llama, compute_seconds(o, big, llama), 3); });
  });
  // Its JSON is the figures by name (below), not the table's rows.
  lab::Table table = lab::bench_table(51);  // the 70B row's label, whole
  table.print_header();
  table.add({fmt::format("stage 0 (DDP), {} ranks, {} steps", run_options.ranks, o.steps),
             lab::seconds(ddp)});
  table.add({fmt::format("stage 3, {} ranks, {} steps", run_options.ranks, o.steps),
             lab::seconds(sharded)},
            fmt::format("{:.2f}x stage 0's (target <= 1.5x)", sharded / ddp));
  table.add({"Llama-2 70B stage-3 step, 1024 ranks, payload-free",
             lab::seconds(what_if)},
            "(target < 20 s)");
  lab::write_json(o.json, {{"ranks", run_options.ranks}, {"steps", o.steps}, {"stage0_seconds", ddp},
                           {"stage3_seconds", sharded}, {"ratio", sharded / ddp},
                           {"llama2_70b_1024_ranks_seconds", what_if},
                           {"targets", {{"ratio", lab::target(sharded / ddp, 1.5)},
                                        {"llama2_70b_1024_ranks_seconds", lab::target(what_if, 20)}}}});
  return 0;
}

}  // namespace fsdp_lab
