/* sr_tp.h: a parameter's shard on one tensor rank and its full tensor.
 * Checkpoints and initialization work on full tensors, so any layout reads
 * what any other wrote and a split run initializes exactly as one rank. */
#ifndef SR_TP_H
#define SR_TP_H

#include "sr_program.h"

#ifdef __cplusplus
extern "C" {
#endif

int64_t sr_param_full_numel(const sr_param_desc *d);
/* flat index in the full tensor of element li of rank `rank`'s shard */
int64_t sr_param_global_index(const sr_param_desc *d, int rank, int64_t li);
/* to_local: shard of `full` into `local`; else `local` into its place in `full` */
void sr_param_shard(const sr_param_desc *d, int rank, float *full, float *local, int to_local);

#ifdef __cplusplus
}
#endif
#endif /* SR_TP_H */
