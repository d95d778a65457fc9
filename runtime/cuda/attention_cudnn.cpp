/* attention_cudnn.cpp: causal attention through cuDNN's fused flash attention
 * (srk_cudnn.h says what each call takes). One SDPA graph of the cuDNN
 * frontend (its header-only C++ API) per direction and shape, built at the
 * first call and kept: the (B, T, C) tensors go in as (B, NH, T, hd) views
 * with strides (T*C, hd, C, 1), so no transposes (q, k, v and their
 * gradients with rows L apart: (T*L, hd, L, 1), L = 3C for the parts of a
 * packed q|k|v tensor read in place); the scores are scaled by
 * `scale` and masked to keys <= query (top-left causal diagonal), as
 * sr_attention_fwd does. Stats (cuDNN's log-sum-exp per row, natural log)
 * is our lse.
 *
 * Compiled by the host C++ compiler (no kernels of its own), into
 * libshardrt_cuda.a where the frontend's headers were found at configure
 * time (SRK_HAVE_CUDNN_FE); otherwise, and in the CPU emulator's runtime,
 * the three entry points only say that the path is not built.
 */
#include "srk_cudnn.h"

#include <stdarg.h>
#include <stdio.h>

static int cd_err(char *err, size_t n, const char *fmt, ...)
{
    if (err && n) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, n, fmt, ap);
        va_end(ap);
    }
    return -1;
}

#if SRK_HAVE_CUDNN_FE

#define NV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING 1
#include <dlfcn.h>
#include <stdlib.h>

#include <cudnn_frontend.h>

#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <unordered_map>

namespace fe = cudnn_frontend;

/* the frontend's calls into cuDNN go through this handle of dlopen (its dynamic-loading mode) */
namespace cudnn_frontend {
void *cudnn_dlhandle = nullptr;
}

namespace {

enum : int64_t { U_Q = 1, U_K, U_V, U_O, U_STATS, U_DO, U_DQ, U_DK, U_DV };

struct Plan {
    std::shared_ptr<fe::graph::Graph> graph;
    int64_t ws = 0;
};

struct State {
    std::string why; /* why cuDNN cannot be used, once loading it or cudnnCreate failed */
    cudnnHandle_t handle = nullptr;
    std::map<std::tuple<int, int, int, int, int, int, float>, Plan> plans;
};
State st;

/* libcudnn.so.9 (or SHARDC_CUDNN_LIB) opened; false with st.why set when it cannot be */
bool cd_load()
{
    if (fe::cudnn_dlhandle) return true;
    if (!st.why.empty()) return false;
    /* the frontend's own CUDA calls go to the libcudart the program runs on (it would take the
     * first of .so.12 and .so.13 that loads), unless the user names one */
    char cudart[32];
    snprintf(cudart, sizeof cudart, "libcudart.so.%d", CUDART_VERSION / 1000);
    setenv("CUDNN_FRONTEND_CUDART_LIB_NAME", cudart, 0);
    const char *lib = getenv("SHARDC_CUDNN_LIB");
    if (!lib || !*lib) lib = "libcudnn.so.9";
    dlerror();
    fe::cudnn_dlhandle = dlopen(lib, RTLD_NOW | RTLD_GLOBAL);
    if (!fe::cudnn_dlhandle) {
        const char *e = dlerror();
        st.why = std::string("cannot load ") + lib + " (" + (e ? e : "dlopen failed") +
                 "): install cuDNN 9 or put its lib directory on LD_LIBRARY_PATH (or name the file in SHARDC_CUDNN_LIB)";
        return false;
    }
    return true;
}

/* the library and one handle; false with st.why set when either fails */
bool cd_open()
{
    if (st.handle) return true;
    if (!cd_load() || !st.why.empty()) return false; /* (a failed cudnnCreate is not retried) */
    try {
        cudnnStatus_t s = fe::detail::create_handle(&st.handle);
        if (s != CUDNN_STATUS_SUCCESS) {
            st.handle = nullptr;
            st.why = std::string("cudnnCreate failed: ") + fe::detail::get_error_string(s);
            return false;
        }
    } catch (std::exception &e) {
        st.handle = nullptr;
        st.why = std::string("cuDNN: ") + e.what();
        return false;
    }
    return true;
}

using Tensor = std::shared_ptr<fe::graph::Tensor_attributes>;

/* a tensor's name, uid, type and layout: q, k, v, o and their gradients bf16 (B,T,C) with rows S
 * apart seen as (B, NH, T, hd); Stats (the lse) float (B, NH, T, 1), packed */
fe::graph::Tensor_attributes &lay(fe::graph::Tensor_attributes &t, const char *name, int64_t uid, int B, int T, int C,
                                  int S, int NH)
{
    t.set_name(name).set_uid(uid);
    if (uid == U_STATS)
        return t.set_dim({B, NH, T, 1}).set_stride({(int64_t)NH * T, T, 1, 1}).set_data_type(fe::DataType_t::FLOAT);
    return t.set_dim({B, NH, T, C / NH})
        .set_stride({(int64_t)T * S, C / NH, S, 1})
        .set_data_type(fe::DataType_t::BFLOAT16);
}
Tensor input(fe::graph::Graph &g, const char *name, int64_t uid, int B, int T, int C, int S, int NH)
{
    fe::graph::Tensor_attributes t;
    return g.tensor(lay(t, name, uid, B, T, C, S, NH));
}
void output(const Tensor &t, const char *name, int64_t uid, int B, int T, int C, int S, int NH)
{
    lay(*t, name, uid, B, T, C, S, NH).set_output(true);
}

/* the SDPA graph of one direction and shape, not yet validated */
std::shared_ptr<fe::graph::Graph> cd_graph(int bwd, int B, int T, int C, int L, int NH, float scale)
{
    auto g = std::make_shared<fe::graph::Graph>();
    g->set_io_data_type(fe::DataType_t::BFLOAT16)
        .set_intermediate_data_type(fe::DataType_t::FLOAT)
        .set_compute_data_type(fe::DataType_t::FLOAT);
    auto q = input(*g, "q", U_Q, B, T, C, L, NH), k = input(*g, "k", U_K, B, T, C, L, NH);
    auto v = input(*g, "v", U_V, B, T, C, L, NH);
    if (!bwd) {
        auto opt = fe::graph::SDPA_attributes()
                       .set_name("causal_attention")
                       .set_generate_stats(true)
                       .set_causal_mask(true)
                       .set_attn_scale(scale);
        auto [o, lse] = g->sdpa(q, k, v, opt);
        output(o, "o", U_O, B, T, C, C, NH);
        output(lse, "stats", U_STATS, B, T, C, C, NH);
    } else {
        auto o = input(*g, "o", U_O, B, T, C, C, NH), dO = input(*g, "dout", U_DO, B, T, C, C, NH);
        auto lse = input(*g, "stats", U_STATS, B, T, C, C, NH);
        auto opt = fe::graph::SDPA_backward_attributes()
                       .set_name("causal_attention_backward")
                       .set_causal_mask(true)
                       .set_attn_scale(scale);
        auto [dq, dk, dv] = g->sdpa_backward(q, k, v, o, dO, lse, opt);
        output(dq, "dq", U_DQ, B, T, C, L, NH);
        output(dk, "dk", U_DK, B, T, C, L, NH);
        output(dv, "dv", U_DV, B, T, C, L, NH);
    }
    return g;
}

int cd_fail(char *err, size_t n, int bwd, int B, int T, int C, int L, int NH, const char *what, const std::string &msg)
{
    return cd_err(err, n, "cuDNN attention %s (B %d, T %d, C %d%s, %d heads): %s: %s", bwd ? "backward" : "forward", B,
                  T, C, L != C ? ", q|k|v packed" : "", NH, what, msg.c_str());
}

/* the graph of one direction and shape, built (validated, lowered, a plan from cuDNN's heuristics), kept */
Plan *cd_plan(int bwd, int B, int T, int C, int L, int NH, float scale, char *err, size_t n)
{
    auto key = std::make_tuple(bwd, B, T, C, L, NH, scale);
    auto it = st.plans.find(key);
    if (it != st.plans.end()) return &it->second;
    if (!cd_open()) {
        cd_err(err, n, "%s", st.why.c_str());
        return nullptr;
    }
    const char *what = "validate";
    try {
        auto g = cd_graph(bwd, B, T, C, L, NH, scale);
        fe::error_t e = g->validate();
        if (e.is_good()) what = "build_operation_graph", e = g->build_operation_graph(st.handle);
        if (e.is_good()) what = "create_execution_plans", e = g->create_execution_plans({fe::HeurMode_t::A});
        if (e.is_good()) what = "check_support", e = g->check_support(st.handle);
        if (e.is_good()) what = "build_plans", e = g->build_plans(st.handle);
        Plan p;
        if (e.is_good()) what = "get_workspace_size", e = g->get_workspace_size(p.ws);
        if (!e.is_good()) {
            cd_fail(err, n, bwd, B, T, C, L, NH, what, e.get_message());
            return nullptr;
        }
        p.graph = g;
        return &(st.plans[key] = p);
    } catch (std::exception &x) {
        cd_fail(err, n, bwd, B, T, C, L, NH, what, x.what());
        return nullptr;
    }
}

int cd_exec(Plan *p, void *stream, void *ws, std::unordered_map<int64_t, void *> &pack, int bwd, char *err, size_t n)
{
    cudnnStatus_t s = fe::detail::set_stream(st.handle, (cudaStream_t)stream);
    if (s != CUDNN_STATUS_SUCCESS)
        return cd_err(err, n, "cudnnSetStream failed: %s", fe::detail::get_error_string(s));
    try {
        fe::error_t e = p->graph->execute(st.handle, pack, ws);
        if (!e.is_good())
            return cd_err(err, n, "cuDNN attention %s: execute: %s", bwd ? "backward" : "forward", e.get_message().c_str());
    } catch (std::exception &x) {
        return cd_err(err, n, "cuDNN attention %s: execute: %s", bwd ? "backward" : "forward", x.what());
    }
    return 0;
}

} /* namespace */

extern "C" int srk_cudnn_attn_check(int bwd, int B, int T, int C, int L, int NH, float scale, char *err,
                                    size_t errlen)
{
    if (!cd_load()) return cd_err(err, errlen, "%s", st.why.c_str());
    try {
        fe::error_t e = cd_graph(bwd, B, T, C, L, NH, scale)->validate();
        if (!e.is_good()) return cd_fail(err, errlen, bwd, B, T, C, L, NH, "validate", e.get_message());
    } catch (std::exception &x) {
        return cd_fail(err, errlen, bwd, B, T, C, L, NH, "validate", x.what());
    }
    return 0;
}

extern "C" long srk_cudnn_version(char *err, size_t errlen)
{
    if (!cd_load()) return cd_err(err, errlen, "%s", st.why.c_str());
    return (long)fe::detail::get_backend_version();
}

extern "C" long srk_cudnn_attn_workspace(int bwd, int B, int T, int C, int L, int NH, float scale, char *err,
                                         size_t errlen)
{
    Plan *p = cd_plan(bwd, B, T, C, L, NH, scale, err, errlen);
    return p ? (long)p->ws : -1;
}

extern "C" int srk_cudnn_attn_fwd(void *stream, void *ws, void *o, float *lse, const void *q, const void *k,
                                  const void *v, int B, int T, int C, int L, int NH, float scale, char *err,
                                  size_t errlen)
{
    Plan *p = cd_plan(0, B, T, C, L, NH, scale, err, errlen);
    if (!p) return -1;
    std::unordered_map<int64_t, void *> pack = {{U_Q, (void *)q}, {U_K, (void *)k}, {U_V, (void *)v},
                                                {U_O, o},         {U_STATS, lse}};
    return cd_exec(p, stream, ws, pack, 0, err, errlen);
}

extern "C" int srk_cudnn_attn_bwd(void *stream, void *ws, void *dq, void *dk, void *dv, const void *dout,
                                  const void *q, const void *k, const void *v, const void *o, const float *lse, int B,
                                  int T, int C, int L, int NH, float scale, char *err, size_t errlen)
{
    Plan *p = cd_plan(1, B, T, C, L, NH, scale, err, errlen);
    if (!p) return -1;
    std::unordered_map<int64_t, void *> pack = {
        {U_Q, (void *)q},    {U_K, (void *)k},         {U_V, (void *)v}, {U_O, (void *)o}, {U_DO, (void *)dout},
        {U_STATS, (void *)lse}, {U_DQ, dq}, {U_DK, dk}, {U_DV, dv}};
    return cd_exec(p, stream, ws, pack, 1, err, errlen);
}

#else /* !SRK_HAVE_CUDNN_FE */

#define CD_NOT_BUILT                                                                                         \
    "this runtime was built without cuDNN's frontend headers (the CPU emulator's never has them; see "      \
    "docs/cuda.md)"

extern "C" int srk_cudnn_attn_check(int, int, int, int, int, int, float, char *err, size_t errlen)
{
    return cd_err(err, errlen, CD_NOT_BUILT);
}

extern "C" long srk_cudnn_version(char *err, size_t errlen) { return cd_err(err, errlen, CD_NOT_BUILT); }

extern "C" long srk_cudnn_attn_workspace(int, int, int, int, int, int, float, char *err, size_t errlen)
{
    return cd_err(err, errlen, CD_NOT_BUILT);
}

extern "C" int srk_cudnn_attn_fwd(void *, void *, void *, float *, const void *, const void *, const void *, int, int,
                                  int, int, int, float, char *err, size_t errlen)
{
    return cd_err(err, errlen, CD_NOT_BUILT);
}

extern "C" int srk_cudnn_attn_bwd(void *, void *, void *, void *, void *, const void *, const void *, const void *,
                                  const void *, const void *, const float *, int, int, int, int, int, float, char *err,
                                  size_t errlen)
{
    return cd_err(err, errlen, CD_NOT_BUILT);
}

#endif
