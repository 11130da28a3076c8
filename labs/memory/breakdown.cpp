// The breakdown per GPU, the step timeline and the recommendation.
#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "labkit/lab/table.h"
#include "memory_lab.h"

using namespace labkit::memory;

namespace memory_lab {

using labkit::lab::Align;

namespace {

// The model, and with --params, that only the parameter count is given: the
// activations and the KV cache still come from the preset's layers and widths.
std::string describe_model(const Architecture& m, const Plan& p) {
  const ParameterCount n = count_parameters(m);
  if (p.params)
    return fmt::format("{:.2f}B parameters (--params) with {}'s shape ({} layers, hidden {}, {} heads; {} itself "
                       "has {:.2f}B)", *p.params / 1e9, m.name, m.layers, m.hidden, m.heads, m.name, n.total / 1e9);
  std::string params = fmt::format("{:.2f}B parameters", n.total / 1e9);
  if (n.active < n.total) params += fmt::format(", {:.1f}B active", n.active / 1e9);
  return fmt::format("{} ({})", m.name, params);
}

std::string describe(const Architecture& m, const Plan& p) {
  if (!p.training)
    return fmt::format("{}, inference in {}, batch {:g} x {:g} tokens, tp {} x pp {}", describe_model(m, p),
                       name_of(p.precision), p.batch, p.seq, p.tp, p.pp);
  std::string parallel = fmt::format("dp {}", p.dp);
  if (p.tp > 1) parallel += fmt::format(" x tp {}", p.tp);
  if (p.pp > 1) parallel += fmt::format(" x pp {}", p.pp);
  const std::string zero = p.zero == 0 ? "DDP" : p.zero == 3 ? "ZeRO-3 (FSDP)" : fmt::format("ZeRO-{}", p.zero);
  const std::string hsdp = p.shard_group ? fmt::format(" (HSDP, shards of {})", p.shard_group) : "";
  return fmt::format("{}, training with {}, {} weights, {}{}, {}", describe_model(m, p), p.optimizer,
                     name_of(p.precision), zero, hsdp, parallel);
}
}  // namespace

nlohmann::json list_models() {
  labkit::lab::Table table({{.header = "model", .key = "model", .width = 14, .align = Align::left},
                            {.header = "parameters", .key = "parameters", .width = 16},
                            {.header = "active", .key = "active", .width = 16},
                            {.header = "layers", .key = "layers", .width = 7},
                            {.header = "hidden", .key = "hidden", .width = 7},
                            {.header = "heads", .key = "heads", .width = 6},
                            {.header = "kv heads", .key = "kv_heads", .width = 8}});
  table.print_header();
  for (std::string_view name : model_presets()) {
    const Architecture m = model_preset(name);
    const ParameterCount n = count_parameters(m);
    table.add({std::string(name), labkit::lab::number(n.total, "{:.0f}"), labkit::lab::number(n.active, "{:.0f}"),
               m.layers, m.hidden, m.heads, m.latent ? "latent" : std::to_string(m.kv_heads)});
  }
  return table.json();
}

nlohmann::json print_breakdown(const Architecture& model, const Plan& plan, const Gpu& gpu) {
  const Breakdown b = estimate(model, plan, gpu);
  fmt::print("{}\non {} ({:.1f} GB usable)\n\n", describe(model, plan), gpu.name, gpu.bytes / GB);
  labkit::lab::Table table({{.header = "component", .key = "component", .width = 38, .align = Align::left},
                            {.header = "GB per GPU", .key = "bytes", .width = 10},
                            {.header = "note", .key = "note", .align = Align::left, .gap = 2},
                            {.key = "overhead"}});
  table.print_header();
  bool overheads = false;
  for (const Line& l : b.lines) {
    // The overheads under a heading, indented; the heading's blank GB cell is printed (" "), as it always was.
    if (l.overhead && !overheads && plan.training)  // the lines above are not all held at once, nor only they
      table.print_row({"peak of the step", gb(b.peak),
                       fmt::format("what the step holds at once, at {} (--timeline)", b.peak_at), false});
    if (l.overhead && !overheads) table.print_row({"overheads:", " ", "", true});
    overheads = overheads || l.overhead;
    table.add({{l.component, (l.overhead ? "  " : "") + l.component}, gb(l.bytes), l.note, l.overhead});
  }
  table.print_row({"total", gb(b.total),
                   b.fits() ? fmt::format("fits: {:.0f}% of {:.1f} GB", 100 * b.total / b.gpu_bytes, b.gpu_bytes / GB)
                            : fmt::format("DOES NOT FIT in {:.1f} GB", b.gpu_bytes / GB),
                   false});
  const int needed = gpus_needed(model, plan, gpu);
  const std::string how = plan.training ? "with ZeRO-3" : "with tensor parallelism";
  if (needed && plan.training && plan.tp * plan.pp > 1)
    fmt::print("GPUs needed {}: {} (data-parallel {} x TP {} x PP {})\n", how, needed, needed / (plan.tp * plan.pp),
               plan.tp, plan.pp);
  else if (needed && !plan.training && plan.pp > 1)
    fmt::print("GPUs needed {}: {} (TP {} x PP {})\n", how, needed, needed / plan.pp, plan.pp);
  else if (needed)
    fmt::print("GPUs needed {}: {}\n", how, needed);
  else
    fmt::print("GPUs needed {}: none suffice; shrink activations (--recompute, --tp with --sp) or batch\n", how);
  nlohmann::json out = {{"model", model.name},
                        {"parameters", plan.params.value_or(count_parameters(model).total)},
                        {"gpu", gpu.name},
                        {"gpu_bytes", gpu.bytes},
                        {"lines", table.json()},
                        {"peak_bytes", b.peak},
                        {"total_bytes", b.total},
                        {"fits", b.fits()},
                        {"gpus_needed", needed ? nlohmann::json(needed) : nlohmann::json(nullptr)}};  // null: none suffice
  if (!plan.training) return out;
  // The 16N count (Rajbhandari et al. 2020, "ZeRO", section 3.1: 2 + 2 + 12 bytes a parameter with
  // mixed-precision Adam; its Figure 1 per GPU) is model state alone, and chapter 3's GPU counts divide a
  // replica's by 80 GB: what activations, overheads and the margin add is the difference.
  Plan replica = plan;
  replica.dp = replica.tp = replica.pp = 1;
  replica.zero = 0;
  const double state = b.model_state, replica_state = estimate(model, replica, gpu).model_state;
  const int reading_gpus = int(std::ceil(replica_state / (80 * GB)));
  fmt::print("model state per GPU: {:.2f} GB (weights, gradients, master weights and optimizer states, as ZeRO shards "
             "them; the lines above add activations, overheads and what FSDP holds whole for a while)\n", state / GB);
  fmt::print("the reading's count: a replica's model state, {:.0f} GB, over 80 GB GPUs: {} (activations, overheads "
             "and the margin are why the count above differs)\n", replica_state / GB, reading_gpus);
  out["model_state_bytes"] = state;
  out["replica_model_state_bytes"] = replica_state;
  out["reading_gpus"] = reading_gpus;
  return out;
}

nlohmann::json print_timeline(const Architecture& model, const Plan& plan) {
  fmt::print("\nmemory over one training step (without overheads):\n");
  const Breakdown b = estimate(model, plan, {"any", 0});
  const std::vector<Phase>& phases = b.timeline;
  const double peak = peak_of(phases);
  // Printed without its header: the title line above says what the columns are.
  labkit::lab::Table table({{.header = "phase", .key = "phase", .width = 16, .align = Align::left},
                            {.header = "memory", .key = "bytes", .width = 11},
                            {.header = "bar", .width = 40, .align = Align::left, .gap = 2},
                            {.header = "holds", .key = "holds", .align = Align::left, .gap = 2}},
                           {.rows = "  "});
  for (const Phase& p : phases)
    table.add({p.name, {p.bytes, fmt::format("{:.2f} GB", p.bytes / GB)},
               std::string(int(40 * p.bytes / peak + 0.5), '#'), p.holds});
  fmt::print("peak: {:.2f} GB, at {}\n", peak / GB, b.peak_at);
  return table.json();
}

nlohmann::json print_recommendation(const Architecture& model, const Plan& plan, const Gpu& gpu, int gpus,
                                    int per_node) {
  if (gpus <= 0) gpus = plan.dp * plan.tp * plan.pp;
  const Recommendation r = recommend(model, plan, gpu, gpus, per_node);
  fmt::print("\nrecommendation for {} x {} ({} per node): {}\n", gpus, gpu.name, per_node, r.strategy);
  for (const std::string& why : r.reasons) fmt::print("  - {}\n", why);
  return {{"gpus", gpus}, {"per_node", per_node}, {"strategy", r.strategy}, {"tp", r.tp}, {"pp", r.pp},
          {"dp", r.dp}, {"reasons", r.reasons}};
}

}  // namespace memory_lab
