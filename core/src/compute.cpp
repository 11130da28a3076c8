#include "labkit/compute.h"

#include <stdexcept>

#include "labkit/topology.h"

namespace labkit::compute {

double training_flops(double params, double tokens) { return 6 * params * tokens; }

double device_hours(double flops, double peak_flops, double mfu) { return flops / (peak_flops * mfu) / 3600; }

double implied_mfu(double flops, double hours, double peak_flops) { return flops / (hours * 3600 * peak_flops); }

std::vector<Accelerator> accelerators() {
  constexpr double GBps = 1e9;
  // Dense peaks are the simulator's (device_preset), so the chapter and the simulated runs agree.
  const double h100 = device_preset("h100").peak_flops, a100 = device_preset("a100").peak_flops;
  return {{"h100", {h100, 3350 * GBps}, 450 * GBps, 2 * h100},
          {"a100", {a100, 2039 * GBps}, 300 * GBps, 2 * a100}};
}

Accelerator accelerator(std::string_view name) {
  for (const Accelerator& a : accelerators())
    if (a.name == name) return a;
  throw std::invalid_argument("unknown GPU '" + std::string(name) + "' (h100, a100)");
}

double ddp_ccr(double params, double tokens_per_rank, double bytes_per_element) {
  return training_flops(params, tokens_per_rank) / (2 * params * bytes_per_element);
}

double ddp_tokens_for(double fraction, double ridge, double bytes_per_element) {
  return fraction * ridge * bytes_per_element / 3;  // CCR = 3 tokens / bytes per element
}

}  // namespace labkit::compute
