/* fake_cudart.c: the few CUDA runtime calls cuDNN's frontend makes while it
 * validates a graph (which device, its compute capability), answered
 * without a GPU, so that test_cudnn_graph can check our attention graphs on
 * a machine that has none. The compute capability is SHARDC_FAKE_CC (e.g.
 * 90), read at every call. The frontend loads this file in place of
 * libcudart through CUDNN_FRONTEND_CUDART_LIB_NAME. */
#include <stdlib.h>

enum { ATTR_CC_MAJOR = 75, ATTR_CC_MINOR = 76 }; /* cudaDevAttrComputeCapabilityMajor/Minor */

static int fake_cc(void)
{
    const char *s = getenv("SHARDC_FAKE_CC");
    return s && *s ? atoi(s) : 90;
}

int cudaGetDevice(int *device)
{
    *device = 0;
    return 0;
}

int cudaDeviceGetAttribute(int *value, int attr, int device)
{
    (void)device;
    *value = attr == ATTR_CC_MAJOR ? fake_cc() / 10 : attr == ATTR_CC_MINOR ? fake_cc() % 10 : 0;
    return 0;
}

int cudaRuntimeGetVersion(int *version)
{
    *version = 13000;
    return 0;
}

int cudaGetLastError(void) { return 0; }

const char *cudaGetErrorString(int error)
{
    (void)error;
    return "fake_cudart: no such call without a GPU";
}
