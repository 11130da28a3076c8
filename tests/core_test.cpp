// core/: dtypes and reductions, chunking, units, host memory, topology and the cost model.
#include <algorithm>
#include <cstdint>
#include <fstream>
#include <limits>

#include <gtest/gtest.h>

#include "labkit/algorithms.h"
#include "labkit/cost_model.h"
#include "labkit/tensor.h"
#include "labkit/topology.h"
#include "labkit/units.h"

using namespace labkit;

TEST(DType, ReducesEveryOpAndType) {
  std::vector<float> a = {1, -2, 3}, b = {4, 5, -6};
  reduce_local(ReduceOp::sum, DType::f32, b.data(), a.data(), 3);
  EXPECT_EQ(a, (std::vector<float>{5, 3, -3}));
  reduce_local(ReduceOp::max, DType::f32, b.data(), a.data(), 3);
  EXPECT_EQ(a, (std::vector<float>{5, 5, -3}));
  std::vector<std::int64_t> x = {2, 3}, y = {5, 7};
  reduce_local(ReduceOp::prod, DType::i64, y.data(), x.data(), 2);
  EXPECT_EQ(x, (std::vector<std::int64_t>{10, 21}));
  reduce_local(ReduceOp::min, DType::i64, y.data(), x.data(), 2);
  EXPECT_EQ(x, (std::vector<std::int64_t>{5, 7}));
  std::vector<double> d = {9, 3};
  divide_local(DType::f64, d.data(), 2, 3);
  EXPECT_EQ(d, (std::vector<double>{3, 1}));
  EXPECT_EQ(parse_dtype("i32"), DType::i32);
  EXPECT_THROW(parse_dtype("f8"), std::invalid_argument);
  EXPECT_THROW(parse_reduce_op("mean"), std::invalid_argument);
}

TEST(ChunkRange, CoversAnyCountWithoutGapsOrOverlap) {
  for (std::size_t count : {0, 1, 7, 8, 100, 1001})
    for (int parts = 1; parts <= 9; ++parts) {
      std::size_t next = 0;
      for (int i = 0; i < parts; ++i) {
        const Chunk c = chunk_range(count, parts, i);
        EXPECT_EQ(c.offset, next) << "count " << count << " parts " << parts << " chunk " << i;
        EXPECT_LE(c.count, chunk_range(count, parts, 0).count);
        next += c.count;
      }
      EXPECT_EQ(next, count);
    }
}

TEST(Units, ReadsBest) {
  EXPECT_EQ(format_seconds(850e-9), "850 ns");
  EXPECT_EQ(format_seconds(12.5e-6), "12.5 us");
  EXPECT_EQ(format_seconds(3.2e-3), "3.20 ms");
  EXPECT_EQ(format_bytes(512), "512 B");
  EXPECT_EQ(format_bytes(1 << 20), "1 MiB");
  EXPECT_EQ(format_bytes(1536), "1.50 KiB");
  EXPECT_EQ(parse_bytes("4K"), 4096u);
  EXPECT_EQ(parse_bytes("1M"), 1u << 20);
  EXPECT_THROW(parse_bytes("4X"), std::invalid_argument);
  EXPECT_THROW(parse_bytes("-1"), std::invalid_argument);  // not wrapped round to 2^64 - 1
  EXPECT_THROW(parse_bytes("lots"), std::invalid_argument);
  EXPECT_EQ(parse_bytes("16777215G"), 16777215ull << 30);
  EXPECT_THROW(parse_bytes("17179869184G"), std::invalid_argument);          // 2^64: not wrapped to 0
  EXPECT_THROW(parse_bytes("99999999999999999999"), std::invalid_argument);  // past stoull
  EXPECT_DOUBLE_EQ(parse_seconds("10us"), 10e-6);
  EXPECT_DOUBLE_EQ(parse_seconds("1.5ms"), 1.5e-3);
  EXPECT_DOUBLE_EQ(parse_seconds("2"), 2.0);
  EXPECT_THROW(parse_seconds("-1us"), std::invalid_argument);
  EXPECT_THROW(parse_seconds("10 us"), std::invalid_argument);
  EXPECT_THROW(parse_seconds("soon"), std::invalid_argument);
}

// Past the ladder of units, engineering notation: ddp --straggler 1:1e-300
// printed a step of 1e300 s as 301 digits, and 1e-13 s read "0.00 ns".
TEST(Units, ExtremeValuesReadInEngineeringNotation) {
  EXPECT_EQ(format_seconds(1e300), "1.00e+300 s");
  EXPECT_EQ(format_seconds(2.5e301), "25.0e+300 s");
  EXPECT_EQ(format_seconds(-4.56e8), "-456e+06 s");
  EXPECT_EQ(format_seconds(std::numeric_limits<double>::max()), "180e+306 s");
  EXPECT_EQ(format_seconds(999999), "999999 s");  // the ladder's last
  EXPECT_EQ(format_seconds(1e6), "1.00e+06 s");
  EXPECT_EQ(format_seconds(0.07e-9), "0.07 ns");  // still the ladder's
  EXPECT_EQ(format_seconds(1.23e-13), "123e-15 s");
  EXPECT_EQ(format_seconds(std::numeric_limits<double>::denorm_min()), "4.94e-324 s");
  EXPECT_EQ(format_seconds(std::numeric_limits<double>::infinity()), "inf s");
  EXPECT_EQ(format_bytes(std::uint64_t(3) << 50), "3 PiB");
  EXPECT_EQ(format_bytes(std::numeric_limits<std::uint64_t>::max()), "16 EiB");
}

// Host buffers come zeroed, and from 2 MiB up they start on a 2 MiB boundary, so
// the kernel can back them with huge pages (device.cpp says why it matters).
TEST(HostMemory, LargeBuffersAreZeroedAndStartOnAHugePage) {
  Tensor small({1000}), large({3 << 20});  // 4 KB and 12 MiB
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(large.data()) % (2 << 20), 0u);
  EXPECT_TRUE(std::all_of(small.begin(), small.end(), [](float x) { return x == 0; }));
  EXPECT_TRUE(std::all_of(large.begin(), large.end(), [](float x) { return x == 0; }));
}

TEST(Topology, PresetsUsePerDirectionFigures) {
  const Topology h = find_topology("dgx-h100");
  EXPECT_EQ(h.devices_per_node, 8);
  EXPECT_DOUBLE_EQ(h.intra.bandwidth, 450e9);  // NVLink 4: 900 GB/s is both directions together
  EXPECT_DOUBLE_EQ(h.inter.bandwidth, 50e9);   // 400 Gb/s NDR
  EXPECT_EQ(h.node_of(9), 1);
  EXPECT_DOUBLE_EQ(h.link(0, 7).alpha, h.intra.alpha);
  EXPECT_DOUBLE_EQ(h.link(7, 8).alpha, h.inter.alpha);
  EXPECT_DOUBLE_EQ(device_preset("h100").peak_flops, 989e12);
  for (std::string_view p : topology_presets()) EXPECT_EQ(find_topology(p).name, p);
  EXPECT_THROW(find_topology("dgx-z900"), std::invalid_argument);
}

TEST(Topology, LoadsJsonFile) {
  const std::string path = ::testing::TempDir() + "/topology.json";
  std::ofstream(path) << R"({"name": "lab", "devices_per_node": 2, "nics_per_node": 1,
    "intra": {"alpha_us": 2, "bandwidth_GBps": 100}, "inter": {"alpha_us": 10, "bandwidth_GBps": 10}})";
  const Topology t = find_topology(path);
  EXPECT_EQ(t.name, "lab");
  EXPECT_EQ(t.nic_of(1), 0);
  EXPECT_DOUBLE_EQ(t.intra.alpha, 2e-6);
  EXPECT_DOUBLE_EQ(t.inter.bandwidth, 10e9);
  std::ofstream(path) << R"({"devices_per_node": 2})";
  EXPECT_THROW(find_topology(path), std::invalid_argument);
}

// A file with a bad field is refused, naming the file and the field. Latency 0
// is an ideal link (calibrate can fit it); bandwidth 0 never delivers.
TEST(Topology, RefusesBadFieldsNamingThem) {
  const std::string path = ::testing::TempDir() + "/bad_topology.json";
  auto error = [&](const std::string& devices, const std::string& intra, const std::string& inter) {
    std::ofstream(path) << R"({"devices_per_node": )" << devices << R"(, "intra": )" << intra << R"(, "inter": )"
                        << inter << "}";
    try {
      find_topology(path);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  const std::string good = R"({"alpha_us": 2, "bandwidth_GBps": 10})";
  EXPECT_EQ(error("2", good, R"({"alpha_us": 0, "bandwidth_GBps": 10})"), "accepted");
  EXPECT_EQ(error("2", good, R"({"alpha_us": 2, "bandwidth_GBps": 0})"),
            "topology '" + path + "': inter.bandwidth_GBps = 0: must be > 0");
  EXPECT_EQ(error("2", R"({"alpha_us": -1, "bandwidth_GBps": 10})", good),
            "topology '" + path + "': intra.alpha_us = -1: must be >= 0");
  EXPECT_EQ(error("2", R"({"bandwidth_GBps": 10})", good), "topology '" + path + "': intra.alpha_us is missing");
  EXPECT_EQ(error("2", good, R"({"alpha_us": "fast", "bandwidth_GBps": 10})"),
            "topology '" + path + R"(': inter.alpha_us = "fast": must be a number)");
  EXPECT_EQ(error("0", good, good),
            "topology '" + path + "': devices_per_node = 0: must be a whole number from 1 to 1048576");
  EXPECT_EQ(error("2.5", good, good),
            "topology '" + path + "': devices_per_node = 2.5: must be a whole number from 1 to 1048576");
  EXPECT_EQ(error("2", good, R"({"alpha_us": 2, "bandwidth_GBps": 10, "bandwith_GBps": 20})"),
            "topology '" + path + "': inter.bandwith_GBps: not a field labkit reads (alpha_us, bandwidth_GBps)");
}

// A field labkit does not read is refused, not ignored: "devise": "a100" would
// leave the cluster computing at the H100's peak.
TEST(Topology, RefusesAFieldItDoesNotRead) {
  const std::string path = ::testing::TempDir() + "/misspelled_topology.json";
  std::ofstream(path) << R"({"devices_per_node": 2, "devise": "a100",
    "intra": {"alpha_us": 2, "bandwidth_GBps": 100}, "inter": {"alpha_us": 10, "bandwidth_GBps": 10}})";
  try {
    find_topology(path);
    ADD_FAILURE() << "a misspelled field accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), ("topology '" + path + "': devise: not a field labkit reads (name, devices_per_node, "
                            "nics_per_node, device, intra, inter, calibration, check)").c_str());
  }
}

