#!/usr/bin/env python3
"""Splits a callgrind profile of redis-server with the module loaded into the module's own
instructions and the ones it spends in each function of another object it calls (each
RedisModule_* call, the allocator, libc), per unit of work.

    scripts/callgrind-attribute.py FILE MODULE_SO UNITS [--top N]

FILE is a callgrind output file (positions: line, events: Ir); MODULE_SO names the module's
object (a path or its base name); UNITS divides every figure (the pairs a workload ran).
Prints: the module's own instructions (every instruction executed in its object, inlined
Rust std included), then each function of another object called from the module with its
inclusive instructions, then what the rest of the server spent, all per unit.
"""

import argparse
import collections
import os
import re
import sys

NAME = re.compile(r"^\((\d+)\)(?: (.*))?$")


def parse(path, module):
    names = {"ob": {}, "fn": {}}
    own = 0
    total = 0
    calls = collections.Counter()
    ob = fn = None
    cob = cfn = None
    pending_call = False
    with open(path, encoding="utf-8", errors="replace") as f:
        for raw in f:
            line = raw.rstrip("\n")
            if not line:
                continue
            head = line[0]
            if head.isdigit() or head in "+-*":
                parts = line.split()
                cost = int(parts[1]) if len(parts) > 1 else 0
                if pending_call:
                    pending_call = False
                    callee_ob = cob if cob is not None else ob
                    if in_module(ob, module) and not in_module(callee_ob, module):
                        calls[(cfn or "?", os.path.basename(callee_ob or "?"))] += cost
                    cob = cfn = None
                    continue
                total += cost
                if in_module(ob, module):
                    own += cost
                continue
            key, _, value = line.partition("=")
            if key in ("ob", "cob"):
                name = resolve(names["ob"], value)
                if key == "ob":
                    ob = name
                else:
                    cob = name
            elif key in ("fn", "cfn"):
                name = resolve(names["fn"], value)
                if key == "fn":
                    fn = name
                else:
                    cfn = name
            elif key == "calls":
                pending_call = True
            elif key == "summary" or key == "totals":
                pass
    del fn
    return own, total, calls


def resolve(table, value):
    m = NAME.match(value)
    if not m:
        return value
    ident, name = m.group(1), m.group(2)
    if name is not None:
        table[ident] = name
        return name
    return table.get(ident, value)


def in_module(ob, module):
    return ob is not None and os.path.basename(ob) == module


def main():
    p = argparse.ArgumentParser()
    p.add_argument("file")
    p.add_argument("module")
    p.add_argument("units", type=int)
    p.add_argument("--top", type=int, default=12)
    a = p.parse_args()
    module = os.path.basename(a.module)
    own, total, calls = parse(a.file, module)
    n = a.units
    called = sum(calls.values())
    print(f"  {'per unit':<40} {'instructions':>12}")
    print(f"  {'the whole server':<40} {total // n:>12,}")
    print(f"  {'the module, its own code':<40} {own // n:>12,}")
    print(f"  {'the module, in calls out of it':<40} {called // n:>12,}")
    for (name, obj), cost in calls.most_common(a.top):
        if cost // n == 0:
            break
        label = name if obj.startswith("redis") or obj.startswith("valkey") else f"{name} ({obj})"
        print(f"    {label:<38} {cost // n:>12,}")
    rest = sum(c for _, c in calls.most_common()[a.top:])
    if rest // n:
        print(f"    {'(the other calls)':<38} {rest // n:>12,}")
    print(f"  {'the rest of the server':<40} {(total - own - called) // n:>12,}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
