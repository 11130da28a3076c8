// Lab 3's views, one file each: breakdown.cpp (the table per GPU, the timeline,
// the recommendation), sweep.cpp (ZeRO stages or GPU counts side by side),
// recompute.cpp (Korthikanti et al.'s Figure 1 for the plan); and
// plan.cpp, the plan the command line describes.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include <fmt/format.h>

#include "labkit/lab/table.h"
#include "labkit/memory.h"

namespace CLI {
class App;  // CLI11's, from <CLI/CLI.hpp> where options are added
}

namespace memory_lab {

using labkit::memory::Architecture;
using labkit::memory::Gpu;
using labkit::memory::Plan;

inline constexpr double GB = 1e9;  // the decimal gigabyte, as GPU datasheets count memory

// Bytes, written whole and printed in GB.
inline labkit::lab::Cell gb(double bytes) { return {bytes, fmt::format("{:.2f}", bytes / GB)}; }

// The command line's words for a plan, before they are parsed into one.
struct PlanOptions {
  std::string model = "llama2-7b", gpu = "h100-80g", states = "fp32";
  std::string precision, grads;  // empty: bf16 (fp32 with --autocast); the weights' where fp32, else bf16
  std::string kv = "bf16", recompute = "none", attention = "eager";
  std::string activation_precision, dropout;  // empty: from the precision, the model's
  Plan plan;  // the options that are its fields already
  bool no_master = false, inference = false, autocast = false, no_loss_buffers = false;
  double workspace_mib = labkit::memory::kCublasWorkspaceBytes / (1024 * 1024);
  double activations_gb = -1;  // < 0: the formula's
  double params = 0;           // 0: the model's
  int seq = 0;                 // 0: the model's learned context, else kRotarySeq
};
// The sequence where --seq is not given and the model's positions are rotary,
// with no learned context to take.
constexpr int kRotarySeq = 2048;
// --model, --gpu, the precisions, the parallelism, the activations' and --inference's.
void add_plan_options(CLI::App& app, PlanOptions& o);
// The plan `o` describes for `model`; throws naming the option where the model's shape does not allow it.
Plan make_plan(const PlanOptions& o, const Architecture& model);

nlohmann::json list_models();  // --models: the presets, printed; their rows for --json
nlohmann::json print_breakdown(const Architecture& model, const Plan& plan, const Gpu& gpu);
nlohmann::json print_timeline(const Architecture& model, const Plan& plan);
nlohmann::json print_recommendation(const Architecture& model, const Plan& plan, const Gpu& gpu, int gpus,
                                    int per_node);
nlohmann::json print_sweep(const Architecture& model, const Plan& plan, const Gpu& gpu, const std::string& what,
                           const std::string& plot);
nlohmann::json print_recompute_sweep(const Architecture& model, const Plan& plan, const Gpu& gpu);

}  // namespace memory_lab
