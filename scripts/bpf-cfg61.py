#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
"""Finds the loops Linux 6.1's verifier refuses before it verifies anything.

6.1's check_cfg walks the program depth first and accepts a back-edge only when it is a
jump (a goto or a conditional jump's either edge); a loop whose header is reached again by
falling through from the instruction before it (a rotated loop: entered by a jump to its
test, the body falling into it) is "back-edge from insn X to X+1", whatever the loop's
bound. Later kernels accept it. This walks every function of an object (llvm-objdump -d)
the same way, from its first instruction, and prints each such edge with its source line,
so that a loop can be changed before a 6.1 machine refuses the object.

usage: scripts/bpf-cfg61.py OBJECT   (exit 1 when it finds one)
"""
import re, subprocess, sys

dis = subprocess.run(["llvm-objdump", "-d", "-l", "--no-show-raw-insn", sys.argv[1]],
                     capture_output=True, text=True, check=True).stdout
syms = subprocess.run(["llvm-objdump", "-t", sys.argv[1]], capture_output=True, text=True, check=True).stdout
funcs = {}
for line in syms.splitlines():
    m = re.match(r"([0-9a-f]+)\s+\S+\s+F\s+(\S+)\s+[0-9a-f]+\s+(\S+)$", line)
    if m:
        funcs[(m.group(2), int(m.group(1), 16) // 8)] = m.group(3)

# per section: pc -> (text, source)
secs, sec, src = {}, None, None
for line in dis.splitlines():
    m = re.match(r"Disassembly of section (\S+):", line)
    if m:
        sec = m.group(1)
        secs[sec] = {}
        continue
    m = re.match(r"; (/\S+:\d+)", line)
    if m:
        src = m.group(1)
        continue
    m = re.match(r"\s+(\d+):\s+(.*)$", line)
    if m and sec:
        secs[sec][int(m.group(1))] = (m.group(2).strip(), src)

bad = 0
for (sec, start), name in sorted(funcs.items(), key=lambda x: (x[0][0], x[0][1])):
    ins = secs.get(sec, {})
    pcs = sorted(p for p in ins if p >= start)
    # the function ends where the next function of the section starts
    nxt = min([s for (sc, s) in funcs if sc == sec and s > start] or [max(pcs, default=start) + 1])
    pcs = [p for p in pcs if p < nxt]
    if not pcs:
        continue
    nextpc = {p: (pcs[i + 1] if i + 1 < len(pcs) else None) for i, p in enumerate(pcs)}

    def edges(t):
        text = ins[t][0]
        if text == "exit":
            return []
        m = re.match(r"(?:if .* )?goto ([+-]\d+)", text)
        if m:
            w = t + 1 + int(m.group(1))
            if text.startswith("goto"):
                return [(w, True)]
            return [(nextpc[t], True), (w, True)]
        return [(nextpc[t], False)]

    state, stack, done = {start: 1}, [(start, 0)], set()
    while stack:
        t, k = stack[-1]
        es = edges(t)
        if k >= len(es):
            state[t] = 2
            stack.pop()
            continue
        stack[-1] = (t, k + 1)
        w, loop_ok = es[k]
        if w is None:
            continue
        if w not in state:
            state[w] = 1
            stack.append((w, 0))
        elif state[w] == 1 and not loop_ok:
            bad += 1
            print(f"{name}: back-edge by fall-through from {t - start} to {w - start} "
                  f"(section {sec} pc {t}), at {ins[t][1]}, into {ins[w][1]}")
sys.exit(1 if bad else 0)
