// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//! Durations as written in the config (`"2h4m"`, `"500ms"`, integer seconds), both ways.

use std::fmt::Write as _;
use std::time::Duration;

/// Units accepted by [`parse_duration`], largest first, in milliseconds.
const DURATION_UNITS: [(&str, u64); 5] =
    [("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1_000), ("ms", 1)];

/// Parses a duration such as `"5m"`, `"2h4m"`, `"1h30m15s"`, `"500ms"` or
/// `"1d"`; a bare integer means seconds.
///
/// Each unit may appear at most once and units must be in descending order:
/// `"5m5m"` or `"30s1m"` are far more likely typos than intent. Zero is
/// accepted here because whether it makes sense depends on the key.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let too_large = || format!("duration {s:?} is too large");
    if s.is_empty() {
        return Err("duration must not be empty".to_owned());
    }
    if s.starts_with('-') {
        return Err(format!("duration {s:?} must not be negative"));
    }
    if s.bytes().all(|b| b.is_ascii_digit()) {
        let secs: u64 = s.parse().map_err(|_| too_large())?;
        let ms = secs.checked_mul(1_000).ok_or_else(too_large)?;
        return Ok(Duration::from_millis(ms));
    }

    let mut rest = s;
    let mut total: u64 = 0;
    let mut prev_unit: Option<usize> = None;
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return Err(format!("invalid duration {s:?}: expected a number at {rest:?}"));
        }
        let (number, tail) = rest.split_at(digits);
        let unit_len = tail.bytes().take_while(u8::is_ascii_alphabetic).count();
        let (unit, tail) = tail.split_at(unit_len);
        if unit.is_empty() {
            return Err(match tail.chars().next() {
                None => {
                    format!("invalid duration {s:?}: missing unit after {number:?} (use d, h, m, s or ms)")
                }
                Some(c) => format!("invalid duration {s:?}: unexpected character {c:?}"),
            });
        }
        let idx = DURATION_UNITS
            .iter()
            .position(|(u, _)| *u == unit)
            .ok_or_else(|| format!("invalid duration {s:?}: unknown unit {unit:?} (use d, h, m, s or ms)"))?;
        if prev_unit.is_some_and(|p| idx <= p) {
            return Err(format!(
                "invalid duration {s:?}: each unit may appear once, largest first (e.g. \"1h30m\")"
            ));
        }
        prev_unit = Some(idx);
        let n: u64 = number.parse().map_err(|_| too_large())?;
        total = n
            .checked_mul(DURATION_UNITS[idx].1)
            .and_then(|ms| total.checked_add(ms))
            .ok_or_else(too_large)?;
        rest = tail;
    }
    Ok(Duration::from_millis(total))
}

/// Inverse of [`parse_duration`], so that messages echo values in the same
/// notation the operator writes.
pub(super) fn fmt_duration(d: Duration) -> String {
    let mut ms = d.as_millis();
    if ms == 0 {
        return "0s".to_owned();
    }
    let mut out = String::new();
    for (unit, size) in DURATION_UNITS {
        let size = u128::from(size);
        if ms >= size {
            let _ = write!(out, "{}{unit}", ms / size);
            ms %= size;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::tests::secs;

    // ---- durations ----

    #[test]
    fn durations_parse() {
        for (s, ms) in [
            ("2h4m", 7_440_000),
            ("60s", 60_000),
            ("3s", 3_000),
            ("5m", 300_000),
            ("500ms", 500),
            ("1d", 86_400_000),
            ("1h30m15s", 5_415_000),
            ("1d2h3m4s5ms", 93_784_005),
            ("1m500ms", 60_500),
            ("90", 90_000),
            ("0", 0),
            ("0s", 0),
            ("90m", 5_400_000),
        ] {
            assert_eq!(parse_duration(s), Ok(Duration::from_millis(ms)), "{s}");
        }
    }

    #[test]
    fn durations_reject_garbage() {
        for (s, why) in [
            ("", "empty"),
            ("-5s", "negative"),
            ("-5", "negative"),
            ("5x", "unknown unit \"x\""),
            ("5M", "unknown unit \"M\""),
            ("5 m", "unexpected character ' '"),
            ("1h 30m", "expected a number"),
            ("1.5h", "unexpected character '.'"),
            ("1h30", "missing unit"),
            ("h", "expected a number"),
            ("+5s", "expected a number"),
            ("5m5m", "largest first"),
            ("30s1m", "largest first"),
            ("99999999999999999999", "too large"),
            ("99999999999999999999s", "too large"),
            ("18446744073709551615", "too large"),
            ("213503982335d", "too large"),
        ] {
            let err = parse_duration(s).expect_err(s);
            assert!(err.contains(why), "{s:?}: {err:?} lacks {why:?}");
        }
    }

    #[test]
    fn fmt_duration_round_trips() {
        for s in ["2h4m", "1d", "500ms", "1h30m15s", "2m", "0s", "1d2h3m4s5ms"] {
            assert_eq!(fmt_duration(parse_duration(s).unwrap()), s);
        }
        assert_eq!(fmt_duration(secs(120)), "2m");
    }
}
