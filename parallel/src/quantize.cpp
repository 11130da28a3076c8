#include "labkit/parallel/quantize.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace labkit {

namespace {
std::size_t blocks_of(std::size_t count) { return (count + kQuantBlock - 1) / kQuantBlock; }
}  // namespace

std::size_t quantized_bytes(std::size_t count) { return blocks_of(count) * sizeof(float) + count; }

void quantize_int8(std::span<const float> x, std::span<std::uint8_t> out) {
  std::uint8_t* values = out.data() + blocks_of(x.size()) * sizeof(float);
  for (std::size_t b = 0; b < blocks_of(x.size()); ++b) {
    const std::size_t begin = b * kQuantBlock, end = std::min(x.size(), begin + kQuantBlock);
    float largest = 0;
    for (std::size_t i = begin; i < end; ++i) largest = std::max(largest, std::abs(x[i]));
    const float scale = largest / 127;
    std::memcpy(out.data() + b * sizeof(float), &scale, sizeof scale);
    for (std::size_t i = begin; i < end; ++i)
      values[i] = std::uint8_t(std::int8_t(scale > 0 ? std::lround(x[i] / scale) : 0));
  }
}

void dequantize_int8(std::span<const std::uint8_t> in, std::span<float> x) {
  const std::uint8_t* values = in.data() + blocks_of(x.size()) * sizeof(float);
  for (std::size_t b = 0; b < blocks_of(x.size()); ++b) {
    float scale;
    std::memcpy(&scale, in.data() + b * sizeof(float), sizeof scale);
    const std::size_t begin = b * kQuantBlock, end = std::min(x.size(), begin + kQuantBlock);
    for (std::size_t i = begin; i < end; ++i) x[i] = float(std::int8_t(values[i])) * scale;
  }
}

}  // namespace labkit
