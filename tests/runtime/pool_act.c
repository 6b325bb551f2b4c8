/* pool_act: how long the pool caps or dozes (pool.c act_length, a static function: this driver includes the
 * source). The first time ACT_MIN_NS; found oversubscribed again while it lasts, or before CAP_NS has passed since
 * it ended, twice the last length, CAP_NS at most; found after a quiet CAP_NS, ACT_MIN_NS again. Prints "ok" or
 * the first step that differs, exit 1. */
#include "pool/pool.c"   /* first: it defines _GNU_SOURCE */

#include <stdio.h>

static int check(const char *what, long got, long want)
{
    if (got == want)
        return 0;
    printf("%s: %ld ns, expected %ld\n", what, got, want);
    return 1;
}

int main(void)
{
    const long ms = 1000000L;
    int bad = 0;
    bad |= check("never before", act_length(5000 * ms, 0, 0), ACT_MIN_NS);
    /* a lasting load, found again in each doze: ACT_MIN_NS, x2, x4, ... up to CAP_NS, which stays */
    long now = 5000 * ms, until = 0, len = 0, want = ACT_MIN_NS;
    for (int i = 0; i < 12; i++) {
        len = act_length(now, until, len);
        bad |= check("found again while dozing", len, want);
        until = now + len;
        now += len / 2;
        want = 2 * want < CAP_NS ? 2 * want : CAP_NS;
    }
    bad |= check("at CAP_NS", len, CAP_NS);
    /* found again soon after the last ended: twice; a quiet CAP_NS after it: the short one again */
    bad |= check("just after the end", act_length(until + CAP_NS - 1, until, ACT_MIN_NS),
                 2 * ACT_MIN_NS < CAP_NS ? 2 * ACT_MIN_NS : CAP_NS);
    bad |= check("a quiet CAP_NS after", act_length(until + CAP_NS, until, CAP_NS), ACT_MIN_NS);
    if (!bad)
        printf("ok\n");
    return bad;
}
