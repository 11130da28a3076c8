#include "labkit/topology.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <optional>
#include <stdexcept>
#include <string_view>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

namespace labkit {

namespace {
constexpr double us = 1e-6;
constexpr double GBps = 1e9;

// Per-direction figures. NVIDIA quotes NVLink as the sum of both directions
// (H100: "900 GB/s", A100: "600 GB/s"); one direction carries half of it.
// Latencies are the long guide's typical values (section 5, book/99-references.md:
// NVLink 1-5 us, InfiniBand 1-2 us, TCP/Ethernet 50-100 us).
Topology make(std::string_view name) {
  const DeviceModel h100 = device_preset("h100"), a100 = device_preset("a100");
  // DGX H100: 8 x H100 SXM on NVSwitch (NVLink 4: 450 GB/s per direction),
  // 8 x ConnectX-7 NDR 400 Gb/s = 50 GB/s per GPU (DGX H100 user guide).
  if (name == "dgx-h100") return {"dgx-h100", 8, 8, {1 * us, 450 * GBps}, {2 * us, 50 * GBps}, h100};
  // DGX A100: 8 x A100 SXM on NVSwitch (NVLink 3: 300 GB/s per direction),
  // 8 x ConnectX-6 HDR 200 Gb/s = 25 GB/s per GPU (DGX A100 user guide).
  if (name == "dgx-a100") return {"dgx-a100", 8, 8, {1 * us, 300 * GBps}, {2 * us, 25 * GBps}, a100};
  // PCIe server: 4 GPUs on PCIe Gen4 x16 (32 GB/s raw, ~25 GB/s achieved per
  // direction), one 100 GbE RoCE NIC per node (12.5 GB/s, ~5 us).
  if (name == "pcie") return {"pcie", 4, 1, {3 * us, 25 * GBps}, {5 * us, 12.5 * GBps}, a100};
  // Cloud VMs: 8 GPUs on PCIe, nodes joined by 100 Gb/s TCP through the kernel
  // (12.5 GB/s, ~50 us per message), one NIC per node.
  if (name == "ethernet") return {"ethernet", 8, 1, {3 * us, 25 * GBps}, {50 * us, 12.5 * GBps}, h100};
  // One H100 per node on InfiniBand NDR 400 Gb/s (50 GB/s): the DDP example of
  // "Day 64: Distributed Training Fundamentals" (8 GPUs, 50 GB/s; book/99-references.md),
  // every allreduce over the network.
  if (name == "ib-ndr") return {"ib-ndr", 1, 1, {1 * us, 450 * GBps}, {2 * us, 50 * GBps}, h100};
  throw std::invalid_argument("");
}

// The number at `key` of `object`, called `name` ("inter.alpha_us") if it is missing or not a number.
double number_at(const nlohmann::json& object, const std::string& key, const std::string& name) {
  if (!object.is_object() || !object.contains(key)) throw std::invalid_argument(name + " is missing");
  const nlohmann::json& value = object[key];
  if (!value.is_number()) throw std::invalid_argument(fmt::format("{} = {}: must be a number", name, value.dump()));
  return value.get<double>();
}

// A field labkit does not read is a slip ("devise" for "device", which would
// leave the H100 in place), refused naming the ones it reads, not ignored.
void refuse_unknown_fields(const nlohmann::json& object, std::initializer_list<std::string_view> known,
                           const std::string& prefix) {
  for (const auto& [key, value] : object.items())
    if (std::find(known.begin(), known.end(), key) == known.end())
      throw std::invalid_argument(
          fmt::format("{}{}: not a field labkit reads ({})", prefix, key, fmt::join(known, ", ")));
}

// A latency of 0 is an ideal link (and what calibrate fits when latency is lost
// in noise); a bandwidth of 0 would make every message take forever.
Link link_from_json(const nlohmann::json& file, const std::string& name) {
  const nlohmann::json link = file.value(name, nlohmann::json::object());
  if (link.is_object()) refuse_unknown_fields(link, {"alpha_us", "bandwidth_GBps"}, name + ".");
  const double alpha = number_at(link, "alpha_us", name + ".alpha_us");
  const double bandwidth = number_at(link, "bandwidth_GBps", name + ".bandwidth_GBps");
  if (alpha < 0) throw std::invalid_argument(fmt::format("{}.alpha_us = {}: must be >= 0", name, alpha));
  if (bandwidth <= 0) throw std::invalid_argument(fmt::format("{}.bandwidth_GBps = {}: must be > 0", name, bandwidth));
  return {alpha * us, bandwidth * GBps};
}

// A count of at least 1 at `key`, or `fallback` when the file leaves it out.
int count_at(const nlohmann::json& file, const std::string& key, std::optional<int> fallback = std::nullopt) {
  if (fallback && !file.contains(key)) return *fallback;
  const double n = number_at(file, key, key);
  if (n < 1 || n != std::floor(n) || n > 1 << 20)
    throw std::invalid_argument(fmt::format("{} = {}: must be a whole number from 1 to {}", key, n, 1 << 20));
  return int(n);
}

// The text at `key`, or `fallback` when the file leaves it out.
std::string text_at(const nlohmann::json& file, const std::string& key, const std::string& fallback) {
  if (!file.contains(key)) return fallback;
  if (!file[key].is_string())
    throw std::invalid_argument(fmt::format("{} = {}: must be a string", key, file[key].dump()));
  return file[key].get<std::string>();
}

Topology load(const std::string& path) {
  if (std::filesystem::is_directory(path))
    throw std::invalid_argument("topology '" + path + "': a folder, not a JSON file");
  std::ifstream in(path);
  if (!in) throw std::invalid_argument("topology: cannot open '" + path + "'");
  try {
    const nlohmann::json j = nlohmann::json::parse(in);
    if (!j.is_object()) throw std::invalid_argument("expected a JSON object (see book/00-introduction.md)");
    // "calibration" and "check": what ./labkit calibrate measured, fitted and then predicted, kept beside the fit.
    refuse_unknown_fields(j, {"name", "devices_per_node", "nics_per_node", "device", "intra", "inter", "calibration",
                              "check"},
                          "");
    Topology t{text_at(j, "name", path), count_at(j, "devices_per_node"), 0, link_from_json(j, "intra"),
               link_from_json(j, "inter"), device_preset(text_at(j, "device", "h100"))};
    t.nics_per_node = count_at(j, "nics_per_node", t.devices_per_node);
    return t;
  } catch (const std::exception& e) {
    throw std::invalid_argument("topology '" + path + "': " + e.what());
  }
}
}  // namespace

std::vector<std::string_view> topology_presets() { return {"dgx-h100", "dgx-a100", "pcie", "ethernet", "ib-ndr"}; }

DeviceModel device_preset(std::string_view name) {
  // Dense BF16 peaks from NVIDIA's H100 and A100 datasheets; the 1979 (H100) and
  // 624 (A100) TFLOPS the long guide's hardware table gives are their with-sparsity
  // figures, twice what dense math reaches.
  if (name == "h100") return {"h100", 989e12};
  if (name == "a100") return {"a100", 312e12};
  throw std::invalid_argument("unknown device '" + std::string(name) + "' (h100, a100)");
}

Topology find_topology(std::string_view name_or_path) {
  for (std::string_view preset : topology_presets())
    if (name_or_path == preset) return make(preset);
  if (std::filesystem::exists(name_or_path)) return load(std::string(name_or_path));
  std::string presets;
  for (std::string_view preset : topology_presets()) presets += std::string(preset) + ", ";
  const bool a_path = name_or_path.find('/') != std::string_view::npos || name_or_path.ends_with(".json");
  throw std::invalid_argument("unknown topology '" + std::string(name_or_path) + "'" +
                              (a_path ? ": no such file" : "") + " (a preset: " + presets + "or a JSON file)");
}

}  // namespace labkit
