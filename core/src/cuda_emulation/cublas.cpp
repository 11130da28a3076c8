// cuBLAS for the CPU's CUDA (include/cuda_runtime.h): the three functions
// labkit calls, by OpenBLAS. A shared library, opened at the first matmul as
// the real one is (cublas_library.cpp), so the asan build checks that path too.
#include <cblas.h>
#include <cublas_v2.h>

extern "C" {

cublasStatus_t cublasCreate_v2(cublasHandle_t* handle) {
  static int handles = 0;  // a tag: the handle holds nothing here
  *handle = reinterpret_cast<cublasHandle_t>(&handles);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetStream_v2(cublasHandle_t, cudaStream_t) { return CUBLAS_STATUS_SUCCESS; }

cublasStatus_t cublasSgemm_v2(cublasHandle_t, cublasOperation_t transa, cublasOperation_t transb, int m, int n, int k,
                              const float* alpha, const float* A, int lda, const float* B, int ldb, const float* beta,
                              float* C, int ldc) {
  if (m < 0 || n < 0 || k < 0) return CUBLAS_STATUS_INVALID_VALUE;
  if (m == 0 || n == 0) return CUBLAS_STATUS_SUCCESS;
  const auto op = [](cublasOperation_t t) { return t == CUBLAS_OP_T ? CblasTrans : CblasNoTrans; };
  cblas_sgemm(CblasColMajor, op(transa), op(transb), m, n, k, *alpha, A, lda, B, ldb, *beta, C, ldc);
  return CUBLAS_STATUS_SUCCESS;
}

}  // extern "C"
