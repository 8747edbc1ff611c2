#!/bin/sh
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
# Builds the NAT core's Verilator testbench (hw/build/Vtb_core) and replays every packet
# test vector and the core's own cases through it (hw/tb/vectors.py). Ends with the line
# "N passed, M failed"; exits non-zero on any failure or when it cannot run.
set -u
HW=$(cd "$(dirname "$0")/.." && pwd)
B="$HW/build"
RTL="nx_csum_pkg.sv nx_core_pkg.sv nx_fifo.sv nx_dir.sv nx_core.sv"
BLOG2=${NX_HW_BLOG2:-8}
if ! command -v verilator >/dev/null 2>&1; then
	echo "cannot run: verilator not installed (apt-get install verilator)"
	echo "0 passed, 1 failed"
	exit 1
fi
if ! command -v python3 >/dev/null 2>&1; then
	echo "cannot run: python3 not installed"
	echo "0 passed, 1 failed"
	exit 1
fi
mkdir -p "$B"
srcs=""
for f in $RTL; do srcs="$srcs $HW/rtl/$f"; done
if ! verilator --cc --exe --build -j 2 -O2 -Wall -Wno-DECLFILENAME -Wno-UNUSEDSIGNAL -Wno-UNUSEDPARAM \
	--top-module nx_core -GBLOG2="$BLOG2" -Mdir "$B/obj_$BLOG2" $srcs "$HW/tb/tb_core.cpp" \
	-o Vtb_core >"$B/verilator_$BLOG2.log" 2>&1; then
	tail -20 "$B/verilator_$BLOG2.log"
	echo "cannot run: the Verilator build failed ($B/verilator_$BLOG2.log)"
	echo "0 passed, 1 failed"
	exit 1
fi
NX_HW_SIM="$B/obj_$BLOG2/Vtb_core" NX_HW_BLOG2="$BLOG2" exec python3 "$HW/tb/vectors.py"
