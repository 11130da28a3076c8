// --scale: a ring allreduce moving sizes only, over as many ranks as asked
// (4096 by default); wall time is the simulator's own speed, virtual time what
// the cluster would take, beside the alpha-beta model's.
#include <chrono>

#include <fmt/format.h>

#include "labkit/algorithms.h"
#include "labkit/cost_model.h"
#include "labkit/lab/output.h"
#include "labkit/output.h"
#include "labkit/units.h"
#include "ring_allreduce.h"

using namespace labkit;

namespace ring_lab {

int scale(const RunOptions& base, std::uint64_t bytes, const std::string& json) {
  RunOptions o = base;
  o.payload_free = true;
  const std::uint64_t expected = 2ull * (o.ranks - 1) * o.ranks;  // 2(P - 1) messages a rank
  o.progress = [&](std::uint64_t done) {
    progress_line(fmt::format("  {:3.0f}% of {} messages", 100.0 * done / expected, expected));
  };
  const auto start = std::chrono::steady_clock::now();
  const RunResult r =
      run(o, [&](Comm& comm) { ring_all_reduce(comm, meta_view(bytes / 4, DType::f32), ReduceOp::sum); });
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  progress_line("");
  const double model = predict(Collective::all_reduce, "ring", bytes, o.ranks, find_topology(o.topology));
  fmt::print("ring allreduce of {} on {} ranks ({}), payload-free\n", format_bytes(bytes), o.ranks, o.topology);
  fmt::print("  simulated time  {} (model {})\n", format_seconds(r.elapsed), format_seconds(model));
  fmt::print("  messages        {}\n", r.messages);
  fmt::print("  wall time       {:.2f} s ({:.2f} M messages/s)\n", wall, r.messages / wall / 1e6);
  lab::write_json(json, {{"bytes", bytes}, {"ranks", o.ranks}, {"topology", o.topology},
                         {"simulated_seconds", r.elapsed}, {"model_seconds", model}, {"messages", r.messages},
                         {"wall_seconds", wall}});
  return 0;
}

}  // namespace ring_lab
