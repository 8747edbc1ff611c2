// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//! `[fib_cache]`: the data plane's per-CPU cache of FIB answers.

use std::time::Duration;

use super::{key_err, ConfigError, Section};

/// The FIB cache (`[fib_cache]`): slots per CPU, a power of two in this range (or 0, no
/// cache). Below the minimum it would thrash on a handful of destinations; above the
/// maximum (64 MiB a CPU) its own lines stop fitting any cache.
const MIN_FIB_CACHE_ENTRIES: i64 = 64;
const MAX_FIB_CACHE_ENTRIES: i64 = 1 << 20;
/// How long a cached FIB answer may be reused without the daemon saying the routing is
/// unchanged; longer would let a route change go unnoticed for that long while no
/// daemon runs.
const MIN_FIB_CACHE_AGE: Duration = Duration::from_millis(1);
const MAX_FIB_CACHE_AGE: Duration = Duration::from_secs(10);

/// The data plane's cache of the kernel's FIB answers (bpf/nx_fwd.h): per CPU, reused
/// until netlink reports a routing change or `max_age` passes.
#[derive(Debug, Clone, PartialEq)]
pub struct FibCache {
    /// Slots per CPU (0: no cache, every packet asks the kernel).
    pub entries: u32,
    /// The longest an answer is reused; the bound on a stale route while no daemon runs.
    pub max_age: Duration,
}

impl Default for FibCache {
    fn default() -> Self {
        FibCache { entries: 4096, max_age: Duration::from_millis(50) }
    }
}

pub(super) fn parse_fib_cache(sec: &Section) -> Result<FibCache, ConfigError> {
    let d = FibCache::default();
    let entries = sec.int("entries", d.entries.into(), 0, MAX_FIB_CACHE_ENTRIES)?;
    if entries != 0 && (entries < MIN_FIB_CACHE_ENTRIES || entries & (entries - 1) != 0) {
        return Err(key_err(
            sec.key("entries"),
            format!(
                "must be 0 (no cache) or a power of two between {MIN_FIB_CACHE_ENTRIES} and \
                 {MAX_FIB_CACHE_ENTRIES}, found {entries}"
            ),
        ));
    }
    let max_age = sec.duration_in("max_age", d.max_age, MIN_FIB_CACHE_AGE, MAX_FIB_CACHE_AGE)?;
    Ok(FibCache { entries: entries as u32, max_age })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::tests::{assert_key_errors, key_error, ok, with};

    // ---- fib_cache ----

    #[test]
    fn fib_cache_values_and_errors() {
        assert_eq!(ok(&with("")).fib_cache, FibCache { entries: 4096, max_age: Duration::from_millis(50) });
        let c = ok(&with("[fib_cache]\nentries = 0\nmax_age = \"1ms\"\n"));
        assert_eq!(c.fib_cache, FibCache { entries: 0, max_age: Duration::from_millis(1) });
        let c = ok(&with("[fib_cache]\nentries = 1048576\nmax_age = 10\n"));
        assert_eq!(c.fib_cache, FibCache { entries: 1 << 20, max_age: Duration::from_secs(10) });
        assert_key_errors(
            "fib_cache.entries",
            |v| with(&format!("[fib_cache]\nentries = {v}\n")),
            &[
                ("100", "power of two"),
                ("32", "power of two between 64 and 1048576"),
                ("2097152", "between 0 and 1048576"),
                ("-1", "between 0"),
                ("\"4k\"", "expected an integer"),
            ],
        );
        assert_key_errors(
            "fib_cache.max_age",
            |v| with(&format!("[fib_cache]\nmax_age = {v}\n")),
            &[
                ("\"0s\"", "between 1ms and 10s"),
                ("11", "between 1ms and 10s"),
                ("true", "expected a duration"),
            ],
        );
        key_error(&with("[fib_cache]\nsize = 64\n"), "fib_cache.size");
    }
}
