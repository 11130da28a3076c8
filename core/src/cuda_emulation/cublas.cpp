// cuBLAS for the CPU's CUDA (include/cuda_runtime.h): the three functions
// labkit calls, by OpenBLAS. A shared library, opened at the first matmul as
// the real one is (cublas_library.cpp), so the asan build checks that path too;
// a matmul runs in its handle's stream's order, as cuBLAS's kernels do.
#include <cblas.h>
#include <cublas_v2.h>

struct cublasContext {
  cudaStream_t stream = cudaStreamLegacy;
};

extern "C" {

// OpenBLAS on one thread, as labkit's CPU ops keep it (ops.cpp): its idle
// threads spin on sched_yield between the small matmuls and take a core from
// whatever else runs (a rank's other ops, another test).
cublasStatus_t cublasCreate_v2(cublasHandle_t* handle) {
  openblas_set_num_threads(1);
  *handle = new cublasContext;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetStream_v2(cublasHandle_t handle, cudaStream_t stream) {
  handle->stream = stream;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSgemm_v2(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n,
                              int k, const float* alpha, const float* A, int lda, const float* B, int ldb,
                              const float* beta, float* C, int ldc) {
  if (m < 0 || n < 0 || k < 0) return CUBLAS_STATUS_INVALID_VALUE;
  if (m == 0 || n == 0) return CUBLAS_STATUS_SUCCESS;
  const auto op = [](cublasOperation_t t) { return t == CUBLAS_OP_T ? CblasTrans : CblasNoTrans; };
  // alpha and beta are host values, read at the call (cuBLAS's host pointer mode).
  labkit::cuda_emulation::issue(handle->stream, [=, a = *alpha, b = *beta] {
    cblas_sgemm(CblasColMajor, op(transa), op(transb), m, n, k, a, A, lda, B, ldb, b, C, ldc);
  });
  return CUBLAS_STATUS_SUCCESS;
}

}  // extern "C"
