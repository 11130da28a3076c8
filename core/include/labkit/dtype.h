// Element types and reduction operators, as NCCL names them (ncclFloat32, ncclSum, ...).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

namespace labkit {

enum class DType { f32, f64, i32, i64, bf16, u8 };  // u8: raw bytes (quantized payloads)
enum class ReduceOp { sum, prod, min, max, avg };

std::size_t size_of(DType dtype);
std::string_view name_of(DType dtype);
std::string_view name_of(ReduceOp op);
DType parse_dtype(std::string_view name);      // throws on an unknown name
ReduceOp parse_reduce_op(std::string_view name);

// bfloat16, NCCL's ncclBfloat16: the top half of a float (sign, the same 8
// exponent bits, 7 of its 23 mantissa bits), so float's range with 8 bits of
// precision (about 3 decimal digits). Training keeps weights and gradients in it
// to halve memory and the bytes an allreduce moves.
struct bfloat16 {
  std::uint16_t bits;
};

// (memcpy, not std::bit_cast: nvcc compiles this header too, as C++17.)
inline float to_float(bfloat16 x) {
  const std::uint32_t bits = std::uint32_t(x.bits) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

// Round to nearest, ties to even (what __float2bfloat16 and PyTorch do): add
// just under half of the dropped part's unit, plus one if the kept part is odd,
// and cut. A NaN stays NaN (cutting could leave only zeros, an infinity), so it
// keeps its sign and gets the quiet bit; a finite value past the largest bf16
// rounds to infinity, as IEEE rounding does.
inline bfloat16 to_bf16(float x) {
  std::uint32_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  if (x != x) return {std::uint16_t((bits >> 16) | 0x0040)};
  const std::uint32_t odd = (bits >> 16) & 1;
  return {std::uint16_t((bits + 0x7FFF + odd) >> 16)};
}

template <class T> constexpr DType dtype_of();
template <> constexpr DType dtype_of<float>() { return DType::f32; }
template <> constexpr DType dtype_of<double>() { return DType::f64; }
template <> constexpr DType dtype_of<std::int32_t>() { return DType::i32; }
template <> constexpr DType dtype_of<std::int64_t>() { return DType::i64; }
template <> constexpr DType dtype_of<bfloat16>() { return DType::bf16; }
template <> constexpr DType dtype_of<std::uint8_t>() { return DType::u8; }

// inout[i] = op(inout[i], in[i]) for i < count. avg is not an elementwise operator:
// the Comm runs an avg collective as sum and then calls divide_local (as NCCL does).
// Null pointers are a payload-free run (sizes only): nothing to compute. One
// null beside real data is a view with no data in a run that carries payloads
// (an empty std::vector's data()), which would drop the reduction unseen: an Error.
// bf16 is computed in float and rounded once per element (to_bf16), as NCCL's
// reduction does: one bf16 add on sm_80 and newer (__hadd2), a float add then
// __float2bfloat16 before; either way each step's partial result is stored,
// and sent on, in bf16. Adding in float and rounding once gives the correctly
// rounded bf16 sum (float's 24 bits are enough for the double rounding to be
// harmless), where adding in 8-bit arithmetic would lose bits on every step.
// Either buffer on a device sends the call there (device_of), which refuses
// the other where it is host memory.
void reduce_local(ReduceOp op, DType dtype, const void* in, void* inout, std::size_t count);
void divide_local(DType dtype, void* inout, std::size_t count, int divisor);
// The same on host memory: the CPU device's, and the fenced device's inside its fence.
void reduce_on_host(ReduceOp op, DType dtype, const void* in, void* inout, std::size_t count);
void divide_on_host(DType dtype, void* inout, std::size_t count, int divisor);

// Element i of a buffer of dtype, read as a double or written from one (rounded
// to the dtype): for checks and printing, where the element type is data.
double load_element(DType dtype, const void* data, std::size_t i);
void store_element(DType dtype, void* data, std::size_t i, double value);

}  // namespace labkit
