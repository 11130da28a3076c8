// The run's model FLOPs utilization (MFU: Chowdhery et al. 2022, "PaLM",
// appendix B): model FLOPs per second over the peak, on the simulated device
// (on the simulator) and, with --mfu, on this one (its peak measured as in chapter 10).
#include <fmt/format.h>

#include "labkit/op_bench.h"
#include "labkit/topology.h"
#include "train_lab.h"

namespace train_lab {

using namespace labkit;

// On the simulator a step's FLOPs are charged at --efficiency of the device's
// peak, so its MFU is that efficiency: the simulator assumes what a real run measures.
nlohmann::json print_mfu(double model_flops, double wall, double simulated, const RunOptions& run, const Device& here,
                         bool measure_here) {
  const DeviceModel sim = find_topology(run.topology).device;
  fmt::print("model FLOPs {:.3g} in all (matmuls and attention, forward and backward: Gpt::flops_per_step, times the "
             "steps run); {:.2f} GFLOP/s here\n", model_flops, model_flops / wall / 1e9);
  nlohmann::json out = {{"model_flops", model_flops}, {"wall_flops_per_second", model_flops / wall}};
  if (run.backend == "sim") {  // a real backend's clock is this machine's
    out["mfu_simulated"] = model_flops / simulated / sim.peak_flops;
    fmt::print("MFU on the simulated {}: {:.1f}% of {:.0f} TFLOP/s (it charges FLOPs at --efficiency {:g})\n",
               sim.name, 100 * model_flops / simulated / sim.peak_flops, sim.peak_flops / 1e12, run.efficiency);
  }
  if (!measure_here) return out;
  const double peak = measure_peak_flops(here, here.kind == DeviceKind::cpu ? 1024 : 8192);
  fmt::print("MFU on this {}: {:.1f}% of {:.1f} GFLOP/s, its peak as the kit's matmul reaches it (one core on a CPU)\n",
             here.kind == DeviceKind::cpu ? "CPU" : "GPU", 100 * model_flops / wall / peak, peak / 1e9);
  out["wall_mfu_here"] = model_flops / wall / peak;
  out["peak_flops_here"] = peak;
  return out;
}

}  // namespace train_lab
