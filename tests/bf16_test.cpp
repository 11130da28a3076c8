// bf16 as a DType: the float <-> bf16 conversions (round to nearest even, NaN
// kept NaN), reduce_local in float rounded once, and allreduce of bf16 buffers
// on the simulator, native and as labkit's ring.
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include <gtest/gtest.h>

#include "harness.h"
#include "labkit/algorithms.h"
#include "labkit/comm.h"
#include "labkit/dtype.h"

using namespace labkit;

namespace {
float bf16_float(std::uint16_t bits) { return to_float(bfloat16{bits}); }

// Spread over many exponents and both signs, differing by rank and index, none zero.
float mixed(int rank, std::size_t i) {
  return (rank % 2 ? -1.0f : 1.0f) * std::ldexp(1.0f + float((rank * 37 + i * 11) % 97) / 97.0f, int(i % 23) - 11);
}
}  // namespace

TEST(Bf16, IsNamedAndSizedAsNcclBfloat16) {
  EXPECT_EQ(parse_dtype("bf16"), DType::bf16);
  EXPECT_EQ(name_of(DType::bf16), "bf16");
  EXPECT_EQ(size_of(DType::bf16), 2u);
  EXPECT_EQ(dtype_of<bfloat16>(), DType::bf16);
}

TEST(Bf16, EveryValueSurvivesARoundTripThroughFloat) {
  for (std::uint32_t bits = 0; bits <= 0xFFFF; ++bits) {
    const float f = bf16_float(std::uint16_t(bits));
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(to_float(to_bf16(f)))) << std::hex << "bits 0x" << bits;
    } else {
      ASSERT_EQ(to_bf16(f).bits, bits) << std::hex << "bits 0x" << bits << " (" << f << ")";
    }
  }
}

TEST(Bf16, RoundsToNearestAndTiesToEven) {
  // Between 1 and 2 bf16's step is 2^-7: 1 + 2^-8 is halfway between 1 and 1 + 2^-7.
  const float step = std::ldexp(1.0f, -7), half = step / 2, tiny = std::ldexp(1.0f, -20);
  EXPECT_EQ(to_float(to_bf16(1 + half)), 1.0f) << "a tie goes to the even neighbour, 1";
  EXPECT_EQ(to_float(to_bf16(1 + step + half)), 1 + 2 * step) << "a tie goes to the even neighbour, 1 + 2^-6";
  EXPECT_EQ(to_float(to_bf16(1 + half + tiny)), 1 + step) << "past halfway rounds up";
  EXPECT_EQ(to_float(to_bf16(1 + half - tiny)), 1.0f) << "short of halfway rounds down";
  EXPECT_EQ(to_float(to_bf16(-(1 + half + tiny))), -(1 + step)) << "negatives round by magnitude";
  EXPECT_EQ(to_float(to_bf16(257.0f)), 256.0f) << "8 bits of precision: 257 is a tie, and 256 is even";
  EXPECT_EQ(to_float(to_bf16(259.0f)), 260.0f);
}

TEST(Bf16, KeepsInfinitiesAndNaNsAndOverflowsToInfinity) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(to_float(to_bf16(inf)), inf);
  EXPECT_EQ(to_float(to_bf16(-inf)), -inf);
  EXPECT_TRUE(std::isnan(to_float(to_bf16(std::numeric_limits<float>::quiet_NaN()))));
  // A NaN whose payload is all in the 16 bits a cut drops would become infinity.
  EXPECT_TRUE(std::isnan(to_float(to_bf16(std::bit_cast<float>(0x7F800001u)))));
  EXPECT_TRUE(std::signbit(to_float(to_bf16(std::bit_cast<float>(0xFF800001u)))));
  EXPECT_EQ(to_float(to_bf16(std::numeric_limits<float>::max())), inf) << "past bf16's largest, rounds to infinity";
  EXPECT_EQ(to_bf16(bf16_float(0x7F7F)).bits, 0x7F7F) << "bf16's largest finite value stays";
}

TEST(Bf16, ReduceLocalComputesInFloatAndRoundsOnce) {
  const std::size_t n = 1000;  // several of reduce_local's 256-element blocks, and a partial one
  for (ReduceOp op : {ReduceOp::sum, ReduceOp::prod, ReduceOp::min, ReduceOp::max}) {
    std::vector<bfloat16> a(n), b(n);
    for (std::size_t i = 0; i < n; ++i) a[i] = to_bf16(mixed(0, i)), b[i] = to_bf16(mixed(1, i));
    std::vector<bfloat16> got = a;
    reduce_local(op, DType::bf16, b.data(), got.data(), n);
    for (std::size_t i = 0; i < n; ++i) {
      const float x = to_float(a[i]), y = to_float(b[i]);
      const float exact = op == ReduceOp::sum ? x + y : op == ReduceOp::prod ? x * y : op == ReduceOp::min ? std::min(x, y) : std::max(x, y);
      ASSERT_EQ(got[i].bits, to_bf16(exact).bits) << name_of(op) << " element " << i << ": " << x << " and " << y
                                                  << ", expected " << to_float(to_bf16(exact)) << ", got " << to_float(got[i]);
    }
  }
  std::vector<bfloat16> v = {to_bf16(3.0f), to_bf16(1.0f), to_bf16(-7.0f)};
  divide_local(DType::bf16, v.data(), v.size(), 3);
  EXPECT_EQ(to_float(v[0]), 1.0f);
  EXPECT_EQ(v[1].bits, to_bf16(1.0f / 3).bits) << "1/3 rounded once to bf16";
  EXPECT_EQ(v[2].bits, to_bf16(-7.0f / 3).bits);
}

TEST(Bf16, SumsRoundOnEveryStepAsTheyTravel) {
  // 256 + 1 + 1 in bf16: each partial sum is stored in bf16, so each +1 is lost
  // (a tie to even), where float would carry 258 to the end.
  std::vector<bfloat16> acc = {to_bf16(256.0f)}, one = {to_bf16(1.0f)};
  reduce_local(ReduceOp::sum, DType::bf16, one.data(), acc.data(), 1);
  reduce_local(ReduceOp::sum, DType::bf16, one.data(), acc.data(), 1);
  EXPECT_EQ(to_float(acc[0]), 256.0f);
}

TEST(Bf16, AllReduceOnFourRanksNativeAndRing) {
  const int p = 4;
  const std::size_t n = 10;  // does not divide by 4: the ring's chunks differ in size
  // Quarter steps up to 10, so every partial sum of 4 ranks is exact in bf16's 8 bits.
  auto input = [](int rank, std::size_t i) { return float((rank * 7 + i * 3) % 41) / 4; };
  for (const char* algo : {"native", "ring"})
    for (ReduceOp op : {ReduceOp::sum, ReduceOp::avg, ReduceOp::max}) {
      std::vector<std::vector<float>> got(p);
      test::simulate(p, [&](Comm& comm) {
        use_algorithm(comm, Collective::all_reduce, algo);
        std::vector<bfloat16> buf(n);
        for (std::size_t i = 0; i < n; ++i) buf[i] = to_bf16(input(comm.rank(), i));
        comm.all_reduce(view_of(buf), op);
        for (const bfloat16& x : buf) got[comm.rank()].push_back(to_float(x));
      });
      for (int r = 0; r < p; ++r)
        for (std::size_t i = 0; i < n; ++i) {
          float want = op == ReduceOp::max ? input(0, i) : 0;
          for (int q = 0; q < p; ++q) want = op == ReduceOp::max ? std::max(want, input(q, i)) : want + input(q, i);
          if (op == ReduceOp::avg) want = to_float(to_bf16(want / p));
          EXPECT_EQ(got[r][i], want) << algo << " " << name_of(op) << ": rank " << r << ", element " << i;
        }
    }
}
