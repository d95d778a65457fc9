/* comm_device.c: the communication layer on a GPU's memory without NCCL
 * (sr_comm.h, "MPI backend on device memory"): each call's buffers are
 * classified with the backend's sr_comm_device, and device buffers are
 * staged through page-locked host copies that MPI moves. No CUDA-aware MPI
 * is assumed, and no CUDA header is needed here: the copies and the
 * page-locked memory are the device backend's calls.
 *
 * Staging buffers come from a pool per communicator, best fit, kept for
 * the communicator's life: page-locking memory costs far more than a copy,
 * and a step issues the same sizes again and again. A request holds at
 * most two (what it sends, what it receives); the pool grows to what is in
 * flight at once.
 *
 * An asynchronous call (one given a request) copies to the host with the
 * device's to_host_async when it has one: the host goes on at once, and
 * comm.c starts the MPI transfer once the copy is done (checked whenever
 * the layer is entered: a test, a wait, a later call), in issue order.
 * The copy back of a result stays synchronous, in the wait.
 */
#include <stdlib.h>
#include <string.h>

#include "comm_impl.h"

/* pool buffers are whole multiples of this, so near sizes share buffers */
#define PIN_ROUND ((size_t)64 << 10)

int srcomm_on_device(const sr_comm *c, int op, const void *send, const void *recv)
{
    const sr_comm_device *d = c->dev;
    /* the buffers an op reads or writes (allreduce, broadcast: one) */
    const void *a = op == SRC_RECV ? recv : send;
    const void *b = op == SRC_REDUCE_SCATTER || op == SRC_ALLGATHER ? recv : NULL;
    int ka = d->on_device(a) != 0;
    if (b && (d->on_device(b) != 0) != ka) return -1;
    return ka;
}

static void *pin_get(sr_comm *c, size_t bytes)
{
    int best = -1;
    for (int i = 0; i < c->npins; i++)
        if (!c->pins[i].busy && c->pins[i].bytes >= bytes &&
            (best < 0 || c->pins[i].bytes < c->pins[best].bytes))
            best = i;
    if (best >= 0) {
        c->pins[best].busy = 1;
        return c->pins[best].p;
    }
    srcomm_pin *grown = realloc(c->pins, sizeof *grown * (size_t)(c->npins + 1));
    if (!grown) return NULL;
    c->pins = grown;
    size_t want = (bytes + PIN_ROUND - 1) / PIN_ROUND * PIN_ROUND;
    void *p = c->dev->host_alloc(want);
    if (!p) {
        /* idle buffers of other sizes may be what is in the way */
        int k = 0;
        for (int i = 0; i < c->npins; i++) {
            if (c->pins[i].busy) c->pins[k++] = c->pins[i];
            else c->dev->host_free(c->pins[i].p);
        }
        c->npins = k;
        p = c->dev->host_alloc(want);
        if (!p) return NULL;
    }
    c->pins[c->npins++] = (srcomm_pin){p, want, 1};
    return p;
}

static void pin_put(sr_comm *c, void *p, int lost)
{
    for (int i = 0; p && i < c->npins; i++)
        if (c->pins[i].p == p) {
            if (lost) c->pins[i] = c->pins[--c->npins]; /* leaked: MPI may still write it */
            else c->pins[i].busy = 0;
            return;
        }
}

void srcomm_pins_free(sr_comm *c)
{
    for (int i = 0; i < c->npins; i++)
        if (!c->pins[i].busy) c->dev->host_free(c->pins[i].p);
    free(c->pins);
    c->pins = NULL;
    c->npins = 0;
}

/* async: queued (r->copy), the MPI start waits for it (comm.c) */
static sr_status to_host(sr_req *r, void *dst, const void *src, int64_t n, int async)
{
    const sr_comm_device *d = r->c->dev;
    sr_status st = async ? d->to_host_async(dst, src, (size_t)n * sr_dtype_size(r->dt), &r->copy)
                         : d->to_host(dst, src, (size_t)n * sr_dtype_size(r->dt));
    if (st != SR_OK)
        return sr_seterr(st, "rank %d: %s '%s' on the %s group: staging %lld elements to the host "
                         "failed: %s", r->c->world_rank, srcomm_op_name(r->op), r->what, r->c->name,
                         (long long)n, sr_errmsg());
    return SR_OK;
}

sr_status srcomm_stage_in(sr_req *r, const void **send, void **recv, int async)
{
    sr_comm *c = r->c;
    const int64_t n = r->n, size = c->size;
    int64_t ns = 0, nr = 0; /* elements of the host send and receive copies */
    switch (r->op) {
    case SRC_ALLREDUCE:
    case SRC_BROADCAST:
    case SRC_RECV: nr = n; break;
    case SRC_SEND: ns = n; break;
    case SRC_REDUCE_SCATTER: ns = n * size, nr = n; break;
    case SRC_ALLGATHER: nr = n * size; break; /* sent in place from this rank's block */
    default: return SR_OK;
    }
    const int64_t es = (int64_t)sr_dtype_size(r->dt);
    if (ns) r->pin[0] = pin_get(c, (size_t)(ns * es));
    if (nr) r->pin[1] = pin_get(c, (size_t)(nr * es));
    if ((ns && !r->pin[0]) || (nr && !r->pin[1]))
        return sr_seterr(SR_ERR_NOMEM, "rank %d: %s '%s' on the %s group: no page-locked host "
                         "memory for staging %lld elements", c->world_rank, srcomm_op_name(r->op),
                         r->what, c->name, (long long)(ns + nr));
    char *hs = r->pin[0], *hr = r->pin[1];
    switch (r->op) {
    case SRC_ALLREDUCE:
        SR_CHECK(to_host(r, hr, *recv, n, async));
        *send = hr;
        break;
    case SRC_BROADCAST:
        if (c->rank == r->peer) SR_CHECK(to_host(r, hr, *recv, n, async));
        *send = hr;
        break;
    case SRC_RECV:
        break;
    case SRC_SEND:
        SR_CHECK(to_host(r, hs, *send, n, async));
        *send = hs;
        break;
    case SRC_REDUCE_SCATTER:
        SR_CHECK(to_host(r, hs, *send, n * size, async));
        *send = hs;
        break;
    case SRC_ALLGATHER:
        SR_CHECK(to_host(r, hr + (int64_t)c->rank * n * es, *send, n, async));
        *send = hr + (int64_t)c->rank * n * es;
        break;
    }
    /* the root of a broadcast and a sender get nothing back */
    if (nr && !(r->op == SRC_BROADCAST && c->rank == r->peer)) {
        r->host_res = hr;
        r->dev_dst = *recv;
        r->dev_n = nr;
    }
    if (nr) *recv = hr;
    return SR_OK;
}

sr_status srcomm_stage_out(sr_req *r)
{
    sr_status st = r->c->dev->to_device(r->dev_dst, r->host_res, (size_t)r->dev_n * sr_dtype_size(r->dt));
    if (st != SR_OK)
        return sr_seterr(st, "rank %d: %s '%s' on the %s group: copying %lld elements back to the "
                         "device failed: %s", r->c->world_rank, srcomm_op_name(r->op), r->what,
                         r->c->name, (long long)r->dev_n, sr_errmsg());
    return SR_OK;
}

void srcomm_unstage(sr_req *r, int lost)
{
    for (int k = 0; k < 2; k++)
        if (r->pin[k]) {
            pin_put(r->c, r->pin[k], lost);
            r->pin[k] = NULL;
        }
    r->dev_dst = NULL;
}
