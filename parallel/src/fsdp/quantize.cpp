#include "labkit/parallel/quantize.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace labkit {

namespace {

std::size_t blocks_of(std::size_t count) { return (count + kQuantBlock - 1) / kQuantBlock; }
int largest_level(int bits) { return (1 << (bits - 1)) - 1; }  // 127, 7: symmetric, so that 0 stays exactly 0

// Value i's signed level, stored at `bits` bits after the scales.
void put(std::uint8_t* values, std::size_t i, int level, int bits) {
  if (bits == 8) {
    values[i] = std::uint8_t(std::int8_t(level));
    return;
  }
  const int shift = i % 2 ? 4 : 0;
  values[i / 2] = std::uint8_t((values[i / 2] & ~(0xF << shift)) | ((level & 0xF) << shift));
}

int get(const std::uint8_t* values, std::size_t i, int bits) {
  if (bits == 8) return std::int8_t(values[i]);
  const int nibble = (values[i / 2] >> (i % 2 ? 4 : 0)) & 0xF;
  return nibble >= 8 ? nibble - 16 : nibble;  // sign-extend the 4 bits
}

}  // namespace

std::size_t quantized_bytes(std::size_t count, int bits) {
  return blocks_of(count) * sizeof(float) + (count * std::size_t(bits) + 7) / 8;
}

void quantize(std::span<const float> x, std::span<std::uint8_t> out, int bits) {
  std::uint8_t* values = out.data() + blocks_of(x.size()) * sizeof(float);
  const float levels = float(largest_level(bits));
  for (std::size_t b = 0; b < blocks_of(x.size()); ++b) {
    const std::size_t begin = b * kQuantBlock, end = std::min(x.size(), begin + kQuantBlock);
    float largest = 0;
    for (std::size_t i = begin; i < end; ++i) largest = std::max(largest, std::abs(x[i]));
    const float scale = largest / levels;
    std::memcpy(out.data() + b * sizeof(float), &scale, sizeof scale);
    for (std::size_t i = begin; i < end; ++i) put(values, i, scale > 0 ? int(std::lround(x[i] / scale)) : 0, bits);
  }
}

void dequantize(std::span<const std::uint8_t> in, std::span<float> x, int bits) {
  const std::uint8_t* values = in.data() + blocks_of(x.size()) * sizeof(float);
  for (std::size_t b = 0; b < blocks_of(x.size()); ++b) {
    float scale;
    std::memcpy(&scale, in.data() + b * sizeof(float), sizeof scale);
    const std::size_t begin = b * kQuantBlock, end = std::min(x.size(), begin + kQuantBlock);
    for (std::size_t i = begin; i < end; ++i) x[i] = float(get(values, i, bits)) * scale;
  }
}

}  // namespace labkit
