// What training costs in arithmetic, and what bounds it. Formulas only (the
// measurements are labkit/op_bench.h):
//
//   budget    C = 6 N D FLOPs for N parameters and D tokens (Kaplan et al. 2020,
//             "Scaling Laws for Neural Language Models", section 2.1): 2 per
//             parameter per token forward (a multiply and an add), 4 backward (the
//             gradients of the inputs and of the weights, 2 each).
//   MFU       model FLOPs utilization = model FLOPs per second / peak FLOP/s
//             (Chowdhery et al. 2022, "PaLM", appendix B).
//   roofline  attainable FLOP/s = min(peak, intensity x memory bandwidth), the
//             intensity in FLOP per byte moved (Williams, Waterman & Patterson 2009).
//   CCR       the same idea one level up: FLOPs per byte a rank communicates,
//             against peak FLOP/s over link bandwidth (the long guide, section 6;
//             book/99-references.md).
#pragma once

#include <algorithm>
#include <string>
#include <string_view>
#include <vector>

namespace labkit::compute {

// C = 6 N D.
double training_flops(double params, double tokens);
// Device-hours to do `flops` at `mfu` of `peak_flops`.
double device_hours(double flops, double peak_flops, double mfu);
// The MFU that `hours` of a device of `peak_flops` imply for `flops`.
double implied_mfu(double flops, double hours, double peak_flops);

struct Roofline {
  double peak_flops;  // FLOP/s
  double bandwidth;   // bytes/s, memory (or, for CCR, a link)
  // The intensity where the two roofs meet: below it bandwidth bounds, above it compute.
  double ridge() const { return peak_flops / bandwidth; }
  double attainable(double intensity) const { return std::min(peak_flops, intensity * bandwidth); }
  bool memory_bound(double intensity) const { return intensity < ridge(); }
};

// A GPU from its datasheet. NVIDIA prints tensor-core peaks "with sparsity"
// (2:4 structured sparsity, twice the dense figure) beside the dense ones, and
// NVLink as both directions summed; a dense model's training gets the dense
// peak, and a ring sends one direction at a time.
//   H100 SXM5: BF16 989 TFLOPS dense (1,979 with sparsity), HBM3 3.35 TB/s,
//              NVLink 900 GB/s (NVIDIA H100 Tensor Core GPU datasheet, 2023)
//   A100 SXM4 80GB: BF16 312 TFLOPS dense (624 with sparsity), TF32 156 (312),
//              HBM2e 2,039 GB/s, NVLink 600 GB/s (NVIDIA A100 datasheet, 2021)
struct Accelerator {
  std::string name;
  Roofline roof;           // dense BF16 peak (the simulator's, labkit/topology.h), HBM bandwidth
  double nvlink;           // bytes/s, one direction
  double sparse_flops;     // the with-sparsity figure the datasheet prints first
};
std::vector<Accelerator> accelerators();     // h100, a100
Accelerator accelerator(std::string_view name);  // throws naming the choices

// The communication-to-computation ratio of data parallelism (the long guide's CCR): FLOPs
// per rank per step, 6 N tokens, over the bytes its gradient allreduce moves,
// 2 N x bytes per element. N cancels: CCR = 3 tokens / bytes per element.
double ddp_ccr(double params, double tokens_per_rank, double bytes_per_element);
// The tokens per rank per step that reach `fraction` of the compute roof when
// communication overlaps computation fully (throughput = min of the two roofs,
// as the roofline models it, Williams et al. 2009): CCR >= fraction x CCR*.
double ddp_tokens_for(double fraction, double ridge, double bytes_per_element);

}  // namespace labkit::compute
