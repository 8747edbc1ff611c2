#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
# Runs one command on another kernel: boots KERNEL (a Debian kernel extracted by fetch.sh)
# under qemu-system-x86_64 -accel tcg with a busybox initramfs, the host's / shared
# read-only over 9p as the guest's root, and runs CMD there as root in the caller's working
# directory. CMD's stdout and stderr come back on the script's stdout and stderr (live); its
# exit status is the script's.
#
#   tests/kernels/vm.sh KERNEL -- CMD [ARGS...]   run CMD, exit with its status
#   tests/kernels/vm.sh KERNEL                    an interactive shell on the serial console
#                                                 (exit or Ctrl-D powers off; Ctrl-A x kills)
# KERNEL: bookworm or 6.1, trixie or 6.12 (fetch.sh fetches/caches it), or a directory
# holding boot/vmlinuz-<version> and lib/modules/<version> (depmod'ed).
#
# Environment:
#   VM_TIMEOUT   seconds before qemu is killed (default 900; 0: none); exit 124 then
#   VM_MEM       guest memory (default 2G); VM_SMP: CPUs (default 2)
#   VM_RW        host directories made writable in the guest (a tmpfs over each, empty)
#   VM_ENV       names of further variables passed to CMD (RUST_BACKTRACE, RUST_LOG,
#                RUST_TEST_THREADS and NATRIX_* are passed anyway)
#   VM_MODULES   modules loaded before CMD runs (default: veth; others load on demand)
#   VM_APPEND    more kernel command line (default mitigations=off: TCG is ~2x slower with
#                page-table isolation; the verifier's checks for root are the same)
#   VM_CONSOLE=1 the guest's console (boot messages) on stderr as well
#   VM_KEEP=1    keep the temporary directory (console.log, the guest's scripts)
#   VM_QUIET=1   no "exit N in T s" line at the end
#   VM_UNAME_FILE  a file vm.sh writes the guest's uname -r to
# Exit: CMD's status; 124 timeout; 125 the guest did not boot or did not run CMD (the
# console's last lines on stderr).
# The guest: /proc, /sys, /sys/fs/bpf, /sys/kernel/debug, /sys/fs/cgroup, /dev, /run (and
# so /var/run/netns), /tmp and /var/tmp are its own and writable; the rest of / is the
# host's, read-only: the working directory and CMD must not be under /tmp, /var/tmp, /run or
# /dev (vm.sh refuses). Modules come from KERNEL's lib/modules (request_module works).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
die() { echo "vm.sh: $*" >&2; exit 125; }
[[ $# -ge 1 ]] || die "usage: vm.sh KERNEL [-- CMD [ARGS...]]"
kernel=$1
shift
interactive=1
if [[ $# -gt 0 ]]; then
	[[ $1 == -- ]] || die "usage: vm.sh KERNEL [-- CMD [ARGS...]]"
	shift
	[[ $# -gt 0 ]] || die "no command after --"
	interactive=0
fi
case $kernel in
6.1 | bookworm) kdir=$("$here/fetch.sh" bookworm) || die "fetch.sh bookworm failed" ;;
6.12 | trixie) kdir=$("$here/fetch.sh" trixie) || die "fetch.sh trixie failed" ;;
*) kdir=$kernel ;;
esac
kdir=$(realpath "$kdir")
[[ -d $kdir/lib/modules ]] || die "$kdir: no lib/modules"
kver=$(ls "$kdir/lib/modules")
[[ $(wc -w <<<"$kver") -eq 1 ]] || die "$kdir: not one directory in lib/modules: $kver"
vmlinuz=$kdir/boot/vmlinuz-$kver
[[ -r $vmlinuz ]] || die "no $vmlinuz"
moddir=$(realpath "$kdir/lib/modules/$kver")
[[ $moddir == /* ]] || die "bad module directory"
for t in qemu-system-x86_64 busybox cpio modprobe depmod timeout xz; do
	command -v "$t" >/dev/null || die "$t missing (scripts/deps.sh kernels installs it)"
done
! ldd "$(command -v busybox)" >/dev/null 2>&1 || die "busybox is not static: apt-get install busybox-static"

# the guest's own /tmp, /var/tmp, /run and /dev hide the host's: nothing there can be run,
# but for a working directory under /tmp or /var/tmp (a clone there, as CI may make), which
# is shared on its own, read-only, at the same path
share=
case $(realpath -m "$PWD")/ in
/tmp/?* | /var/tmp/?*) share=$(realpath -m "$PWD") ;;
esac
for p in "$PWD" "${1:-/}"; do
	[[ $p == /* ]] || continue
	rp=$(realpath -m "$p")
	[[ -n $share && ( $rp == "$share" || $rp == "$share"/* ) ]] && continue
	case $rp/ in
	/tmp/* | /var/tmp/* | /run/* | /dev/*) die "$p: under /tmp, /var/tmp, /run or /dev, which the guest has its own of (work from elsewhere, or from the directory it is in)" ;;
	esac
done

# --- the initramfs: busybox, the modules that mount the 9p root, /init. Cached per kernel.
read -r -d '' init_script <<'INIT' || true
#!/bin/busybox sh
/bin/busybox --install -s /bin
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
fail() { echo "natrix-vm: $*"; echo "natrix-vm: init failed"; echo o >/proc/sysrq-trigger; sleep 10; }
for m in $(cat /modules.order); do insmod "/modules/$m" || fail "insmod $m"; done
mkdir -p /newroot
mount -t 9p -o trans=virtio,version=9p2000.L,msize=262144,cache=loose,ro hostroot /newroot || fail "mount of the 9p root"
mount -t tmpfs -o mode=755 run /newroot/run || fail "tmpfs on /run"
mkdir -p /newroot/run/natrix-vm /newroot/run/netns
mount -t 9p -o trans=virtio,version=9p2000.L,msize=262144 natrixio /newroot/run/natrix-vm || fail "mount of the io share"
. /newroot/run/natrix-vm/config
mount -t proc proc /newroot/proc
mount -t sysfs sys /newroot/sys
mount -t bpf bpf /newroot/sys/fs/bpf || fail "bpffs"
mount -t debugfs debugfs /newroot/sys/kernel/debug 2>/dev/null
mount -t tracefs tracefs /newroot/sys/kernel/tracing 2>/dev/null
mount -t cgroup2 cgroup2 /newroot/sys/fs/cgroup 2>/dev/null
mount -t devtmpfs dev /newroot/dev
mkdir -p /newroot/dev/pts /newroot/dev/shm
mount -t devpts -o ptmxmode=666 devpts /newroot/dev/pts
mount -t tmpfs shm /newroot/dev/shm
mount -t tmpfs -o mode=1777 tmp /newroot/tmp
mount -t tmpfs -o mode=1777 vartmp /newroot/var/tmp
if [ -d "/newroot$HOST_MODULES" ]; then
	mount -t tmpfs -o mode=755 modules "/newroot$HOST_MODULES" || fail "tmpfs on $HOST_MODULES"
	mkdir -p "/newroot$HOST_MODULES/$KVER"
	mount -o bind "/newroot$MODDIR" "/newroot$HOST_MODULES/$KVER" || fail "bind of $MODDIR"
fi
for d in $RW; do mount -t tmpfs -o mode=1777 rw "/newroot$d" || fail "tmpfs on $d"; done
if [ -n "$SHARE" ]; then
	mkdir -p "/newroot$SHARE"
	mount -t 9p -o trans=virtio,version=9p2000.L,msize=262144,cache=loose,ro hostshare "/newroot$SHARE" || fail "mount of $SHARE"
fi
umount /proc /sys /dev
exec switch_root /newroot /bin/bash /run/natrix-vm/stage2
INIT
initramfs_modules="9pnet_virtio 9p virtio_pci"
cache=${NATRIX_KERNEL_CACHE:-/var/cache/natrix-kernels}/initramfs
key=$( (echo "$kver $moddir $initramfs_modules"; echo "$init_script"; busybox | head -1; stat -c %Y "$moddir/modules.dep") | sha256sum | cut -c1-16)
initrd=$cache/$kver-$key.cpio.gz
if [[ ! -s $initrd ]]; then
	mkdir -p "$cache"
	stage=$(mktemp -d "$cache/.build.XXXXXX")
	trap 'rm -rf "$stage"' EXIT
	mkdir -p "$stage"/{bin,proc,sys,dev,modules,newroot}
	cp "$(command -v busybox)" "$stage/bin/busybox"
	printf '%s\n' "$init_script" >"$stage/init"
	chmod 755 "$stage/init"
	n=0
	while read -r verb path _; do
		[[ $verb == insmod ]] || continue
		base=$(basename "$path")
		base=${base%.xz}; base=${base%.zst}; base=${base%.gz}
		grep -qx "[0-9]*-$base" "$stage/modules.order" 2>/dev/null && continue
		n=$((n + 1))
		out=$(printf '%02d-%s' "$n" "$base")
		case $path in
		*.xz) xz -dc "$path" >"$stage/modules/$out" ;;
		*.zst) zstd -qdc "$path" >"$stage/modules/$out" ;;
		*.gz) gzip -dc "$path" >"$stage/modules/$out" ;;
		*) cp "$path" "$stage/modules/$out" ;;
		esac
		echo "$out" >>"$stage/modules.order"
	done < <(for m in $initramfs_modules; do modprobe -d "$kdir" -S "$kver" --show-depends "$m"; done)
	touch "$stage/modules.order"
	(cd "$stage" && find . -mindepth 1 | LC_ALL=C sort | cpio -o -H newc --quiet -R 0:0 | gzip -1) >"$stage.cpio.gz"
	mv "$stage.cpio.gz" "$initrd"
	rm -rf "$stage"
	trap - EXIT
	# initramfs images of earlier versions of this kernel's modules or of this script
	find "$cache" -maxdepth 1 -name "$kver-*.cpio.gz" ! -name "$(basename "$initrd")" -delete
fi

# --- one run: a temporary directory shared read-write as the guest's /run/natrix-vm
tmp=$(mktemp -d /tmp/natrix-vm.XXXXXX)
qpid=
tails=()
cleanup() {
	[[ -n $qpid ]] && kill -KILL "$qpid" 2>/dev/null
	for p in "${tails[@]}"; do kill "$p" 2>/dev/null; done
	wait 2>/dev/null
	if [[ ${VM_KEEP:-0} == 1 ]]; then echo "vm.sh: kept $tmp" >&2; else rm -rf "$tmp"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM
io=$tmp/io
mkdir "$io"
host_modules=$(realpath -m /lib/modules)
rw=
for d in ${VM_RW:-}; do
	d=$(realpath -m "$d")
	[[ -d $d ]] || die "VM_RW: $d is not a directory"
	rw+=" $d"
done
{
	printf 'KVER=%q\nMODDIR=%q\nHOST_MODULES=%q\nRW=%q\nSHARE=%q\n' "$kver" "$moddir" "$host_modules" "$rw" "$share"
} >"$io/config"
{
	echo 'export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root TERM=${TERM:-dumb} LANG=C.UTF-8'
	for v in RUST_BACKTRACE RUST_LOG RUST_TEST_THREADS RUST_MIN_STACK ${VM_ENV:-} $(compgen -v NATRIX_ || true); do
		[[ -n ${!v+x} ]] && printf 'export %s=%q\n' "$v" "${!v}"
	done
	printf 'cd %q || exit 125\n' "$PWD"
	if ((interactive)); then
		echo 'exec bash -i'
	else
		printf 'exec'
		printf ' %q' "$@"
		echo
	fi
} >"$io/cmd"
cat >"$io/stage2" <<STAGE2
# the guest's PID 1 after switch_root (bash from the host's /)
exec </dev/null
hostname natrix-vm
ip link set lo up 2>/dev/null
# the kernel's request_module and the modules below: from KERNEL's lib/modules (the host's
# /lib/modules, when there is one, shows it too)
printf '#!/bin/sh\nexec /sbin/modprobe -d %q "\$@"\n' "$kdir" >/run/natrix-modprobe
chmod 755 /run/natrix-modprobe
echo /run/natrix-modprobe >/proc/sys/kernel/modprobe
for m in ${VM_MODULES-veth}; do /run/natrix-modprobe "\$m" || echo "natrix-vm: modprobe \$m failed" >/dev/console; done
uname -r >/run/natrix-vm/uname
echo "natrix-vm: running on \$(uname -r)" >/dev/console
if [[ $interactive == 1 ]]; then
	setsid -c -w bash /run/natrix-vm/cmd <>/dev/ttyS0 >&0 2>&0
	rc=\$?
else
	bash /run/natrix-vm/cmd >/run/natrix-vm/stdout 2>/run/natrix-vm/stderr
	rc=\$?
fi
echo "\$rc" >/run/natrix-vm/rc.tmp && mv /run/natrix-vm/rc.tmp /run/natrix-vm/rc
echo "natrix-vm: exit \$rc" >/dev/console
sync
echo o >/proc/sysrq-trigger
sleep 30
STAGE2
: >"$io/stdout"
: >"$io/stderr"

append="console=ttyS0 panic=-1 oops=panic quiet loglevel=4 ${VM_APPEND-mitigations=off}"
((interactive)) && append=${append/quiet loglevel=4/loglevel=4}
qemu=(qemu-system-x86_64 -accel tcg -cpu max -smp "${VM_SMP:-2}" -m "${VM_MEM:-2G}"
	-nodefaults -no-user-config -display none -no-reboot
	-kernel "$vmlinuz" -initrd "$initrd" -append "$append"
	-fsdev "local,id=hostroot,path=/,security_model=none,readonly=on,multidevs=remap"
	-device virtio-9p-pci,fsdev=hostroot,mount_tag=hostroot
	-fsdev "local,id=natrixio,path=$io,security_model=none"
	-device virtio-9p-pci,fsdev=natrixio,mount_tag=natrixio)
if [[ -n $share ]]; then
	qemu+=(-fsdev "local,id=hostshare,path=$share,security_model=none,readonly=on,multidevs=remap"
		-device virtio-9p-pci,fsdev=hostshare,mount_tag=hostshare)
fi
timeout=${VM_TIMEOUT:-900}
((interactive)) && [[ -z ${VM_TIMEOUT:-} ]] && timeout=0
t0=$(date +%s%N)
if ((interactive)); then
	echo "vm.sh: $kver, interactive (Ctrl-A x kills the guest)" >&2
	qemu+=(-serial mon:stdio)
	set +e
	timeout -s KILL "$timeout" "${qemu[@]}"
	qrc=$?
	set -e
else
	qemu+=(-serial "file:$tmp/console.log" -monitor none)
	: >"$tmp/console.log"
	timeout -s KILL "$timeout" "${qemu[@]}" </dev/null >"$tmp/qemu.log" 2>&1 &
	qpid=$!
	tail -n +1 --pid="$qpid" -f "$io/stdout" &
	tails+=($!)
	tail -n +1 --pid="$qpid" -f "$io/stderr" >&2 &
	tails+=($!)
	if [[ ${VM_CONSOLE:-0} == 1 ]]; then
		tail -n +1 --pid="$qpid" -f "$tmp/console.log" >&2 &
		tails+=($!)
	fi
	set +e
	wait "$qpid"
	qrc=$?
	set -e
	qpid=
	wait "${tails[@]}" 2>/dev/null || true
	tails=()
fi
ms=$((($(date +%s%N) - t0) / 1000000))
[[ -n ${VM_UNAME_FILE:-} && -s $io/uname ]] && cp "$io/uname" "$VM_UNAME_FILE"
if [[ -s $io/rc ]]; then
	rc=$(cat "$io/rc")
	[[ ${VM_QUIET:-0} == 1 ]] || printf 'vm.sh: %s: exit %s in %d.%d s\n' "$kver" "$rc" $((ms / 1000)) $((ms % 1000 / 100)) >&2
	exit "$rc"
fi
if [[ $qrc == 137 || $qrc == 124 ]]; then
	echo "vm.sh: $kver: timed out after ${timeout} s (VM_TIMEOUT)" >&2
	fail=124
else
	echo "vm.sh: $kver: the guest stopped without running the command (qemu exit $qrc)" >&2
	fail=125
fi
if ! ((interactive)); then
	cat "$tmp/qemu.log" >&2
	echo "vm.sh: the console's last lines:" >&2
	tail -n 40 "$tmp/console.log" | sed 's/^/  | /' >&2
fi
exit "$fail"
