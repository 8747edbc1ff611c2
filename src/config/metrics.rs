// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//! `[metrics]`: the Prometheus endpoint (src/metrics.rs; docs/OPERATIONS.md).

use std::net::SocketAddr;

use super::{key_err, ConfigError, Section};

/// The Prometheus endpoint (`[metrics]`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Metrics {
    /// Where `GET /metrics` is served; None (absent or "") serves nothing.
    pub listen: Option<SocketAddr>,
}

pub(super) fn parse_metrics(sec: &Section) -> Result<Metrics, ConfigError> {
    let listen = match sec.str("listen")? {
        None | Some("") => None,
        Some(s) => Some(s.parse::<SocketAddr>().map_err(|_| {
            key_err(
                sec.key("listen"),
                format!("expected ADDRESS:PORT such as \"127.0.0.1:9099\", found {s:?}"),
            )
        })?),
    };
    Ok(Metrics { listen })
}

#[cfg(test)]
mod tests {
    use crate::config::tests::{key_error, ok, with};

    #[test]
    fn metrics_listen() {
        assert_eq!(ok(&with("")).metrics.listen, None);
        assert_eq!(ok(&with("[metrics]\nlisten = \"\"\n")).metrics.listen, None);
        assert_eq!(
            ok(&with("[metrics]\nlisten = \"127.0.0.1:9099\"\n")).metrics.listen,
            Some("127.0.0.1:9099".parse().unwrap())
        );
        let m = key_error(&with("[metrics]\nlisten = \"localhost\"\n"), "metrics.listen");
        assert!(m.contains("ADDRESS:PORT"), "{m}");
        key_error(&with("[metrics]\nport = 9099\n"), "metrics.port");
    }
}
