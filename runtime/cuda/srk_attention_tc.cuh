/* srk_attention_tc.cuh: tensor-core attention (placeholder: not yet) */
#ifndef SRK_ATTENTION_TC_CUH
#define SRK_ATTENTION_TC_CUH
template <class TO, class TQ, class TK, class TV>
static inline int srk_attn_tc_fwd(TO *, TO *, float *, const TQ *, const TK *, const TV *, int, int, int, int, float)
{
    return 0;
}
template <class TDQ, class TDK, class TDV, class TG, class TQ, class TK, class TV>
static inline int srk_attn_tc_bwd(TDQ *, TDK *, TDV *, const TG *, const TQ *, const TK *, const TV *, const float *,
                                  const float *, int, int, int, int, float)
{
    return 0;
}
#endif
