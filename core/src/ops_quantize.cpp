// ZeRO++'s block-wise quantization on the CPU (labkit/ops.h).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "labkit/ops.h"

namespace labkit::ops {

namespace {

long blocks_of(long count) { return (count + kQuantBlock - 1) / kQuantBlock; }
int largest_level(int bits) { return (1 << (bits - 1)) - 1; }  // 127, 7: symmetric, so that 0 stays exactly 0

// Value i's signed level, stored at `bits` bits after the scales.
void put(unsigned char* values, long i, int level, int bits) {
  if (bits == 8) {
    values[i] = std::uint8_t(std::int8_t(level));
    return;
  }
  const int shift = i % 2 ? 4 : 0;
  values[i / 2] = std::uint8_t((values[i / 2] & ~(0xF << shift)) | ((level & 0xF) << shift));
}

int get(const unsigned char* values, long i, int bits) {
  if (bits == 8) return std::int8_t(values[i]);
  const int nibble = (values[i / 2] >> (i % 2 ? 4 : 0)) & 0xF;
  return nibble >= 8 ? nibble - 16 : nibble;  // sign-extend the 4 bits
}

}  // namespace

void quantize(unsigned char* out, const float* x, long count, int bits) {
  unsigned char* values = out + blocks_of(count) * long(sizeof(float));
  const float levels = float(largest_level(bits));
  for (long b = 0; b < blocks_of(count); ++b) {
    const long begin = b * kQuantBlock, end = std::min(count, begin + kQuantBlock);
    float largest = 0;
    for (long i = begin; i < end; ++i) largest = std::max(largest, std::abs(x[i]));
    const float scale = largest / levels;
    std::memcpy(out + b * long(sizeof(float)), &scale, sizeof scale);
    for (long i = begin; i < end; ++i) put(values, i, scale > 0 ? int(std::lround(x[i] / scale)) : 0, bits);
  }
}

void dequantize(float* x, const unsigned char* in, long count, int bits) {
  const unsigned char* values = in + blocks_of(count) * long(sizeof(float));
  for (long b = 0; b < blocks_of(count); ++b) {
    float scale;
    std::memcpy(&scale, in + b * long(sizeof(float)), sizeof scale);
    const long begin = b * kQuantBlock, end = std::min(count, begin + kQuantBlock);
    for (long i = begin; i < end; ++i) x[i] = float(get(values, i, bits)) * scale;
  }
}

}  // namespace labkit::ops
