// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//! `[[exclude]]`: destinations forwarded without translation (RFC 6888 REQ-6).

use std::collections::HashMap;
use std::net::Ipv4Addr;

use ipnet::Ipv4Net;

use super::pool::{parse_prefix, PoolEntry};
use super::{key_err, ConfigError, Section};

/// Each `[[exclude]]` prefix is an entry in a data-plane LPM trie that is
/// looked up for every outbound packet.
pub(super) const MAX_EXCLUDES: usize = 1024;

pub(super) fn parse_exclude(secs: &[Section], pool: &[PoolEntry]) -> Result<Vec<Ipv4Net>, ConfigError> {
    let mut seen: HashMap<Ipv4Net, (String, &str)> = HashMap::with_capacity(secs.len());
    let mut nets = Vec::with_capacity(secs.len());
    for sec in secs {
        let key = sec.key("prefix");
        let text = sec.required_str("prefix")?;
        let (addr, len) = parse_prefix(text, 0).map_err(|m| key_err(&key, m))?;
        let net = Ipv4Net::new(addr, len).expect("parse_prefix bounds the length to /32");
        if let Some((k, t)) = seen.get(&net) {
            return Err(key_err(key, format!("{text:?} duplicates {k} ({t:?})")));
        }
        // Replies to translated traffic are addressed to the pool; exempting
        // them from translation would break every mapping on that address.
        let (first, last) = (u32::from(net.network()), u32::from(net.broadcast()));
        if let Some(p) = pool.iter().find(|p| p.first <= last && first <= p.last) {
            return Err(key_err(
                key,
                format!(
                    "{text:?} contains the pool address {} from {} ({:?}); return traffic to the pool is NAT traffic and cannot be excluded from translation",
                    Ipv4Addr::from(first.max(p.first)),
                    p.key,
                    p.text
                ),
            ));
        }
        seen.insert(net, (key, text));
        nets.push(net);
    }
    Ok(nets)
}

#[cfg(test)]
mod tests {
    use crate::config::tests::{assert_key_errors, key_error, net, ok, with, IFACES};

    // ---- exclude ----

    /// Minimal valid document plus `[[exclude]]` entries, one per prefix.
    fn with_excludes(prefixes: &[&str]) -> String {
        let entries: String = prefixes.iter().map(|p| format!("[[exclude]]\nprefix = \"{p}\"\n")).collect();
        with(&entries)
    }

    #[test]
    fn exclude_defaults_to_none() {
        assert!(ok(&with("")).exclude.is_empty());
        assert!(ok(&format!("exclude = []\n{}", with(""))).exclude.is_empty());
    }

    #[test]
    fn exclude_prefixes_and_addresses() {
        let c =
            ok(&with_excludes(&["192.0.2.128/25", "198.51.100.7", "10.0.0.0/8", "0.0.0.0/1", "8.8.8.8/32"]));
        assert_eq!(
            c.exclude,
            [
                net("192.0.2.128/25"),
                net("198.51.100.7/32"),
                net("10.0.0.0/8"),
                net("0.0.0.0/1"),
                net("8.8.8.8/32")
            ]
        );
        // Nested prefixes are not duplicates.
        let c = ok(&with_excludes(&["10.0.0.0/8", "10.1.0.0/16"]));
        assert_eq!(c.exclude.len(), 2);
        // Inline tables are arrays of tables too.
        let c = ok(&format!("exclude = [{{ prefix = \"192.0.2.0/24\" }}]\n{}", with("")));
        assert_eq!(c.exclude, [net("192.0.2.0/24")]);
    }

    #[test]
    fn exclude_prefix_syntax() {
        assert_key_errors(
            "exclude[1].prefix",
            |prefix| with_excludes(&["10.0.0.0/8", prefix]),
            &[
                ("192.0.2", "not an IPv4 address"),
                ("192.0.2.0/", "not a number"),
                ("192.0.2.0/+24", "not a number"),
                ("192.0.2.0/33", "between /0 and /32"),
                ("2001:db8::/32", "not an IPv4 address"),
                ("", "not an IPv4 address"),
                ("192.0.2.129/25", "host bits set; did you mean \"192.0.2.128/25\""),
                ("1.0.0.0/0", "host bits set; did you mean \"0.0.0.0/0\""),
            ],
        );
    }

    #[test]
    fn exclude_entry_shape() {
        let m = key_error(&with("[[exclude]]\n"), "exclude[0].prefix");
        assert!(m.contains("required"), "{m}");
        let m = key_error(&with("[[exclude]]\nprefix = 5\n"), "exclude[0].prefix");
        assert!(m.contains("expected a string, found integer 5"), "{m}");
        let m = key_error(&with("[[exclude]]\nprefix = [\"10.0.0.0/8\"]\n"), "exclude[0].prefix");
        assert!(m.contains("expected a string, found an array"), "{m}");
        let m = key_error(
            &with("[[exclude]]\nprefix = \"10.0.0.0/8\"\nprefixes = \"x\"\n"),
            "exclude[0].prefixes",
        );
        assert!(m.contains("did you mean `prefix`"), "{m}");
        let m = key_error(
            &with("[[exclude]]\nprefix = \"10.0.0.0/8\"\n[[exclude]]\nnetwork = \"x\"\n"),
            "exclude[1].network",
        );
        assert!(m.contains("unknown key; expected one of: prefix"), "{m}");
    }

    #[test]
    fn exclude_must_be_an_array_of_tables() {
        let m = key_error(&format!("exclude = \"192.0.2.0/24\"\n{}", with("")), "exclude");
        assert!(m.contains("expected an array of tables") && m.contains("[[exclude]]"), "{m}");
        assert!(m.contains("found string \"192.0.2.0/24\""), "{m}");
        let m = key_error(&with("[exclude]\nprefix = \"192.0.2.0/24\"\n"), "exclude");
        assert!(m.contains("single table") && m.contains("[[exclude]]"), "{m}");
        let m = key_error(&format!("exclude = [\"192.0.2.0/24\"]\n{}", with("")), "exclude[0]");
        assert!(m.contains("expected a table") && m.contains("found string \"192.0.2.0/24\""), "{m}");
        let m =
            key_error(&format!("exclude = [{{ prefix = \"192.0.2.0/24\" }}, 7]\n{}", with("")), "exclude[1]");
        assert!(m.contains("found integer 7"), "{m}");
    }

    #[test]
    fn exclude_duplicates_name_both() {
        let m =
            key_error(&with_excludes(&["192.0.2.0/24", "10.0.0.0/8", "192.0.2.0/24"]), "exclude[2].prefix");
        assert!(m.contains("duplicates exclude[0].prefix (\"192.0.2.0/24\")"), "{m}");
        // An address and its /32 are the same prefix.
        let m = key_error(&with_excludes(&["198.51.100.7", "198.51.100.7/32"]), "exclude[1].prefix");
        assert!(m.contains("\"198.51.100.7/32\" duplicates exclude[0].prefix (\"198.51.100.7\")"), "{m}");
    }

    #[test]
    fn exclude_must_not_contain_pool_addresses() {
        let pool = "[pool]\naddresses = [\"203.0.113.16/29\", \"203.0.113.40\"]\n";
        let doc = |p: &str| {
            format!("{IFACES}{pool}[[exclude]]\nprefix = \"10.0.0.0/8\"\n[[exclude]]\nprefix = \"{p}\"\n")
        };
        for (prefix, addr, entry) in [
            ("203.0.113.40", "203.0.113.40", "pool.addresses[1] (\"203.0.113.40\")"),
            ("203.0.113.0/24", "203.0.113.16", "pool.addresses[0] (\"203.0.113.16/29\")"),
            ("203.0.113.20/30", "203.0.113.20", "pool.addresses[0] (\"203.0.113.16/29\")"),
            ("203.0.113.32/28", "203.0.113.40", "pool.addresses[1] (\"203.0.113.40\")"),
            ("0.0.0.0/0", "203.0.113.16", "pool.addresses[0]"),
            ("128.0.0.0/1", "203.0.113.16", "pool.addresses[0]"),
        ] {
            let m = key_error(&doc(prefix), "exclude[1].prefix");
            assert!(
                m.contains(&format!("contains the pool address {addr} from {entry}"))
                    && m.contains("NAT traffic"),
                "{prefix}: {m}"
            );
        }
        // Neighbours of the pool are fine.
        let c = ok(&format!(
            "{IFACES}{pool}[[exclude]]\nprefix = \"203.0.113.8/29\"\n[[exclude]]\nprefix = \"203.0.113.24/29\"\n[[exclude]]\nprefix = \"203.0.113.41\"\n"
        ));
        assert_eq!(c.exclude.len(), 3);
    }

    #[test]
    fn exclude_limit() {
        let list = |n: usize| -> Vec<String> {
            (0..n).map(|i| format!("10.{}.{}.0/24", i / 256, i % 256)).collect()
        };
        let refs =
            |v: &[String]| -> String { with_excludes(&v.iter().map(String::as_str).collect::<Vec<_>>()) };
        assert_eq!(ok(&refs(&list(1024))).exclude.len(), 1024);
        let m = key_error(&refs(&list(1025)), "exclude");
        assert!(m.contains("at most 1024 entries") && m.contains("found 1025"), "{m}");
    }
}
