#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
"""Places the core's block RAMs in an ECP5-85 netlist (Yosys' JSON, nextpnr's input) by
hand: each DP16KD gets a BEL attribute, which nextpnr takes as a fixed placement.

    floorplan.py IN.json OUT.json

Why: left to itself nextpnr's placer spreads the 58 block RAMs of the 1k-entry core over
three block RAM rows and 70 columns of the die (a way's five block RAMs up to 40 columns
and two rows apart), and the logic between them follows, so register-to-register paths
cross half the die. The plan keeps each direction's block RAMs together, two rows (Y22
and Y46) of adjacent sites: its table's ways on the outer side, its data FIFO towards the
middle, where the two directions' egress and the CPU port meet. Everything else is left
to the placer. Prints what it placed; leaves the netlist unchanged (and says so) when the
block RAMs do not fit the plan (4k entries and more).
"""
import json
import re
import sys

# the block RAM sites of rows Y22 and Y46 of an LFE5U-85, left to right (x, EBR index)
SITES = [(4, 0), (6, 1), (8, 2), (10, 3), (13, 0), (15, 1), (17, 2), (19, 3), (22, 0), (24, 1),
         (26, 2), (28, 3), (31, 0), (33, 1), (35, 2), (37, 3), (40, 0), (42, 1), (44, 2), (46, 3),
         (49, 0), (51, 1), (53, 2), (55, 3), (58, 0), (60, 1), (62, 2), (64, 3), (69, 0), (71, 1),
         (73, 2), (75, 3), (78, 0), (80, 1), (82, 2), (84, 3)]
ROWS = (22, 46)
DIRS = ("u_i2o", "u_o2i")


def main():
    src, dst = sys.argv[1], sys.argv[2]
    d = json.load(open(src))
    top = max(d["modules"].values(), key=lambda m: len(m.get("cells", {})))
    groups = {k: {"table": [], "data": []} for k in DIRS}
    other = []
    for name, c in top["cells"].items():
        if c["type"] != "DP16KD":
            continue
        m = re.match(r"(u_i2o|u_o2i)\.(?:g_way\[(\d+)\]\.mem|u_data\.mem)\.(\d+)\.(\d+)$", name)
        if not m:
            other.append(name)
            continue
        if m.group(2) is not None:
            groups[m.group(1)]["table"].append(((int(m.group(2)), int(m.group(3)), int(m.group(4))), name))
        else:
            groups[m.group(1)]["data"].append(((int(m.group(3)), int(m.group(4))), name))
    if other:
        print(f"floorplan.py: block RAMs outside the plan ({', '.join(other[:3])}): netlist unchanged")
        json.dump(d, open(dst, "w"))
        return
    # per direction: its columns; the table from the outer edge, the data FIFO next to it
    need = [(len(g["table"]) + len(g["data"]) + 1) // 2 for g in groups.values()]
    if sum(need) > len(SITES):
        print(f"floorplan.py: {sum(need)} columns of block RAM needed, {len(SITES)} in the plan: netlist unchanged")
        json.dump(d, open(dst, "w"))
        return
    placed = 0
    col0 = 0
    for di, k in enumerate(DIRS):
        g = groups[k]
        cols = list(range(col0, col0 + need[di]))
        col0 += need[di]
        if di == 0:
            order = cols              # i2o: table on the left, data towards the middle
        else:
            order = cols[::-1]        # o2i: table on the right
        slots = [(c, r) for c in order for r in ROWS]
        cells = [n for _, n in sorted(g["table"])] + [n for _, n in sorted(g["data"])]
        for n, (c, r) in zip(cells, slots):
            x, e = SITES[c]
            top["cells"][n]["attributes"]["BEL"] = f"X{x}/Y{r}/EBR{e}"
            placed += 1
    json.dump(d, open(dst, "w"))
    print(f"floorplan.py: {placed} block RAMs placed, {need[0]} and {need[1]} columns of rows "
          f"Y{ROWS[0]} and Y{ROWS[1]} (the directions side by side)")


if __name__ == "__main__":
    main()
