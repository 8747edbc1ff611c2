// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//! `[fragments]`: bounds on fragment tracking (RFC 4787 REQ-14).

use std::time::Duration;

use super::{ConfigError, Section};

/// RFC 4787 REQ-14: fragment state is a bounded resource. Shorter than this
/// and fragments of one datagram that merely arrive spread out are dropped;
/// longer and a burst of lone first fragments pins the table.
const MIN_FRAGMENT_TIMEOUT: Duration = Duration::from_millis(100);
const MAX_FRAGMENT_TIMEOUT: Duration = Duration::from_secs(60);

const MIN_FRAGMENTS_TRACKED: i64 = 16;
const MAX_FRAGMENTS_TRACKED: i64 = 10_000_000;
const MAX_FRAGMENTS_HELD: i64 = 65_536;

/// Bounds on fragment tracking (RFC 4787 REQ-14). Only the first fragment
/// carries the ports, so later ones are translated by remembering it.
#[derive(Debug, Clone, PartialEq)]
pub struct Fragments {
    /// How long a datagram's fragment state lives after its last fragment.
    pub timeout: Duration,
    /// Datagrams whose first fragment was seen, tracked at once.
    pub max_tracked: u32,
    /// Out-of-order fragments held while waiting for their first fragment.
    pub max_held: u32,
}

impl Default for Fragments {
    fn default() -> Self {
        Fragments { timeout: Duration::from_secs(2), max_tracked: 16_384, max_held: 256 }
    }
}

pub(super) fn parse_fragments(sec: &Section) -> Result<Fragments, ConfigError> {
    let d = Fragments::default();
    Ok(Fragments {
        timeout: sec.duration_in("timeout", d.timeout, MIN_FRAGMENT_TIMEOUT, MAX_FRAGMENT_TIMEOUT)?,
        max_tracked: sec.int(
            "max_tracked",
            d.max_tracked.into(),
            MIN_FRAGMENTS_TRACKED,
            MAX_FRAGMENTS_TRACKED,
        )? as u32,
        max_held: sec.int("max_held", d.max_held.into(), 0, MAX_FRAGMENTS_HELD)? as u32,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::tests::{assert_key_errors, key_error, ok, secs, with};

    // ---- fragments ----

    #[test]
    fn fragments_defaults_and_values() {
        let d = Fragments { timeout: secs(2), max_tracked: 16384, max_held: 256 };
        assert_eq!(ok(&with("")).fragments, d);
        assert_eq!(ok(&with("[fragments]\n")).fragments, d);
        assert_eq!(Fragments::default(), d);
        let c = ok(&with("[fragments]\ntimeout = \"100ms\"\nmax_tracked = 16\nmax_held = 0\n"));
        assert_eq!(
            c.fragments,
            Fragments { timeout: Duration::from_millis(100), max_tracked: 16, max_held: 0 }
        );
        let c = ok(&with("[fragments]\ntimeout = 60\nmax_tracked = 10000000\nmax_held = 65536\n"));
        assert_eq!(c.fragments, Fragments { timeout: secs(60), max_tracked: 10_000_000, max_held: 65536 });
        assert_eq!(
            ok(&with("[fragments]\ntimeout = \"1s500ms\"\n")).fragments.timeout,
            Duration::from_millis(1500)
        );
    }

    #[test]
    fn fragments_errors() {
        assert_key_errors(
            "fragments.timeout",
            |v| with(&format!("[fragments]\ntimeout = {v}\n")),
            &[
                ("\"99ms\"", "between 100ms and 1m, found 99ms"),
                ("\"1m1ms\"", "found 1m1ms"),
                ("61", "found 1m1s"),
                ("0", "found 0s"),
                ("\"2x\"", "unknown unit"),
                ("-1", "negative"),
                ("true", "expected a duration"),
            ],
        );
        assert_key_errors(
            "fragments.max_tracked",
            |v| with(&format!("[fragments]\nmax_tracked = {v}\n")),
            &[
                ("15", "between 16 and 10000000, found 15"),
                ("10000001", "between 16 and 10000000"),
                ("\"16384\"", "expected an integer"),
            ],
        );
        assert_key_errors(
            "fragments.max_held",
            |v| with(&format!("[fragments]\nmax_held = {v}\n")),
            &[
                ("-1", "between 0 and 65536, found -1"),
                ("65537", "between 0 and 65536"),
                ("2.5", "expected an integer"),
            ],
        );
        let m = key_error(&with("[fragments]\nmax_hold = 5\n"), "fragments.max_hold");
        assert!(m.contains("did you mean `max_held`"), "{m}");
        let m = key_error(&with("[fragments]\ntimeouts = \"2s\"\n"), "fragments.timeouts");
        assert!(m.contains("did you mean `timeout`"), "{m}");
    }
}
