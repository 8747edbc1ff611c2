#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
# Checks what building and testing natrix needs, and installs what is missing (Debian 12).
set -euo pipefail

# What is checked depends on the target (make passes it): build needs the compilers and
# libraries only; test adds the tools the tests drive; bench and lint add theirs; hw is
# make hw-test's alone (the RTL's simulators and Yosys; no Rust, no BPF); kernels is what
# tests/kernels/ needs besides build's (make kernel-matrix: Debian's kernels under qemu).
what=${1:-build}
case $what in build | test | bench | lint | hw | kernels) ;; *) echo "deps: unknown target $what (build, test, bench, lint, hw, kernels)" >&2; exit 2 ;; esac
need_pkgs=()
check() { # check <command-or-file> <debian package>
	if [[ $1 == /* ]]; then [[ -e $1 ]] || need_pkgs+=("$2")
	else command -v "$1" >/dev/null 2>&1 || need_pkgs+=("$2"); fi
}
if [[ $what == hw ]]; then
	check verilator verilator # hw/tb/: testbenches compiled to C++ (Debian 12: 5.006)
	check g++ g++             # what Verilator's output is compiled with
	check make make
	check iverilog iverilog   # the RTL under a second simulator (Debian 12: 11)
	check vvp iverilog
	check yosys yosys         # hw/formal/: the SAT proofs; synthesis (Debian 12: 0.23)
	check /usr/include/linux/types.h linux-libc-dev # __u16, __u32 for bpf/nx_csum.h on the host
fi
if [[ $what == kernels ]]; then
	check qemu-system-x86_64 qemu-system-x86 # tests/kernels/vm.sh: the kernels under -accel tcg
	check busybox busybox-static # the guest's initramfs (static: it runs before the 9p root)
	if command -v busybox >/dev/null && ldd "$(command -v busybox)" >/dev/null 2>&1; then need_pkgs+=(busybox-static); fi
	check cpio cpio
	check depmod kmod # modules.dep for the extracted kernels; modprobe in the guest
	check xz xz-utils # Debian 13's modules are .ko.xz
	check jq jq # the test binaries' paths from cargo's JSON
	check clang-19 clang-19 # the data plane built with the newer compiler as well (Debian 12: 19.1.7)
	check dpkg-deb dpkg
	# trixie's archive key: in debian-archive-keyring 2023.3+deb12u2 (April 2025) and later
	check /usr/share/keyrings/debian-archive-trixie-stable.gpg debian-archive-keyring
fi
# build
if [[ $what != hw && $what != kernels ]]; then
	check clang clang
	check llvm-strip llvm
	check pkg-config pkg-config
	check /usr/include/libelf.h libelf-dev
	check /usr/include/zlib.h zlib1g-dev
	check /usr/include/linux/bpf.h linux-libc-dev
	check /usr/include/pcap/pcap.h libpcap-dev # the capture filter compiler (src/capture/): libpcap.so to link
	# clang -target bpf defines no __x86_64__, so glibc's headers (linux/if.h includes
	# sys/socket.h) ask for the 32-bit stubs
	if [[ $(uname -m) == x86_64 ]]; then check /usr/include/x86_64-linux-gnu/gnu/stubs-32.h libc6-dev-i386; fi
	check make make
fi
if [[ $what == test || $what == bench ]]; then
	check ip iproute2
	check ethtool ethtool
	check ping iputils-ping
	check curl curl
	check python3 python3
	check /usr/lib/python3/dist-packages/matplotlib python3-matplotlib # the bench's plots (its smoke run is a test)
	check unshare util-linux
	check turnserver coturn # tests/rfc_netns.rs: NAT behaviour as a TURN server sees it
	check tshark tshark # the NAT log's IPFIX, decoded by Wireshark's dissector
	check text2pcap wireshark-common
	check dumpcap wireshark-common # tests/capture_filter.rs: what libpcap compiles, its messages
	check promtool prometheus # /metrics and the shipped alert rules, checked by Prometheus' own tool
fi
if [[ $what == bench ]]; then
	check nft nftables
	check conntrack conntrack # flushes nftables' state between runs
fi
if [[ $what == lint ]]; then
	check clang-format clang-format
fi

if ((${#need_pkgs[@]})); then
	echo "deps: installing ${need_pkgs[*]}"
	if [[ $(id -u) -ne 0 ]]; then echo "deps: need root for apt-get" >&2; exit 1; fi
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -q || true
	apt-get install -y -q --no-install-recommends "${need_pkgs[@]}"
fi
if [[ $what == kernels ]]; then
	echo "deps (kernels): ok ($(qemu-system-x86_64 --version | head -1 | awk '{print "qemu", $4}'), $(clang-19 --version | head -1 | grep -o 'clang version [0-9.]*'))"
	exit 0
fi
if [[ $what == hw ]]; then
	echo "deps (hw): ok ($(verilator --version | awk '{print $1, $2}'), $(iverilog -V 2>&1 | head -1 | awk '{print "Icarus Verilog", $4}'), $(yosys -V | awk '{print $1, $2}'))"
	exit 0
fi

if ! command -v cargo >/dev/null 2>&1 && [[ ! -x $HOME/.cargo/bin/cargo ]]; then
	echo "deps: no Rust toolchain; installing Debian's cargo (natrix needs rustc >= 1.85)"
	apt-get install -y -q cargo rustc
fi
rustc_v=$( (command -v rustc >/dev/null && rustc --version || "$HOME/.cargo/bin/rustc" --version) | awk '{print $2}')
if [[ $(printf '%s\n1.85.0\n' "$rustc_v" | sort -V | head -1) != 1.85.0 ]]; then
	echo "deps: rustc $rustc_v is older than 1.85 (the locked clap needs it): install a newer toolchain (rustup)" >&2
	exit 1
fi
if [[ $what == lint ]]; then
	for c in rustfmt clippy; do
		if ! cargo "${c/rustfmt/fmt}" --version >/dev/null 2>&1; then
			command -v rustup >/dev/null 2>&1 || { echo "deps: cargo $c missing and no rustup to add it" >&2; exit 1; }
			rustup component add "$c"
		fi
	done
fi
if ! mount | grep -q ' type bpf '; then
	echo "deps: note: no bpffs mounted; natrix mounts one at /sys/fs/bpf when it starts"
fi
echo "deps ($what): ok (clang $(clang --version | head -1 | grep -o '[0-9]*\.[0-9.]*' | head -1), rustc $rustc_v)"
