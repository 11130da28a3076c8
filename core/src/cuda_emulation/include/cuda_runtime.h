// The CUDA that labkit's CUDA files use, on the CPU: what CI has instead of a
// GPU. The asan build compiles those files as C++ over these headers, so every
// kernel runs on the host under AddressSanitizer and UBSan (a read past a
// buffer's end, which a GPU lets pass silently, stops the test), and
// ops_cuda_test compares each with its CPU op there as on a GPU.
//
// A kernel's threads run one at a time, on fibers (cuda_emulation.cpp): a
// warp's shuffle or __syncwarp waits for the warp's other lanes, __syncthreads
// for the block, and a lane that waits where one of its warp has returned
// stops the program, as a full-mask warp op is undefined then.
//
// A stream made by cudaStreamCreate keeps the work issued to it (kernels,
// copies, memsets, cuBLAS's matmuls, host functions) until something waits for
// it: a cudaStreamSynchronize of it, or any work on the legacy default stream
// (cudaStreamLegacy, or none named), which first runs every stream's work so
// far, the last stream made first, as CUDA orders the legacy stream after all
// of theirs. So work that reads what another stream wrote, with nothing to
// order the two, reads it before it is written, as it may on a GPU. A copy to
// the host waits until its stream is waited for (CUDA, copying to pageable
// memory, may finish it before returning: the stricter order here).
//
// Not emulated: the GPU's speed. A race between threads shows only where the
// order they run in gives a wrong answer: between barriers, thread 0 first, or
// the last first with LABKIT_CUDA_THREAD_ORDER=reverse (blocks too), so that a
// test run both ways sees a read that comes before its write in either direction.
#pragma once

#include <math.h>
#include <string.h>  // memcpy, which device code has, as the host

#include <bit>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <utility>

// Device code is host code here; a block's shared memory is a static, as one
// block runs at a time.
#define __global__
#define __device__
#define __host__
#define __shared__ static

struct dim3 {
  unsigned x = 1, y = 1, z = 1;
  constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};

// The running thread's coordinates, set as each thread's fiber is resumed
// (cuda_emulation.cpp, a shared library as CUDA's runtime is).
extern thread_local dim3 threadIdx, blockIdx, blockDim, gridDim;

// Device functions.
float __shfl_xor_sync(unsigned mask, float value, int lane_mask);
void __syncwarp(unsigned mask = 0xffffffffu);
void __syncthreads();
inline float atomicAdd(float* at, float value) { return std::exchange(*at, *at + value); }
inline double atomicAdd(double* at, double value) { return std::exchange(*at, *at + value); }
inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
inline unsigned __float_as_uint(float x) { return std::bit_cast<unsigned>(x); }
inline float __uint_as_float(unsigned x) { return std::bit_cast<float>(x); }
template <class T> T min(T a, T b) { return b < a ? b : a; }
template <class T> T max(T a, T b) { return a < b ? b : a; }

// The runtime.
enum cudaError { cudaSuccess = 0, cudaErrorInvalidValue = 1, cudaErrorMemoryAllocation = 2 };
using cudaError_t = cudaError;
using cudaStream_t = struct CUstream_st*;
#define cudaStreamLegacy (reinterpret_cast<cudaStream_t>(0x1))
enum cudaMemcpyKind {
  cudaMemcpyHostToHost,
  cudaMemcpyHostToDevice,
  cudaMemcpyDeviceToHost,
  cudaMemcpyDeviceToDevice,
  cudaMemcpyDefault
};

cudaError_t cudaGetDeviceCount(int* count);
cudaError_t cudaMalloc(void** p, std::size_t bytes);
template <class T> cudaError_t cudaMalloc(T** p, std::size_t bytes) { return cudaMalloc(reinterpret_cast<void**>(p), bytes); }
cudaError_t cudaFree(void* p);
cudaError_t cudaMemcpy(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind);
cudaError_t cudaMemcpyAsync(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind, cudaStream_t stream);
cudaError_t cudaMemsetAsync(void* p, int value, std::size_t bytes, cudaStream_t stream);
cudaError_t cudaStreamCreate(cudaStream_t* stream);
cudaError_t cudaStreamSynchronize(cudaStream_t stream);
cudaError_t cudaDeviceSynchronize();
using cudaHostFn_t = void (*)(void* user_data);
cudaError_t cudaLaunchHostFunc(cudaStream_t stream, cudaHostFn_t fn, void* user_data);
const char* cudaGetErrorString(cudaError_t error);

struct cudaLaunchConfig_t {
  dim3 gridDim, blockDim;
  cudaStream_t stream = nullptr;
};

namespace labkit::cuda_emulation {
// Runs work in stream order (above): now on the legacy stream, after every
// made stream's work so far; else when something waits for the stream.
void issue(cudaStream_t stream, std::function<void()> work);
// A launch's grid and block as CUDA checks them when it is issued.
cudaError_t check_launch(dim3 grid, dim3 block);
// Runs thread(context) for every thread of the grid, block by block.
void run_grid(dim3 grid, dim3 block, void (*thread)(void* context), void* context);
}  // namespace labkit::cuda_emulation

// As CUDA's: the arguments convert to the kernel's parameter types first, and
// the kernel runs in its stream's order, with the arguments it was given.
template <class... Params, class... Args>
cudaError_t cudaLaunchKernelEx(const cudaLaunchConfig_t* config, void (*kernel)(Params...), Args&&... args) {
  if (const cudaError_t e = labkit::cuda_emulation::check_launch(config->gridDim, config->blockDim); e != cudaSuccess)
    return e;
  [&](Params... converted) {
    labkit::cuda_emulation::issue(
        config->stream, [kernel, grid = config->gridDim, block = config->blockDim, ... converted = converted] {
          auto thread = [&] { kernel(converted...); };
          using Thread = decltype(thread);
          labkit::cuda_emulation::run_grid(grid, block, [](void* t) { (*static_cast<Thread*>(t))(); }, &thread);
        });
  }(std::forward<Args>(args)...);
  return cudaSuccess;
}
