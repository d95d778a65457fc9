/* nccl.h of the CUDA emulator: the NCCL API that runtime/cuda/comm_nccl.c
 * uses, implemented over MPI by emu/nccl_emu.cpp, so that the NCCL backend's
 * own code runs in tests without a GPU. The names are macros for emu_nccl*
 * functions (C linkage) so that they never meet the real libnccl that
 * libshardrt links. NCCL 2.14's non-blocking communicators are what it
 * emulates (NCCL_VERSION_CODE says so). See docs/cuda.md.
 */
#ifndef SR_EMU_NCCL_H
#define SR_EMU_NCCL_H

#include "cuda_runtime.h"

#define NCCL_VERSION(X, Y, Z) (((X) <= 2 && (Y) <= 8) ? (X) * 1000 + (Y) * 100 + (Z) : (X) * 10000 + (Y) * 100 + (Z))
#define NCCL_VERSION_CODE NCCL_VERSION(2, 18, 0)

typedef struct ncclComm *ncclComm_t;
#define NCCL_UNIQUE_ID_BYTES 128
typedef struct {
    char internal[NCCL_UNIQUE_ID_BYTES];
} ncclUniqueId;

typedef enum {
    ncclSuccess = 0,
    ncclUnhandledCudaError = 1,
    ncclSystemError = 2,
    ncclInternalError = 3,
    ncclInvalidArgument = 4,
    ncclInvalidUsage = 5,
    ncclRemoteError = 6,
    ncclInProgress = 7
} ncclResult_t;
typedef enum { ncclSum = 0, ncclProd = 1, ncclMax = 2, ncclMin = 3, ncclAvg = 4 } ncclRedOp_t;
typedef enum { ncclFloat32 = 7, ncclFloat = 7, ncclFloat64 = 8, ncclDouble = 8, ncclBfloat16 = 9 } ncclDataType_t;

typedef struct {
    size_t size;
    unsigned int magic;
    unsigned int version;
    int blocking;
} ncclConfig_t;
#define NCCL_CONFIG_INITIALIZER {sizeof(ncclConfig_t), 0xcafebeefu, NCCL_VERSION_CODE, 1}
#define NCCL_SPLIT_NOCOLOR -1

#ifdef __cplusplus
extern "C" {
#endif
ncclResult_t emu_ncclGetUniqueId(ncclUniqueId *id);
ncclResult_t emu_ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank);
ncclResult_t emu_ncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank,
                                        ncclConfig_t *config);
ncclResult_t emu_ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t *newcomm, ncclConfig_t *config);
ncclResult_t emu_ncclCommFinalize(ncclComm_t comm);
ncclResult_t emu_ncclCommDestroy(ncclComm_t comm);
ncclResult_t emu_ncclCommAbort(ncclComm_t comm);
ncclResult_t emu_ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *state);
const char *emu_ncclGetErrorString(ncclResult_t r);
const char *emu_ncclGetLastError(ncclComm_t comm);
ncclResult_t emu_ncclAllReduce(const void *send, void *recv, size_t count, ncclDataType_t type, ncclRedOp_t op,
                               ncclComm_t comm, cudaStream_t stream);
ncclResult_t emu_ncclReduceScatter(const void *send, void *recv, size_t recvcount, ncclDataType_t type,
                                   ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream);
ncclResult_t emu_ncclAllGather(const void *send, void *recv, size_t sendcount, ncclDataType_t type,
                               ncclComm_t comm, cudaStream_t stream);
ncclResult_t emu_ncclBroadcast(const void *send, void *recv, size_t count, ncclDataType_t type, int root,
                               ncclComm_t comm, cudaStream_t stream);
ncclResult_t emu_ncclSend(const void *send, size_t count, ncclDataType_t type, int peer, ncclComm_t comm,
                          cudaStream_t stream);
ncclResult_t emu_ncclRecv(void *recv, size_t count, ncclDataType_t type, int peer, ncclComm_t comm,
                          cudaStream_t stream);
ncclResult_t emu_ncclGroupStart(void);
ncclResult_t emu_ncclGroupEnd(void);
#ifdef __cplusplus
}
#endif

#define ncclGetUniqueId emu_ncclGetUniqueId
#define ncclCommInitRank emu_ncclCommInitRank
#define ncclCommInitRankConfig emu_ncclCommInitRankConfig
#define ncclCommSplit emu_ncclCommSplit
#define ncclCommFinalize emu_ncclCommFinalize
#define ncclCommDestroy emu_ncclCommDestroy
#define ncclCommAbort emu_ncclCommAbort
#define ncclCommGetAsyncError emu_ncclCommGetAsyncError
#define ncclGetErrorString emu_ncclGetErrorString
#define ncclGetLastError emu_ncclGetLastError
#define ncclAllReduce emu_ncclAllReduce
#define ncclReduceScatter emu_ncclReduceScatter
#define ncclAllGather emu_ncclAllGather
#define ncclBroadcast emu_ncclBroadcast
#define ncclSend emu_ncclSend
#define ncclRecv emu_ncclRecv
#define ncclGroupStart emu_ncclGroupStart
#define ncclGroupEnd emu_ncclGroupEnd

#endif /* SR_EMU_NCCL_H */
