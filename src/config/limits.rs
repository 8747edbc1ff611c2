// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//! `[limits]`: the sizes of the data-plane tables and the sessions per subscriber.

use super::{ConfigError, Section};

/// Upper bound for the `limits.*` keys; each sizes a BPF map, and beyond this
/// the kernel memory cost stops being plausible for a single gateway.
const MAX_LIMIT: i64 = 100_000_000;

#[derive(Debug, Clone, PartialEq)]
pub struct Limits {
    pub max_subscribers: u32,
    pub max_mappings: u32,
    pub max_sessions: u32,
    /// Sessions (all protocols, inbound- and outbound-created) one subscriber may hold at
    /// once (RFC 6888 REQ-3/4); 0 = no limit. See [`DEFAULT_SESSIONS_PER_SUBSCRIBER`].
    pub max_sessions_per_subscriber: u32,
}

/// Default of `limits.max_sessions_per_subscriber`. A household's concurrent connections
/// are counted in tens to a few hundred, a few thousand for heavy peer-to-peer use; 4096
/// leaves that room while it takes 256 subscribers at their limit to fill the default
/// session table (1M), and an attacker flooding one subscriber's mapping with new remote
/// endpoints fills only that subscriber's share.
pub const DEFAULT_SESSIONS_PER_SUBSCRIBER: u32 = 4096;

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_subscribers: 65_536,
            max_mappings: 1_048_576,
            max_sessions: 1_048_576,
            max_sessions_per_subscriber: DEFAULT_SESSIONS_PER_SUBSCRIBER,
        }
    }
}

pub(super) fn parse_limits(sec: &Section) -> Result<Limits, ConfigError> {
    let d = Limits::default();
    let get = |k: &str, default: u32| sec.int(k, default.into(), 1, MAX_LIMIT).map(|n| n as u32);
    Ok(Limits {
        max_subscribers: get("max_subscribers", d.max_subscribers)?,
        max_mappings: get("max_mappings", d.max_mappings)?,
        max_sessions: get("max_sessions", d.max_sessions)?,
        max_sessions_per_subscriber: sec.int(
            "max_sessions_per_subscriber",
            d.max_sessions_per_subscriber.into(),
            0,
            MAX_LIMIT,
        )? as u32,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::tests::{assert_key_errors, ok, with};

    // ---- limits ----

    #[test]
    fn limits_errors() {
        for k in ["max_subscribers", "max_mappings", "max_sessions"] {
            let key = format!("limits.{k}");
            assert!(ok(&with(&format!("[limits]\n{k} = 100000000\n"))).warnings.is_empty());
            assert_key_errors(
                &key,
                |v| with(&format!("[limits]\n{k} = {v}\n")),
                &[
                    ("0", "between 1 and 100000000"),
                    ("100000001", "between 1 and 100000000"),
                    ("-1", "between 1"),
                    ("\"1000\"", "expected an integer"),
                    ("1e6", "expected an integer"),
                ],
            );
        }
    }

    #[test]
    fn sessions_per_subscriber_limit() {
        assert_eq!(ok(&with("")).limits.max_sessions_per_subscriber, DEFAULT_SESSIONS_PER_SUBSCRIBER);
        assert_eq!(
            ok(&with("[limits]\nmax_sessions_per_subscriber = 0\n")).limits.max_sessions_per_subscriber,
            0
        );
        assert_eq!(
            ok(&with("[limits]\nmax_sessions_per_subscriber = 1000\n")).limits.max_sessions_per_subscriber,
            1000
        );
        assert_key_errors(
            "limits.max_sessions_per_subscriber",
            |v| with(&format!("[limits]\nmax_sessions_per_subscriber = {v}\n")),
            &[("-1", "between"), ("\"many\"", "expected an integer")],
        );
    }
}
