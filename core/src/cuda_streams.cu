// The CUDA stream and cuBLAS handle a simulated rank's ops go to. One process's
// ranks share the GPU; on one stream each rank's kernels would queue behind the
// others', and a kernel too small to fill the GPU would leave it part idle. So
// each rank issues on a stream of its own, and kernels of different ranks may
// run at once:
//   - the ops of one rank keep their order (one stream);
//   - data that crosses ranks moves by the device's copy and reduce (the
//     simulator's deliveries and native collectives), issued on the legacy
//     default stream, which waits for all earlier work of every rank's stream
//     and which every rank's later work waits for (CUDA's legacy stream semantics,
//     with streams made by cudaStreamCreate): what a rank reads after a
//     collective was written before it.
// A process of one rank (issuing_rank() -1) issues everything on the legacy stream.
// Each rank has its own cuBLAS handle: a handle's workspace is shared by its
// calls, which on two streams may run at once.
#include <deque>
#include <mutex>

#include "cuda_support.h"
#include "labkit/device.h"

namespace labkit::cuda_launch {

namespace {

struct Lane {
  cudaStream_t stream = cudaStreamLegacy;
  cublasHandle_t blas = nullptr;  // made at the rank's first matmul, when cuBLAS is opened
};

std::mutex lanes_lock;

// Lane r + 1 is rank r's; lane 0 the legacy stream's. Never destroyed, as the
// caching allocator's blocks (a static tensor may release at exit).
Lane& lane(int rank) {
  static auto* lanes = new std::deque<Lane>;
  while (int(lanes->size()) <= rank + 1) {
    Lane made;
    if (!lanes->empty()) check_cuda(cudaStreamCreate(&made.stream), "cudaStreamCreate for a simulated rank");
    lanes->push_back(made);
  }
  return (*lanes)[std::size_t(rank + 1)];
}

}  // namespace

cudaStream_t stream() {
  std::lock_guard guard(lanes_lock);
  return lane(issuing_rank()).stream;
}

cublasHandle_t blas() {
  std::lock_guard guard(lanes_lock);
  Lane& l = lane(issuing_rank());
  if (l.blas) return l.blas;
  cublasHandle_t made = nullptr;
  if (cublas().create(&made) != CUBLAS_STATUS_SUCCESS || cublas().set_stream(made, l.stream) != CUBLAS_STATUS_SUCCESS)
    throw std::runtime_error("cublas: cannot create a handle");
  return l.blas = made;
}

}  // namespace labkit::cuda_launch
