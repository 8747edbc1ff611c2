#!/bin/sh
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
# floorplan.py's check (make hw-test runs it): a netlist with the 1k-entry core's 58 block
# RAMs (named as Yosys names them) gets 58 distinct BELs, all DP16KD sites of rows Y22 and
# Y46, each direction's in its own columns with its table's ways on the outer side, and
# nothing else changed; a netlist with more block RAMs than the plan holds (the 4k core's
# 92) and one with a block RAM it does not know come back unchanged. Prints one line; exits
# non-zero on any difference. OUT: the directory for the netlists.
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
OUT=${1:-$(mktemp -d)}
mkdir -p "$OUT"
python3 - "$HERE/floorplan.py" "$OUT" <<'P'
import json, re, subprocess, sys
fp, out = sys.argv[1], sys.argv[2]
def netlist(n_slices, depth, extra=None):
    cells = {"u_i2o.other_lut": {"type": "LUT4", "attributes": {}, "connections": {}}}
    for d in ("u_i2o", "u_o2i"):
        for w in range(4):
            for z in range(depth):
                for k in range(n_slices):
                    cells[f"{d}.g_way[{w}].mem.{z}.{k}"] = {"type": "DP16KD", "attributes": {}, "connections": {}}
        for k in range(9):
            cells[f"{d}.u_data.mem.0.{k}"] = {"type": "DP16KD", "attributes": {}, "connections": {}}
    if extra:
        cells[extra] = {"type": "DP16KD", "attributes": {}, "connections": {}}
    return {"modules": {"nx_core": {"ports": {}, "cells": cells}}}
def run(name, net):
    src, dst = f"{out}/{name}_in.json", f"{out}/{name}_out.json"
    json.dump(net, open(src, "w"))
    msg = subprocess.run([sys.executable, fp, src, dst], capture_output=True, text=True, check=True).stdout.strip()
    return msg, json.load(open(dst))["modules"]["nx_core"]["cells"]
bad = []
net = netlist(5, 1)
msg, cells = run("k1", net)
bels = {n: c["attributes"].get("BEL") for n, c in cells.items() if c["type"] == "DP16KD"}
if any(b is None for b in bels.values()):
    bad.append("a block RAM without a BEL")
else:
    if len(set(bels.values())) != 58:
        bad.append(f"{len(set(bels.values()))} distinct BELs for 58 block RAMs")
    xs = {}
    for n, b in bels.items():
        m = re.match(r"X(\d+)/Y(22|46)/EBR[0-3]$", b)
        if not m:
            bad.append(f"{n} at {b}, not a row Y22/Y46 site")
            continue
        d, kind = n.split(".")[0], "table" if "g_way" in n else "data"
        xs.setdefault((d, kind), []).append(int(m.group(1)))
    if not bad:
        # i2o left of o2i; i2o's table left of its data, o2i's right of its data
        if not max(xs[("u_i2o", "table")]) < min(xs[("u_i2o", "data")]) <= max(xs[("u_i2o", "data")]) < \
               min(xs[("u_o2i", "data")]) <= max(xs[("u_o2i", "data")]) < min(xs[("u_o2i", "table")]):
            bad.append("the columns are not i2o table | i2o data | o2i data | o2i table")
if cells["u_i2o.other_lut"] != net["modules"]["nx_core"]["cells"]["u_i2o.other_lut"]:
    bad.append("a cell other than a block RAM changed")
for name, n in (("k4", netlist(5, 2)), ("unknown", netlist(5, 1, "u_x.mem.0.0"))):
    m2, c2 = run(name, n)
    if c2 != n["modules"]["nx_core"]["cells"] or "unchanged" not in m2:
        bad.append(f"{name}: the netlist changed ({m2})")
if bad:
    print("floorplan.py: " + "; ".join(bad))
    sys.exit(1)
print("floorplan.py: the 1k core's 58 block RAMs on 58 distinct sites of rows Y22/Y46, in four column groups; 4k and unknown netlists unchanged")
P
