// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//! `[interfaces]`: the inside and outside interfaces, the XDP mode and the virtual MACs.

use toml::Value;

use super::{key_err, ConfigError, Section};

/// Linux IFNAMSIZ is 16 including the terminating NUL.
const MAX_IFNAME_LEN: usize = 15;
/// Two full lists exactly fill the data plane's interface table
/// (NX_MAX_IFACES = 64 in bpf/nx_types.h).
const MAX_INTERFACES: usize = 32;

#[derive(Debug, Clone, PartialEq)]
pub struct Interfaces {
    pub inside: Vec<String>,
    pub outside: Vec<String>,
    pub xdp_mode: XdpMode,
    /// Unicast MACs besides each interface's own that frames for natrix may be addressed
    /// to (a VRRP virtual MAC): `interfaces.virtual_macs`. A unicast frame for any other
    /// MAC is left to the kernel, untouched.
    pub virtual_macs: Vec<[u8; 6]>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum XdpMode {
    #[default]
    Native,
    Generic,
}

pub(super) fn parse_interfaces(sec: &Section) -> Result<Interfaces, ConfigError> {
    let inside = interface_list(sec, "inside", &[])?;
    let outside = interface_list(sec, "outside", &inside)?;
    let xdp_mode = sec.choice(
        "xdp_mode",
        XdpMode::default(),
        &[("native", XdpMode::Native), ("generic", XdpMode::Generic)],
    )?;
    let mut virtual_macs: Vec<[u8; 6]> = Vec::new();
    // absent or [] (none, as documented); otherwise every entry a unicast MAC
    let empty = matches!(sec.get("virtual_macs"), Some(Value::Array(a)) if a.is_empty());
    if sec.get("virtual_macs").is_some() && !empty {
        let entries = sec.str_array("virtual_macs")?;
        if entries.len() > MAX_VIRTUAL_MACS {
            return Err(key_err(
                sec.key("virtual_macs"),
                format!("at most {MAX_VIRTUAL_MACS} virtual MACs are supported, found {}", entries.len()),
            ));
        }
        for (key, text) in entries {
            let mac = parse_mac(text).map_err(|m| key_err(&key, m))?;
            if virtual_macs.contains(&mac) {
                return Err(key_err(key, format!("{text:?} is listed twice")));
            }
            virtual_macs.push(mac);
        }
    }
    Ok(Interfaces { inside, outside, xdp_mode, virtual_macs })
}

/// An interface's own MAC takes one of the data plane's NX_IF_MACS (4) slots per
/// interface; the rest are for virtual MACs.
const MAX_VIRTUAL_MACS: usize = 3;

/// `"00:00:5e:00:01:01"`: a unicast MAC (a multicast or all-zero one would never be the
/// destination natrix checks).
fn parse_mac(text: &str) -> Result<[u8; 6], String> {
    let parts: Vec<&str> = text.split(':').collect();
    let bad = || format!("{text:?} is not a MAC address such as \"00:00:5e:00:01:01\"");
    if parts.len() != 6 {
        return Err(bad());
    }
    let mut mac = [0u8; 6];
    for (m, p) in mac.iter_mut().zip(&parts) {
        if p.len() != 2 {
            return Err(bad());
        }
        *m = u8::from_str_radix(p, 16).map_err(|_| bad())?;
    }
    if mac[0] & 1 != 0 || mac == [0; 6] {
        return Err(format!("{text:?} is a multicast or all-zero MAC; a virtual MAC is unicast"));
    }
    Ok(mac)
}

/// `other` is the list parsed before this one: an interface on both sides
/// would make the NAT direction of its traffic ambiguous.
fn interface_list(sec: &Section, k: &str, other: &[String]) -> Result<Vec<String>, ConfigError> {
    let entries = sec.str_array(k)?;
    if entries.len() > MAX_INTERFACES {
        return Err(key_err(
            sec.key(k),
            format!("at most {MAX_INTERFACES} interfaces are supported, found {}", entries.len()),
        ));
    }
    let mut names: Vec<String> = Vec::with_capacity(entries.len());
    for (key, name) in entries {
        check_ifname(name).map_err(|m| key_err(&key, m))?;
        if let Some(i) = names.iter().position(|n| n == name) {
            return Err(key_err(key, format!("{name:?} is already listed as {}[{i}]", sec.key(k))));
        }
        if let Some(i) = other.iter().position(|n| n == name) {
            return Err(key_err(
                key,
                format!("{name:?} is also listed as interfaces.inside[{i}]; an interface cannot be both inside and outside"),
            ));
        }
        names.push(name.to_owned());
    }
    Ok(names)
}

/// Mirrors the kernel's dev_valid_name(), so that a name the kernel would
/// refuse fails here with a clear message instead of as an ifindex lookup
/// error at attach time.
fn check_ifname(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("interface name must not be empty".to_owned());
    }
    if name.len() > MAX_IFNAME_LEN {
        return Err(format!(
            "interface name {name:?} is {} bytes long; Linux allows at most {MAX_IFNAME_LEN}",
            name.len()
        ));
    }
    if name == "." || name == ".." {
        return Err(format!("{name:?} is not a valid interface name"));
    }
    // ':' is the kernel's alias separator and NUL would silently truncate the
    // name, so both are rejected alongside '/' and whitespace.
    if let Some(c) = name.chars().find(|&c| c == '/' || c == ':' || c == '\0' || c.is_whitespace()) {
        return Err(format!("interface name {name:?} contains {c:?}, which Linux does not allow"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::config::tests::{assert_key_errors, key_error, ok, with, with_interfaces, POOL};

    // ---- errors: interfaces ----

    #[test]
    fn interfaces_required() {
        key_error(POOL, "interfaces.inside");
        key_error(&with_interfaces("outside = [\"wan0\"]"), "interfaces.inside");
        let m = key_error(&with_interfaces("inside = [\"lan0\"]"), "interfaces.outside");
        assert!(m.contains("required"), "{m}");
    }

    #[test]
    fn interfaces_must_be_non_empty_string_arrays() {
        let m = key_error(&with_interfaces("inside = []\noutside = [\"wan0\"]"), "interfaces.inside");
        assert!(m.contains("at least one"), "{m}");
        key_error(&with_interfaces("inside = [\"lan0\"]\noutside = []"), "interfaces.outside");
        let m = key_error(&with_interfaces("inside = \"lan0\"\noutside = [\"wan0\"]"), "interfaces.inside");
        assert!(m.contains("[\"lan0\"]"), "{m}");
        key_error(&with_interfaces("inside = 3\noutside = [\"wan0\"]"), "interfaces.inside");
        let m = key_error(
            &with_interfaces("inside = [\"lan0\", 7]\noutside = [\"wan0\"]"),
            "interfaces.inside[1]",
        );
        assert!(m.contains("expected a string, found integer 7"), "{m}");
        key_error(&with_interfaces("inside = [\"lan0\"]\noutside = [[\"wan0\"]]"), "interfaces.outside[0]");
    }

    #[test]
    fn interface_names_are_validated() {
        for (name, why) in [
            ("", "empty"),
            ("abcdefghijklmnop", "at most 15"),
            ("a/b", "'/'"),
            ("lan 0", "' '"),
            ("lan\\t0", "'\\t'"),
            (".", "not a valid"),
            ("..", "not a valid"),
            ("eth0:1", "':'"),
        ] {
            let doc = with_interfaces(&format!("inside = [\"lan0\", \"{name}\"]\noutside = [\"wan0\"]"));
            let m = key_error(&doc, "interfaces.inside[1]");
            assert!(m.contains(why), "{name:?}: {m}");
            let doc = with_interfaces(&format!("inside = [\"lan0\"]\noutside = [\"{name}\"]"));
            key_error(&doc, "interfaces.outside[0]");
        }
        // Exactly 15 bytes is fine.
        ok(&with_interfaces("inside = [\"abcdefghijklmno\"]\noutside = [\"wan0\"]"));
    }

    #[test]
    fn interface_duplicates_within_a_list() {
        let m = key_error(
            &with_interfaces("inside = [\"lan0\", \"lan1\", \"lan0\"]\noutside = [\"wan0\"]"),
            "interfaces.inside[2]",
        );
        assert!(m.contains("interfaces.inside[0]"), "{m}");
        key_error(
            &with_interfaces("inside = [\"lan0\"]\noutside = [\"wan0\", \"wan0\"]"),
            "interfaces.outside[1]",
        );
    }

    #[test]
    fn interface_in_both_lists() {
        let m = key_error(
            &with_interfaces("inside = [\"lan0\", \"x0\"]\noutside = [\"wan0\", \"x0\"]"),
            "interfaces.outside[1]",
        );
        assert!(m.contains("interfaces.inside[1]") && m.contains("both"), "{m}");
    }

    #[test]
    fn interface_list_limit() {
        let list = |n: usize| (0..n).map(|i| format!("\"l{i}\"")).collect::<Vec<_>>().join(", ");
        ok(&with_interfaces(&format!("inside = [{}]\noutside = [\"wan0\"]", list(32))));
        let m = key_error(
            &with_interfaces(&format!("inside = [{}]\noutside = [\"wan0\"]", list(33))),
            "interfaces.inside",
        );
        assert!(m.contains("at most 32"), "{m}");
        key_error(
            &with_interfaces(&format!("inside = [\"lan0\"]\noutside = [{}]", list(33))),
            "interfaces.outside",
        );
    }

    #[test]
    fn xdp_mode_values() {
        let base = "inside = [\"lan0\"]\noutside = [\"wan0\"]\n";
        let m = key_error(&with_interfaces(&format!("{base}xdp_mode = \"skb\"")), "interfaces.xdp_mode");
        assert!(m.contains("\"native\", \"generic\"") && m.contains("\"skb\""), "{m}");
        let m = key_error(&with_interfaces(&format!("{base}xdp_mode = 1")), "interfaces.xdp_mode");
        assert!(m.contains("expected a string"), "{m}");
        // Case matters: the config is not a place for guessing.
        key_error(&with_interfaces(&format!("{base}xdp_mode = \"Native\"")), "interfaces.xdp_mode");
    }

    #[test]
    fn virtual_macs_parse_and_errors() {
        assert!(ok(&with("")).interfaces.virtual_macs.is_empty());
        assert!(ok(&format!(
            "[interfaces]\ninside = [\"lan0\"]\noutside = [\"wan0\"]\nvirtual_macs = []\n{POOL}"
        ))
        .interfaces
        .virtual_macs
        .is_empty());
        let doc = |v: &str| {
            format!("[interfaces]\ninside = [\"lan0\"]\noutside = [\"wan0\"]\nvirtual_macs = {v}\n{POOL}")
        };
        assert_eq!(ok(&doc("[\"00:00:5e:00:01:01\"]")).interfaces.virtual_macs, vec![[0, 0, 0x5e, 0, 1, 1]]);
        assert_key_errors(
            "interfaces.virtual_macs[0]",
            doc,
            &[
                ("[\"00:00:5e:00:01\"]", "not a MAC address"),
                ("[\"00:00:5e:00:01:zz\"]", "not a MAC address"),
                ("[\"01:00:5e:00:00:01\"]", "multicast"),
                ("[\"00:00:00:00:00:00\"]", "all-zero"),
            ],
        );
        key_error(&doc("[\"00:00:5e:00:01:01\", \"00:00:5e:00:01:01\"]"), "interfaces.virtual_macs[1]");
        key_error(&doc("[\"02:00:00:00:00:01\", \"02:00:00:00:00:02\", \"02:00:00:00:00:03\", \"02:00:00:00:00:04\"]"), "interfaces.virtual_macs");
    }
}
