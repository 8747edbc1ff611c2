#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
# Fetches the Debian kernel of a release (bookworm: 6.1 LTS, trixie: 6.12 LTS) without
# installing it: apt-get download of the package linux-image-amd64 depends on, dpkg-deb -x
# into the cache, depmod there. Prints the directory (KERNEL_DIR for vm.sh) on stdout.
#
#   tests/kernels/fetch.sh bookworm|trixie
#
# Cache: $NATRIX_KERNEL_CACHE (default /var/cache/natrix-kernels)/<release>/
#   apt/            the release's own apt state (lists, archives): the system's sources
#                   and lists are not touched
#   <package>_<version>/   the extracted package (boot/vmlinuz-*, lib/modules/*), one per
#                   version; a version already there is not downloaded again
# The release's package lists are read again after NATRIX_KERNEL_MAXAGE seconds (default
# 21600: 6 h). Offline (apt-get update fails): the newest version in the cache is used.
set -euo pipefail

release=${1:?usage: fetch.sh bookworm|trixie}
case $release in
bookworm | trixie) ;;
*) echo "fetch.sh: unknown release $release (bookworm, trixie)" >&2; exit 2 ;;
esac
cache=${NATRIX_KERNEL_CACHE:-/var/cache/natrix-kernels}/$release
arch=$(dpkg --print-architecture)
log() { echo "fetch.sh ($release): $*" >&2; }

# The archive's signatures are checked: bookworm's debian-archive-keyring (2023.3+deb12u2
# of April 2025 and later) carries trixie's archive keys as well (debian-archive-trixie-*.gpg).
keyring=/usr/share/keyrings/debian-archive-keyring.gpg
for k in "$keyring" "/usr/share/keyrings/debian-archive-$release-stable.gpg"; do
	[[ -e $k ]] || { echo "fetch.sh: $k missing: apt-get install debian-archive-keyring (bookworm's 2023.3+deb12u2 or later knows trixie)" >&2; exit 1; }
done

apt_dir=$cache/apt
mkdir -p "$apt_dir/lists/partial" "$apt_dir/cache/archives/partial" "$apt_dir/etc"
cat >"$apt_dir/etc/sources.list" <<SRC
deb [arch=$arch signed-by=$keyring] http://deb.debian.org/debian $release main
deb [arch=$arch signed-by=$keyring] http://deb.debian.org/debian $release-updates main
deb [arch=$arch signed-by=$keyring] http://deb.debian.org/debian-security $release-security main
SRC
apt_opts=(
	-o "Dir::Etc::SourceList=$apt_dir/etc/sources.list"
	-o Dir::Etc::SourceParts=/dev/null
	-o "Dir::State::Lists=$apt_dir/lists"
	-o "Dir::Cache=$apt_dir/cache"
	-o Dir::Etc::Preferences=/dev/null
	-o Dir::Etc::PreferencesParts=/dev/null
	-o "APT::Architecture=$arch"
	-o APT::Architectures="$arch"
	-o Debug::NoLocking=1
	-o Acquire::Languages=none
	-o quiet=1
	-o APT::Sandbox::User=root
	-o Acquire::IndexTargets::deb::DEP-11::DefaultEnabled=false
	-o Acquire::IndexTargets::deb::DEP-11-icons::DefaultEnabled=false
	-o Acquire::IndexTargets::deb::DEP-11-icons-small::DefaultEnabled=false
)

newest_cached() {
	# shellcheck disable=SC2012
	ls -d "$cache"/linux-image-*/ 2>/dev/null | while read -r d; do
		[[ -e $d/.complete ]] && echo "$d"
	done | sort -V | tail -1
}

# The lists are read again when older than NATRIX_KERNEL_MAXAGE seconds (default 6 h)
stamp=$apt_dir/lists/.updated
maxage=${NATRIX_KERNEL_MAXAGE:-21600}
if [[ -e $stamp ]] && (($(date +%s) - $(stat -c %Y "$stamp") < maxage)); then
	:
elif apt-get "${apt_opts[@]}" update >"$apt_dir/update.log" 2>&1 && ! grep -q '^[WE]:' "$apt_dir/update.log"; then
	touch "$stamp"
else
	d=$(newest_cached)
	if [[ -n $d ]]; then
		log "apt-get update failed (offline?): using the cached ${d%/}"
		echo "${d%/}"
		exit 0
	fi
	cat "$apt_dir/update.log" >&2
	log "apt-get update failed and nothing is cached"
	exit 1
fi
# linux-image-amd64 -> linux-image-6.x.y-N-amd64 (the candidate of the newest suite)
meta=linux-image-$arch
pkg=$(apt-cache "${apt_opts[@]}" depends "$meta" | awk '$1 == "Depends:" && $2 ~ /^linux-image-/ { print $2; exit }')
[[ -n $pkg ]] || { log "cannot resolve $meta's kernel package"; exit 1; }
ver=$(apt-cache "${apt_opts[@]}" policy "$pkg" | awk '$1 == "Candidate:" { print $2 }')
[[ -n $ver && $ver != "(none)" ]] || { log "no candidate for $pkg"; exit 1; }
dir=$cache/${pkg}_$ver
if [[ -e $dir/.complete ]]; then
	[[ ${NATRIX_KERNEL_VERBOSE:-0} == 0 ]] || log "$pkg $ver cached in $dir"
	echo "$dir"
	exit 0
fi

log "downloading $pkg $ver"
work=$(mktemp -d "$cache/.fetch.XXXXXX")
trap 'rm -rf "$work"' EXIT
(cd "$work" && apt-get "${apt_opts[@]}" download "$pkg=$ver" >&2)
deb=$(ls "$work"/*.deb)
mkdir "$work/root"
dpkg-deb -x "$deb" "$work/root"
# usr-merged packages (trixie) ship usr/lib/modules; depmod -b wants <base>/lib/modules
if [[ ! -e $work/root/lib && -d $work/root/usr/lib ]]; then ln -s usr/lib "$work/root/lib"; fi
kver=$(ls "$work/root/lib/modules")
[[ $(wc -w <<<"$kver") -eq 1 ]] || { log "not one module directory: $kver"; exit 1; }
[[ -e $work/root/boot/vmlinuz-$kver ]] || { log "no boot/vmlinuz-$kver in $deb"; exit 1; }
depmod -b "$work/root" "$kver"
printf 'package=%s\nversion=%s\nkernel=%s\nvmlinuz=boot/vmlinuz-%s\nmodules=lib/modules/%s\n' \
	"$pkg" "$ver" "$kver" "$kver" "$kver" >"$work/root/kernel.env"
touch "$work/root/.complete"
rm -rf "$dir"
mv "$work/root" "$dir"
rm -f "$deb"
# older versions of the same release: removed (each is ~0.5 GB extracted)
for old in "$cache"/linux-image-*/; do
	[[ ${old%/} == "$dir" ]] || rm -rf "${old%/}"
done
log "$pkg $ver extracted in $dir"
echo "$dir"
