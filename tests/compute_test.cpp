// The compute chapter's figures: C = 6ND (Kaplan et al. 2020) for the runs of
// the course reading "Day 64: Distributed Training Fundamentals" and the MFU
// its GPU-hours imply, the datasheet ridges, the long guide's CCR table and
// ridge (both readings in book/99-references.md), and
// the roofline's FLOPs and bytes for known shapes; then the measured roofline
// of this machine, which each op must stay under (with slack for cache and noise).
#include <cmath>
#include <map>

#include <gtest/gtest.h>

#include "labkit/compute.h"
#include "labkit/op_bench.h"

using namespace labkit;
using namespace labkit::compute;

namespace {

// Day 64: its C column, rounded as it prints it.
TEST(Budget, SixNDGivesTheReadingsComputeColumn) {
  EXPECT_DOUBLE_EQ(training_flops(1.5e9, 40e9), 3.6e20);
  EXPECT_DOUBLE_EQ(training_flops(7e9, 2e12), 8.4e22);
  EXPECT_DOUBLE_EQ(training_flops(70e9, 2e12), 8.4e23);
  EXPECT_NEAR(training_flops(1.8e12, 13e12), 1.4e26, 0.01e26);  // 1.404e26
}

// Its A100-hours column: GPT-2's is 70% MFU of 312 TFLOP/s; the LLaMA-2 rows are
// Meta's measured hours, about 40% MFU; GPT-4's ~200M is 62%.
TEST(Budget, GpuHoursAndTheMfuTheReadingsHoursImply) {
  const double a100 = accelerator("a100").roof.peak_flops;
  EXPECT_NEAR(device_hours(3.6e20, a100, 0.7), 458, 1);  // Day 64: ~460
  EXPECT_NEAR(device_hours(8.4e22, a100, 0.7), 106838, 1);  // Day 64: ~180K
  EXPECT_NEAR(device_hours(8.4e23, a100, 0.7), 1068376, 1);  // Day 64: ~1.7M
  EXPECT_NEAR(implied_mfu(3.6e20, 460, a100), 0.70, 0.005);
  EXPECT_NEAR(implied_mfu(8.4e22, 180e3, a100), 0.415, 0.005);
  EXPECT_NEAR(implied_mfu(8.4e22, 184320, a100), 0.406, 0.005);   // Llama 2, Table 2
  EXPECT_NEAR(implied_mfu(8.4e23, 1720320, a100), 0.435, 0.005);  // Llama 2, Table 2
  EXPECT_NEAR(implied_mfu(1.4e26, 200e6, a100), 0.623, 0.005);
  // GPT-4 on the parameters a token meets (~280B), over the epigraph's 25,000 GPUs x 3 months.
  EXPECT_NEAR(implied_mfu(training_flops(280e9, 13e12), 25000 * 90 * 24, a100), 0.36, 0.005);
}

// Dense BF16 peaks over HBM bandwidth (datasheets); the long guide's with-sparsity peaks double them.
TEST(Roofline, DatasheetRidges) {
  const Accelerator h100 = accelerator("h100"), a100 = accelerator("a100");
  EXPECT_NEAR(h100.roof.ridge(), 295, 1);  // 989 TF / 3.35 TB/s
  EXPECT_NEAR(a100.roof.ridge(), 153, 1);  // 312 TF / 2.039 TB/s
  EXPECT_DOUBLE_EQ(h100.sparse_flops, 2 * h100.roof.peak_flops);
  EXPECT_THROW(accelerator("v100"), std::invalid_argument);
  const Roofline r{100, 10};
  EXPECT_DOUBLE_EQ(r.attainable(1), 10);  // memory-bound: intensity x bandwidth
  EXPECT_DOUBLE_EQ(r.attainable(50), 100);  // compute-bound: the peak
  EXPECT_TRUE(r.memory_bound(9.9));
  EXPECT_FALSE(r.memory_bound(10));
}

// The guide, section 6: calculate_ccr.py's output, its batch-32 example and its ridge.
TEST(Ccr, TheGuidesTableAndGpt3Example) {
  const std::map<int, double> reading = {{1, 3072}, {4, 12288}, {16, 49152}, {32, 98304}, {64, 196608},
                                         {256, 786432}};
  for (auto [batch, ccr] : reading) EXPECT_DOUBLE_EQ(ddp_ccr(175e9, batch * 2048.0, 2), ccr) << "batch " << batch;
  EXPECT_NEAR((Roofline{1979e12, 900e9}.ridge()), 2199, 0.5);  // the guide's, with the sparse peak
  const Accelerator h100 = accelerator("h100");
  EXPECT_NEAR((Roofline{h100.roof.peak_flops, 900e9}.ridge()), 1099, 0.5);  // dense, both directions
  EXPECT_NEAR((Roofline{h100.roof.peak_flops, h100.nvlink}.ridge()), 2198, 0.5);  // dense, one direction
  // Its practical numbers: 8 x A100 over 4.8 TB/s, multi-node H100 over 400 GB/s.
  EXPECT_NEAR((Roofline{2496e12, 4800e9}.ridge()), 520, 0.5);
  EXPECT_NEAR((Roofline{15832e12, 400e9}.ridge()), 39580, 0.5);
  // 90% of the compute roof at CCR = 0.9 CCR*: 0.6 CCR* tokens in bf16.
  EXPECT_NEAR(ddp_tokens_for(0.9, 2198, 2), 1318.8, 0.1);
}

// Intensity = FLOPs / compulsory bytes, for shapes worked by hand: B = 2, T = 4,
// C = 8 (N = 8 tokens), 2 heads, vocabulary 16, 1 layer.
TEST(Roofline, OpCostsForAKnownShape) {
  const GptConfig c{.max_seq = 4, .vocab = 16, .layers = 1, .heads = 2, .channels = 8};
  std::map<std::string, OpCost> ops;
  for (const OpCost& op : gpt_op_costs(c, 2)) ops[op.name + " " + op.pass] = op;
  ASSERT_EQ(ops.size(), 24u);
  // qkv forward: 2 N C 3C + N 3C = 3072 + 192; reads inp (64), weight (192), bias (24), writes out (192) floats.
  const OpCost& qkv = ops.at("matmul qkv (C->3C) forward");
  EXPECT_DOUBLE_EQ(qkv.flops, 2.0 * 8 * 8 * 24 + 8 * 24);
  EXPECT_DOUBLE_EQ(qkv.bytes, 4.0 * (64 + 192 + 24 + 192));
  EXPECT_DOUBLE_EQ(qkv.intensity(), qkv.flops / qkv.bytes);
  // Its backward: twice the products, the bias gradient, and dinp, dweight, dbias read and written.
  const OpCost& qkv_back = ops.at("matmul qkv (C->3C) backward");
  EXPECT_DOUBLE_EQ(qkv_back.flops, 4.0 * 8 * 8 * 24 + 8 * 24);
  EXPECT_DOUBLE_EQ(qkv_back.bytes, 4.0 * (192 + 64 + 192 + 2 * 64 + 2 * 192 + 2 * 24));
  // Attention: 2 B T^2 C (the kit's model FLOPs); reads q, k, v, writes two (B,NH,T,T) score arrays and out.
  const OpCost& attention = ops.at("attention forward");
  EXPECT_DOUBLE_EQ(attention.flops, 2.0 * 2 * 16 * 8);
  EXPECT_DOUBLE_EQ(attention.bytes, 4.0 * (3 * 64 + 2 * 64 + 64));
  // GELU over N x 4C = 256 elements: 9 FLOPs, 8 bytes each.
  EXPECT_DOUBLE_EQ(ops.at("gelu forward").intensity(), 9.0 / 8);
  EXPECT_DOUBLE_EQ(ops.at("residual forward").intensity(), 1.0 / 12);
  // The matmuls and attention of the op table are the model's FLOPs per step.
  double model_flops = 0;
  for (const auto& [name, op] : ops)
    if (name.starts_with("matmul") || name.starts_with("attention")) model_flops += op.flops;
  const double biases = 2 * 8 * (24 + 8 + 32 + 8);  // N x OC per biased linear, forward and backward
  EXPECT_DOUBLE_EQ(model_flops - biases, Gpt(c, 1).flops_per_step(2, 4));
}

// The measured roofline of this machine: every op positive and under its roof.
// The roofs are the best of a few calls on a shared machine, and an op whose
// tensors stay in cache beats the memory roof; so: under 1.5x the peak always,
// and under 1.5x the memory roof for the ops that move far more than a cache holds.
TEST(Roofline, MeasuredOpsStayUnderTheMeasuredRoofs) {
  const Device& cpu = device(DeviceKind::cpu);
  const Roofline roof{measure_peak_flops(cpu, 512), measure_bandwidth(cpu, 128 << 20)};
  ASSERT_GT(roof.peak_flops, 0);
  ASSERT_GT(roof.bandwidth, 0);
  const GptOpBench bench(gpt_preset("tiny-gpt", 30), 1024, cpu);
  for (std::size_t i = 0; i < bench.costs().size(); ++i) {
    const OpCost& op = bench.costs()[i];
    const double measured = op.flops / bench.best_seconds(i, 0.01);
    EXPECT_GT(measured, 0) << op.name << " " << op.pass;
    EXPECT_LT(measured, 1.5 * roof.peak_flops) << op.name << " " << op.pass;
    if (op.bytes > 64e6) {
      EXPECT_LT(measured, 1.5 * roof.attainable(op.intensity())) << op.name << " " << op.pass;
    }
  }
}

}  // namespace
