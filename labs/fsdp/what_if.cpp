// Lab 6 at scale, payload-free: --what-if MODEL.
#include <functional>
#include <map>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <CLI/CLI.hpp>

#include "fsdp.h"
#include "labkit/cli.h"
#include "labkit/error.h"
#include "labkit/lab/option_checks.h"
#include "labkit/lab/output.h"
#include "labkit/lab/table.h"
#include "labkit/lab/what_if.h"
#include "labkit/memory.h"
#include "labkit/output.h"
#include "labkit/parallel/data_parallel.h"
#include "labkit/parallel/fully_sharded.h"
#include "labkit/parallel/quantize.h"
#include "labkit/topology.h"
#include "labkit/units.h"

namespace fsdp_lab {

namespace {

cli::Sweep parse_sweep(const std::string& text) {
  return cli::parse_sweep(text, {{"ranks", 1, 65536, true, ""}, {"hidden", 64, 65536, true, ""}});
}

}  // namespace

void add_what_if_options(CLI::App& app, Options& o) {
  lab::add_what_if(app, o.what_if, "a model preset (llama2-7b, ...): each stage's memory per GPU and a "
                                   "payload-free step of its shapes");
  app.add_option("--step-seconds", o.step_seconds,
                 "--what-if: compute per step, in seconds (default: one --seq sequence's 6N FLOPs a token at "
                 "--efficiency of the device's peak)")
      ->check(cli::above(0.0, lab::kMostStepSeconds));
  app.add_option("--gpu", o.gpu, "--what-if: the GPU whose memory must hold it (default: the topology's device, "
                                 "80 GB; h100-80g for a sweep over every topology)")
      ->check(cli::parsed_by([](const std::string& name) { memory::gpu_preset(name); }));
  lab::add_what_if_seq(app, o.seq, fmt::format("--what-if: tokens per sequence, one sequence per GPU (default: the "
                                               "model's learned context, {} with rotary positions)", kRotarySeq));
  app.add_option("--recompute", o.recompute, "--what-if: activation recomputation: none, selective or full")
      ->capture_default_str()->check(cli::one_of("recomputation", {"none", "selective", "full"}));
  cli::add_parsed(app, "--sweep", o.sweep, parse_sweep,
      "ranks=A..B: the --what-if model (llama2-7b by default) on A, 2A, ... B GPUs of every topology preset: each "
      "stage's memory per GPU and exposed communication; hidden=A..B: its layer at hidden A, 2A, ... B, stage 3 on "
      "--ranks: where prefetching hides the all-gather, measured and by alpha-beta");
}

std::string studied_model(const Options& o) { return o.what_if.empty() ? "llama2-7b" : o.what_if; }

double compute_seconds(const Options& o, const RunOptions& run_options, const memory::Architecture& arch) {
  if (o.step_seconds > 0) return o.step_seconds;
  return step_seconds_for(arch, o.seq, find_topology(run_options.topology).device.peak_flops * run_options.efficiency);
}

namespace {

std::string compute_words(const Options& o, const RunOptions& run_options, const memory::Architecture& arch) {
  const std::string seconds = format_seconds(compute_seconds(o, run_options, arch));
  if (o.step_seconds > 0) return seconds + " of compute per step";
  return fmt::format("{} of compute per step (the sequence's 6N FLOPs per token at {:g}% of the {}'s peak)", seconds,
                     100 * run_options.efficiency, find_topology(run_options.topology).device.name);
}

// The long guide's ZeRO table (section 8.2, book/99-references.md; 7B parameters,
// P = 8) three ways: by its formulas
// (18N: 4N of parameters, 2N of gradients, 12N of optimizer state), by the
// gigabytes it prints (14 + 14 + 112 = 140 GB: 2N, 2N and 16N), and by ours
// (mixed-precision Adam: bf16 weights and gradients, 2N each; fp32 master, m
// and v, 12N), which are ZeRO's own (Rajbhandari et al. 2020, section 3.1).
nlohmann::json print_guide_zero_table() {
  constexpr double n = 7e9, p = 8, gb = 1e9;
  struct Row {
    const char* formula;
    double its_formula, its_figure;
  };
  const Row rows[] = {
      {"4N + 2N + 12N", 18 * n, 140 * gb},
      {"4N + 2N + 12N/P", 6 * n + 12 * n / p, 42 * gb},
      {"4N + 2N/P + 12N/P", 4 * n + 14 * n / p, 30 * gb},
      {"(4N + 2N + 12N)/P", 18 * n / p, 18 * gb},
  };
  fmt::print("the reading's ZeRO table, 7B parameters on 8 GPUs, model state per GPU:\n");
  lab::Table table({{.header = "stage", .key = "stage", .width = 5, .align = lab::Align::left},
                    {.header = "its formula", .key = "formula", .width = 20, .align = lab::Align::left},
                    {.header = "= GB", .key = "its_formula_bytes", .width = 8},
                    {.header = "its GB", .key = "its_bytes", .width = 13},
                    {.header = "ours GB", .key = "ours_bytes", .width = 12}});
  table.print_header();
  for (int stage = 0; stage <= 3; ++stage) {
    const double ours = memory::model_state_bytes(n, {}, memory::find_optimizer("adam"), stage, int(p)).total();
    table.add({stage, rows[stage].formula, lab::number(rows[stage].its_formula, "{:.2f}", gb),
               lab::number(rows[stage].its_figure, "{:.2f}", gb), lab::number(ours, "{:.2f}", gb)});
  }
  fmt::print("(its formulas count 4N bytes of fp16 parameters, which take 2N, and its gigabytes count 16N of "
             "optimizer state (112 GB), where the fp32 master copy, momentum and variance take 12N (84 GB): the two "
             "agree with each other nowhere; ours are mixed-precision Adam's 2N + 2N + 12N = 16N, sharded as ZeRO "
             "shards it)\n");
  return table.json();
}

// The memory lab's plan for one GPU of `ranks` at ZeRO `stage`: mixed-precision
// AdamW, one sequence of --seq tokens.
memory::Plan plan_for(const Options& o, int stage, int ranks) {
  memory::Plan plan;
  plan.zero = stage;
  plan.dp = stage > 0 && o.hsdp > 0 ? std::min(o.hsdp, ranks) : ranks;  // HSDP shards over its group
  plan.seq = o.seq;
  plan.recompute = memory::parse_recompute(o.recompute);
  plan.loss_buffers = true;  // as the memory lab counts by default
  plan.workspace = memory::kCublasWorkspaceBytes;
  plan.prefetch = o.prefetch != "none";
  return plan;
}

// T_step of one payload-free sharded step of the model's shapes on run_options' ranks and topology.
double meta_step_seconds(const Options& o, RunOptions run_options, const memory::Architecture& arch, int stage) {
  run_options.payload_free = true;
  const double compute = compute_seconds(o, run_options, arch);
  return run(run_options, [&](Comm& comm) {
           sharded_meta_step(comm, arch, compute, stage,
                             {.shard_group = o.hsdp, .prefetch = parse_prefetch(o.prefetch)});
         }).elapsed;
}

// ZeRO++ at scale (--qwz, --hpz G, --qgz beside --what-if): exact stage 3,
// then each technique asked for added in the paper's order, qwZ, hpZ, qgZ.
// Each row runs the payload-free step and sums what every rank sent off its
// node (its trace), per node, in M: the model's bytes in bf16, as the paper
// counts them. The paper's column is its 3M -> 0.75M taken apart: the
// forward's gathers M, 0.5M in int8; backward's M, 0 inside a node; the
// reduce-scatter M, 0.25M in int4.
nlohmann::json print_zero_plus_plus(const Options& o, const RunOptions& run_options, lab::TracePerRow& traces,
                                    const memory::Architecture& arch, const memory::Gpu& gpu) {
  struct Row {
    std::string name;
    std::string file;  // in its --trace file's name
    ShardingOptions sharding;
    double paper;
  };
  std::vector<Row> rows = {{"stage 3", "zeropp", {.prefetch = parse_prefetch(o.prefetch)}, 3}};
  const auto add = [&](std::string name, std::string_view file, const std::function<void(ShardingOptions&)>& set,
                       double saved) {
    Row next = rows.back();
    next.name = std::move(name);
    next.file += fmt::format("-{}", file);
    set(next.sharding);
    next.paper -= saved;
    rows.push_back(next);
  };
  if (o.qwz) add("+ qwZ", "qwz", [](ShardingOptions& s) { s.quantize_weights = true; }, 0.5);
  if (o.hpz > 0)
    add(fmt::format("+ hpZ {}", o.hpz), fmt::format("hpz{}", o.hpz), [&](ShardingOptions& s) { s.hpz_group = o.hpz; },
        1);
  if (o.qgz) add("+ qgZ", "qgz", [](ShardingOptions& s) { s.quantize_gradients = true; }, 0.75);
  const int p = run_options.ranks;
  const int per_node = find_topology(run_options.topology).devices_per_node, nodes = (p + per_node - 1) / per_node;
  const double m = memory::count_parameters(arch).total * 2;  // bf16
  fmt::print("ZeRO++ at stage 3 on {} node{} of {}: what leaves each node per step, from every rank's trace, in M = "
             "the model in bf16 ({}){}\n", nodes, nodes == 1 ? "" : "s", std::min(p, per_node),
             format_bytes(std::uint64_t(m)),
             nodes == 1 ? fmt::format("; on one node nothing leaves it: --ranks {} or more", 2 * per_node) : "");
  lab::Table table({{.header = " ", .key = "configuration", .width = 10, .align = lab::Align::left},
                    {.header = "off node", .key = "off_node_bytes_per_node", .width = 10},
                    {.header = "x M", .key = "m", .width = 7},
                    {.header = "paper", .key = "paper_m", .width = 7},
                    {.header = "memory", .key = "memory_per_gpu", .width = 10},
                    {.header = "T_step", .key = "t_step", .width = 9},
                    {.header = "exposed", .key = "exposed", .width = 9}});
  table.print_header();
  const double compute = compute_seconds(o, run_options, arch);
  for (const Row& row : rows) {
    RunOptions row_run = traces.row(row.file);
    row_run.payload_free = true;
    row_run.keep_trace = true;
    const RunResult r = run(row_run, [&](Comm& comm) { sharded_meta_step(comm, arch, compute, 3, row.sharding); });
    const double off_node = off_node_bytes(*r.trace) / nodes;
    memory::Plan plan = plan_for(o, 3, p);
    plan.hpz = row.sharding.hpz_group;
    const double memory = memory::estimate(arch, plan, gpu).total;
    table.add({row.name, lab::bytes(off_node), lab::number(off_node / m, "{:.2f}M"), lab::number(row.paper, "{:.2f}M"),
               lab::bytes(memory), lab::seconds(r.elapsed), lab::seconds(r.elapsed - compute)});
    std::fflush(stdout);
  }
  fmt::print("(off node: a ring leaves each node once, with (P-1)/P of the model; the root is gathered once a step, "
             "not twice. The paper's column counts neither, nor the blocks' scales: one fp32 per {} values, "
             "+{:.0f}% on int8 and +{:.0f}% on int4; qgZ's partial sums leave a node (n-1)/n of the time, "
             "{:.2f} on {} node{}. Memory: the estimate, hpZ's secondary shards in it; T_step: the quantization "
             "kernels taken as free)\n", kQuantBlock, 100.0 * sizeof(float) / kQuantBlock,
             200.0 * sizeof(float) / kQuantBlock, double(nodes - 1) / nodes, nodes, nodes == 1 ? "" : "s");
  return table.json();
}

// A model that does not fit even at stage 3, refused with the GPUs it needs.
void refuse_what_cannot_fit(const Options& o, const memory::Architecture& arch, const memory::Gpu& gpu, int p) {
  const memory::Breakdown sharded = memory::estimate(arch, plan_for(o, 3, p), gpu);
  if (sharded.fits()) return;
  const int needed = memory::gpus_needed(arch, plan_for(o, 3, p), gpu);
  const std::string remedy =
      o.hsdp > 0 && o.hsdp < p ? fmt::format("HSDP shards over groups of {} only: a larger --hsdp", o.hsdp)
      : needed ? fmt::format("it needs --ranks {} or more", needed)
               : "no rank count will do: the activations do not shrink with data parallelism (a shorter --seq, or "
                 "--recompute full)";
  throw Error(fmt::format("--what-if {} on --ranks {}: does not fit on {} even at stage 3, {} per GPU against {} "
                          "({} over); {}", o.what_if, p, gpu.name, format_bytes(std::uint64_t(sharded.total)),
                          format_bytes(std::uint64_t(gpu.bytes)),
                          format_bytes(std::uint64_t(sharded.total - gpu.bytes)), remedy));
}

// ZeRO's Figure 1 (7.5B parameters, K = 12, Nd = 64), the long guide's ZeRO
// table, and the FSDP bound of "Day 64" against FSDP's layer-at-a-time gathers.
nlohmann::json print_published_figures(const Options& o, const memory::Architecture& arch, const memory::Gpu& gpu,
                                       int p) {
  constexpr double paper[] = {120e9, 31.4e9, 16.6e9, 1.9e9};
  std::string figure;
  nlohmann::json figure_1 = nlohmann::json::array();
  for (int stage = 0; stage <= 3; ++stage) {
    const double bytes = memory::model_state_bytes(7.5e9, {}, memory::find_optimizer("adam"), stage, 64).total();
    figure += fmt::format("{}{:.1f}", stage ? ", " : "", bytes / 1e9);
    figure_1.push_back({{"stage", stage}, {"model_state_bytes", bytes}, {"paper_bytes", paper[stage]}});
  }
  fmt::print("ZeRO's Figure 1 (7.5B parameters, 64 GPUs): model state {} GB per GPU at stages 0-3 (the paper: {:g}, "
             "{:g}, {:g}, {:g})\n", figure, paper[0] / 1e9, paper[1] / 1e9, paper[2] / 1e9, paper[3] / 1e9);
  nlohmann::json zero_table = print_guide_zero_table();
  memory::Plan prefetched = plan_for(o, 3, p);
  prefetched.prefetch = true;
  const memory::Breakdown whole = memory::estimate(arch, prefetched, gpu);
  const double gathered = whole.bytes_of("gathered weights") + whole.bytes_of("prefetched weights");
  const double n = memory::count_parameters(arch).total;
  fmt::print("the reading's FSDP bound 16N/P + 2N = {} counts the whole model gathered in bf16; FSDP gathers a "
             "layer at a time: 16N/P + its root and two layers in bf16 (one computing, the next prefetched) = {}\n",
             format_bytes(std::uint64_t(16 * n / p + 2 * n)), format_bytes(std::uint64_t(16 * n / p + gathered)));
  return {{"zero_figure_1", figure_1},
          {"reading_zero_table", zero_table},
          {"reading_fsdp_bound_bytes", 16 * n / p + 2 * n},
          {"layer_at_a_time_bytes", 16 * n / p + gathered}};
}

}  // namespace

// --what-if MODEL: each stage's memory per GPU (the memory lab's estimate:
// mixed-precision AdamW, 16 bytes per parameter before sharding) and a
// payload-free step of the model's shapes on --ranks GPUs, beside ZeRO's
// Figure 1 and the FSDP bound of "Day 64: Distributed Training Fundamentals".
// A model that does not fit even at stage 3 is refused first, with the GPUs it
// needs.
int what_if(const Options& o, RunOptions run_options) {
  const memory::Architecture arch = memory::model_preset(o.what_if);
  const std::string device = find_topology(run_options.topology).device.name;  // "h100", "a100"
  const memory::Gpu gpu = memory::gpu_preset(!o.gpu.empty() ? o.gpu : device + "-80g");
  const int p = run_options.ranks;
  refuse_what_cannot_fit(o, arch, gpu, p);
  const double n = memory::count_parameters(arch).total;
  const double compute = compute_seconds(o, run_options, arch);
  fmt::print("fsdp --what-if {}: {:.2f}B parameters, {} ranks on {}, one sequence of {} tokens per GPU, {}; per "
             "GPU, mixed-precision AdamW, {} recomputation, {}; stage 3 prefetching {} ...\n", o.what_if, n / 1e9,
             o.hsdp > 0 && o.hsdp < p ? fmt::format("{} (HSDP: groups of {})", p, o.hsdp) : fmt::format("{}", p),
             run_options.topology, o.seq, compute_words(o, run_options, arch), o.recompute, gpu.name,
             o.prefetch == "none" ? "nothing" : o.prefetch == "both" ? "in both passes" : "in " + o.prefetch);
  std::fflush(stdout);
  lab::Table table({{.header = "stage", .key = "stage", .width = 5, .align = lab::Align::left},
                    {.header = "weights", .key = "weights", .width = 9},
                    {.header = "gathered", .key = "gathered", .width = 9},
                    {.header = "gradients", .key = "gradients", .width = 9},
                    {.header = "optimizer", .key = "master_and_optimizer", .width = 9},
                    {.header = "activations", .key = "activations", .width = 11},
                    {.header = "total", .key = "total", .width = 10},
                    {.header = "fits", .key = "fits", .width = 5},
                    {.header = "T_step", .key = "t_step", .width = 9},
                    {.header = "exposed", .key = "exposed", .width = 9}});
  table.print_header();
  const bool zero_plus_plus = o.qwz || o.hpz > 0 || o.qgz;
  lab::TracePerRow traces(run_options, o.stages.size() > 1 || zero_plus_plus);
  for (int stage : o.stages) {
    const memory::Breakdown b = memory::estimate(arch, plan_for(o, stage, p), gpu);
    auto line = [&](const char* component) { return b.bytes_of(component); };
    const double optimizer = line("master weights") + line("optimizer states");
    const double gathered = line("gathered weights") + line("prefetched weights");
    const double step = meta_step_seconds(o, traces.row(fmt::format("stage{}", stage)), arch, stage);
    table.add({stage, lab::bytes(line("weights")), lab::bytes(gathered), lab::bytes(line("gradients")),
               lab::bytes(optimizer), lab::bytes(line("activations")), lab::bytes(b.total),
               {b.fits(), b.fits() ? "yes" : "no"}, lab::seconds(step), lab::seconds(step - compute)});
  }
  fmt::print("(gathered: whole while they compute, FSDP's root unit (embeddings, final norm, head) and a layer{}; "
             "gradients: the shard, and from stage 2 the root's and a layer's whole until reduce-scattered; total: "
             "the step's peak{}, the loss's buffers and cuBLAS's workspaces with the framework, communication "
             "buffers and a 20% margin, as the memory lab counts them; exposed: T_step less the {} of compute)\n",
             o.prefetch == "none" ? "" : " and the next, prefetched",
             o.recompute == "none"
                 ? ""
                 : fmt::format(" (a layer's activations rebuilt in backward by {} recomputation)", o.recompute),
             format_seconds(compute));
  nlohmann::json json = {{"model", o.what_if}, {"parameters", n}, {"ranks", p}, {"topology", run_options.topology},
                         {"seq", o.seq}, {"compute_seconds", compute}, {"gpu", gpu.name}, {"stages", table.json()}};
  if (zero_plus_plus) json["zero_plus_plus"] = print_zero_plus_plus(o, run_options, traces, arch, gpu);
  traces.print("row");
  json["published"] = print_published_figures(o, arch, gpu, p);
  lab::write_json(o.json, json);
  return 0;
}

namespace {

// The sweep's tables: a row per rank count (and topology), a column per stage.
// Their JSON has a row per topology, rank count and stage instead: a stage's
// cells are the printed one (written as `key`), the stage, then one for each
// of `beside`, written only.
lab::Table sweep_table(const Options& o, const char* first, const char* key, const std::vector<const char*>& beside) {
  std::vector<lab::Column> columns = {{.header = first, .key = "topology", .width = 10, .align = lab::Align::left},
                                      {.header = "ranks", .key = "ranks", .width = 6}};
  for (int stage : o.stages) {
    const std::string group = fmt::format("stage {}", stage);
    columns.push_back({.header = group, .key = key, .width = 11, .group = group});
    columns.push_back({.key = "stage", .group = group});
    for (const char* also : beside) columns.push_back({.key = also, .group = group});
  }
  return lab::Table(columns);
}

}  // namespace

// --sweep ranks=A..B: the --what-if model (llama2-7b by default) on A, 2A, ...
// B GPUs of every topology preset: each stage's memory per GPU (which depends
// on the rank count alone), then its exposed communication on each topology.
int sweep(const Options& o, RunOptions run_options) {
  const std::string name = studied_model(o);
  const memory::Architecture arch = memory::model_preset(name);
  const memory::Gpu gpu = memory::gpu_preset(!o.gpu.empty() ? o.gpu : "h100-80g");
  std::vector<int> counts;
  for (int p = int(o.sweep.from); p <= o.sweep.to; p *= 2) {
    if (o.hsdp > 0 && p > o.hsdp && p % o.hsdp != 0)
      throw Error(fmt::format("--hsdp {}: does not divide {} ranks of --sweep {}={:g}..{:g} into equal groups", o.hsdp,
                              p, o.sweep.over, o.sweep.from, o.sweep.to));
    counts.push_back(p);
  }
  const std::vector<std::string_view> topologies = topology_presets();
  fmt::print("fsdp --sweep ranks={:g}..{:g}: {} ({:.2f}B parameters), {}, stages {}{}, {} topologies; per GPU, "
             "mixed-precision AdamW, one sequence of {} tokens, {} recomputation ...\n",
             o.sweep.from, o.sweep.to, name, memory::count_parameters(arch).total / 1e9,
             o.step_seconds > 0 ? format_seconds(o.step_seconds) + " of compute per step"
                                : fmt::format("compute per step the sequence's 6N FLOPs per token at {:g}% of each "
                                              "topology's device's peak", 100 * run_options.efficiency),
             fmt::join(o.stages, " "),
             o.hsdp > 0 ? fmt::format(" (HSDP: sharded within groups of {}, replicated across them)", o.hsdp) : "",
             topologies.size(), o.seq, o.recompute);
  std::fflush(stdout);
  fmt::print("memory per GPU on {} (the memory lab's estimate; '!': does not fit)\n", gpu.name);
  lab::Table memory_table = sweep_table(o, " ", "memory_per_gpu", {});
  memory_table.print_header();
  std::map<std::pair<int, int>, memory::Breakdown> per_gpu;  // (ranks, stage): the same on every topology
  for (int p : counts) {
    std::vector<lab::Cell> row = {"", p};
    for (int stage : o.stages) {
      const memory::Breakdown& b = per_gpu[{p, stage}] = memory::estimate(arch, plan_for(o, stage, p), gpu);
      row.insert(row.end(), {{b.total, format_bytes(std::uint64_t(b.total)) + (b.fits() ? " " : "!")}, stage});
    }
    memory_table.add(row);
  }
  fmt::print("exposed communication per step: T_step less the compute\n");
  lab::Table exposed_table = sweep_table(o, "topology", "exposed", {"memory_per_gpu", "fits", "t_step"});
  exposed_table.print_header();
  for (std::string_view topology : topologies) {
    run_options.topology = std::string(topology);
    for (int p : counts) {
      run_options.ranks = p;
      std::vector<lab::Cell> row = {topology, p};
      for (int stage : o.stages) {
        const double step = meta_step_seconds(o, run_options, arch, stage);
        const memory::Breakdown& b = per_gpu.at({p, stage});
        row.insert(row.end(),
                   {lab::seconds(step - compute_seconds(o, run_options, arch)), stage, b.total, b.fits(), step});
      }
      exposed_table.add(row);
      std::fflush(stdout);
    }
  }
  lab::write_json(o.json, exposed_table.json());  // a row per topology, rank count and stage
  return 0;
}

}  // namespace fsdp_lab
