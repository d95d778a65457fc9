"""evalfile.py: llm.c's multiple-choice eval files (what --eval-mc reads) for
the tests, written from the layout llm.c's dev/data/data_common.py documents
for write_evalfile: 256 int32 header words (magic 20240522, version 1, the
number of examples, the longest example's bytes), then per example uint16
words: 65535, its bytes, its index, the label, the number of completions, the
context's length and tokens, then each completion's length and tokens."""
import struct

MAGIC, VERSION = 20240522, 1


def write(path, examples):
    """examples: [(label, context tokens, [completion tokens, ...]), ...]"""
    words, longest = [], 0
    for i, (label, ctx, comps) in enumerate(examples):
        body = [len(ctx)] + list(ctx)
        for c in comps:
            body += [len(c)] + list(c)
        nbytes = 2 * (5 + len(body))
        longest = max(longest, nbytes)
        words += [65535, nbytes, i, label, len(comps)] + body
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", MAGIC, VERSION, len(examples), longest, *[0] * 252))
        f.write(struct.pack("<%dH" % len(words), *[int(w) for w in words]))


def read(path):
    """[(label, context tokens, [completion tokens, ...]), ...] of an eval file."""
    raw = open(path, "rb").read()
    magic, version, n = struct.unpack("<3i", raw[:12])
    if (magic, version) != (MAGIC, VERSION):
        raise SystemExit(f"{path}: bad eval file header {magic} {version}")
    w = struct.unpack("<%dH" % ((len(raw) - 1024) // 2), raw[1024:])
    out, at = [], 0
    for _ in range(n):
        assert w[at] == 65535
        end, label, nc = at + w[at + 1] // 2, w[at + 3], w[at + 4]
        q, parts = at + 5, []
        for _ in range(nc + 1):
            parts.append(list(w[q + 1:q + 1 + w[q]]))
            q += 1 + w[q]
        assert q == end
        out.append((label, parts[0], parts[1:]))
        at = end
    return out
