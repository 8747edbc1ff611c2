// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//! The names people read: counters (`natrix stats`), protocols, TCP states.

use crate::abi::{PROTO_ICMP, PROTO_TCP, PROTO_UDP, TCP_STATE_NAMES};
use crate::skel::types::nx_stat;

pub fn proto_name(p: u8) -> &'static str {
    match p {
        PROTO_TCP => "tcp",
        PROTO_UDP => "udp",
        PROTO_ICMP => "icmp",
        _ => "other",
    }
}

/// A session's TCP state by name (TCP_STATE_NAMES); "open" for one it does not know.
pub fn tcp_state_name(s: u8) -> &'static str {
    TCP_STATE_NAMES.iter().find(|(st, _)| st.0 == u32::from(s)).map_or("open", |(_, n)| n)
}

/// Counter names, in the order of `enum nx_stat`: the names `natrix stats` prints.
/// Tied to the generated constants, and a test checks the list covers the enum exactly.
pub const STATS: &[(nx_stat, &str)] = &[
    (nx_stat::NX_STAT_RX_INSIDE, "rx_inside"),
    (nx_stat::NX_STAT_RX_OUTSIDE, "rx_outside"),
    (nx_stat::NX_STAT_XLATE_OUT, "translated_out"),
    (nx_stat::NX_STAT_XLATE_IN, "translated_in"),
    (nx_stat::NX_STAT_REDIRECT, "redirected"),
    (nx_stat::NX_STAT_PASS_NOT_IP, "pass_not_ipv4"),
    (nx_stat::NX_STAT_PASS_LOCAL, "pass_local"),
    (nx_stat::NX_STAT_PASS_TTL, "pass_ttl"),
    (nx_stat::NX_STAT_PASS_NO_NEIGH, "pass_no_neigh"),
    (nx_stat::NX_STAT_PASS_FIB_OTHER, "pass_fib_other"),
    (nx_stat::NX_STAT_PASS_TOO_BIG, "pass_too_big"),
    (nx_stat::NX_STAT_MAP_CREATED, "mappings_created"),
    (nx_stat::NX_STAT_SESS_CREATED, "sessions_created"),
    (nx_stat::NX_STAT_SUB_CREATED, "subscribers_created"),
    (nx_stat::NX_STAT_BLOCK_ALLOC, "blocks_allocated"),
    (nx_stat::NX_STAT_ALLOC_RETRY, "alloc_retries"),
    (nx_stat::NX_STAT_PASS_EXCLUDED, "pass_excluded"),
    (nx_stat::NX_STAT_ICMP_ERR_IN, "icmp_errors_in"),
    (nx_stat::NX_STAT_ICMP_ERR_OUT, "icmp_errors_out"),
    (nx_stat::NX_STAT_ICMP_SENT, "icmp_sent"),
    (nx_stat::NX_STAT_ICMP_SUPPRESSED, "icmp_rate_limited"),
    (nx_stat::NX_STAT_FRAG_OUT, "fragments_out"),
    (nx_stat::NX_STAT_FRAG_IN, "fragments_in"),
    (nx_stat::NX_STAT_FRAG_HELD, "fragments_held"),
    (nx_stat::NX_STAT_LOG_EVENT, "log_events"),
    (nx_stat::NX_STAT_LOG_LOST, "log_lost"),
    (nx_stat::NX_STAT_FRAG_REINJECTED, "fragments_reinjected"),
    (nx_stat::NX_STAT_FIB_LOOKUP, "fib_lookups"),
    (nx_stat::NX_STAT_HOME_BLOCK, "home_blocks"),
    (nx_stat::NX_STAT_PASS_OTHER_HOST, "pass_other_host"),
    (nx_stat::NX_DROP_MALFORMED_ETH, "malformed_eth"),
    (nx_stat::NX_DROP_MALFORMED_IP, "malformed_ip"),
    (nx_stat::NX_DROP_MALFORMED_L4, "malformed_l4"),
    (nx_stat::NX_DROP_FRAGMENT, "fragment"),
    (nx_stat::NX_DROP_FRAG_NO_STATE, "fragment_no_room"),
    (nx_stat::NX_DROP_UNSUPPORTED_PROTO, "unsupported_proto"),
    (nx_stat::NX_DROP_UNSUPPORTED_ICMP, "unsupported_icmp"),
    (nx_stat::NX_DROP_NO_MAPPING, "no_mapping"),
    (nx_stat::NX_DROP_FILTERED, "filtered"),
    (nx_stat::NX_DROP_POOL_EXHAUSTED, "pool_exhausted"),
    (nx_stat::NX_DROP_QUOTA_EXCEEDED, "quota_exceeded"),
    (nx_stat::NX_DROP_RATE_LIMITED, "rate_limited"),
    (nx_stat::NX_DROP_TABLE_FULL, "table_full"),
    (nx_stat::NX_DROP_HAIRPIN_DISABLED, "hairpin_disabled"),
    (nx_stat::NX_DROP_TCP_NO_SYN, "tcp_no_syn"),
    (nx_stat::NX_DROP_REDIRECT_FAILED, "redirect_failed"),
    (nx_stat::NX_DROP_ICMP_BAD_CHECKSUM, "icmp_bad_checksum"),
    (nx_stat::NX_DROP_ICMP_MALFORMED, "icmp_malformed"),
    (nx_stat::NX_DROP_MTU_EXCEEDED, "mtu_exceeded"),
    (nx_stat::NX_DROP_MAP_DYING, "mapping_expiring"),
    (nx_stat::NX_DROP_TABLE_BUSY, "table_busy"),
    (nx_stat::NX_DROP_NOT_SUBSCRIBER, "not_subscriber"),
    (nx_stat::NX_DROP_SESSION_QUOTA, "session_quota"),
    (nx_stat::NX_DROP_FRAG_TOO_BIG, "fragment_too_big"),
    (nx_stat::NX_DROP_FRAG_EXPIRED, "fragment_expired"),
    (nx_stat::NX_DROP_FRAG_EVICTED, "fragment_evicted"),
    (nx_stat::NX_DROP_FRAG_SEND_FAILED, "fragment_send_failed"),
    (nx_stat::NX_DROP_LOG_FULL, "log_full"),
    (nx_stat::NX_DROP_INTERNAL, "internal_error"),
];

pub fn is_drop(s: nx_stat) -> bool {
    s.0 >= nx_stat::NX_DROP_FIRST.0 && s.0 < nx_stat::NX_STAT_MAX.0
}

/// Index of a counter by its printed name (for tests and tools).
pub fn stat_index(name: &str) -> Option<usize> {
    STATS.iter().find(|(_, n)| *n == name).map(|(s, _)| s.0 as usize)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_names_cover_the_enum_once() {
        let mut seen = vec![false; nx_stat::NX_STAT_MAX.0 as usize];
        for (s, name) in STATS {
            let i = s.0 as usize;
            assert!(!seen[i], "{name}: index {i} listed twice");
            seen[i] = true;
        }
        assert!(seen.iter().all(|s| *s), "a counter of enum nx_stat has no name");
    }
}
