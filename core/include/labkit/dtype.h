// Element types and reduction operators, as NCCL names them (ncclFloat32, ncclSum, ...).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace labkit {

enum class DType { f32, f64, i32, i64 };
enum class ReduceOp { sum, prod, min, max, avg };

std::size_t size_of(DType dtype);
std::string_view name_of(DType dtype);
std::string_view name_of(ReduceOp op);
DType parse_dtype(std::string_view name);      // throws on an unknown name
ReduceOp parse_reduce_op(std::string_view name);

template <class T> constexpr DType dtype_of();
template <> constexpr DType dtype_of<float>() { return DType::f32; }
template <> constexpr DType dtype_of<double>() { return DType::f64; }
template <> constexpr DType dtype_of<std::int32_t>() { return DType::i32; }
template <> constexpr DType dtype_of<std::int64_t>() { return DType::i64; }

// inout[i] = op(inout[i], in[i]) for i < count. avg is not an elementwise operator:
// the Comm runs an avg collective as sum and then calls divide_local (as NCCL does).
// Null pointers are a payload-free run (sizes only): nothing to compute.
void reduce_local(ReduceOp op, DType dtype, const void* in, void* inout, std::size_t count);
void divide_local(DType dtype, void* inout, std::size_t count, int divisor);

}  // namespace labkit
