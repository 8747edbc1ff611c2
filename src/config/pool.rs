// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//! `[pool]`: the public addresses and the port range, and the address-prefix and port syntax
//! other sections share.

use std::net::Ipv4Addr;

use super::{key_err, ConfigError, Section};

/// The outside-port table is direct-indexed: 3 protocols x 65536 ports x 8 bytes
/// = 1.5 MiB of kernel memory per pool address, allocated up front (see
/// docs/ARCHITECTURE.md). 4096 addresses (6 GiB) is the most one gateway is
/// sized for; prefixes shorter than /20 could never fit, so they are rejected by
/// length before any counting.
const MAX_POOL_ADDRESSES: u64 = 1 << 12;
const MIN_POOL_PREFIX_LEN: u8 = 20;

#[derive(Debug, Clone, PartialEq)]
pub struct Pool {
    /// Every usable public address, in configured order, prefixes expanded in
    /// ascending order. Network and broadcast addresses of a prefix are
    /// included because the pool is routed to the gateway, not on-link.
    pub addresses: Vec<Ipv4Addr>,
    pub port_lo: u16,
    pub port_hi: u16,
}

pub(super) struct PoolEntry<'a> {
    pub(super) key: String,
    pub(super) text: &'a str,
    pub(super) first: u32,
    pub(super) last: u32,
}

/// Ranges that can never be a NAT source address. 255.255.255.255 is listed
/// before 240.0.0.0/4 so that it gets the more specific explanation.
const RESERVED_RANGES: &[(u32, u32, &str)] = &[
    (0x0000_0000, 0x00ff_ffff, "0.0.0.0/8 (\"this network\")"),
    (0x7f00_0000, 0x7fff_ffff, "127.0.0.0/8 (loopback)"),
    (0xe000_0000, 0xefff_ffff, "224.0.0.0/4 (multicast)"),
    (0xffff_ffff, 0xffff_ffff, "255.255.255.255 (limited broadcast)"),
    (0xf000_0000, 0xffff_ffff, "240.0.0.0/4 (reserved)"),
];

/// Besides the pool, returns its entries as written, so that later sections
/// can name the entry an address came from.
pub(super) fn parse_pool<'a>(sec: &Section<'a>) -> Result<(Pool, Vec<PoolEntry<'a>>), ConfigError> {
    let mut entries = Vec::new();
    for (key, text) in sec.str_array("addresses")? {
        let (first, last) = parse_pool_entry(text).map_err(|m| key_err(&key, m))?;
        entries.push(PoolEntry { key, text, first, last });
    }
    check_pool_overlap(&entries)?;

    let total: u64 = entries.iter().map(|e| u64::from(e.last - e.first) + 1).sum();
    if total > MAX_POOL_ADDRESSES {
        return Err(key_err(
            sec.key("addresses"),
            format!("the pool has {total} addresses; at most {MAX_POOL_ADDRESSES} are supported"),
        ));
    }
    let addresses = entries.iter().flat_map(|e| (e.first..=e.last).map(Ipv4Addr::from)).collect();

    let (port_lo, port_hi) = match sec.str("ports")? {
        None => (1024, 65535),
        Some(s) => parse_port_range(s).map_err(|m| key_err(sec.key("ports"), m))?,
    };
    Ok((Pool { addresses, port_lo, port_hi }, entries))
}

/// Returns the inclusive address range of `"a.b.c.d"` or `"a.b.c.d/len"`.
fn parse_pool_entry(text: &str) -> Result<(u32, u32), String> {
    let (addr, len) = parse_prefix(text, MIN_POOL_PREFIX_LEN)?;
    let first = u32::from(addr);
    let last = first | u32::MAX.checked_shr(u32::from(len)).unwrap_or(0);
    if let Some((_, _, what)) = RESERVED_RANGES.iter().find(|(lo, hi, _)| first <= *hi && *lo <= last) {
        return Err(format!("{text:?} lies in {what}, which cannot be used as a NAT pool address"));
    }
    Ok((first, last))
}

/// Parses `"a.b.c.d"` (a /32) or `"a.b.c.d/len"` with `min_len <= len <= 32`
/// into its network address and length; host bits must be clear.
pub(super) fn parse_prefix(text: &str, min_len: u8) -> Result<(Ipv4Addr, u8), String> {
    let (addr_text, len) = match text.split_once('/') {
        None => (text, 32),
        Some((a, l)) => {
            // u8::from_str would also accept "+24".
            if l.is_empty() || !l.bytes().all(|b| b.is_ascii_digit()) {
                return Err(format!("{text:?}: prefix length {l:?} is not a number"));
            }
            let len = l.parse::<u8>().ok().filter(|n| (min_len..=32).contains(n)).ok_or_else(|| {
                format!("{text:?}: prefix length /{l} is out of range; it must be between /{min_len} and /32")
            })?;
            (a, len)
        }
    };
    // std's parser rejects leading zeros, which avoids the octal ambiguity
    // of inet_aton ("010.0.0.1").
    let addr: Ipv4Addr =
        addr_text.parse().map_err(|_| format!("{addr_text:?} is not an IPv4 address in dotted-quad form"))?;
    let host_mask = u32::MAX.checked_shr(u32::from(len)).unwrap_or(0);
    let first = u32::from(addr);
    if first & host_mask != 0 {
        let network = Ipv4Addr::from(first & !host_mask);
        return Err(format!(
            "{text:?} has host bits set; did you mean \"{network}/{len}\" (or \"{addr}\" for the single address)?"
        ));
    }
    Ok((addr, len))
}

/// Overlaps would hand out the same public address/port twice. Sorting keeps
/// this O(n log n), which matters since the pool may list thousands of /32s.
fn check_pool_overlap(entries: &[PoolEntry]) -> Result<(), ConfigError> {
    let mut order: Vec<usize> = (0..entries.len()).collect();
    order.sort_by_key(|&i| (entries[i].first, i));
    // After sorting by start, an entry overlaps some earlier one iff it
    // overlaps the one reaching furthest so far.
    let mut widest: Option<usize> = None;
    for i in order {
        if let Some(w) = widest {
            let (a, b) = (&entries[w], &entries[i]);
            if b.first <= a.last {
                // Blame the entry that comes later in the file.
                let (earlier, later) = if w < i { (a, b) } else { (b, a) };
                let verb = if a.first == b.first && a.last == b.last { "duplicates" } else { "overlaps" };
                return Err(key_err(
                    &later.key,
                    format!("{:?} {verb} {} ({:?})", later.text, earlier.key, earlier.text),
                ));
            }
            if b.last > a.last {
                widest = Some(i);
            }
        } else {
            widest = Some(i);
        }
    }
    Ok(())
}

fn parse_port_range(s: &str) -> Result<(u16, u16), String> {
    let Some((lo, hi)) = s.split_once('-') else {
        return Err(format!("expected an inclusive range \"lo-hi\" such as \"1024-65535\", found {s:?}"));
    };
    let lo = parse_port(lo)?;
    let hi = parse_port(hi)?;
    if lo == 0 {
        return Err("port 0 is not a valid source port; the range must start at 1 or above".to_owned());
    }
    if lo > hi {
        return Err(format!("range {s:?} is empty: {lo} is above {hi}"));
    }
    Ok((lo, hi))
}

pub(super) fn parse_port(p: &str) -> Result<u16, String> {
    if p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("{p:?} is not a port number"));
    }
    p.parse::<u16>().map_err(|_| format!("port {p} is above 65535"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::tests::{assert_key_errors, key_error, ok, with_pool, IFACES};

    // ---- errors: pool ----

    #[test]
    fn pool_addresses_required() {
        key_error(IFACES, "pool.addresses");
        key_error(&with_pool("ports = \"1024-65535\""), "pool.addresses");
        key_error(&with_pool("addresses = []"), "pool.addresses");
        key_error(&with_pool("addresses = \"203.0.113.1\""), "pool.addresses");
        key_error(&with_pool("addresses = [\"203.0.113.1\", 5]"), "pool.addresses[1]");
    }

    #[test]
    fn pool_address_syntax() {
        assert_key_errors(
            "pool.addresses[1]",
            |entry| with_pool(&format!("addresses = [\"203.0.114.1\", \"{entry}\"]")),
            &[
                ("203.0.113", "not an IPv4 address"),
                ("203.0.113.256", "not an IPv4 address"),
                ("203.0.113.01", "not an IPv4 address"),
                ("2001:db8::1", "not an IPv4 address"),
                (" 203.0.113.1", "not an IPv4 address"),
                ("203.0.113.0/", "not a number"),
                ("203.0.113.0/+24", "not a number"),
                ("203.0.113.0/x", "not a number"),
                ("203.0.0.0/19", "between /20 and /32"),
                ("203.0.113.0/33", "between /20 and /32"),
                ("203.0.113.0/999", "between /20 and /32"),
            ],
        );
    }

    #[test]
    fn pool_prefix_with_host_bits() {
        let m = key_error(&with_pool("addresses = [\"203.0.113.17/29\"]"), "pool.addresses[0]");
        assert!(m.contains("host bits") && m.contains("\"203.0.113.16/29\""), "{m}");
    }

    #[test]
    fn pool_prefix_includes_network_and_broadcast() {
        let c = ok(&with_pool("addresses = [\"203.0.113.0/30\"]"));
        assert_eq!(c.pool.addresses, (0..4).map(|h| Ipv4Addr::new(203, 0, 113, h)).collect::<Vec<_>>());
        let c = ok(&with_pool("addresses = [\"10.0.0.0/20\"]"));
        assert_eq!(c.pool.addresses.len(), 4096);
        assert_eq!(c.pool.addresses[0], Ipv4Addr::new(10, 0, 0, 0));
        assert_eq!(c.pool.addresses[4095], Ipv4Addr::new(10, 0, 15, 255));
    }

    #[test]
    fn pool_keeps_configured_order() {
        let c = ok(&with_pool("addresses = [\"203.0.113.40\", \"198.51.100.2/31\", \"203.0.113.1\"]"));
        assert_eq!(
            c.pool.addresses,
            [
                Ipv4Addr::new(203, 0, 113, 40),
                Ipv4Addr::new(198, 51, 100, 2),
                Ipv4Addr::new(198, 51, 100, 3),
                Ipv4Addr::new(203, 0, 113, 1),
            ]
        );
    }

    #[test]
    fn pool_reserved_ranges() {
        assert_key_errors(
            "pool.addresses[0]",
            |entry| with_pool(&format!("addresses = [\"{entry}\"]")),
            &[
                ("0.0.0.0", "0.0.0.0/8"),
                ("0.1.0.0/20", "0.0.0.0/8"),
                ("127.0.0.1", "loopback"),
                ("224.0.0.1", "multicast"),
                ("239.255.0.0/20", "multicast"),
                ("240.0.0.1", "240.0.0.0/4"),
                ("255.255.255.255", "limited broadcast"),
            ],
        );
        // Neighbours of the reserved ranges are fine.
        ok(&with_pool("addresses = [\"1.0.0.0\", \"126.255.255.255\", \"128.0.0.0\", \"223.255.255.255\"]"));
    }

    #[test]
    fn pool_duplicates_and_overlaps_name_both() {
        let m = key_error(
            &with_pool("addresses = [\"203.0.113.40\", \"203.0.113.1\", \"203.0.113.40\"]"),
            "pool.addresses[2]",
        );
        assert!(m.contains("duplicates pool.addresses[0]"), "{m}");
        // The later entry is blamed even when it sorts first.
        let m =
            key_error(&with_pool("addresses = [\"203.0.113.20\", \"203.0.113.16/29\"]"), "pool.addresses[1]");
        assert!(m.contains("overlaps pool.addresses[0]") && m.contains("\"203.0.113.20\""), "{m}");
        let m = key_error(
            &with_pool("addresses = [\"203.0.113.0/24\", \"198.51.100.1\", \"203.0.113.200\"]"),
            "pool.addresses[2]",
        );
        assert!(m.contains("pool.addresses[0]"), "{m}");
        // Overlap hidden behind a wide earlier prefix is still found.
        let m = key_error(
            &with_pool("addresses = [\"10.0.0.0/20\", \"10.0.1.0/24\", \"10.0.200.1\"]"),
            "pool.addresses[1]",
        );
        assert!(m.contains("pool.addresses[0]"), "{m}");
        // Adjacent is not overlapping.
        ok(&with_pool("addresses = [\"203.0.113.16/29\", \"203.0.113.24/29\", \"203.0.113.15\"]"));
    }

    #[test]
    fn pool_size_limit() {
        let m = key_error(&with_pool("addresses = [\"10.0.0.0/20\", \"10.1.0.0\"]"), "pool.addresses");
        assert!(m.contains("4097") && m.contains("4096"), "{m}");
    }

    #[test]
    fn pool_ports() {
        let base = "addresses = [\"203.0.113.1\"]\n";
        let c = ok(&with_pool(&format!("{base}ports = \"1-256\"\n[nat]\nport_class = false")));
        assert_eq!((c.pool.port_lo, c.pool.port_hi), (1, 256));
        let c = ok(&with_pool(&format!("{base}ports = \"5000-5001\"\n[nat]\nblock_size = 2")));
        assert_eq!((c.pool.port_lo, c.pool.port_hi), (5000, 5001));
        assert_key_errors(
            "pool.ports",
            |ports| with_pool(&format!("{base}ports = {ports}")),
            &[
                ("\"2000\"", "\"lo-hi\""),
                ("\"\"", "\"lo-hi\""),
                ("\"0-65535\"", "port 0"),
                ("\"3000-2000\"", "3000 is above 2000"),
                ("\"1024-65536\"", "above 65535"),
                ("\"1024-99999999999\"", "above 65535"),
                ("\"a-b\"", "not a port number"),
                ("\"1024-\"", "not a port number"),
                ("\"1024 - 2048\"", "not a port number"),
                ("\"1024-2048-4096\"", "not a port number"),
                ("\"-1-5\"", "not a port number"),
                ("1024", "expected a string"),
            ],
        );
    }
}
