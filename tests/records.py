"""records.py TEXT OUT N SEED MARGIN MAXLEN: N JSON Lines prompt-completion
records cut from TEXT at random places (the first at most len - MARGIN),
prompts and completions of 1 to MAXLEN characters, for the tests of training
on records (the loss on the completions only)."""
import json
import random
import sys

src, out, n, seed, margin, maxlen = sys.argv[1:7]
t, r = open(src).read(), random.Random(int(seed))
with open(out, "w") as f:
    for _ in range(int(n)):
        a, p, c = r.randrange(len(t) - int(margin)), r.randint(1, int(maxlen)), r.randint(1, int(maxlen))
        f.write(json.dumps({"prompt": t[a:a + p], "completion": t[a + p:a + p + c]}) + "\n")
