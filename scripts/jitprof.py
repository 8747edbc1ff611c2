#!/usr/bin/python3
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
"""Where a loaded BPF program spends its samples, instruction by instruction.

perf can sample a JIT-compiled BPF program, but without hardware counters (as in this VM)
it only knows the program's symbol. This tool maps each sample's address onto the x86
disassembly of the program's JIT image and onto the source line the kernel's JIT line
table gives for it (bpf_prog_info.jited_line_info), so a stall shows as the instruction
right after the load that waited: the timer interrupt is taken once the load retires, so
the sample names the next instruction (--top shows both).

Usage:
  perf record -e cpu-clock -C CPU -o pd.data -- LOAD...     # while the program is loaded
  perf script -i pd.data -F ip | scripts/jitprof.py PROG_ID [--top N] [--asm]

  PROG_ID  the program's id (bpftool prog show; natrix's inside program is nx_xdp_inside)
  --top N  the N instructions with the most samples, with their source lines (default 25)
  --asm    also print every subprogram's disassembly, samples in the first column

Needs objdump (binutils) and root (BPF_OBJ_GET_INFO_BY_FD on the program).
"""
import argparse
import bisect
import collections
import ctypes
import os
import platform
import re
import struct
import subprocess
import sys
import tempfile

SYS_BPF = {"x86_64": 321, "aarch64": 280}.get(platform.machine())
BPF_PROG_GET_FD_BY_ID = 13
BPF_OBJ_GET_INFO_BY_FD = 15
BPF_BTF_GET_FD_BY_ID = 19
OBJDUMP_ARCH = {"x86_64": "i386:x86-64", "aarch64": "aarch64"}.get(platform.machine())

libc = ctypes.CDLL(None, use_errno=True)


def bpf(cmd, attr):
    buf = ctypes.create_string_buffer(attr, 256)
    r = libc.syscall(SYS_BPF, cmd, buf, len(attr))
    if r < 0:
        err = ctypes.get_errno()
        raise OSError(err, "bpf(%d): %s" % (cmd, os.strerror(err)))
    return r


def obj_info(fd, size, request=None):
    """BPF_OBJ_GET_INFO_BY_FD; request: the info struct with the arrays wanted filled in."""
    ib = ctypes.create_string_buffer(request if request else b"\0" * size, size)
    bpf(BPF_OBJ_GET_INFO_BY_FD, struct.pack("IIQ", fd, size, ctypes.addressof(ib)))
    return ib.raw


def program(prog_id):
    """JIT image per subprogram (address, bytes) and source line per JIT address."""
    fd = bpf(BPF_PROG_GET_FD_BY_ID, struct.pack("I", prog_id))
    try:
        return program_info(fd)
    finally:
        os.close(fd)


def program_info(fd):
    raw = obj_info(fd, 256)
    (jlen,) = struct.unpack_from("I", raw, 16)
    nks, nfl = struct.unpack_from("II", raw, 104)
    (btf_id,) = struct.unpack_from("I", raw, 128)
    (nr_li,) = struct.unpack_from("I", raw, 148)
    (nr_jli,) = struct.unpack_from("I", raw, 168)
    (li_rs,) = struct.unpack_from("I", raw, 172)
    if not jlen or not nks or not nr_jli:
        sys.exit("jitprof: the kernel gave no JIT image, symbols or JIT line table for this "
                 "program (not JIT-compiled, no BTF line info, or not root)")
    img = ctypes.create_string_buffer(jlen)
    ks = ctypes.create_string_buffer(nks * 8)
    fl = ctypes.create_string_buffer(nfl * 4)
    li = ctypes.create_string_buffer(nr_li * li_rs)
    jli = ctypes.create_string_buffer(nr_jli * 8)
    req = bytearray(256)
    struct.pack_into("I", req, 16, jlen)
    struct.pack_into("Q", req, 24, ctypes.addressof(img))
    struct.pack_into("II", req, 104, nks, nfl)
    struct.pack_into("QQ", req, 112, ctypes.addressof(ks), ctypes.addressof(fl))
    struct.pack_into("I", req, 148, nr_li)
    struct.pack_into("Q", req, 152, ctypes.addressof(li))
    struct.pack_into("Q", req, 160, ctypes.addressof(jli))
    struct.pack_into("I", req, 168, nr_jli)
    struct.pack_into("II", req, 172, li_rs, 8)
    obj_info(fd, 256, bytes(req))
    # the BTF's string section names the files and holds the source lines
    bfd = bpf(BPF_BTF_GET_FD_BY_ID, struct.pack("I", btf_id))
    try:
        (bsz,) = struct.unpack_from("I", obj_info(bfd, 32), 8)
        bb = ctypes.create_string_buffer(bsz)
        req = bytearray(32)
        struct.pack_into("QI", req, 0, ctypes.addressof(bb), bsz)
        obj_info(bfd, 32, bytes(req))
    finally:
        os.close(bfd)
    b = bb.raw
    hl, _to, _tl, so, sl = struct.unpack_from("IIIII", b, 4)
    strs = b[hl + so : hl + so + sl]

    def s(o):
        return strs[o : strs.index(b"\0", o)].decode(errors="replace")

    src = {}
    for i in range(min(nr_li, nr_jli)):
        _insn, fo, lo, lc = struct.unpack_from("IIII", li.raw, i * li_rs)
        (a,) = struct.unpack_from("Q", jli.raw, i * 8)
        src[a] = "%s:%d  %s" % (os.path.basename(s(fo)), lc >> 10, s(lo).strip()[:70])
    ksyms = [struct.unpack_from("Q", ks.raw, i * 8)[0] for i in range(nks)]
    flens = [struct.unpack_from("I", fl.raw, i * 4)[0] for i in range(nfl)]
    funcs, off = [], 0
    for k, n in zip(ksyms, flens):
        funcs.append((k, img.raw[off : off + n]))
        off += n
    return funcs, src


def disassemble(addr, code):
    with tempfile.NamedTemporaryFile(suffix=".bin") as f:
        f.write(code)
        f.flush()
        out = subprocess.run(
            # one line per instruction however long (movabs is 10 bytes), zeros not elided
            ["objdump", "-D", "-z", "--insn-width=16", "-b", "binary", "-m" + OBJDUMP_ARCH,
             "--adjust-vma=%d" % addr, f.name],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    for line in out.splitlines():
        m = re.match(r"\s*([0-9a-f]+):\s+(?:[0-9a-f]{2} )+\s*(.*)", line)
        if m and m.group(2).strip():
            yield int(m.group(1), 16), m.group(2).strip()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("prog_id", type=int)
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--asm", action="store_true")
    args = ap.parse_args()
    if SYS_BPF is None or OBJDUMP_ARCH is None:
        sys.exit("jitprof: no bpf syscall number or objdump target known for " + platform.machine())
    funcs, src = program(args.prog_id)
    samples = collections.Counter()
    for line in sys.stdin:
        m = re.match(r"\s*([0-9a-f]+)", line)
        if m:
            samples[int(m.group(1), 16)] += 1
    starts = sorted((k, k + len(code)) for k, code in funcs)

    def inside(a):
        i = bisect.bisect_right(starts, (a, float("inf"))) - 1
        return i >= 0 and a < starts[i][1]

    inprog = {a: c for a, c in samples.items() if inside(a)}
    total = sum(inprog.values())
    print("%d samples in the program, %d outside it" % (total, sum(samples.values()) - total))
    if not total:
        return
    src_addrs = sorted(src)

    def line_of(a):
        i = bisect.bisect_right(src_addrs, a) - 1
        return src[src_addrs[i]] if i >= 0 else ""

    rows = []  # (samples, subprogram, index, asm, source, previous asm, its source)
    subs = []  # (samples, subprogram, first source line)
    for n, (k, code) in enumerate(funcs):
        fs = sum(c for a, c in inprog.items() if k <= a < k + len(code))
        subs.append((fs, n, src.get(k, line_of(k))))
        if args.asm:
            print("\n== subprogram %d at %x, %d bytes, %d samples" % (n, k, len(code), fs))
        prev = ("", "")
        for idx, (a, asm) in enumerate(disassemble(k, code)):
            c = inprog.get(a, 0)
            if args.asm:
                if a in src:
                    print("             ; " + src[a])
                print("%6s %5d  %s" % (c or "", idx, asm[:70]))
            if c:
                rows.append((c, n, idx, asm, line_of(a)) + prev)
            prev = (asm, line_of(a))
    print("\nper subprogram (named by its first source line):")
    for c, n, name in sorted(subs, reverse=True):
        if c:
            print("%6d %5.1f%%  %-4d %s" % (c, 100.0 * c / total, n, name))
    print("\nper instruction: the sample's instruction and the one before it (a load that waited")
    print("shows as the instruction after it)")
    print("%6s %6s  %-4s %-6s %-30s %s" % ("samples", "share", "sub", "insn", "instruction before", "its source"))
    for c, n, idx, asm, line, pasm, pline in sorted(rows, reverse=True)[: args.top]:
        print("%6d %5.1f%%  %-4d %-6d %-30s %s" % (c, 100.0 * c / total, n, idx, pasm[:30], pline))


if __name__ == "__main__":
    main()
