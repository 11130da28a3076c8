// Block-wise int8 quantization, the wire format of ZeRO++'s quantized weight
// gathers (qwZ; Wang et al. 2023, section 3.1): a run of floats in blocks of
// kQuantBlock, each block with one fp32 scale, its largest magnitude / 127,
// and its values as round(x / scale) in [-127, 127]. A scale per block, not
// per tensor, keeps one large value from flattening every small one to zero.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace labkit {

inline constexpr std::size_t kQuantBlock = 64;

// The bytes `count` floats take quantized: the scales, then one byte per value.
std::size_t quantized_bytes(std::size_t count);
void quantize_int8(std::span<const float> x, std::span<std::uint8_t> out);
void dequantize_int8(std::span<const std::uint8_t> in, std::span<float> x);

}  // namespace labkit
