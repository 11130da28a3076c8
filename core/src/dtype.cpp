#include "labkit/dtype.h"

#include "labkit/device.h"
#include "labkit/error.h"

#include <algorithm>
#include <array>
#include <stdexcept>
#include <string>

namespace labkit {

namespace {
constexpr std::array kDTypeNames = {"f32", "f64", "i32", "i64", "bf16", "u8"};
constexpr std::array kOpNames = {"sum", "prod", "min", "max", "avg"};

template <class T>
void reduce_typed(ReduceOp op, const T* in, T* inout, std::size_t n) {
  switch (op) {
    case ReduceOp::sum:
    case ReduceOp::avg:  // summed here, divided once at the end (divide_local)
      for (std::size_t i = 0; i < n; ++i) inout[i] += in[i];
      return;
    case ReduceOp::prod:
      for (std::size_t i = 0; i < n; ++i) inout[i] *= in[i];
      return;
    case ReduceOp::min:
      for (std::size_t i = 0; i < n; ++i) inout[i] = std::min(inout[i], in[i]);
      return;
    case ReduceOp::max:
      for (std::size_t i = 0; i < n; ++i) inout[i] = std::max(inout[i], in[i]);
      return;
  }
}

template <class T>
void divide_typed(T* inout, std::size_t n, int divisor) {
  for (std::size_t i = 0; i < n; ++i) inout[i] /= static_cast<T>(divisor);
}

// bf16 in float: a block at a time widened, computed by the float code above,
// and rounded back once per element (see reduce_local in dtype.h).
constexpr std::size_t kBf16Block = 256;

template <class Compute>
void in_float(bfloat16* inout, std::size_t n, Compute compute) {
  float wide[kBf16Block];
  for (std::size_t start = 0; start < n; start += kBf16Block) {
    const std::size_t m = std::min(kBf16Block, n - start);
    for (std::size_t i = 0; i < m; ++i) wide[i] = to_float(inout[start + i]);
    compute(wide, start, m);
    for (std::size_t i = 0; i < m; ++i) inout[start + i] = to_bf16(wide[i]);
  }
}

void reduce_bf16(ReduceOp op, const bfloat16* in, bfloat16* inout, std::size_t n) {
  in_float(inout, n, [&](float* wide, std::size_t start, std::size_t m) {
    float incoming[kBf16Block];
    for (std::size_t i = 0; i < m; ++i) incoming[i] = to_float(in[start + i]);
    reduce_typed(op, incoming, wide, m);
  });
}

void divide_bf16(bfloat16* inout, std::size_t n, int divisor) {
  in_float(inout, n, [&](float* wide, std::size_t, std::size_t m) { divide_typed(wide, m, divisor); });
}
}  // namespace

std::size_t size_of(DType dtype) {
  switch (dtype) {
    case DType::u8: return 1;
    case DType::bf16: return 2;
    case DType::f32: case DType::i32: return 4;
    case DType::f64: case DType::i64: return 8;
  }
  return 0;
}

std::string_view name_of(DType dtype) { return kDTypeNames[static_cast<int>(dtype)]; }
std::string_view name_of(ReduceOp op) { return kOpNames[static_cast<int>(op)]; }

DType parse_dtype(std::string_view name) {
  for (std::size_t i = 0; i < kDTypeNames.size(); ++i)
    if (name == kDTypeNames[i]) return static_cast<DType>(i);
  throw std::invalid_argument("unknown dtype '" + std::string(name) + "' (f32, f64, i32, i64, bf16, u8)");
}

ReduceOp parse_reduce_op(std::string_view name) {
  for (std::size_t i = 0; i < kOpNames.size(); ++i)
    if (name == kOpNames[i]) return static_cast<ReduceOp>(i);
  throw std::invalid_argument("unknown reduce op '" + std::string(name) + "' (sum, prod, min, max, avg)");
}

void reduce_local(ReduceOp op, DType dtype, const void* in, void* inout, std::size_t count) {
  if (!in != !inout && count > 0)
    throw Error(fmt::format("reduce_local: {} is a null pointer (a view with no data, such as an empty "
                            "std::vector's) while {} holds {} values of {}: nothing would be reduced",
                            in ? "inout" : "in", in ? "in" : "inout", count, name_of(dtype)));
  if (!in || !inout) return;
  device_of(inout, in).reduce(op, dtype, in, inout, count);
}

void reduce_on_host(ReduceOp op, DType dtype, const void* in, void* inout, std::size_t count) {
  switch (dtype) {
    case DType::f32: return reduce_typed(op, static_cast<const float*>(in), static_cast<float*>(inout), count);
    case DType::f64: return reduce_typed(op, static_cast<const double*>(in), static_cast<double*>(inout), count);
    case DType::i32: return reduce_typed(op, static_cast<const std::int32_t*>(in), static_cast<std::int32_t*>(inout), count);
    case DType::i64: return reduce_typed(op, static_cast<const std::int64_t*>(in), static_cast<std::int64_t*>(inout), count);
    case DType::bf16: return reduce_bf16(op, static_cast<const bfloat16*>(in), static_cast<bfloat16*>(inout), count);
    case DType::u8: return reduce_typed(op, static_cast<const std::uint8_t*>(in), static_cast<std::uint8_t*>(inout), count);
  }
}

void divide_local(DType dtype, void* inout, std::size_t count, int divisor) {
  if (inout) device_of(inout).divide(dtype, inout, count, divisor);
}

void divide_on_host(DType dtype, void* inout, std::size_t count, int divisor) {
  switch (dtype) {
    case DType::f32: return divide_typed(static_cast<float*>(inout), count, divisor);
    case DType::f64: return divide_typed(static_cast<double*>(inout), count, divisor);
    case DType::i32: return divide_typed(static_cast<std::int32_t*>(inout), count, divisor);
    case DType::i64: return divide_typed(static_cast<std::int64_t*>(inout), count, divisor);
    case DType::bf16: return divide_bf16(static_cast<bfloat16*>(inout), count, divisor);
    case DType::u8: return divide_typed(static_cast<std::uint8_t*>(inout), count, divisor);
  }
}

double load_element(DType dtype, const void* data, std::size_t i) {
  switch (dtype) {
    case DType::f32: return static_cast<const float*>(data)[i];
    case DType::f64: return static_cast<const double*>(data)[i];
    case DType::i32: return static_cast<const std::int32_t*>(data)[i];
    case DType::i64: return double(static_cast<const std::int64_t*>(data)[i]);
    case DType::bf16: return to_float(static_cast<const bfloat16*>(data)[i]);
    case DType::u8: return static_cast<const std::uint8_t*>(data)[i];
  }
  return 0;
}

void store_element(DType dtype, void* data, std::size_t i, double value) {
  switch (dtype) {
    case DType::f32: static_cast<float*>(data)[i] = float(value); return;
    case DType::f64: static_cast<double*>(data)[i] = value; return;
    case DType::i32: static_cast<std::int32_t*>(data)[i] = std::int32_t(value); return;
    case DType::i64: static_cast<std::int64_t*>(data)[i] = std::int64_t(value); return;
    case DType::bf16: static_cast<bfloat16*>(data)[i] = to_bf16(float(value)); return;
    case DType::u8: static_cast<std::uint8_t*>(data)[i] = std::uint8_t(value); return;
  }
}

}  // namespace labkit
