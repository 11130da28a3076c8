// --compress none|bf16|powersgd:R|topk:F: the tiny GPT trained twice on the
// same batches, its gradients averaged once per step after backward, plainly
// and compressed (parallel/gradient_compression.h), side by side: the bytes
// each rank sends per step (counted, from the formula, from the trace), the
// times, and the two loss curves.
#include <sstream>
#include <stdexcept>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "ddp.h"
#include "labkit/cli.h"
#include "labkit/error.h"
#include "labkit/lab/option_checks.h"
#include "labkit/lab/output.h"
#include "labkit/lab/plot.h"
#include "labkit/lab/table.h"
#include "labkit/lab/verdict.h"

namespace ddp_lab {

namespace {

std::string_view formula_of(Compression kind) {
  switch (kind) {
    case Compression::none: return "4 N";
    case Compression::bf16: return "2 N";
    case Compression::powersgd: return "4 R (M + N) per compressed M x N matrix + 4 x the other tensors' values";
    case Compression::topk: return "k (4 + 4), k = floor(F N)";
  }
  return "?";
}

bool bytes_agree(const ModeRun& r) { return r.bytes_sent == r.bytes_formula && r.bytes_sent == r.bytes_traced; }

void plot_losses(const std::string& path, const std::string& name, const ModeRun& plain, const ModeRun& compressed) {
  std::ostringstream data;
  for (std::size_t s = 0; s < plain.losses.size(); ++s)
    data << s + 1 << ' ' << plain.losses[s] << ' ' << compressed.losses[s] << '\n';
  lab::plot(path, {}, data.str(), fmt::format(
      "set title 'DDP on the tiny GPT: training loss, uncompressed and {}'\n"
      "set xlabel 'step'\nset ylabel 'loss (mean over the global batch)'\nset key top right\nset grid\n"
      "plot $data using 1:2 with linespoints title 'none', '' using 1:3 with linespoints title '{}'\n",
      name, name));
}

}  // namespace

void add_compress_option(CLI::App& app, Options& o) {
  cli::add_parsed(app, "--compress", o.compress, parse_compression,
      "none, bf16, powersgd:R or topk:F: average each step's gradients compressed, beside an uncompressed run "
      "(bytes, times and loss curves; --plot draws the curves)");
}

void check_compress_alone(const CLI::App& app, const Options& o) {
  const std::string compress = "--compress " + name_of(o.compress);
  for (const char* other : {"--mode", "--what-if", "--sweep", "--volume", "--bench", "--bucket-mb", "--first-bucket-mb"})
    if (app.count(other))
      throw Error(fmt::format("{}: it replaces the gradient averaging with one compressed average per step after "
                              "backward, and takes no {}", compress, other));
}

int compare_compression(const Options& o, const RunOptions& run_options, const Sequences& corpus,
                        const GptConfig& config) {
  try {
    check_compression(o.compress, Gpt(config, o.seed).tensors(), "the tiny GPT");
  } catch (const std::invalid_argument& e) {
    throw Error(fmt::format("--compress {}: {}", name_of(o.compress), e.what()));
  }
  const std::string name = name_of(o.compress);
  lab::TracePerRow traces(run_options);  // the uncompressed run's and the compressed one's ("powersgd:2": "powersgd")
  const ModeRun plain = train(o, traces.row("none"), DdpMode::naive, corpus, config, CompressionSpec{});
  const ModeRun compressed =
      train(o, traces.row(name.substr(0, name.find(':'))), DdpMode::naive, corpus, config, o.compress);
  if (plain.weights.empty()) return 0;  // a process of mpirun that ran another rank than 0
  fmt::print("ddp --compress {}: {}, {}, {}, {}; per step, rank 0\n", name, o.model, run_shape(o, plain.ranks),
             o.optimizer, run_options.backend == "sim" ? run_options.topology : "--backend " + run_options.backend);
  fmt::print("(compression changes the averaged gradients, so this run is not checked against one rank: "
             "an uncompressed run on the same batches runs beside it)\n");
  lab::Table table({{.header = "averaging", .key = "compress", .width = 12, .align = lab::Align::left},
                    {.header = "bytes/rank", .key = "bytes_sent", .width = 10},
                    {.header = "formula", .key = "bytes_formula", .width = 10},
                    {.header = "traced", .key = "bytes_traced", .width = 10},
                    {.header = "ratio", .key = "ratio", .width = 7},
                    {.header = "T_comm", .key = "t_comm", .width = 9},
                    {.header = "T_step", .key = "t_step", .width = 9},
                    {.header = "loss", .key = "loss", .width = 8},
                    {.key = "ranks"},
                    {.key = "ranks_agree"}});
  table.print_header();
  for (const auto& [label, r] : {std::pair{std::string("none"), &plain}, std::pair{name, &compressed}}) {
    const double ratio = double(plain.bytes_sent) / double(r->bytes_sent);
    table.add({label, r->bytes_sent, r->bytes_formula, r->bytes_traced, lab::number(ratio, "{:.1f}x"),
               lab::seconds(r->per_step.comm), lab::seconds(r->per_step.step),
               {r->losses, fmt::format("{:.4f}", r->losses.back())}, r->ranks, r->ranks_agree});
  }
  fmt::print("{:>4} {:>10} {:>12}\n", "step", "loss none", fmt::format("loss {}", name));
  for (std::size_t s = 0; s < plain.losses.size(); ++s)
    fmt::print("{:>4} {:>10.4f} {:>12.4f}\n", s + 1, plain.losses[s], compressed.losses[s]);
  traces.print("row");
  lab::Verdict verdict;
  verdict.require(bytes_agree(plain) && bytes_agree(compressed),
                  fmt::format("the bytes counted, the formula and the trace disagree ({})",
                              formula_of(o.compress.kind)));
  verdict.require(plain.ranks_agree && compressed.ranks_agree, "ranks' weights differ");
  lab::write_json(o.json, {{"runs", table.json()}, {"verdict", verdict.json()}});
  if (!o.plot.empty()) plot_losses(o.plot, name, plain, compressed);
  return verdict.print(fmt::format("bytes per rank: counted = formula = traced ({}: {}); every rank's weights the "
                                   "same bits", name, formula_of(o.compress.kind)));
}

}  // namespace ddp_lab
