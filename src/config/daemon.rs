// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//! `[daemon]`: the bpffs pin path and the expiry sweep interval.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::{key_err, ConfigError, Section};

/// Sweeping more often than this burns CPU walking the maps for nothing;
/// less often than this makes expiry visibly late relative to the timeouts.
const MIN_SWEEP_INTERVAL: Duration = Duration::from_millis(100);
const MAX_SWEEP_INTERVAL: Duration = Duration::from_secs(60);

#[derive(Debug, Clone, PartialEq)]
pub struct Daemon {
    pub pin_path: PathBuf,
    pub sweep_interval: Duration,
}

impl Default for Daemon {
    fn default() -> Self {
        Daemon { pin_path: PathBuf::from("/sys/fs/bpf/natrix"), sweep_interval: Duration::from_secs(1) }
    }
}

pub(super) fn parse_daemon(sec: &Section) -> Result<Daemon, ConfigError> {
    let d = Daemon::default();
    let pin_path = match sec.str("pin_path")? {
        None => d.pin_path,
        // A relative path would resolve against whatever directory the
        // daemon happened to be started from, and bpffs pins must outlive it.
        Some(p) if Path::new(p).is_absolute() => PathBuf::from(p),
        Some(p) => {
            return Err(key_err(sec.key("pin_path"), format!("must be an absolute path, found {p:?}")))
        }
    };
    let sweep_interval =
        sec.duration_in("sweep_interval", d.sweep_interval, MIN_SWEEP_INTERVAL, MAX_SWEEP_INTERVAL)?;
    Ok(Daemon { pin_path, sweep_interval })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::tests::{assert_key_errors, key_error, ok, secs, with};

    // ---- daemon ----

    #[test]
    fn daemon_pin_path() {
        let m = key_error(&with("[daemon]\npin_path = \"bpf/natrix\"\n"), "daemon.pin_path");
        assert!(m.contains("absolute"), "{m}");
        key_error(&with("[daemon]\npin_path = \"\"\n"), "daemon.pin_path");
        let m = key_error(&with("[daemon]\npin_path = 1\n"), "daemon.pin_path");
        assert!(m.contains("expected a string"), "{m}");
    }

    #[test]
    fn daemon_sweep_interval() {
        assert_eq!(
            ok(&with("[daemon]\nsweep_interval = \"100ms\"\n")).daemon.sweep_interval,
            Duration::from_millis(100)
        );
        assert_eq!(ok(&with("[daemon]\nsweep_interval = 60\n")).daemon.sweep_interval, secs(60));
        assert_key_errors(
            "daemon.sweep_interval",
            |v| with(&format!("[daemon]\nsweep_interval = {v}\n")),
            &[
                ("\"99ms\"", "between 100ms and 1m, found 99ms"),
                ("\"0s\"", "found 0s"),
                ("\"60s1ms\"", "found 1m1ms"),
                ("61", "found 1m1s"),
                ("\"1 s\"", "unexpected character"),
                ("-1", "negative"),
                ("false", "expected a duration"),
            ],
        );
    }
}
