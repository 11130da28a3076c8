// --sweep recompute: Korthikanti et al.'s (2022) Figure 1 for the plan, per
// GPU of the first pipeline stage, in GiB as the paper plots it: the model
// state, and the activations without recomputation, with selective
// recomputation, with it and sequence parallelism (the paper's "present
// work"), and with full recomputation.
#include <fmt/format.h>

#include "labkit/lab/table.h"
#include "memory_lab.h"

using namespace labkit::memory;

namespace memory_lab {

namespace {
constexpr double GiB = 1024.0 * 1024 * 1024;

labkit::lab::Cell gib(double bytes) { return {bytes, fmt::format("{:.2f}", bytes / GiB)}; }

// The transformer layers' share of the parameters: what the figure counts (it leaves the embeddings out).
double layer_share(const Architecture& model) {
  double layers = 0;
  for (int layer = 0; layer < model.layers; ++layer)
    for (const WeightTensor& w : layer_tensors(model, layer)) layers += w.count;
  return layers / count_parameters(model).total;
}
}  // namespace

nlohmann::json print_recompute_sweep(const Architecture& model, const Plan& base, const Gpu& gpu) {
  const double state = estimate(model, base, gpu).model_state, layers_state = state * layer_share(model);
  fmt::print("\nper GPU of the first stage, GiB, as Korthikanti et al.'s Figure 1 plots them:\n");
  fmt::print("model state {:.2f} (the layers' alone, as the figure counts it: {:.2f}; the rest is the embeddings)\n",
             state / GiB, layers_state / GiB);
  labkit::lab::Table table({{.header = "recompute", .key = "recompute", .width = 16, .align = labkit::lab::Align::left},
                            {.header = "activations", .key = "activations", .width = 11}});
  table.print_header();
  struct Variant {
    const char* name;
    Recompute recompute;
    bool sequence_parallel;
  };
  for (const Variant& v : {Variant{"none", Recompute::none, false}, Variant{"selective", Recompute::selective, false},
                           Variant{"sp + selective", Recompute::selective, true}, Variant{"full", Recompute::full, false}}) {
    if (v.sequence_parallel && base.tp == 1) continue;  // nothing to split over
    Plan p = base;
    p.recompute = v.recompute;
    p.sequence_parallel = v.sequence_parallel;
    table.add({v.name, gib(estimate(model, p, gpu).bytes_of("activations"))});
  }
  return {{"model_state_bytes", state}, {"layers_model_state_bytes", layers_state}, {"activations", table.json()}};
}

}  // namespace memory_lab
