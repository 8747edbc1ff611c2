#!/bin/sh
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
# Builds the NAT core's Verilator testbench (hw/build/obj_<BLOG2>/Vtb_core), replays every
# packet test vector and the core's own cases through it (hw/tb/vectors.py), and checks
# that Icarus Verilog and Yosys take the RTL too. Ends with the line "N passed, M failed";
# exits non-zero on any failure or when it cannot run. NX_HW_BLOG2: log2 of the buckets
# per direction (default 8: 1k entries; 12: 16k).
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
out=$(NX_HW_SIM="$B/obj_$BLOG2/Vtb_core" NX_HW_BLOG2="$BLOG2" python3 "$HW/tb/vectors.py")
rc=$?
last=$(printf '%s\n' "$out" | tail -1)
printf '%s\n' "$out" | sed '$d'
pass=$(printf '%s\n' "$last" | sed -n 's/^\([0-9]*\) passed, \([0-9]*\) failed$/\1/p')
fail=$(printf '%s\n' "$last" | sed -n 's/^\([0-9]*\) passed, \([0-9]*\) failed$/\2/p')
if [ -z "$pass" ] || [ -z "$fail" ]; then
	echo "$last"
	pass=0
	fail=1
elif [ "$rc" -ne 0 ] && [ "$fail" -eq 0 ]; then
	fail=1
fi

# the other tools the RTL must be accepted by: Icarus Verilog compiles it, Yosys elaborates it
if command -v iverilog >/dev/null 2>&1 &&
	iverilog -g2012 -s nx_core -o "$B/nx_core.vvp" $srcs >"$B/iverilog.log" 2>&1; then
	pass=$((pass + 1))
else
	echo "FAIL rtl: Icarus Verilog (iverilog -g2012) does not compile the core ($B/iverilog.log)"
	fail=$((fail + 1))
fi
if command -v yosys >/dev/null 2>&1 &&
	yosys -q -p "read_verilog -sv $srcs; hierarchy -check -top nx_core; proc" >"$B/yosys.log" 2>&1; then
	pass=$((pass + 1))
else
	echo "FAIL rtl: Yosys (read_verilog -sv, hierarchy, proc) does not take the core ($B/yosys.log)"
	fail=$((fail + 1))
fi
echo "rtl        Icarus and Yosys accept the core (2 checks)"
# bench-hw's netlist step: absorb.py moves only the registers it may into block RAMs
if command -v yosys >/dev/null 2>&1 && msg=$(sh "$HW/bench/absorb_test.sh" "$B/absorb"); then
	pass=$((pass + 1))
	echo "bench      $msg"
else
	echo "FAIL bench: ${msg:-absorb_test.sh did not run (no yosys)}"
	fail=$((fail + 1))
fi
# and floorplan.py places the 1k core's block RAMs as planned, leaving other netlists alone
if msg=$(sh "$HW/bench/floorplan_test.sh" "$B/floorplan"); then
	pass=$((pass + 1))
	echo "bench      $msg"
else
	echo "FAIL bench: ${msg:-floorplan_test.sh did not run}"
	fail=$((fail + 1))
fi
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
