// The fenced device (core/src/fenced_device.cpp): its ops compute what the
// CPU's do, bit for bit, and host code that touches its memory is stopped with
// the allocation named, as a GPU would crash on it.
#include <cstring>
#include <span>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "labkit/device.h"
#include "labkit/error.h"
#include "labkit/gpt.h"
#include "labkit/optim.h"
#include "labkit/scratch.h"
#include "labkit/tensor.h"

namespace labkit {
namespace {

using ::testing::HasSubstr;

// What a host loop over a tensor's data() does on a GPU, planted on purpose.
float read_on_the_host(const float* p, int i) { return *(static_cast<const volatile float*>(p) + i); }

// BLAS keeps threads: the death tests re-run the binary rather than fork it.
class FencedDeviceDeathTest : public ::testing::Test {
 protected:
  void SetUp() override { GTEST_FLAG_SET(death_test_style, "threadsafe"); }
};

TEST_F(FencedDeviceDeathTest, AHostReadOfItsMemoryStopsNamingTheAllocationAndTheByte) {
  const Tensor t({16}, DeviceKind::fenced);
  EXPECT_DEATH(read_on_the_host(t.data(), 3),
               "fenced device: the host read from fenced allocation #[0-9]+ \\(64 bytes\\) at byte 12, outside the "
               "device's ops");
}

TEST_F(FencedDeviceDeathTest, AHostWriteIsStoppedToo) {
  Tensor t({4}, DeviceKind::fenced);
  EXPECT_DEATH(std::memset(t.data(), 0, 8), "the host wrote to fenced allocation #[0-9]+ \\(16 bytes\\) at byte 0");
}

TEST_F(FencedDeviceDeathTest, ReleasedMemoryStaysFenced) {
  const Device& fenced = device(DeviceKind::fenced);
  void* released = fenced.allocate(64);
  fenced.release(released);
  EXPECT_DEATH(read_on_the_host(static_cast<const float*>(released), 3),
               "fenced device: the host read from fenced memory at 0x[0-9a-f]+ that no live allocation holds "
               "\\(released\\?\\)");
}

TEST(FencedDevice, IsNeitherTheHostNorIndexableFromIt) {
  Tensor t({4}, DeviceKind::fenced);
  EXPECT_FALSE(t.on_host());
  EXPECT_EQ(&device_of(t.data()), &device(DeviceKind::fenced));
  EXPECT_EQ(&device_of(std::vector<float>(4).data()), &device(DeviceKind::cpu));
  EXPECT_THROW(t[0], std::logic_error);
}

TEST(FencedDevice, CopiesCrossTheFenceEitherWay) {
  const std::vector<float> values = {1, 2, 3, 4};
  Tensor t = Tensor::from_host(values, {4}, DeviceKind::fenced);
  EXPECT_EQ(t.to_host(), values);
  EXPECT_EQ(t.clone().to_host(), values);
  std::vector<float> back(4);
  copy_local(view_of(std::span(back)), {t.data(), 4});  // device to host: the fenced side's copy, not a memcpy
  EXPECT_EQ(back, values);
  const std::vector<float> twos(4, 2.0f);
  reduce_local(ReduceOp::sum, DType::f32, Tensor::from_host(twos, {4}, DeviceKind::fenced).data(), t.data(), 4);
  EXPECT_EQ(t.to_host(), (std::vector<float>{3, 4, 5, 6}));
  t.zero();
  EXPECT_EQ(t.to_host(), std::vector<float>(4));
}

TEST(FencedDevice, AnOpHandedHostMemoryNamesTheOpAndTheArgument) {
  const Device& fenced = device(DeviceKind::fenced);
  Tensor inp({2, 3}, DeviceKind::fenced), weight({4, 3}, DeviceKind::fenced);
  std::vector<float> out_on_the_host(8);
  try {
    fenced.matmul_forward(out_on_the_host.data(), inp.data(), weight.data(), nullptr, 2, 3, 4);
    FAIL() << "matmul_forward ran on host memory";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("fenced device: matmul_forward was handed host memory as its argument 1"));
  }
  std::vector<float> host(4);
  EXPECT_THROW(reduce_local(ReduceOp::sum, DType::f32, host.data(), inp.data(), 4), Error);
}

TEST(FencedDevice, AnOpHandedReleasedMemorySaysSo) {
  const Device& fenced = device(DeviceKind::fenced);
  const Tensor inp({2, 3}, DeviceKind::fenced), weight({4, 3}, DeviceKind::fenced);
  void* released = fenced.allocate(8 * sizeof(float));
  fenced.release(released);
  try {
    fenced.matmul_forward(static_cast<float*>(released), inp.data(), weight.data(), nullptr, 2, 3, 4);
    FAIL() << "matmul_forward wrote to released memory";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("fenced device: matmul_forward was handed memory the device has released, as "
                                    "its argument 1"));
  }
}

// A released block is handed out again, and zero-filled as a new one is (5 MiB:
// larger than anything else this test program releases, so the block is this one).
TEST(FencedDevice, AReusedBlockIsZeroFilledAsANewOne) {
  const Device& fenced = device(DeviceKind::fenced);
  const std::size_t count = std::size_t(5) << 18;
  void* first = fenced.allocate(count * sizeof(float));
  fenced.copy_from_host(first, std::vector<float>(count, 1.0f).data(), count * sizeof(float));
  fenced.release(first);
  void* again = fenced.allocate((count - 100) * sizeof(float));
  EXPECT_EQ(again, first);
  std::vector<float> back(count - 100, -1.0f);
  fenced.copy_to_host(back.data(), again, back.size() * sizeof(float));
  EXPECT_EQ(back, std::vector<float>(count - 100, 0.0f));
  fenced.release(again);
}

// The MoE layer's ops (its experts' ReLU, its router's softmax backward) are in the table too.
TEST(FencedDevice, ReluAndSoftmaxBackwardAreTheCpusKernels) {
  const int N = 3, V = 5;
  std::vector<float> x(N * V), dy(N * V);
  for (int i = 0; i < N * V; ++i) x[i] = 0.1f * float(i % 7) - 0.3f, dy[i] = 0.05f * float(i % 5) - 0.1f;
  const Device &cpu = device(DeviceKind::cpu), &fenced = device(DeviceKind::fenced);
  const auto on_both = [&](auto op) {  // op(device, out, x, dy) on host buffers and on fenced copies of them
    std::vector<float> host_out(N * V);
    op(cpu, host_out.data(), x.data(), dy.data());
    Tensor out({std::size_t(N * V)}, DeviceKind::fenced);
    const Tensor fx = Tensor::from_host(x, {x.size()}, DeviceKind::fenced);
    const Tensor fdy = Tensor::from_host(dy, {dy.size()}, DeviceKind::fenced);
    op(fenced, out.data(), fx.data(), fdy.data());
    EXPECT_EQ(out.to_host(), host_out);
  };
  on_both([&](const Device& d, float* out, const float* in, const float*) { d.relu_forward(out, in, N * V); });
  on_both([&](const Device& d, float* out, const float* in, const float* g) { d.relu_backward(out, in, g, N * V); });
  on_both([&](const Device& d, float* out, const float* p, const float* g) { d.softmax_backward(out, p, g, N, V); });
}

// SGD and clipping run where the gradients are: the same bits as on the host.
TEST(FencedDevice, SgdAndClippingRunOnTheDeviceAsOnTheHost) {
  std::vector<float> w(100), g(100);
  for (int i = 0; i < 100; ++i) w[i] = 0.01f * float(i), g[i] = 0.5f - 0.013f * float(i);
  Tensor fenced_w = Tensor::from_host(w, {100}, DeviceKind::fenced);
  Tensor fenced_g = Tensor::from_host(g, {100}, DeviceKind::fenced);
  SgdMomentum on_host{.lr = 0.1f}, on_device{.lr = 0.1f};
  for (int step = 0; step < 3; ++step) {
    EXPECT_EQ(clip_by_global_norm(fenced_g, 0.5), clip_by_global_norm(g, 0.5));
    on_host.update(w, g);
    on_device.update(fenced_w, fenced_g);
  }
  EXPECT_EQ(fenced_g.to_host(), g);
  EXPECT_EQ(fenced_w.to_host(), w);
  EXPECT_EQ(on_device.velocity.device().kind, DeviceKind::fenced);
}

// The fence changes where memory may be read, not what is computed: the same
// kernels, so the same bits, step after step.
TEST(FencedDevice, TheGptTrainsToTheCpusWeightsBitForBit) {
  const GptConfig config{.max_seq = 16, .vocab = 20, .layers = 2, .heads = 4, .channels = 32};
  Gpt on_cpu(config, 7), fenced(config, 7, DeviceKind::fenced);
  AdamW cpu_adamw, fenced_adamw;
  std::vector<int> x(4 * 16), y(4 * 16);
  for (int step = 0; step < 3; ++step) {
    for (std::size_t i = 0; i < x.size(); ++i) {
      x[i] = int((i * 7 + step) % 20);
      y[i] = int((i * 5 + 3 * step) % 20);
    }
    EXPECT_EQ(fenced.forward(x, y, 4, 16), on_cpu.forward(x, y, 4, 16)) << "step " << step;
    on_cpu.zero_grad();
    fenced.zero_grad();
    on_cpu.backward();
    fenced.backward();
    cpu_adamw.update(on_cpu.parameters(), on_cpu.gradients());
    fenced_adamw.update(fenced.parameters(), fenced.gradients());
  }
  EXPECT_EQ(fenced.parameters().to_host(), on_cpu.parameters().to_host());
}

}  // namespace
}  // namespace labkit
