#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
"""Stack frames and the deepest call chains of a BPF object, before any kernel sees it.

Reads `llvm-objdump -dr` of the object: each function's frame (its deepest r10-relative
access, directly or through a register copied from r10 plus a constant), its calls
(BPF-to-BPF, relocated or pc-relative) and the callbacks it passes (bpf_loop's), then
prints, per program (an ELF section other than .text), the deepest chain with each frame
rounded up to 32 bytes as the kernel does. A development aid for the verifier's "combined
stack size of N calls is M. Too large", which names no function; the loaded programs'
figures come from src/headroom.rs (tests/headroom.rs).

usage: scripts/bpf-stack.py OBJECT [PROGRAM...]
"""
import re, subprocess, sys
from functools import lru_cache

obj = sys.argv[1]
want = set(sys.argv[2:])
dis = subprocess.run(["llvm-objdump", "-dr", "--no-show-raw-insn", obj], capture_output=True, text=True, check=True).stdout
syms = subprocess.run(["llvm-objdump", "-t", obj], capture_output=True, text=True, check=True).stdout

# function symbols: name -> (section, byte offset)
funcs = {}
for line in syms.splitlines():
    m = re.match(r"([0-9a-f]+)\s+\S+\s+F\s+(\S+)\s+[0-9a-f]+\s+(\S+)$", line)
    if m:
        funcs[m.group(3)] = (m.group(2), int(m.group(1), 16))
by_addr = {v: k for k, v in funcs.items()}

frame, calls, order = {}, {}, []
sec, cur, fp, last = None, None, {}, None
for line in dis.splitlines():
    m = re.match(r"Disassembly of section (\S+):", line)
    if m:
        sec = m.group(1)
        continue
    m = re.match(r"([0-9a-f]+) <(\S+)>:", line)
    if m:
        if (sec, int(m.group(1), 16)) in by_addr:
            cur = by_addr[(sec, int(m.group(1), 16))]
            frame[cur], calls[cur], fp = 0, set(), {}
            order.append(cur)
        continue
    if cur is None:
        continue
    m = re.match(r"\s+[0-9a-f]+:\s+R_BPF_64_(32|64)\s+(\S+)", line)
    if m:
        if not last:
            continue
        tgt = m.group(2)
        if tgt in funcs:
            calls[cur].add(tgt)
        elif tgt.startswith(".text") or tgt in (".text",):
            im = re.search(r"= (0x[0-9a-f]+|\d+) ll", last[1])
            if im and (".text", int(im.group(1), 0)) in by_addr:
                calls[cur].add(by_addr[(".text", int(im.group(1), 0))])
        continue
    m = re.match(r"\s+(\d+):\s+(.*)$", line)
    if m:
        pc, text = int(m.group(1)), m.group(2).strip()
        last = (pc, text)
        for base, off in re.findall(r"\((r\d+) ([+-] (?:0x[0-9a-f]+|\d+))\)", text):
            o = int(off.replace(" ", ""), 0)
            if base == "r10":
                frame[cur] = max(frame[cur], -o)
            elif base in fp:
                frame[cur] = max(frame[cur], -(fp[base] + o))
        a = re.match(r"(r\d+) = r10$", text)
        if a:
            fp[a.group(1)] = 0
            continue
        a = re.match(r"(r\d+) \+= (-?0x[0-9a-f]+|-?\d+)$", text)
        if a and a.group(1) in fp:
            fp[a.group(1)] += int(a.group(2), 0)
            frame[cur] = max(frame[cur], -fp[a.group(1)])
            continue
        a = re.match(r"(r\d+) (=|\+=|-=|&=|\|=|<<=|>>=|\^=) ", text)
        if a:
            fp.pop(a.group(1), None)
        if text.startswith("call") or text.startswith("goto") or text.startswith("if "):
            if text.startswith("call"):
                for r in ("r0", "r1", "r2", "r3", "r4", "r5"):
                    fp.pop(r, None)
                c = re.match(r"call (-?0x[0-9a-f]+|-?\d+)$", text)
                if c and int(c.group(1), 0) != -1:
                    # pc-relative in this section
                    tgt = (sec, (pc + 1 + int(c.group(1), 0)) * 8)
                    if tgt in by_addr:
                        calls[cur].add(by_addr[tgt])
            else:
                fp = {}
        continue
def rnd(d):
    return (max(d, 1) + 31) // 32 * 32

@lru_cache(None)
def deepest(f):
    best = (0, ())
    for c in calls.get(f, ()):
        if c != f:
            d = deepest(c)
            if d[0] > best[0]:
                best = d
    return (rnd(frame[f]) + best[0], (f,) + best[1])

progs = [f for f in order if funcs[f][0] != ".text"]
for p in progs:
    if want and p not in want:
        continue
    d, chain = deepest(p)
    print(f"{p}: {d} B: " + " -> ".join(f"{c}({frame[c]})" for c in chain))
