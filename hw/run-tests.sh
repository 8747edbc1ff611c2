#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
# make hw-test: every step under hw/, in order. Each step is a command whose last line of
# output is "N passed, M failed"; this script prints the steps' output, sums the counts and
# ends with exactly one line "N passed, M failed". A step that cannot run (a tool missing,
# a build error) or prints no such line counts as one failure, never as a skip. Exit status
# 1 if anything failed.
#
# To add a step: a function below and its name in STEPS.
set -uo pipefail
hw=$(cd "$(dirname "$0")" && pwd)
build=$hw/build
mkdir -p "$build"

need() { # need <tool>...: fail the step if one is missing
	local t
	for t; do
		command -v "$t" >/dev/null 2>&1 || { echo "missing tool: $t (make deps-hw installs it)"; return 1; }
	done
}

CSUM_RTL=("$hw/rtl/nx_csum_pkg.sv" "$hw/rtl/nx_csum_unit.sv")

# Verilator's lint (-Wall), both variants of the unit; Yosys reads and synthesizes them
csum_lint() {
	need verilator yosys || return 1
	local p=0 f=0 r
	for r in 0 1; do
		if verilator --lint-only -Wall -GREGISTERED=$r --top-module nx_csum_unit "${CSUM_RTL[@]}"; then
			p=$((p + 1))
		else
			f=$((f + 1)); echo "verilator lint REGISTERED=$r failed"
		fi
		if yosys -q -p "read_verilog -sv ${CSUM_RTL[*]}; chparam -set REGISTERED $r nx_csum_unit; synth -top nx_csum_unit; check -assert" >"$build/csum_synth_$r.log" 2>&1; then
			p=$((p + 1))
		else
			f=$((f + 1)); echo "yosys synth REGISTERED=$r failed:"; tail -5 "$build/csum_synth_$r.log"
		fi
	done
	echo "$p passed, $f failed"
}

# the proofs (Yosys SAT): hw/formal/prove.sh
csum_formal() {
	"$hw/formal/prove.sh"
}

# the Verilator testbench against bpf/nx_csum.h compiled for the host
csum_verilator() {
	need verilator g++ make || return 1
	local obj=$build/tb_csum
	mkdir -p "$obj"
	verilator --cc --exe --build -j 2 -Wall -Wno-DECLFILENAME -O3 --top-module tb_csum_top \
		-Mdir "$obj" -CFLAGS "-O2 -std=c++17 -I$hw/tb/csum" -o tb_csum \
		"${CSUM_RTL[@]}" "$hw/tb/csum/tb_csum_top.sv" "$hw/tb/csum/tb_csum.cpp" >"$obj/build.log" 2>&1 ||
		{ echo "verilator build failed:"; tail -20 "$obj/build.log"; return 1; }
	"$obj/tb_csum" "${HW_CSUM_VECTORS:-1000000}" ${HW_CSUM_SEED:+"$HW_CSUM_SEED"}
}

# the same RTL under Icarus Verilog
csum_icarus() {
	need iverilog vvp || return 1
	iverilog -g2012 -o "$build/tb_csum_icarus" "${CSUM_RTL[@]}" "$hw/tb/csum/tb_csum_icarus.sv" || return 1
	vvp -n "$build/tb_csum_icarus"
}

# the NAT core: every XDP packet vector replayed through it byte for byte, its own cases,
# Icarus and Yosys reading it, bench-hw's absorb.py on a small netlist (hw/tb/run.sh)
core() {
	"$hw/tb/run.sh"
}

STEPS=(csum_lint csum_formal csum_verilator csum_icarus core)

total_p=0 total_f=0
for s in "${STEPS[@]}"; do
	echo "== $s"
	start=$SECONDS
	out=$("$s" 2>&1)
	rc=$?
	# indented: the one line at the margin in the form "N passed, M failed" is the last
	[[ -n $out ]] && printf '%s\n' "$out" | sed 's/^/  /'
	last=$(printf '%s\n' "$out" | tail -1)
	if [[ $last =~ ^([0-9]+)\ passed,\ ([0-9]+)\ failed$ ]]; then
		p=${BASH_REMATCH[1]} f=${BASH_REMATCH[2]}
		# a step that exits non-zero with no failure counted still failed
		((rc != 0 && f == 0)) && f=1
	else
		p=0 f=1
		echo "$s: no result line (exit $rc): counted as one failure"
	fi
	total_p=$((total_p + p)) total_f=$((total_f + f))
	echo "-- $s: $p passed, $f failed ($((SECONDS - start)) s)"
done
echo "$total_p passed, $total_f failed"
((total_f == 0))
