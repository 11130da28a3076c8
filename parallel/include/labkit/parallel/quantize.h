// Block-wise quantization, the wire format of ZeRO++ (Wang et al. 2023): int8
// for its quantized weight gathers (qwZ, section 3.1), int4 for its quantized
// gradient reduce (qgZ, section 3.3). A run of floats goes in blocks of
// kQuantBlock, each block with one fp32 scale, its largest magnitude / qmax,
// and its values as round(x / scale) in [-qmax, qmax]: qmax 127 at 8 bits (a
// byte each), 7 at 4 bits (two to a byte, the even index in the low nibble). A
// scale per block, not per tensor, keeps one large value from flattening every
// small one to zero. The kernels are device ops (labkit/ops.h's quantize and
// dequantize), run where the buffers live.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "labkit/ops.h"

namespace labkit {

inline constexpr std::size_t kQuantBlock = ops::kQuantBlock;

// The bytes `count` floats take quantized to `bits` (8 or 4): the scales, then the values.
std::size_t quantized_bytes(std::size_t count, int bits);
// On the device that holds x (and out): host memory, a GPU's or the fenced device's.
void quantize(std::span<const float> x, std::span<std::uint8_t> out, int bits);
void dequantize(std::span<const std::uint8_t> in, std::span<float> x, int bits);

}  // namespace labkit
