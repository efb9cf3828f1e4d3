#!/usr/bin/env python
"""Summarise a py-spy ``--format raw`` profile (collapsed stacks): top self and inclusive costs.

    py-spy record --native --threads -r 50 --format raw -o prof.txt -- \
        .venv/bin/python -m twopgraph train --epochs 2 --no-progress --eval-every 0
    .venv/bin/python scripts/pyspy_top.py prof.txt --within _train_epoch --top 25

``--within NAME`` keeps only the samples whose stack passes through a frame whose function
name contains NAME (e.g. ``_train_epoch``: one training epoch, not loading or evaluation);
``--thread`` keeps one thread (substring of its "thread (id): name" label). Frames are
``function (file:line)``; lines are dropped so that a function is counted once.
"""
import argparse
import collections
import re


def frame_key(f: str) -> str:
    return re.sub(r":\d+\)$", ")", f.strip())


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("path")
    p.add_argument("--within", default=None)
    p.add_argument("--thread", default=None)
    p.add_argument("--top", type=int, default=25)
    a = p.parse_args(argv)
    self_c, incl_c, threads = collections.Counter(), collections.Counter(), collections.Counter()
    total = 0
    for line in open(a.path):
        line = line.rstrip("\n")
        if not line:
            continue
        stack, _, n = line.rpartition(" ")
        n = int(n)
        frames = stack.split(";")
        if frames and frames[0].startswith("thread"):
            th, frames = frames[0], frames[1:]
        else:
            th = "-"
        if a.thread and a.thread not in th:
            continue
        if a.within and not any(a.within in f.split(" (")[0] for f in frames):
            continue
        total += n
        threads[th] += n
        keys = [frame_key(f) for f in frames]
        if keys:
            self_c[keys[-1]] += n
        for k in set(keys):
            incl_c[k] += n
    print(f"samples: {total}")
    for th, n in threads.most_common():
        print(f"  {100 * n / max(total, 1):5.1f}%  {th}")
    print("\ntop self (leaf frames):")
    for k, n in self_c.most_common(a.top):
        print(f"  {100 * n / max(total, 1):5.1f}%  {k[:150]}")
    print("\ntop inclusive:")
    for k, n in incl_c.most_common(a.top):
        print(f"  {100 * n / max(total, 1):5.1f}%  {k[:150]}")


if __name__ == "__main__":
    main()
