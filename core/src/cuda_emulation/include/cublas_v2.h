// cuBLAS's declarations that labkit uses, for the CPU's CUDA (cuda_runtime.h
// beside this). The library itself is libcublas_emulation.so (cublas.cpp),
// opened at the first matmul as the real one is (cublas_library.cpp).
#pragma once

#include "cuda_runtime.h"

using cublasHandle_t = struct cublasContext*;
enum cublasStatus_t { CUBLAS_STATUS_SUCCESS = 0, CUBLAS_STATUS_INVALID_VALUE = 7 };
enum cublasOperation_t { CUBLAS_OP_N = 0, CUBLAS_OP_T = 1 };

extern "C" {
cublasStatus_t cublasCreate_v2(cublasHandle_t* handle);
cublasStatus_t cublasSetStream_v2(cublasHandle_t handle, cudaStream_t stream);
cublasStatus_t cublasSgemm_v2(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n,
                              int k, const float* alpha, const float* A, int lda, const float* B, int ldb,
                              const float* beta, float* C, int ldc);
}
