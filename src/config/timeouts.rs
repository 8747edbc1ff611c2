// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//! `[timeouts]`: idle timeouts of mappings and sessions, and the RFC minima that warn.

use std::time::Duration;

use super::duration::fmt_duration;
use super::{key_err, ConfigError, Section};

/// A longer idle timeout is almost certainly a unit mistake, and would keep
/// mappings, and the ports they hold, allocated effectively forever.
const MAX_TIMEOUT: Duration = Duration::from_secs(30 * 86_400);

#[derive(Debug, Clone, PartialEq)]
pub struct Timeouts {
    pub udp: Duration,
    pub tcp_established: Duration,
    pub tcp_transitory: Duration,
    pub icmp: Duration,
    pub port_hold_down: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts {
            udp: Duration::from_secs(5 * 60),
            tcp_established: Duration::from_secs(2 * 3600 + 4 * 60),
            tcp_transitory: Duration::from_secs(4 * 60),
            icmp: Duration::from_secs(60),
            port_hold_down: Duration::from_secs(120),
        }
    }
}

pub(super) fn parse_timeouts(sec: &Section, warnings: &mut Vec<String>) -> Result<Timeouts, ConfigError> {
    let d = Timeouts::default();
    // Below these minima applications misbehave (keepalives outrun the NAT),
    // but operators sometimes trade that for state-table capacity, so they
    // only warrant a warning.
    let mut get = |k: &str, default: Duration, min: Duration, rfc: &str| -> Result<Duration, ConfigError> {
        let Some(v) = sec.duration(k)? else { return Ok(default) };
        if v.is_zero() {
            return Err(key_err(sec.key(k), "timeout must not be zero"));
        }
        if v > MAX_TIMEOUT {
            return Err(key_err(
                sec.key(k),
                format!("{} exceeds the maximum of {}", fmt_duration(v), fmt_duration(MAX_TIMEOUT)),
            ));
        }
        if v < min {
            warnings.push(format!(
                "{} = {} is below the {rfc} minimum of {}",
                sec.key(k),
                fmt_duration(v),
                fmt_duration(min)
            ));
        }
        Ok(v)
    };
    Ok(Timeouts {
        udp: get("udp", d.udp, Duration::from_secs(120), "RFC 4787 REQ-5")?,
        tcp_established: get(
            "tcp_established",
            d.tcp_established,
            Duration::from_secs(7440),
            "RFC 5382 REQ-5",
        )?,
        tcp_transitory: get("tcp_transitory", d.tcp_transitory, Duration::from_secs(240), "RFC 5382 REQ-5")?,
        icmp: get("icmp", d.icmp, Duration::from_secs(60), "RFC 5508 REQ-2")?,
        port_hold_down: get("port_hold_down", d.port_hold_down, Duration::from_secs(120), "RFC 6888 REQ-8")?,
    })
}

#[cfg(test)]
mod tests {
    use crate::config::tests::{assert_key_errors, ok, secs, with};

    // ---- timeouts ----

    const TIMEOUT_KEYS: [&str; 5] = ["udp", "tcp_established", "tcp_transitory", "icmp", "port_hold_down"];

    #[test]
    fn timeouts_accept_strings_and_integer_seconds() {
        let c = ok(&with("[timeouts]\nudp = 300\nicmp = \"1m\"\ntcp_established = \"3h\"\n"));
        assert_eq!(c.timeouts.udp, secs(300));
        assert_eq!(c.timeouts.icmp, secs(60));
        assert_eq!(c.timeouts.tcp_established, secs(3 * 3600));
        assert!(c.warnings.is_empty());
        // 30 days is the inclusive maximum.
        assert_eq!(ok(&with("[timeouts]\nudp = \"30d\"\n")).timeouts.udp, secs(30 * 86400));
    }

    #[test]
    fn timeouts_errors() {
        for k in TIMEOUT_KEYS {
            let key = format!("timeouts.{k}");
            assert_key_errors(
                &key,
                |v| with(&format!("[timeouts]\n{k} = {v}\n")),
                &[
                    ("\"0s\"", "zero"),
                    ("0", "zero"),
                    ("\"31d\"", "exceeds the maximum of 30d"),
                    ("2592001", "exceeds the maximum"),
                    ("\"5x\"", "unknown unit"),
                    ("\"\"", "empty"),
                    ("\"-5m\"", "negative"),
                    ("-5", "negative"),
                    ("true", "expected a duration"),
                    ("1.5", "expected a duration"),
                ],
            );
        }
    }

    #[test]
    fn timeouts_below_rfc_minimum_warn() {
        let c = ok(&with(
            "[timeouts]\nudp = \"1m\"\ntcp_established = \"2h\"\ntcp_transitory = \"3m59s\"\nicmp = \"30s\"\nport_hold_down = 10\n",
        ));
        assert_eq!(c.timeouts.udp, secs(60));
        assert_eq!(c.timeouts.port_hold_down, secs(10));
        assert_eq!(
            c.warnings,
            [
                "timeouts.udp = 1m is below the RFC 4787 REQ-5 minimum of 2m",
                "timeouts.tcp_established = 2h is below the RFC 5382 REQ-5 minimum of 2h4m",
                "timeouts.tcp_transitory = 3m59s is below the RFC 5382 REQ-5 minimum of 4m",
                "timeouts.icmp = 30s is below the RFC 5508 REQ-2 minimum of 1m",
                "timeouts.port_hold_down = 10s is below the RFC 6888 REQ-8 minimum of 2m",
            ]
        );
    }

    #[test]
    fn timeouts_at_rfc_minimum_do_not_warn() {
        let c = ok(&with(
            "[timeouts]\nudp = \"2m\"\ntcp_established = \"2h4m\"\ntcp_transitory = \"4m\"\nicmp = \"60s\"\nport_hold_down = \"120s\"\n",
        ));
        assert!(c.warnings.is_empty(), "{:?}", c.warnings);
    }
}
