#!/usr/bin/env python3
"""Checks that each layer of src/ includes only headers of its own layer or the layers
below it (README.md's map), and that include/pagoda includes nothing from src/. The
order is DESIGN.md's but for the ledger, which sits below the engine: the engine sizes
its KV pool with it, and it needs only the core and the model. Prints each offending include; exits 1 if there is any.

  scripts/check_layers.py
"""
import os, re, sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Bottom to top; tools/ (the CLI) sits above them all.
ORDER = ["core", "backend", "model", "tokenizer", "jinja", "kv", "sched", "ledger", "engine",
         "quant", "dist", "server"]
RANK = {name: i for i, name in enumerate(ORDER)}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def layer_of_include(path):
    top = path.split("/", 1)[0]
    return top if top in RANK else None


def main():
    bad = []
    for base, rank_of in (("src", lambda rel: RANK.get(rel.split("/", 1)[0])),
                          ("include", lambda rel: -1)):
        for dirpath, _, files in os.walk(os.path.join(ROOT, base)):
            for f in files:
                if not f.endswith((".h", ".cpp", ".cu", ".cuh")):
                    continue
                full = os.path.join(dirpath, f)
                rel = os.path.relpath(full, os.path.join(ROOT, base))
                mine = rank_of(rel)
                if mine is None:
                    bad.append(f"{base}/{rel}: in no layer of {ORDER}")
                    continue
                for inc in INCLUDE.findall(open(full, encoding="utf-8").read()):
                    theirs = layer_of_include(inc)
                    if theirs is not None and RANK[theirs] > mine:
                        bad.append(f"{base}/{rel} includes \"{inc}\" from a higher layer")
    for line in bad:
        print(line)
    print(f"{len(bad)} include(s) against the layer order" if bad else "layers include downward only")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
