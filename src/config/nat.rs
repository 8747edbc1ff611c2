// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//! `[nat]`: port blocks, filtering and the per-subscriber settings, the deterministic mode
//! (RFC 7422), `nat.subscribers` and `nat.unreachable_code`.

use ipnet::Ipv4Net;

use super::pool::parse_prefix;
use super::{key_err, ConfigError, Pool, Section};

/// Ports 1-1023 stay in their own class when `nat.port_class` is on (RFC 4787
/// REQ-3), so the dynamic range must begin at or above this.
const FIRST_NON_PRIVILEGED_PORT: u16 = 1024;
const MAX_ICMP_ERRORS_PER_SEC: i64 = 100_000;

#[derive(Debug, Clone, PartialEq)]
pub struct Nat {
    pub block_size: u16,
    pub max_blocks_per_subscriber: u16,
    pub port_parity: bool,
    pub hairpinning: bool,
    pub filtering: Filtering,
    /// 0 means unlimited.
    pub max_new_mappings_per_sec: u32,
    /// RFC 4787 REQ-3: inside source ports 1-1023 are mapped to outside ports
    /// 1-1023, and no others are. `pool.ports` then starts at 1024 or above.
    pub port_class: bool,
    /// Rate limit for the ICMP errors natrix generates itself ("fragmentation
    /// needed", "administratively prohibited"); 0 disables them.
    pub icmp_errors_per_sec: u32,
    /// `nat.mode = "deterministic"` (RFC 7422): each subscriber's pool address
    /// and port range follow from its address. `None`: dynamic port blocks.
    pub deterministic: Option<Deterministic>,
    /// Dynamic mode: pairs of each parity a walk of a subscriber's home block goes at
    /// most, looking for an endpoint's mapping or a port for a new one (bpf/nx_home.h);
    /// capped at half the block. Beyond it a new mapping goes to another block. 0: no
    /// home walk, every mapping in the mapping table.
    pub home_probe: u16,
    /// Dynamic mode: the prefixes whose sources are translated (`nat.subscribers`); a
    /// packet from any other source makes no state and is dropped (`not_subscriber`).
    pub subscribers: Vec<Ipv4Net>,
    /// The ICMP destination unreachable code sent when no mapping can be made
    /// (`nat.unreachable_code`).
    pub unreachable_code: UnreachableCode,
}

/// RFC 6888 REQ-8 asks a CGN for host unreachable (code 1) when it cannot make a mapping;
/// RFC 5508 REQ-8 for administratively prohibited (code 13).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum UnreachableCode {
    #[default]
    HostUnreachable,
    AdminProhibited,
}

impl UnreachableCode {
    /// The ICMP code (type 3).
    pub fn code(self) -> u8 {
        match self {
            UnreachableCode::HostUnreachable => 1,
            UnreachableCode::AdminProhibited => 13,
        }
    }
}

/// Default of `nat.subscribers`: shared address space (RFC 6598) and private space
/// (RFC 1918), where an ISP numbers the subscribers behind a CGN.
pub const DEFAULT_SUBSCRIBERS: [&str; 4] = ["100.64.0.0/10", "10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16"];

/// Deterministic NAT (RFC 7422, bpf/nx_det.h): subscriber `i` of `subscribers`
/// (the i-th address of the prefix) owns `ports` outside ports starting at
/// `pool.ports`' first + (i % `per_addr`) * `ports` on pool address i / `per_addr`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Deterministic {
    pub subscribers: Ipv4Net,
    /// Outside ports per subscriber and protocol; even.
    pub ports: u16,
    /// Subscribers sharing one pool address.
    pub per_addr: u32,
    /// Pairs a lookup or a new mapping's search walks at most (nx_det.h).
    pub probe: u16,
}

impl Deterministic {
    pub fn count(&self) -> u32 {
        1u32.checked_shl(32 - u32::from(self.subscribers.prefix_len())).unwrap_or(0).max(1)
    }
}

impl Default for Nat {
    fn default() -> Self {
        Nat {
            block_size: 256,
            max_blocks_per_subscriber: 4,
            port_parity: true,
            hairpinning: true,
            filtering: Filtering::EndpointIndependent,
            max_new_mappings_per_sec: 0,
            port_class: true,
            icmp_errors_per_sec: 100,
            deterministic: None,
            home_probe: DEFAULT_HOME_PROBE as u16,
            subscribers: DEFAULT_SUBSCRIBERS.iter().map(|p| p.parse().expect("default prefix")).collect(),
            unreachable_code: UnreachableCode::default(),
        }
    }
}

/// RFC 4787 section 5 filtering behaviour.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Filtering {
    /// RFC 4787 REQ-8 recommends this when application transparency matters.
    #[default]
    EndpointIndependent,
    AddressDependent,
    AddressAndPortDependent,
}

pub(super) fn parse_nat(sec: &Section, pool: &Pool) -> Result<Nat, ConfigError> {
    let d = Nat::default();
    let ports = u32::from(pool.port_hi) - u32::from(pool.port_lo) + 1;

    let block_size = sec.int("block_size", d.block_size.into(), 2, u16::MAX.into())? as u16;
    if block_size % 2 != 0 {
        return Err(key_err(
            sec.key("block_size"),
            format!("must be even so that each block holds as many even as odd ports (port parity), found {block_size}"),
        ));
    }
    if u32::from(block_size) > ports {
        let which = if sec.get("block_size").is_some() { "" } else { "the default " };
        return Err(key_err(
            sec.key("block_size"),
            format!(
                "{which}{block_size} is larger than the {ports} ports of pool.ports ({}-{})",
                pool.port_lo, pool.port_hi
            ),
        ));
    }

    let max_blocks_per_subscriber =
        sec.int("max_blocks_per_subscriber", d.max_blocks_per_subscriber.into(), 1, 32)? as u16;
    let port_parity = sec.bool("port_parity", d.port_parity)?;
    let hairpinning = sec.bool("hairpinning", d.hairpinning)?;
    let filtering = sec.choice(
        "filtering",
        d.filtering,
        &[
            ("endpoint-independent", Filtering::EndpointIndependent),
            ("address-dependent", Filtering::AddressDependent),
            ("address-and-port-dependent", Filtering::AddressAndPortDependent),
        ],
    )?;
    let max_new_mappings_per_sec =
        sec.int("max_new_mappings_per_sec", d.max_new_mappings_per_sec.into(), 0, u32::MAX.into())? as u32;

    let home_probe = sec.int("home_probe", DEFAULT_HOME_PROBE, 0, 4096)? as u16;

    let deterministic = parse_deterministic(sec, pool)?;
    if deterministic.is_some() {
        for k in ["block_size", "max_blocks_per_subscriber", "home_probe"] {
            if sec.get(k).is_some() {
                return Err(key_err(
                    sec.key(k),
                    "has no effect with nat.mode = \"deterministic\": each subscriber's ports are nat.deterministic_ports (or as many as the pool gives each); remove it",
                ));
            }
        }
        if max_new_mappings_per_sec != 0 {
            return Err(key_err(
                sec.key("max_new_mappings_per_sec"),
                "is not supported with nat.mode = \"deterministic\", which keeps no per-subscriber state on the packet path; set it to 0 or remove it",
            ));
        }
        if sec.bool("port_class", false)? {
            return Err(key_err(
                sec.key("port_class"),
                "is not supported with nat.mode = \"deterministic\": every mapping comes from the subscriber's range; set it to false or remove it",
            ));
        }
    }
    let port_class = deterministic.is_none() && sec.bool("port_class", d.port_class)?;
    if port_class && pool.port_lo < FIRST_NON_PRIVILEGED_PORT {
        let which = if sec.get("port_class").is_some() { "" } else { " (the default)" };
        return Err(key_err(
            "pool.ports",
            format!(
                "range {}-{} starts below {FIRST_NON_PRIVILEGED_PORT}, but with nat.port_class = true{which} ports 1-1023 are reserved for port-class preservation (RFC 4787 REQ-3); start the range at {FIRST_NON_PRIVILEGED_PORT} or above, or set nat.port_class = false",
                pool.port_lo, pool.port_hi
            ),
        ));
    }
    let icmp_errors_per_sec =
        sec.int("icmp_errors_per_sec", d.icmp_errors_per_sec.into(), 0, MAX_ICMP_ERRORS_PER_SEC)? as u32;
    let unreachable_code = sec.choice(
        "unreachable_code",
        d.unreachable_code,
        &[
            ("host-unreachable", UnreachableCode::HostUnreachable),
            ("admin-prohibited", UnreachableCode::AdminProhibited),
        ],
    )?;
    let subscribers = if sec.get("subscribers").is_none() {
        d.subscribers
    } else {
        if deterministic.is_some() {
            return Err(key_err(
                sec.key("subscribers"),
                "has no effect with nat.mode = \"deterministic\", whose subscribers are nat.deterministic_subscribers; remove it",
            ));
        }
        parse_subscribers(sec)?
    };

    Ok(Nat {
        block_size,
        max_blocks_per_subscriber,
        port_parity,
        hairpinning,
        filtering,
        max_new_mappings_per_sec,
        port_class,
        icmp_errors_per_sec,
        deterministic,
        home_probe,
        subscribers,
        unreachable_code,
    })
}

/// Most entries of `nat.subscribers` (the data plane's LPM trie nx_subnets holds 1024).
const MAX_SUBSCRIBER_PREFIXES: usize = 1024;

fn parse_subscribers(sec: &Section) -> Result<Vec<Ipv4Net>, ConfigError> {
    let entries = sec.str_array("subscribers")?;
    if entries.len() > MAX_SUBSCRIBER_PREFIXES {
        return Err(key_err(
            sec.key("subscribers"),
            format!("at most {MAX_SUBSCRIBER_PREFIXES} prefixes are supported, found {}", entries.len()),
        ));
    }
    let mut out: Vec<(String, Ipv4Net)> = Vec::with_capacity(entries.len());
    for (key, text) in entries {
        let (addr, len) = parse_prefix(text, 0).map_err(|m| key_err(&key, m))?;
        let net = Ipv4Net::new(addr, len).expect("length checked");
        if let Some((other, _)) = out.iter().find(|(_, n)| n.contains(&net) || net.contains(n)) {
            return Err(key_err(key, format!("{text:?} overlaps {other}")));
        }
        out.push((key, net));
    }
    Ok(out.into_iter().map(|(_, n)| n).collect())
}

/// Pairs of each parity a home walk goes at most, by default (bpf/nx_home.h).
const DEFAULT_HOME_PROBE: i64 = 64;

/// Most subscribers one deterministic prefix may hold (a /8).
const MAX_DET_PREFIX_LEN_MIN: u8 = 8;
const DEFAULT_DET_PROBE: i64 = 64;

fn parse_deterministic(sec: &Section, pool: &Pool) -> Result<Option<Deterministic>, ConfigError> {
    #[derive(Clone, Copy, PartialEq)]
    enum Mode {
        Dynamic,
        Deterministic,
    }
    let mode = sec.choice(
        "mode",
        Mode::Dynamic,
        &[("dynamic", Mode::Dynamic), ("deterministic", Mode::Deterministic)],
    )?;
    let det_keys = ["deterministic_subscribers", "deterministic_ports", "deterministic_probe"];
    if mode == Mode::Dynamic {
        if let Some(k) = det_keys.iter().find(|k| sec.get(k).is_some()) {
            return Err(key_err(sec.key(k), "only applies with nat.mode = \"deterministic\""));
        }
        return Ok(None);
    }
    let text = sec.required_str("deterministic_subscribers")?;
    let (addr, len) = parse_prefix(text, MAX_DET_PREFIX_LEN_MIN)
        .map_err(|m| key_err(sec.key("deterministic_subscribers"), m))?;
    let subscribers = Ipv4Net::new(addr, len).expect("parse_prefix bounds the length to /32");
    let count: u64 = 1u64 << (32 - u32::from(len));
    let n_addrs = pool.addresses.len() as u64;
    let range = u64::from(pool.port_hi) - u64::from(pool.port_lo) + 1;
    let per_addr = count.div_ceil(n_addrs);
    let ports = match sec.get("deterministic_ports") {
        Some(_) => {
            let p = sec.int("deterministic_ports", 0, 2, range.min(65534) as i64)? as u64;
            if p % 2 != 0 {
                return Err(key_err(
                    sec.key("deterministic_ports"),
                    format!("must be even so that each subscriber holds as many even as odd ports (port parity), found {p}"),
                ));
            }
            if p * per_addr > range {
                return Err(key_err(
                    sec.key("deterministic_ports"),
                    format!(
                        "{count} subscribers ({text}) on {n_addrs} pool address(es) put {per_addr} on each; {per_addr} x {p} ports exceed the {range} ports of pool.ports ({}-{}): at most {} ports each",
                        pool.port_lo,
                        pool.port_hi,
                        (range / per_addr) & !1
                    ),
                ));
            }
            p
        }
        None => (range / per_addr) & !1,
    };
    if ports < 2 {
        return Err(key_err(
            sec.key("deterministic_subscribers"),
            format!(
                "{count} subscribers ({text}) on {n_addrs} pool address(es) leave fewer than 2 ports of pool.ports ({}-{}) to each; use a smaller prefix or more pool addresses",
                pool.port_lo, pool.port_hi
            ),
        ));
    }
    let probe = sec.int("deterministic_probe", DEFAULT_DET_PROBE, 1, 4096)? as u16;
    Ok(Some(Deterministic { subscribers, ports: ports as u16, per_addr: per_addr as u32, probe }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::tests::{assert_key_errors, key_error, ok, with, with_pool};

    #[test]
    fn address_dependent_filtering() {
        let c = ok(&with("[nat]\nfiltering = \"address-dependent\"\n"));
        assert_eq!(c.nat.filtering, Filtering::AddressDependent);
    }

    // ---- errors: nat ----

    #[test]
    fn nat_block_size() {
        assert_key_errors(
            "nat.block_size",
            |v| with(&format!("[nat]\nblock_size = {v}\n")),
            &[
                ("255", "even"),
                ("0", "between 2 and 65535"),
                ("-2", "between 2 and 65535"),
                ("65536", "between 2 and 65535"),
                ("\"256\"", "expected an integer, found string \"256\""),
                ("256.0", "expected an integer, found float"),
                ("65534", "larger than the 64512 ports"),
            ],
        );
        // The block may span the whole range, but not more.
        let pool =
            "addresses = [\"203.0.113.1\"]\nports = \"1000-1099\"\n[nat]\nport_class = false\nblock_size";
        ok(&with_pool(&format!("{pool} = 100")));
        key_error(&with_pool(&format!("{pool} = 102")), "nat.block_size");
    }

    #[test]
    fn nat_default_block_size_too_large_for_ports() {
        let m =
            key_error(&with_pool("addresses = [\"203.0.113.1\"]\nports = \"1000-1099\""), "nat.block_size");
        assert!(m.contains("the default 256") && m.contains("100 ports"), "{m}");
    }

    #[test]
    fn nat_max_blocks_per_subscriber() {
        ok(&with("[nat]\nmax_blocks_per_subscriber = 1\n"));
        for v in ["0", "33", "-1", "true"] {
            key_error(
                &with(&format!("[nat]\nmax_blocks_per_subscriber = {v}\n")),
                "nat.max_blocks_per_subscriber",
            );
        }
    }

    #[test]
    fn nat_booleans_must_be_booleans() {
        for k in ["port_parity", "hairpinning"] {
            for v in ["\"yes\"", "1", "\"true\""] {
                let m = key_error(&with(&format!("[nat]\n{k} = {v}\n")), &format!("nat.{k}"));
                assert!(m.contains("expected a boolean"), "{m}");
            }
        }
    }

    #[test]
    fn nat_filtering() {
        let m = key_error(&with("[nat]\nfiltering = \"full-cone\"\n"), "nat.filtering");
        assert!(m.contains("\"endpoint-independent\"") && m.contains("\"full-cone\""), "{m}");
        key_error(&with("[nat]\nfiltering = \"endpoint_independent\"\n"), "nat.filtering");
        key_error(&with("[nat]\nfiltering = 1\n"), "nat.filtering");
    }

    #[test]
    fn nat_max_new_mappings_per_sec() {
        let c = ok(&with("[nat]\nmax_new_mappings_per_sec = 4294967295\n"));
        assert_eq!(c.nat.max_new_mappings_per_sec, u32::MAX);
        for v in ["-1", "4294967296", "\"100\"", "1.5"] {
            key_error(
                &with(&format!("[nat]\nmax_new_mappings_per_sec = {v}\n")),
                "nat.max_new_mappings_per_sec",
            );
        }
    }

    // ---- nat.home_probe ----

    #[test]
    fn nat_home_probe() {
        assert_eq!(ok(&with("")).nat.home_probe, 64);
        assert_eq!(ok(&with("[nat]\nhome_probe = 8")).nat.home_probe, 8);
        assert_eq!(ok(&with("[nat]\nhome_probe = 0")).nat.home_probe, 0, "0: every mapping in the table");
        let m = key_error(&with("[nat]\nhome_probe = 4097"), "nat.home_probe");
        assert!(m.contains("4096"), "{m}");
        key_error(&with("[nat]\nhome_probe = -1"), "nat.home_probe");
        key_error(&with("[nat]\nhome_probe = \"64\""), "nat.home_probe");
    }

    // ---- nat.mode = "deterministic" (RFC 7422) ----

    #[test]
    fn nat_deterministic() {
        let det = |extra: &str| {
            with_pool(&format!(
                "addresses = [\"203.0.113.0/29\"]\n[nat]\nmode = \"deterministic\"\ndeterministic_subscribers = \"100.64.0.0/24\"\n{extra}"
            ))
        };
        // 256 subscribers on 8 addresses: 32 each, 64512 / 32 = 2016 ports
        let d = ok(&det("")).nat.deterministic.expect("deterministic");
        assert_eq!((d.count(), d.per_addr, d.ports, d.probe), (256, 32, 2016, 64));
        assert!(!ok(&det("")).nat.port_class, "port class is off in this mode");
        assert!(ok(&det("")).warnings.is_empty(), "parity falls back: nothing to warn of");
        let d = ok(&det("deterministic_ports = 1000\ndeterministic_probe = 8")).nat.deterministic.unwrap();
        assert_eq!((d.ports, d.probe), (1000, 8));
        assert_eq!(ok(&with("")).nat.deterministic, None, "dynamic by default");

        key_error(&det("deterministic_ports = 1001"), "nat.deterministic_ports");
        let m = key_error(&det("deterministic_ports = 2018"), "nat.deterministic_ports");
        assert!(m.contains("at most 2016"), "{m}");
        key_error(&det("block_size = 128"), "nat.block_size");
        key_error(&det("home_probe = 8"), "nat.home_probe");
        key_error(&det("max_new_mappings_per_sec = 10"), "nat.max_new_mappings_per_sec");
        key_error(&det("port_class = true"), "nat.port_class");
        key_error(
            &with("[nat]\ndeterministic_subscribers = \"100.64.0.0/24\""),
            "nat.deterministic_subscribers",
        );
        key_error(&with("[nat]\nmode = \"deterministic\""), "nat.deterministic_subscribers");
        key_error(&with("[nat]\nmode = \"fixed\""), "nat.mode");
        let m = key_error(
            &with_pool("addresses = [\"203.0.113.1\"]\n[nat]\nmode = \"deterministic\"\ndeterministic_subscribers = \"100.0.0.0/8\""),
            "nat.deterministic_subscribers",
        );
        assert!(m.contains("fewer than 2 ports"), "{m}");
        let fwd = "[[forward]]\nproto = \"tcp\"\noutside = \"203.0.113.1:80\"\ninside = \"100.64.0.2:80\"\n";
        key_error(&format!("{}{fwd}", det("")), "forward[0]");
    }

    // ---- nat.port_class and nat.icmp_errors_per_sec ----

    #[test]
    fn nat_port_class() {
        assert!(ok(&with("")).nat.port_class);
        assert!(ok(&with("[nat]\nport_class = true\n")).nat.port_class);
        // Starting exactly at 1024 is fine.
        let c =
            ok(&with_pool("addresses = [\"203.0.113.1\"]\nports = \"1024-2047\"\n[nat]\nport_class = true"));
        assert_eq!(c.pool.port_lo, 1024);
        // Without port-class preservation any range is fine.
        let c =
            ok(&with_pool("addresses = [\"203.0.113.1\"]\nports = \"1-1023\"\n[nat]\nport_class = false"));
        assert!(!c.nat.port_class);
        assert_eq!((c.pool.port_lo, c.pool.port_hi), (1, 1023));
        // The conflict is reported on pool.ports, whether port_class is
        // the default or explicit.
        for nat in ["", "[nat]\nport_class = true"] {
            let m = key_error(
                &with_pool(&format!("addresses = [\"203.0.113.1\"]\nports = \"1023-65535\"\n{nat}")),
                "pool.ports",
            );
            assert!(
                m.contains("1023-65535")
                    && m.contains("ports 1-1023 are reserved for port-class preservation")
                    && m.contains("nat.port_class = false"),
                "{m}"
            );
            assert_eq!(m.contains("(the default)"), nat.is_empty(), "{m}");
        }
        for v in ["\"yes\"", "1", "\"false\""] {
            let m = key_error(&with(&format!("[nat]\nport_class = {v}\n")), "nat.port_class");
            assert!(m.contains("expected a boolean"), "{m}");
        }
        let m = key_error(&with("[nat]\nport-class = false\n"), "nat.port-class");
        assert!(m.contains("did you mean `port_class`"), "{m}");
    }

    #[test]
    fn nat_icmp_errors_per_sec() {
        assert_eq!(ok(&with("")).nat.icmp_errors_per_sec, 100);
        assert_eq!(ok(&with("[nat]\nicmp_errors_per_sec = 0\n")).nat.icmp_errors_per_sec, 0);
        assert_eq!(ok(&with("[nat]\nicmp_errors_per_sec = 100000\n")).nat.icmp_errors_per_sec, 100_000);
        assert_key_errors(
            "nat.icmp_errors_per_sec",
            |v| with(&format!("[nat]\nicmp_errors_per_sec = {v}\n")),
            &[
                ("100001", "between 0 and 100000, found 100001"),
                ("-1", "between 0 and 100000"),
                ("\"100\"", "expected an integer, found string \"100\""),
                ("1.5", "expected an integer"),
            ],
        );
        let m = key_error(&with("[nat]\nicmp_error_per_sec = 5\n"), "nat.icmp_error_per_sec");
        assert!(m.contains("did you mean `icmp_errors_per_sec`"), "{m}");
    }

    #[test]
    fn subscriber_prefixes_default_parse_and_errors() {
        let d = ok(&with(""));
        let want: Vec<Ipv4Net> = DEFAULT_SUBSCRIBERS.iter().map(|p| p.parse().unwrap()).collect();
        assert_eq!(d.nat.subscribers, want, "default: RFC 6598 and RFC 1918 space");
        let c = ok(&with("[nat]\nsubscribers = [\"100.64.0.0/24\", \"192.0.2.7\"]\n"));
        assert_eq!(
            c.nat.subscribers,
            vec!["100.64.0.0/24".parse::<Ipv4Net>().unwrap(), "192.0.2.7/32".parse().unwrap()]
        );
        assert_key_errors(
            "nat.subscribers[1]",
            |v| with(&format!("[nat]\nsubscribers = [\"100.64.0.0/10\", {v}]\n")),
            &[
                ("\"100.64.1.0/24\"", "overlaps nat.subscribers[0]"),
                ("\"10.0.0.1/8\"", "host bits set"),
                ("\"10.0.0.0/33\"", "out of range"),
                ("\"ten\"", "not an IPv4 address"),
                ("5", "expected a string"),
            ],
        );
        key_error(&with("[nat]\nsubscribers = []\n"), "nat.subscribers");
        let det = "[nat]\nmode = \"deterministic\"\ndeterministic_subscribers = \"100.64.0.0/24\"\nsubscribers = [\"100.64.0.0/24\"]\n";
        let m = key_error(&with(det), "nat.subscribers");
        assert!(m.contains("deterministic_subscribers"), "{m}");
    }

    #[test]
    fn unreachable_code_choices() {
        assert_eq!(ok(&with("")).nat.unreachable_code.code(), 1, "RFC 6888 REQ-8 by default");
        let c = ok(&with("[nat]\nunreachable_code = \"admin-prohibited\"\n"));
        assert_eq!(c.nat.unreachable_code.code(), 13);
        let c = ok(&with("[nat]\nunreachable_code = \"host-unreachable\"\n"));
        assert_eq!(c.nat.unreachable_code.code(), 1);
        assert_key_errors(
            "nat.unreachable_code",
            |v| with(&format!("[nat]\nunreachable_code = {v}\n")),
            &[("\"prohibited\"", "host-unreachable"), ("13", "expected a string")],
        );
    }
}
