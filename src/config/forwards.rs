// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//! `[[forward]]`: static inbound port forwards.

use std::collections::{HashMap, HashSet};
use std::net::{Ipv4Addr, SocketAddrV4};

use super::pool::parse_port;
use super::{key_err, ConfigError, Pool, Section};

// IP protocol numbers as carried in [`Forward::proto`].
use crate::abi::{PROTO_TCP, PROTO_UDP};

/// `[[forward]]` entries are static mappings preinstalled in the mapping tables.
pub(super) const MAX_FORWARDS: usize = 4096;

/// A static port forward: `outside` on a pool address is permanently mapped to
/// `inside`, in both directions, as an endpoint-independent mapping.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Forward {
    /// IP protocol number: 6 (TCP) or 17 (UDP).
    pub proto: u8,
    /// Always one of `pool.addresses`. The port may lie inside or outside
    /// `pool.ports`; dynamic allocation never hands out a forwarded port.
    pub outside: SocketAddrV4,
    pub inside: SocketAddrV4,
}

fn proto_name(proto: u8) -> &'static str {
    if proto == PROTO_TCP {
        "tcp"
    } else {
        "udp"
    }
}

pub(super) fn parse_forwards(secs: &[Section], pool: &Pool) -> Result<Vec<Forward>, ConfigError> {
    let pool_addrs: HashSet<Ipv4Addr> = pool.addresses.iter().copied().collect();
    // (proto, endpoint) -> index of the forward that has it.
    let mut outsides: HashMap<(u8, SocketAddrV4), usize> = HashMap::with_capacity(secs.len());
    let mut insides: HashMap<(u8, SocketAddrV4), usize> = HashMap::with_capacity(secs.len());
    let mut forwards: Vec<Forward> = Vec::with_capacity(secs.len());
    for (i, sec) in secs.iter().enumerate() {
        let proto = sec.required_choice("proto", &[("tcp", PROTO_TCP), ("udp", PROTO_UDP)])?;
        let name = proto_name(proto);

        let outside_key = sec.key("outside");
        let outside = parse_endpoint(sec.required_str("outside")?).map_err(|m| key_err(&outside_key, m))?;
        if !pool_addrs.contains(outside.ip()) {
            return Err(key_err(
                outside_key,
                format!(
                    "{} is not a pool address; the outside address must be in pool.addresses",
                    outside.ip()
                ),
            ));
        }

        let inside_key = sec.key("inside");
        let inside = parse_endpoint(sec.required_str("inside")?).map_err(|m| key_err(&inside_key, m))?;
        if let Some(what) = unreachable_host(*inside.ip()) {
            return Err(key_err(
                inside_key,
                format!("{} is {what}, which cannot be the target of a forward", inside.ip()),
            ));
        }

        if let Some(&j) = outsides.get(&(proto, outside)) {
            return Err(key_err(
                outside_key,
                format!("{name} {outside} is already forwarded by forward[{j}] (to {})", forwards[j].inside),
            ));
        }
        if let Some(&j) = insides.get(&(proto, inside)) {
            return Err(key_err(
                inside_key,
                format!(
                    "{name} {inside} is already the target of forward[{j}] (from {}); mappings are endpoint-independent, so one inside endpoint has exactly one outside endpoint",
                    forwards[j].outside
                ),
            ));
        }
        outsides.insert((proto, outside), i);
        insides.insert((proto, inside), i);
        forwards.push(Forward { proto, outside, inside });
    }
    Ok(forwards)
}

/// Parses `"a.b.c.d:port"` with a port in 1-65535.
fn parse_endpoint(s: &str) -> Result<SocketAddrV4, String> {
    let Some((addr, port)) = s.rsplit_once(':') else {
        return Err(format!("expected an IPv4 address and port such as \"203.0.113.40:8080\", found {s:?}"));
    };
    let ip: Ipv4Addr =
        addr.parse().map_err(|_| format!("{addr:?} is not an IPv4 address in dotted-quad form"))?;
    let port = parse_port(port)?;
    if port == 0 {
        return Err(format!("{s:?}: port 0 is not valid; ports are 1-65535"));
    }
    Ok(SocketAddrV4::new(ip, port))
}

/// Why a unicast packet can never be delivered to `ip`, if it cannot.
fn unreachable_host(ip: Ipv4Addr) -> Option<&'static str> {
    if ip.is_unspecified() {
        Some("the unspecified address")
    } else if ip.is_broadcast() {
        Some("the limited broadcast address")
    } else if ip.is_multicast() {
        Some("a multicast address")
    } else if ip.is_loopback() {
        Some("a loopback address")
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::tests::{assert_key_errors, forward, key_error, ok, sa, with, IFACES};

    // ---- forward ----

    /// Pool 203.0.113.1 with ports 1024-65535 and the given `[[forward]]`s.
    fn with_forwards(forwards: &[(&str, &str, &str)]) -> String {
        with(&forwards.iter().map(|(p, o, i)| forward(p, o, i)).collect::<String>())
    }

    #[test]
    fn forwards_default_to_none() {
        assert!(ok(&with("")).forwards.is_empty());
        assert!(ok(&format!("forward = []\n{}", with(""))).forwards.is_empty());
    }

    #[test]
    fn forwards_parse() {
        let c = ok(&with_forwards(&[
            ("tcp", "203.0.113.1:8080", "100.64.0.3:80"),
            // Same endpoints on the other protocol are a separate mapping.
            ("udp", "203.0.113.1:8080", "100.64.0.3:80"),
            // Outside ports below, inside and at the ends of pool.ports.
            ("tcp", "203.0.113.1:1", "100.64.0.4:22"),
            ("tcp", "203.0.113.1:1024", "100.64.0.4:1024"),
            ("udp", "203.0.113.1:65535", "100.64.0.5:65535"),
            // One inside host may have many forwarded ports.
            ("tcp", "203.0.113.1:443", "100.64.0.3:443"),
        ]));
        assert_eq!(
            c.forwards,
            [
                Forward { proto: PROTO_TCP, outside: sa("203.0.113.1:8080"), inside: sa("100.64.0.3:80") },
                Forward { proto: PROTO_UDP, outside: sa("203.0.113.1:8080"), inside: sa("100.64.0.3:80") },
                Forward { proto: PROTO_TCP, outside: sa("203.0.113.1:1"), inside: sa("100.64.0.4:22") },
                Forward { proto: PROTO_TCP, outside: sa("203.0.113.1:1024"), inside: sa("100.64.0.4:1024") },
                Forward {
                    proto: PROTO_UDP,
                    outside: sa("203.0.113.1:65535"),
                    inside: sa("100.64.0.5:65535")
                },
                Forward { proto: PROTO_TCP, outside: sa("203.0.113.1:443"), inside: sa("100.64.0.3:443") },
            ]
        );
        // Inline tables work as well.
        let c = ok(&format!(
            "forward = [{{ proto = \"udp\", outside = \"203.0.113.1:53\", inside = \"100.64.0.9:53\" }}]\n{}",
            with("")
        ));
        assert_eq!(
            c.forwards,
            [Forward { proto: PROTO_UDP, outside: sa("203.0.113.1:53"), inside: sa("100.64.0.9:53") }]
        );
    }

    #[test]
    fn forward_required_and_unknown_keys() {
        let o = "outside = \"203.0.113.1:80\"\n";
        let i = "inside = \"100.64.0.3:80\"\n";
        let p = "proto = \"tcp\"\n";
        for (body, key) in [
            (format!("{o}{i}"), "forward[0].proto"),
            (format!("{p}{i}"), "forward[0].outside"),
            (format!("{p}{o}"), "forward[0].inside"),
            (String::new(), "forward[0].proto"),
        ] {
            let m = key_error(&with(&format!("[[forward]]\n{body}")), key);
            assert!(m.contains("required key is missing"), "{key}: {m}");
        }
        let m =
            key_error(&with(&format!("[[forward]]\n{p}{o}{i}protocol = \"tcp\"\n")), "forward[0].protocol");
        assert!(m.contains("expected one of: proto, outside, inside"), "{m}");
        let m = key_error(
            &with(&format!("[[forward]]\n{p}{o}{i}[[forward]]\n{p}{o}{i}insid = \"x\"\n")),
            "forward[1].insid",
        );
        assert!(m.contains("did you mean `inside`"), "{m}");
    }

    #[test]
    fn forward_proto() {
        assert_key_errors(
            "forward[1].proto",
            |v| {
                with(&format!(
                    "{}[[forward]]\nproto = {v}\noutside = \"203.0.113.1:81\"\ninside = \"100.64.0.3:81\"\n",
                    forward("tcp", "203.0.113.1:80", "100.64.0.3:80")
                ))
            },
            &[
                ("\"icmp\"", "expected one of \"tcp\", \"udp\", found \"icmp\""),
                ("\"TCP\"", "found \"TCP\""),
                ("\"\"", "found \"\""),
                ("6", "expected a string, found integer 6"),
            ],
        );
    }

    #[test]
    fn forward_endpoint_syntax() {
        let cases = [
            ("203.0.113.1", "expected an IPv4 address and port such as \"203.0.113.40:8080\""),
            ("", "expected an IPv4 address and port"),
            ("203.0.113.1:", "\"\" is not a port number"),
            ("203.0.113.1:http", "\"http\" is not a port number"),
            ("203.0.113.1:+80", "not a port number"),
            ("203.0.113.1:65536", "port 65536 is above 65535"),
            ("203.0.113.1:0", "port 0 is not valid"),
            ("203.0.113.1:80:90", "\"203.0.113.1:80\" is not an IPv4 address"),
            ("203.0.113:80", "\"203.0.113\" is not an IPv4 address"),
            ("[::1]:80", "not an IPv4 address"),
            (" 203.0.113.1:80", "not an IPv4 address"),
        ];
        assert_key_errors("forward[0].outside", |e| with_forwards(&[("tcp", e, "100.64.0.3:80")]), &cases);
        assert_key_errors("forward[0].inside", |e| with_forwards(&[("tcp", "203.0.113.1:80", e)]), &cases);
        for k in ["outside", "inside"] {
            let doc = with(&format!(
                "[[forward]]\nproto = \"tcp\"\n{}\n",
                if k == "outside" {
                    "outside = 80\ninside = \"100.64.0.3:80\""
                } else {
                    "outside = \"203.0.113.1:80\"\ninside = 80"
                }
            ));
            let m = key_error(&doc, &format!("forward[0].{k}"));
            assert!(m.contains("expected a string, found integer 80"), "{m}");
        }
    }

    #[test]
    fn forward_outside_must_be_a_pool_address() {
        let pool = "[pool]\naddresses = [\"203.0.113.16/29\", \"203.0.113.40\"]\n";
        for outside in ["203.0.113.15:80", "203.0.113.24:80", "198.51.100.1:80", "100.64.0.3:80"] {
            let doc = format!("{IFACES}{pool}{}", forward("udp", outside, "100.64.0.3:80"));
            let m = key_error(&doc, "forward[0].outside");
            let ip = outside.split(':').next().unwrap();
            assert!(
                m.contains(&format!("{ip} is not a pool address"))
                    && m.contains("the outside address must be in pool.addresses"),
                "{outside}: {m}"
            );
        }
        // Network and broadcast addresses of a pool prefix are pool addresses.
        for outside in ["203.0.113.16:80", "203.0.113.23:80", "203.0.113.40:80"] {
            ok(&format!("{IFACES}{pool}{}", forward("udp", outside, "100.64.0.3:80")));
        }
    }

    #[test]
    fn forward_inside_must_be_a_unicast_host() {
        for (inside, why) in [
            ("0.0.0.0:80", "0.0.0.0 is the unspecified address"),
            ("255.255.255.255:80", "255.255.255.255 is the limited broadcast address"),
            ("224.0.0.1:80", "224.0.0.1 is a multicast address"),
            ("239.255.255.250:1900", "239.255.255.250 is a multicast address"),
            ("127.0.0.1:80", "127.0.0.1 is a loopback address"),
        ] {
            let m = key_error(&with_forwards(&[("tcp", "203.0.113.1:80", inside)]), "forward[0].inside");
            assert!(m.contains(why) && m.contains("cannot be the target of a forward"), "{inside}: {m}");
        }
        // Any other unicast address, private or not, is a possible target.
        for inside in ["100.64.0.0:80", "10.0.0.1:80", "192.168.1.255:80", "223.255.255.255:80"] {
            ok(&with_forwards(&[("tcp", "203.0.113.1:80", inside)]));
        }
    }

    #[test]
    fn forward_duplicate_outside() {
        let m = key_error(
            &with_forwards(&[
                ("tcp", "203.0.113.1:8080", "100.64.0.3:80"),
                ("udp", "203.0.113.1:8080", "100.64.0.4:80"),
                ("tcp", "203.0.113.1:8080", "100.64.0.5:80"),
            ]),
            "forward[2].outside",
        );
        assert!(
            m.contains("tcp 203.0.113.1:8080 is already forwarded by forward[0] (to 100.64.0.3:80)"),
            "{m}"
        );
    }

    #[test]
    fn forward_duplicate_inside() {
        let m = key_error(
            &with_forwards(&[
                ("udp", "203.0.113.1:5060", "100.64.0.3:5060"),
                ("tcp", "203.0.113.1:5060", "100.64.0.3:5060"),
                ("udp", "203.0.113.1:5061", "100.64.0.3:5060"),
            ]),
            "forward[2].inside",
        );
        assert!(
            m.contains("udp 100.64.0.3:5060 is already the target of forward[0] (from 203.0.113.1:5060)")
                && m.contains("endpoint-independent"),
            "{m}"
        );
    }

    #[test]
    fn forward_must_be_an_array_of_tables() {
        let m = key_error(&format!("forward = \"203.0.113.1:80\"\n{}", with("")), "forward");
        assert!(m.contains("expected an array of tables") && m.contains("[[forward]]"), "{m}");
        let m = key_error(&with("[forward]\nproto = \"tcp\"\n"), "forward");
        assert!(m.contains("single table") && m.contains("[[forward]]"), "{m}");
        let m = key_error(
            &format!("forward = [\"tcp 203.0.113.1:80 100.64.0.3:80\"]\n{}", with("")),
            "forward[0]",
        );
        assert!(m.contains("expected a table"), "{m}");
    }

    #[test]
    fn forward_limit() {
        let list = |n: usize| -> String {
            (0..n)
                .map(|i| {
                    forward(
                        "udp",
                        &format!("203.0.113.1:{}", 1000 + i),
                        &format!("100.64.{}.{}:53", i / 256, i % 256),
                    )
                })
                .collect()
        };
        assert_eq!(ok(&with(&list(4096))).forwards.len(), 4096);
        let m = key_error(&with(&list(4097)), "forward");
        assert!(m.contains("at most 4096 entries") && m.contains("found 4097"), "{m}");
    }
}
