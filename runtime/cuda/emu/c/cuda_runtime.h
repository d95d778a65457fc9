/* cuda_runtime.h of the CUDA emulator, for C sources: the runtime API's
 * types (shared with cuda_emu.h, which includes this file) and, in C, the
 * part of the API that runtime/cuda/comm_nccl.c calls. A C program built
 * against the emulator also links the real libcudart (libshardrt's NCCL
 * backend needs it), so the C names are macros for emuc_* functions (C
 * linkage, defined in cuda_emu.cpp) rather than cudart's own symbols.
 */
#ifndef SR_EMU_C_CUDA_RUNTIME_H
#define SR_EMU_C_CUDA_RUNTIME_H

#include <stddef.h>

typedef enum cudaError_t {
    cudaSuccess = 0,
    cudaErrorInvalidValue = 1,
    cudaErrorMemoryAllocation = 2,
    cudaErrorInvalidConfiguration = 9,
    cudaErrorInvalidDevice = 101,
    cudaErrorNoDevice = 100,
    cudaErrorLaunchFailure = 719,
    cudaErrorNotReady = 600
} cudaError_t;
typedef enum cudaMemcpyKind {
    cudaMemcpyHostToHost = 0,
    cudaMemcpyHostToDevice = 1,
    cudaMemcpyDeviceToHost = 2,
    cudaMemcpyDeviceToDevice = 3,
    cudaMemcpyDefault = 4
} cudaMemcpyKind;
enum { cudaStreamNonBlocking = 1, cudaStreamDefault = 0, cudaEventDisableTiming = 2, cudaEventDefault = 0 };

typedef struct CUstream_st *cudaStream_t;
typedef struct CUevent_st *cudaEvent_t;

#ifdef __cplusplus
extern "C" {
#endif
const char *emuc_cudaGetErrorString(cudaError_t e);
cudaError_t emuc_cudaGetLastError(void);
cudaError_t emuc_cudaGetDeviceCount(int *n);
cudaError_t emuc_cudaSetDevice(int d);
cudaError_t emuc_cudaDeviceGetPCIBusId(char *bus, int len, int d);
cudaError_t emuc_cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags);
cudaError_t emuc_cudaStreamDestroy(cudaStream_t s);
cudaError_t emuc_cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned flags);
cudaError_t emuc_cudaEventCreateWithFlags(cudaEvent_t *e, unsigned flags);
cudaError_t emuc_cudaEventDestroy(cudaEvent_t e);
cudaError_t emuc_cudaEventRecord(cudaEvent_t e, cudaStream_t s);
cudaError_t emuc_cudaEventQuery(cudaEvent_t e);
#ifdef __cplusplus
}
#else
#define cudaGetErrorString emuc_cudaGetErrorString
#define cudaGetLastError emuc_cudaGetLastError
#define cudaGetDeviceCount emuc_cudaGetDeviceCount
#define cudaSetDevice emuc_cudaSetDevice
#define cudaDeviceGetPCIBusId emuc_cudaDeviceGetPCIBusId
#define cudaStreamCreateWithFlags emuc_cudaStreamCreateWithFlags
#define cudaStreamDestroy emuc_cudaStreamDestroy
#define cudaStreamWaitEvent emuc_cudaStreamWaitEvent
#define cudaEventCreateWithFlags emuc_cudaEventCreateWithFlags
#define cudaEventDestroy emuc_cudaEventDestroy
#define cudaEventRecord emuc_cudaEventRecord
#define cudaEventQuery emuc_cudaEventQuery
#endif

#endif /* SR_EMU_C_CUDA_RUNTIME_H */
