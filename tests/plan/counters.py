#!/usr/bin/env python3
"""A program's --comm-stats against shardc plan --json: the calls and bytes of
each collective over the training steps, per group, to the byte.

  counters.py PLAN.json STATS [--ranks N] [--groups data,tensor,pipeline]
              [--at-most GROUP.OP ...]

STATS is one rank's file (rank 0, the plan's first role), or with --ranks N a
pattern with %r, every rank's, each compared with the role of its pipeline
stage (runtime/comm.c: tensor ranks fastest, then data, then pipeline).
--at-most GROUP.OP: that counter may be under the plan's (the plan's bound).
Prints what differs; exit status 1 if anything does. Also imported by
tests/plan/run.sh (read_stats, planned).
"""
import json
import sys

GROUPS = ('data', 'tensor', 'pipeline')


def read_stats(path):
    """(steps, peak bytes or None, {(group, op): (calls, bytes)})"""
    steps, peak, got = 0, None, {}
    for line in open(path).read().split('\n'):
        w = line.split()
        if len(w) == 2 and w[0] == 'steps':
            steps = int(w[1])
        elif len(w) == 2 and w[0] == 'peak_bytes':
            peak = int(w[1])
        elif len(w) == 6:
            got[(w[0], w[1])] = (int(w[3]), int(w[5]))
    return steps, peak, got


def planned(role, steps, groups=GROUPS):
    """the role's counters over `steps` steps, as read_stats gives them"""
    want, cc = {}, role['comm_counters']
    for g in groups:
        t = cc[g]
        for i, op in enumerate(cc['ops']):
            if t['calls'][i]:
                want[(g, op)] = (round(t['calls'][i] * steps), round(t['bytes'][i] * steps))
    return want


def main(argv):
    plan, stats, ranks, groups, upper = argv[0], argv[1], 0, GROUPS, []
    i = 2
    while i < len(argv):
        if argv[i] == '--ranks':
            ranks = int(argv[i + 1])
        elif argv[i] == '--groups':
            groups = tuple(argv[i + 1].split(','))
        elif argv[i] == '--at-most':
            upper.append(tuple(argv[i + 1].split('.')))
        else:
            sys.exit('counters.py: unknown argument %s' % argv[i])
        i += 2
    d = json.load(open(plan))
    lay = d['layout']
    good = True
    for rank in range(max(ranks, 1)):
        stage = rank // (lay['tp'] * lay['dp'])
        role = [r for r in d['roles'] if r['stages'][0] <= stage <= r['stages'][1]][0]
        steps, _, got = read_stats(stats.replace('%r', str(rank)) if ranks else stats)
        got = {k: v for k, v in got.items() if k[0] in groups}
        want = planned(role, steps, groups)
        over = []
        for k in upper:
            a, b = got.pop(k, (0, 0)), want.pop(k, (0, 0))
            if a[0] > b[0] or a[1] > b[1]:
                over.append(k)
        if got != want or over or not want or not steps:
            print('   rank %d (stage %d): measured %s\n   planned  %s%s' % (
                rank, stage, sorted(got.items()), sorted(want.items()),
                '\n   over the plan: %s' % over if over else ''))
            good = False
    return 0 if good else 1


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
