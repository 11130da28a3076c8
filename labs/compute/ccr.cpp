// --ccr: the communication roofline of data parallelism (the long guide,
// section 6; book/99-references.md). Each step a rank computes 6 N tokens
// FLOPs and its ring allreduce sends about 2 N x 2 bytes of bf16 gradients:
//
//   CCR  = FLOPs per step / bytes communicated = 6 N tokens / 4 N = 1.5 tokens
//   CCR* = peak FLOP/s / link bytes/s   (above it, compute-bound)
//
// The guide divides the with-sparsity H100 peak (1,979 TFLOPS, twice what dense
// training reaches) by NVLink's both-directions figure (900 GB/s; a ring sends
// 450 GB/s each way). The two slips cancel for the H100 (989 / 450 = 2,198), and
// not for its other rows.
#include <fmt/format.h>

#include "compute_lab.h"
#include "labkit/lab/table.h"

namespace lab = labkit::lab;

using namespace labkit::compute;

namespace compute_lab {

namespace {
constexpr double GB = 1e9, TF = 1e12;
constexpr double kBf16 = 2;  // bytes per gradient element
constexpr double kGpt3 = 175e9, kSeq = 2048;

// A row of the guide's "Practical Roofline Numbers" (6.7): its peak and link,
// and the kit's. Peaks and links are per GPU, or per node of 8 where it says so.
struct Config {
  const char* name;
  double reading_peak, reading_link;    // what the guide divides
  const char* reading_ridge;            // what it prints
  const char* reading_batch;            // its "Min Batch for 90% Eff"
  double peak, link;                    // dense peak, bytes/s one direction
  int gpus_per_allreduce = 1;           // GPUs whose gradients one rank's bytes on this link carry
};

std::vector<Config> practical_configs() {
  const Accelerator h100 = accelerator("h100"), a100 = accelerator("a100");
  constexpr double Gbps = GB / 8;
  return {
      {"H100, NVSwitch (per GPU)", 1979 * TF, 900 * GB, "~2,200", "~16-32", h100.roof.peak_flops, h100.nvlink},
      {"8x H100 DGX (per node)", 15832 * TF, 7200 * GB, "~2,200", "~128-256", 8 * h100.roof.peak_flops,
       8 * h100.nvlink},
      // 8 ConnectX-7 NDR NICs of 400 Gb/s: 400 GB/s a node each way. A hierarchical allreduce sends
      // one gradient's worth between nodes for the node's 8 GPUs.
      {"H100 nodes, IB NDR (per node)", 15832 * TF, 400 * GB, "~40,000", "~2,000+", 8 * h100.roof.peak_flops,
       8 * 400 * Gbps, 8},
      {"8x A100 (per node)", 2496 * TF, 4800 * GB, "~520", "~64-128", 8 * a100.roof.peak_flops, 8 * a100.nvlink},
      {"H100, 100 Gb/s Ethernet", 1979 * TF, 100 * Gbps, "~200,000+", "very large", h100.roof.peak_flops, 100 * Gbps},
      {"H100, 25 Gb/s Ethernet", 1979 * TF, 25 * Gbps, "~200,000+", "very large", h100.roof.peak_flops, 25 * Gbps},
  };
}

// The CCR the guide prints for GPT-3 at each batch: calculate_ccr.py's output,
// and its worked example (batch 32) in the roofline section.
struct ReadingCcr {
  int batch;
  const char* prints;
};
constexpr ReadingCcr kReadingCcr[] = {{1, "3072.0"},  {4, "12288.0"},  {16, "49152.0"},
                                      {32, "98,304"}, {64, "196608.0"}, {256, "786432.0"}};

nlohmann::json print_gpt3_sweep() {
  fmt::print("# CCR = 6 N tokens / (2 N x 2 bytes) = 1.5 tokens per rank per step: N cancels\n");
  fmt::print("# GPT-3 175B, sequences of {:.0f} tokens, bf16 gradients (the guide's calculate_ccr.py)\n", kSeq);
  lab::Table table({{.header = "batch", .key = "batch", .width = 6},
                    {.header = "tokens", .key = "tokens", .width = 9},
                    {.header = "CCR (FLOP/byte)", .key = "ccr", .width = 16},
                    {.header = "reading", .key = "reading_prints", .width = 12}});
  table.print_header();
  for (const auto [batch, prints] : kReadingCcr) {
    const double ccr = ddp_ccr(kGpt3, batch * kSeq, kBf16);
    table.add({batch, lab::number(batch * kSeq, "{:.0f}"), {ccr, grouped(ccr)}, prints});
  }
  return table.json();
}

nlohmann::json print_gpt3_example() {
  const Accelerator h100 = accelerator("h100");
  const double ccr = ddp_ccr(kGpt3, 32 * kSeq, kBf16);
  const Roofline reading{1979 * TF, 900 * GB}, dense_both{h100.roof.peak_flops, 900 * GB},
      kit{h100.roof.peak_flops, h100.nvlink};
  fmt::print("\n# the guide's example: GPT-3 175B, batch 32 per H100 on NVLink; CCR* = peak / link\n");
  fmt::print("{:<34} {:>10} {:>10} {:>8}  {}\n", "", "peak TF", "link GB/s", "CCR*", "");
  auto row = [&](const char* what, const Roofline& r, const char* why) {
    fmt::print("{:<34} {:>10.0f} {:>10.0f} {:>8}  {}\n", what, r.peak_flops / TF, r.bandwidth / GB,
               grouped(r.ridge()), why);
  };
  row("reading (prints 2,199)", reading, "with-sparsity peak, both directions");
  row("dense peak, both directions", dense_both, "");
  row("kit: dense peak, one direction", kit, "what a ring's step sees");
  // Efficiency two ways: full overlap (the guide's min of the two roofs) and none.
  const double overlapped = std::min(1.0, ccr / kit.ridge()), serial = 1 / (1 + kit.ridge() / ccr);
  fmt::print("CCR {} vs CCR* {}: {}, {:.0f}x above the ridge (the reading's verdict holds)\n", grouped(ccr),
             grouped(kit.ridge()), ccr > kit.ridge() ? "compute-bound" : "communication-bound", ccr / kit.ridge());
  fmt::print("efficiency {:.1f}% with communication fully overlapped (the guide's min of the roofs), {:.1f}% with "
             "none: 1 / (1 + CCR*/CCR)\n", overlapped * 100, serial * 100);
  const Accelerator a100 = accelerator("a100");
  const double a100_h100_link = 312 * TF / (900 * GB);
  fmt::print("the guide's diagram, 312 TFLOPS / 900 GB/s = {:.0f}, is an A100's peak over an H100's NVLink; an A100 "
             "over its own, {:.0f} GB/s each way: {}\n", a100_h100_link, a100.nvlink / GB,
             grouped(a100.roof.peak_flops / a100.nvlink));
  return {{"ccr", ccr}, {"reading_ridge", reading.ridge()}, {"dense_ridge_both_directions", dense_both.ridge()},
          {"ridge", kit.ridge()}, {"efficiency_overlapped", overlapped}, {"efficiency_serial", serial}};
}

nlohmann::json print_practical_numbers() {
  fmt::print("\n# the guide's practical roofline numbers (6.7), and the kit's: dense peaks, links one direction\n");
  // The guide's columns left of the bar, the kit's right of it.
  lab::Table table({{.header = "configuration", .key = "configuration", .width = 30, .align = lab::Align::left},
                    {.header = "peak TF", .key = "reading_peak", .width = 8},
                    {.header = "GB/s", .key = "reading_link", .width = 8},
                    {.header = "= CCR*", .key = "reading_ridge", .width = 9},
                    {.header = "prints", .key = "reading_prints", .width = 10},
                    {.header = "90% batch", .key = "reading_90_percent_batch", .width = 11},
                    {.header = "|", .width = 1},
                    {.header = "peak TF", .key = "peak", .width = 7},
                    {.header = "GB/s", .key = "link", .width = 8},
                    {.header = "CCR*", .key = "ridge", .width = 8},
                    {.header = "90% tok/GPU", .key = "tokens_per_gpu_for_90_percent", .width = 11}});
  table.print_header();
  // A figure printed with its thousands grouped ("2,198"), in `unit`s, written whole.
  const auto in_groups = [](double value, double unit = 1) { return lab::Cell{value, grouped(value / unit)}; };
  for (const Config& c : practical_configs()) {
    const Roofline reading{c.reading_peak, c.reading_link}, kit{c.peak, c.link};
    const double tokens = ddp_tokens_for(0.9, kit.ridge(), kBf16) / c.gpus_per_allreduce;
    table.add({c.name, in_groups(c.reading_peak, TF), lab::number(c.reading_link, "{:g}", GB),
               in_groups(reading.ridge()), c.reading_ridge, c.reading_batch, "|", in_groups(c.peak, TF),
               lab::number(c.link, "{:g}", GB), in_groups(kit.ridge()), in_groups(tokens)});
  }
  const nlohmann::json& rows = table.json();
  const double per_h100 = rows[0]["tokens_per_gpu_for_90_percent"];
  const double per_ndr_gpu = rows[2]["tokens_per_gpu_for_90_percent"];
  fmt::print("# 90% tok/GPU: tokens per GPU per step for CCR = 1.5 tokens to reach 0.9 CCR* (full overlap). The\n"
             "# model's size cancels, so the guide's \"model dependent\" batch is not: {:.2f} sequences of {:.0f} "
             "tokens\n# per H100 on NVLink, {:.2f} per H100 between NDR nodes.\n", per_h100 / kSeq, kSeq,
             per_ndr_gpu / kSeq);
  return rows;
}
}  // namespace

nlohmann::json print_ccr() {
  nlohmann::json out;
  out["gpt3_sweep"] = print_gpt3_sweep();
  out["gpt3_batch_32"] = print_gpt3_example();
  out["practical"] = print_practical_numbers();
  return out;
}

}  // namespace compute_lab
