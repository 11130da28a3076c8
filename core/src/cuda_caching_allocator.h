// GPU memory for the "cuda" Device, kept once allocated (cuda_caching_allocator.cu).
#pragma once

#include <cstddef>

namespace labkit::cuda_memory {

void* allocate(std::size_t bytes);  // zero-filled, in stream order
void release(void* p);              // back to the cache, not to CUDA
bool holds(const void* p);          // p points into a block this cache allocated

}  // namespace labkit::cuda_memory
