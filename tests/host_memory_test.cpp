// The simulator holds every rank's tensors in one process: a run that would
// outgrow the machine stops with an error that names the rank (core/src/device.cpp),
// where the kernel would kill it without a word.
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "harness.h"
#include "labkit/device.h"
#include "labkit/error.h"
#include "labkit/tensor.h"

namespace labkit {
namespace {

using ::testing::HasSubstr;
using test::error_of;

// Tensors of 1 MiB, which malloc maps fresh and this test never writes: the
// run takes address space up to the machine's available memory, not memory.
TEST(HostMemory, ARunPastTheMachineStopsNamingTheRank) {
  const std::string error = error_of(4, [](Comm& c) {
    if (c.rank() != 3) return;
    std::vector<TensorOf<float>> held;
    for (;;) held.emplace_back(std::vector<std::size_t>{1 << 18});
  });
  EXPECT_THAT(error, HasSubstr("rank 3: host memory: 1.0 MB more for a tensor, where the tensors of this process hold "));
  EXPECT_THAT(error, HasSubstr("what this machine had for it when its tensors began (simulate fewer --ranks"));
}

// Under mpirun a process is one rank: the launcher names it, and the advice is
// a smaller run, not fewer simulated ranks.
TEST(HostMemory, AProcessOfOneRankNamesItsRank) {
  set_process_rank(2);
  std::string error;
  try {
    std::vector<TensorOf<float>> held;
    for (;;) held.emplace_back(std::vector<std::size_t>{1 << 18});
  } catch (const Error& e) {
    error = e.what();
  }
  set_process_rank(-1);
  EXPECT_THAT(error, HasSubstr("rank 2: host memory: 1.0 MB more for a tensor"));
  EXPECT_THAT(error, HasSubstr("when its tensors began (a smaller --batch or model)"));
}

}  // namespace
}  // namespace labkit
