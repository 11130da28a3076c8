// --roofline: this machine's roofs, measured by the kit, and each op of a GPT's
// training step against them (Williams, Waterman & Patterson 2009):
//
//   intensity  = FLOPs / bytes moved            (labkit/op_bench.h counts both)
//   attainable = min(peak, intensity x memory bandwidth)
//
// An op left of the ridge (peak / bandwidth) is memory-bound: a faster ALU would
// not speed it up, moving fewer bytes would (fusion, FlashAttention). The batch
// is large by default so that each op's tensors outgrow the caches and meet the
// DRAM roof; at the train lab's batch of 8 the tiny GPT's fit in cache, which is
// faster than DRAM. On a GPU, --model small-gpt at a rank's batch and at the
// whole batch shows which ops a small batch leaves the GPU part idle in.
#include <cstdio>

#include <fmt/format.h>

#include "compute_lab.h"
#include "labkit/gpt.h"
#include "labkit/lab/plot.h"
#include "labkit/lab/table.h"
#include "labkit/op_bench.h"

using namespace labkit;

namespace compute_lab {

namespace {
constexpr double GF = 1e9, MB = 1e6;

struct Measured {
  OpCost cost;
  double flops_per_second;
};

// The model the train lab trains, over its character corpus.
GptConfig train_lab_model(const std::string& name) {
  return gpt_preset(name, character_tokens(synthetic_corpus(200000, 1337)).vocab);
}

compute::Roofline measure_machine(const Device& device) {
  const bool gpu = device.kind == DeviceKind::cuda;
  const int n = gpu ? 8192 : 1024;
  const std::size_t array = std::size_t(gpu ? 1024 : 128) << 20;
  fmt::print(stderr, "measuring the peak: {0} x {0} x {0} matmuls ...\n", n);
  const double peak = measure_peak_flops(device, n);
  fmt::print(stderr, "measuring memory bandwidth: out = a + b over 3 x {} MB ...\n", array >> 20);
  const double bandwidth = measure_bandwidth(device, array);
  fmt::print("# the roofline of this {}, measured by the kit\n", gpu ? "GPU" : "CPU");
  fmt::print("peak     {:>8.1f} GFLOP/s  the kit's matmul on {} x {} x {} ({})\n", peak / GF, n, n, n,
             gpu ? "cuBLAS sgemm, fp32" : "OpenBLAS sgemm, one core: the kit's ops run on one thread");
  fmt::print("memory   {:>8.1f} GB/s     out = a + b over 3 x {} MB (STREAM's add; the kit's residual_forward)\n",
             bandwidth / GF, array >> 20);
  const compute::Roofline roof{peak, bandwidth};
  fmt::print("ridge    {:>8.2f} FLOP/byte\n", roof.ridge());
  return roof;
}

std::vector<Measured> measure_ops(const GptConfig& config, int batch, const Device& device) {
  const GptOpBench bench(config, batch, device);
  std::vector<Measured> out;
  for (std::size_t i = 0; i < bench.costs().size(); ++i) {
    const OpCost& op = bench.costs()[i];
    fmt::print(stderr, "timing op {:>2}/{}: {} {} ...\n", i + 1, bench.costs().size(), op.name, op.pass);
    out.push_back({op, op.flops / bench.best_seconds(i)});
  }
  return out;
}

nlohmann::json print_ops(const std::vector<Measured>& ops, const compute::Roofline& roof) {
  const compute::Roofline h100 = compute::accelerator("h100").roof;
  using lab::Align;
  lab::Table table({{.header = "op", .key = "op", .width = 22, .align = Align::left},
                    {.header = "pass", .key = "pass", .width = 9, .align = Align::left},
                    {.header = "MFLOP", .key = "flops", .width = 9},
                    {.header = "MB", .key = "bytes", .width = 8},
                    {.header = "FLOP/byte", .key = "intensity", .width = 9},
                    {.header = "roof GF/s", .key = "attainable", .width = 10},
                    {.header = "measured", .key = "measured", .width = 10},
                    {.header = "of roof", .key = "of_roof", .width = 7},
                    {.header = "bound", .key = "bound", .width = 7, .align = Align::left, .gap = 2},
                    {.header = "on H100", .key = "bound_on_h100"}});
  table.print_header();
  const auto bound = [](const compute::Roofline& r, double intensity) {
    return r.memory_bound(intensity) ? "memory" : "compute";
  };
  for (const Measured& m : ops) {
    const double intensity = m.cost.intensity(), attainable = roof.attainable(intensity);
    table.add({m.cost.name, m.cost.pass, lab::number(m.cost.flops, "{:.1f}", MB),
               lab::number(m.cost.bytes, "{:.1f}", MB), lab::number(intensity, "{:.2f}"),
               lab::number(attainable, "{:.2f}", GF), lab::number(m.flops_per_second, "{:.2f}", GF),
               {m.flops_per_second / attainable, fmt::format("{:.0f}%", 100 * m.flops_per_second / attainable)},
               bound(roof, intensity),
               bound(h100, intensity)});
  }
  fmt::print("# of roof over 100%: the op's tensors stayed in cache, which is faster than the memory roof\n");
  return table.json();
}

nlohmann::json print_datasheet_ridges(const std::vector<Measured>& ops) {
  fmt::print("\n# datasheet roofs (dense BF16 tensor peak / HBM bandwidth; NVIDIA H100 and A100 datasheets)\n");
  lab::Table table({{.header = "gpu", .key = "gpu", .width = 6, .align = lab::Align::left},
                    {.header = "peak TF", .key = "peak_flops", .width = 8},
                    {.header = "HBM TB/s", .key = "bandwidth", .width = 9},
                    {.header = "ridge", .key = "ridge", .width = 7},
                    {.header = "ridge at the sparse peak", .key = "sparse_ridge", .width = 26, .gap = 2},
                    {.header = "its ops memory-bound there", .key = "memory_bound_ops", .gap = 2}});
  table.print_header();
  for (const compute::Accelerator& a : compute::accelerators()) {
    int bound = 0;
    for (const Measured& m : ops) bound += a.roof.memory_bound(m.cost.intensity());
    const compute::Roofline sparse{a.sparse_flops, a.roof.bandwidth};
    table.add({a.name, lab::number(a.roof.peak_flops, "{:.0f}", 1e12), lab::number(a.roof.bandwidth, "{:.2f}", 1e12),
               lab::number(a.roof.ridge(), "{:.0f}"), lab::number(sparse.ridge(), "{:.0f}"),
               {bound, fmt::format("{} of {}", bound, ops.size())}});
  }
  return table.json();
}

// The roofline, log-log, with the ops as points and the datasheet ridges as dashed lines.
void plot_roofline(const std::vector<Measured>& ops, const compute::Roofline& roof, const std::string& title,
                   const std::string& path) {
  std::string points[2];  // gnuplot index 0: forward; index 1: backward and update
  for (const Measured& m : ops) {
    const std::string label = m.cost.name.substr(0, m.cost.name.find(" ("));  // "matmul qkv"
    points[m.cost.pass == "forward" ? 0 : 1] +=
        fmt::format("{} {} \"{}\"\n", m.cost.intensity(), m.flops_per_second / GF, label);
  }
  std::string ridges;
  for (const compute::Accelerator& a : compute::accelerators())
    ridges += fmt::format("set arrow from {0}, graph 0 to {0}, graph 1 nohead dashtype 2 lc rgb '#888888'\n"
                          "set label '{1} ridge {0:.0f}' at {0}, graph 0.03 left rotate by 90 offset -0.7,0 "
                          "textcolor rgb '#666666'\n", a.roof.ridge(), a.name);
  const std::string commands = fmt::format(
      "set title '{title}'\n"
      "set logscale xy\nset xrange [0.05:1000]\nset yrange [0.01:{top}]\nset grid\nset key top left\n"
      "set xlabel 'arithmetic intensity (FLOP/byte)'\nset ylabel 'GFLOP/s'\n"
      "peak = {peak}\nbw = {bw}\nroof(x) = x * bw < peak ? x * bw : peak\nset samples 500\n{ridges}"
      "plot roof(x) with lines lw 2 lc rgb '#000000' title sprintf('this machine: %.1f GFLOP/s, %.1f GB/s', peak, bw),"
      " $data index 0 using 1:2 with points pt 7 ps 1.2 lc rgb '#1f77b4' title 'forward',"
      " $data index 1 using 1:2 with points pt 5 ps 1.2 lc rgb '#d62728' title 'backward, update',"
      " $data index 0 using 1:2:3 with labels left offset 0.8,0.3 font ',8' notitle,"
      " $data index 1 using 1:2:3 with labels left offset 0.8,-0.5 font ',8' notitle\n",
      fmt::arg("title", title),
      fmt::arg("top", 4 * roof.peak_flops / GF), fmt::arg("peak", roof.peak_flops / GF),
      fmt::arg("bw", roof.bandwidth / GF), fmt::arg("ridges", ridges));
  lab::plot(path, {.width = 900, .height = 600}, points[0] + "\n\n" + points[1], commands);
}
}  // namespace

nlohmann::json print_roofline(DeviceKind where, const std::string& model, int batch, const std::string& plot) {
  const Device& device = labkit::device(where);
  const GptConfig config = train_lab_model(model);
  if (batch == 0) batch = 65536 / config.max_seq;
  const compute::Roofline roof = measure_machine(device);
  const std::vector<Measured> ops = measure_ops(config, batch, device);
  fmt::print("\n# the ops of {} on {} sequences of {} tokens ({} layers, C {}, {} heads, vocabulary {}), one of "
             "each shape,\n# fp32; FLOPs and bytes as labkit/op_bench.h counts them\n", model, batch, config.max_seq,
             config.layers, config.channels, config.heads, config.vocab);
  nlohmann::json out = {{"peak_flops", roof.peak_flops}, {"bandwidth", roof.bandwidth}, {"model", model},
                        {"batch", batch}};
  out["ops"] = print_ops(ops, roof);
  out["datasheets"] = print_datasheet_ridges(ops);
  if (!plot.empty())
    plot_roofline(ops, roof, fmt::format("{} ops on this {}, batch {} x {}", model, device.name, batch, config.max_seq),
                  plot);
  return out;
}

}  // namespace compute_lab
