// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//! `[log]`: NAT event logging (RFC 8158 IPFIX, RFC 5424 syslog; docs/OPERATIONS.md).

use std::net::SocketAddr;
use std::time::Duration;

use super::{key_err, ConfigError, Section};

/// The event buffer's bounds, in events: below the minimum a daemon restart of a few
/// seconds under load would fill it; above the maximum (about 40 MiB) it is memory no
/// outage of the daemon needs.
const MIN_BUFFER_EVENTS: i64 = 1024;
const MAX_BUFFER_EVENTS: i64 = 1 << 20;
/// Bytes one event takes in the data plane's ring buffer (its 8-byte header and the
/// 40-byte struct nx_log_ev), for sizing it.
pub const RING_BYTES_PER_EVENT: u64 = 48;
const MAX_INTERIM: Duration = Duration::from_secs(7 * 24 * 3600);
const MIN_INTERIM: Duration = Duration::from_secs(1);
const MIN_TEMPLATE_REFRESH: Duration = Duration::from_secs(1);
const MAX_TEMPLATE_REFRESH: Duration = Duration::from_secs(3600);

/// Where IPFIX goes: a collector over UDP (RFC 7011 section 10.3) or over TCP (10.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Collector {
    Udp(SocketAddr),
    Tcp(SocketAddr),
}

/// NAT event logging (`[log]`).
#[derive(Debug, Clone, PartialEq)]
pub struct Log {
    /// IPFIX collectors (`"HOST:PORT"` is UDP, `"tcp:HOST:PORT"` TCP).
    pub ipfix: Vec<Collector>,
    /// RFC 5424 syslog receivers over UDP, the same events one line each.
    pub syslog: Vec<SocketAddr>,
    /// Also per-session events (natEvent 4 and 5; RFC 6888 REQ-12/14: off by default).
    pub sessions: bool,
    /// The remote address and port in session events (RFC 6888 REQ-12: off by default).
    pub destinations: bool,
    /// Re-send the allocation of every active block this often (None: never).
    pub interim: Option<Duration>,
    /// Refuse a new port block (drop reason `log_full`) when its event cannot be kept.
    pub strict: bool,
    /// The IPFIX Observation Domain ID (RFC 7011 section 3.1).
    pub observation_domain: u32,
    /// How often templates are re-sent over UDP (RFC 7011 section 8.4).
    pub template_refresh: Duration,
    /// Events the data plane's buffer holds while no daemon reads it (rounded up to the
    /// ring buffer's power-of-two size).
    pub buffer_events: u32,
    /// Pool utilisation, in percent of its blocks, at which a threshold event (natEvent 18)
    /// is sent (0: never).
    pub pool_threshold: u8,
}

impl Default for Log {
    fn default() -> Self {
        Log {
            ipfix: Vec::new(),
            syslog: Vec::new(),
            sessions: false,
            destinations: false,
            interim: None,
            strict: false,
            observation_domain: 1,
            template_refresh: Duration::from_secs(60),
            buffer_events: 1 << 18,
            pool_threshold: 90,
        }
    }
}

impl Log {
    /// Whether events are exported anywhere.
    pub fn enabled(&self) -> bool {
        !self.ipfix.is_empty() || !self.syslog.is_empty()
    }

    /// The data plane's ring buffer size in bytes: a power of two, at least one page.
    pub fn ring_bytes(&self) -> u32 {
        (u64::from(self.buffer_events) * RING_BYTES_PER_EVENT).next_power_of_two().max(4096) as u32
    }
}

fn sock(key: &str, s: &str) -> Result<SocketAddr, ConfigError> {
    s.parse::<SocketAddr>()
        .map_err(|_| key_err(key, format!("expected ADDRESS:PORT such as \"192.0.2.10:4739\", found {s:?}")))
}

pub(super) fn parse_log(sec: &Section) -> Result<Log, ConfigError> {
    let d = Log::default();
    let mut ipfix = Vec::new();
    for (key, s) in sec.opt_str_array("ipfix")? {
        let c = match s.strip_prefix("tcp:") {
            Some(rest) => Collector::Tcp(sock(&key, rest)?),
            None => Collector::Udp(sock(&key, s.strip_prefix("udp:").unwrap_or(s))?),
        };
        ipfix.push(c);
    }
    let mut syslog = Vec::new();
    for (key, s) in sec.opt_str_array("syslog")? {
        syslog.push(sock(&key, s.strip_prefix("udp:").unwrap_or(s))?);
    }
    let sessions = sec.bool("sessions", d.sessions)?;
    let destinations = sec.bool("destinations", d.destinations)?;
    if destinations && !sessions {
        return Err(key_err(
            sec.key("destinations"),
            "destinations are part of session events: set log.sessions = true as well",
        ));
    }
    let interim = match sec.duration("interim")? {
        None => None,
        Some(v) if v.is_zero() => None,
        Some(v) if (MIN_INTERIM..=MAX_INTERIM).contains(&v) => Some(v),
        Some(_) => {
            return Err(key_err(
                sec.key("interim"),
                "must be 0s (never) or between 1s and 7d (an interim record re-sends every active block)",
            ))
        }
    };
    let strict = sec.bool("strict", d.strict)?;
    let observation_domain =
        sec.int("observation_domain", d.observation_domain.into(), 0, u32::MAX.into())? as u32;
    let template_refresh =
        sec.duration_in("template_refresh", d.template_refresh, MIN_TEMPLATE_REFRESH, MAX_TEMPLATE_REFRESH)?;
    let buffer_events =
        sec.int("buffer_events", d.buffer_events.into(), MIN_BUFFER_EVENTS, MAX_BUFFER_EVENTS)? as u32;
    let pool_threshold = sec.int("pool_threshold", d.pool_threshold.into(), 0, 100)? as u8;
    Ok(Log {
        ipfix,
        syslog,
        sessions,
        destinations,
        interim,
        strict,
        observation_domain,
        template_refresh,
        buffer_events,
        pool_threshold,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::tests::{assert_key_errors, key_error, ok, with};

    #[test]
    fn log_defaults_and_values() {
        let c = ok(&with(""));
        assert_eq!(c.log, Log::default());
        assert!(!c.log.enabled());
        let c = ok(&with(
            "[log]\nipfix = [\"192.0.2.10:4739\", \"tcp:192.0.2.11:4740\"]\nsyslog = [\"192.0.2.10:514\"]\n\
             sessions = true\ndestinations = true\ninterim = \"1h\"\nstrict = true\nobservation_domain = 7\n\
             template_refresh = \"30s\"\nbuffer_events = 4096\npool_threshold = 80\n",
        ));
        assert_eq!(
            c.log.ipfix,
            vec![
                Collector::Udp("192.0.2.10:4739".parse().unwrap()),
                Collector::Tcp("192.0.2.11:4740".parse().unwrap())
            ]
        );
        assert_eq!(c.log.syslog, vec!["192.0.2.10:514".parse().unwrap()]);
        assert!(c.log.sessions && c.log.destinations && c.log.strict && c.log.enabled());
        assert_eq!(c.log.interim, Some(Duration::from_secs(3600)));
        assert_eq!(c.log.observation_domain, 7);
        assert_eq!(c.log.template_refresh, Duration::from_secs(30));
        assert_eq!(c.log.ring_bytes(), 256 * 1024);
        assert_eq!(c.log.pool_threshold, 80);
        assert_eq!(ok(&with("[log]\ninterim = \"0s\"\nipfix = []\n")).log.interim, None);
    }

    #[test]
    fn log_errors_name_the_key() {
        assert_key_errors(
            "log.ipfix[0]",
            |v| with(&format!("[log]\nipfix = [{v}]\n")),
            &[
                ("\"collector:4739\"", "ADDRESS:PORT"),
                ("\"tcp:192.0.2.1\"", "ADDRESS:PORT"),
                ("1", "expected a string"),
            ],
        );
        assert_key_errors(
            "log.syslog[1]",
            |v| with(&format!("[log]\nsyslog = [\"192.0.2.1:514\", {v}]\n")),
            &[("\"192.0.2.1\"", "ADDRESS:PORT")],
        );
        assert_key_errors(
            "log.interim",
            |v| with(&format!("[log]\ninterim = {v}\n")),
            &[("\"500ms\"", "between 1s and 7d"), ("\"8d\"", "between 1s and 7d")],
        );
        key_error(&with("[log]\ndestinations = true\n"), "log.destinations");
        key_error(&with("[log]\nbuffer_events = 10\n"), "log.buffer_events");
        key_error(&with("[log]\npool_threshold = 101\n"), "log.pool_threshold");
        key_error(&with("[log]\nipfix = \"192.0.2.1:4739\"\n"), "log.ipfix");
        key_error(&with("[log]\nfile = \"x\"\n"), "log.file");
    }
}
