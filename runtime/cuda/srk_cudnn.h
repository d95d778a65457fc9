/* srk_cudnn.h: causal attention through cuDNN's fused flash attention
 * (attention_cudnn.cpp), the path of SHARDC_CUDA_ATTN=cudnn in bf16 programs.
 *
 * Tensors as srk_attention.cuh has them: q, k, v, o, dout, dq, dk, dv bf16
 * (B, T, C) with head h in columns [h*hd, (h+1)*hd), hd = C / NH, the rows of
 * q, k, v, dq, dk, dv L elements apart (C, or 3C for the parts of one
 * packed q|k|v tensor), those of o and dout C; lse float
 * (B, NH, T), the natural-log log-sum-exp of each row of scaled scores (the
 * forward writes it, the backward reads it). Every call takes the CUDA stream
 * and a device workspace of at least srk_cudnn_attn_workspace() bytes.
 *
 * libcudnn.so.9 is opened at the first call (dlopen: the programs do not
 * link it, so they start where cuDNN is absent); SHARDC_CUDNN_LIB names
 * another file. A runtime built without the cuDNN frontend's headers (and
 * the CPU emulator's) has these functions fail with a message that says so.
 *
 * Each returns 0, or -1 with why in err (one line, at most errlen bytes).
 */
#ifndef SRK_CUDNN_H
#define SRK_CUDNN_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* the graph of one direction and shape checked by the cuDNN frontend
 * (validate(): shapes, strides, types, the mask, against the device's
 * compute capability), without a cuDNN handle: what the CPU test runs */
int srk_cudnn_attn_check(int bwd, int B, int T, int C, int L, int NH, float scale, char *err, size_t errlen);

/* the cuDNN library's version (90100 for 9.1.0) once it loads, else -1 with why in err */
long srk_cudnn_version(char *err, size_t errlen);

/* bytes of workspace the forward (bwd 0) or backward (bwd 1) of this shape needs; -1 on failure */
long srk_cudnn_attn_workspace(int bwd, int B, int T, int C, int L, int NH, float scale, char *err, size_t errlen);

/* o (B,T,C) and lse (B,NH,T) from q, k, v */
int srk_cudnn_attn_fwd(void *stream, void *ws, void *o, float *lse, const void *q, const void *k, const void *v, int B,
                       int T, int C, int L, int NH, float scale, char *err, size_t errlen);

/* dq, dk, dv (B,T,C), overwritten, from dout and the forward's q, k, v, o, lse */
int srk_cudnn_attn_bwd(void *stream, void *ws, void *dq, void *dk, void *dv, const void *dout, const void *q,
                       const void *k, const void *v, const void *o, const float *lse, int B, int T, int C, int L,
                       int NH, float scale, char *err, size_t errlen);

#ifdef __cplusplus
}
#endif

#endif /* SRK_CUDNN_H */
