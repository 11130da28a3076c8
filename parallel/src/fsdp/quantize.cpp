#include "labkit/parallel/quantize.h"

#include <fmt/format.h>

#include "labkit/device.h"
#include "labkit/error.h"

namespace labkit {

namespace {
void check_size(std::size_t bytes, std::size_t count, int bits, const char* what) {
  if (bytes < quantized_bytes(count, bits))
    throw Error(fmt::format("{}: {} floats take {} bytes at {} bits; the buffer holds {}", what, count,
                            quantized_bytes(count, bits), bits, bytes));
}
}  // namespace

std::size_t quantized_bytes(std::size_t count, int bits) {
  const std::size_t blocks = (count + kQuantBlock - 1) / kQuantBlock;
  return blocks * sizeof(float) + (count * std::size_t(bits) + 7) / 8;
}

void quantize(std::span<const float> x, std::span<std::uint8_t> out, int bits) {
  check_size(out.size(), x.size(), bits, "quantize");
  device_of(x.data(), out.data()).quantize(out.data(), x.data(), long(x.size()), bits);
}

void dequantize(std::span<const std::uint8_t> in, std::span<float> x, int bits) {
  check_size(in.size(), x.size(), bits, "dequantize");
  device_of(x.data(), in.data()).dequantize(x.data(), in.data(), long(x.size()), bits);
}

}  // namespace labkit
