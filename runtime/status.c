/* status.c: status names and the process-wide last-error message.
 *
 * The runtime never prints or exits on its own: a failing function records one
 * sentence here with sr_seterr and returns the status; the caller (in the end
 * sr_main) decides how to report it.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "shardrt.h"

/* One buffer per process: errors are reported by the thread that drives the
 * program, never from inside parallel kernels. */
static char errmsg[2048];

const char *sr_status_str(sr_status s)
{
    switch (s) {
    case SR_OK: return "ok";
    case SR_ERR_ARG: return "invalid argument";
    case SR_ERR_IO: return "i/o error";
    case SR_ERR_FORMAT: return "malformed file";
    case SR_ERR_NOMEM: return "out of memory";
    case SR_ERR_COMM: return "communication error";
    case SR_ERR_STATE: return "state mismatch";
    case SR_ERR_USAGE: return "usage error";
    }
    return "unknown status";
}

const char *sr_errmsg(void)
{
    return errmsg;
}

sr_status sr_seterr(sr_status s, const char *fmt, ...)
{
    /* Format into a scratch buffer first: callers may pass sr_errmsg() itself
     * as an argument to add context ("loading X: %s"). */
    char tmp[sizeof errmsg];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    memcpy(errmsg, tmp, sizeof errmsg);
    return s;
}
