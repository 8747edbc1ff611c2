// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//! NAT event logging: what happened (RFC 8158's events), made in the data plane or by the
//! daemon, and exported to IPFIX collectors (RFC 7011/8158) and syslog receivers (RFC 5424).

pub mod export;
pub mod ipfix;
pub mod pump;
pub mod source;
pub mod syslog;

use std::net::{Ipv4Addr, SocketAddrV4};

/// RFC 8158's natEvent values (IANA "natEvent Values"), the ones natrix sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[repr(u8)]
pub enum NatEventKind {
    /// No pool address had a free port block for a new subscriber.
    AddressesExhausted = 3,
    /// A NAT44 session was created.
    SessionCreate = 4,
    /// A NAT44 session was deleted.
    SessionDelete = 5,
    /// The subscriber's pool address had no free port block left.
    PortsExhausted = 12,
    /// A limit was hit (natQuotaExceededEvent says which).
    QuotaExceeded = 13,
    /// A port block was allocated to a subscriber.
    BlockAlloc = 16,
    /// A port block was released.
    BlockFree = 17,
    /// Pool utilisation crossed the configured threshold (natThresholdEvent says which).
    ThresholdReached = 18,
}

impl NatEventKind {
    /// Every kind, in natEvent order.
    pub const ALL: [NatEventKind; 8] = [
        NatEventKind::AddressesExhausted,
        NatEventKind::SessionCreate,
        NatEventKind::SessionDelete,
        NatEventKind::PortsExhausted,
        NatEventKind::QuotaExceeded,
        NatEventKind::BlockAlloc,
        NatEventKind::BlockFree,
        NatEventKind::ThresholdReached,
    ];

    /// The kind whose natEvent value is `v`, if natrix sends it.
    pub fn from_code(v: u8) -> Option<NatEventKind> {
        Self::ALL.into_iter().find(|k| *k as u8 == v)
    }
}

/// natQuotaExceededEvent (IE 466) values (IANA "natQuotaExceededEvent Values").
pub mod quota {
    /// Maximum session entries (the session table is full).
    pub const MAX_SESSIONS: u32 = 1;
    /// Maximum BIB entries (the mapping table is full).
    pub const MAX_BIB: u32 = 2;
    /// Maximum entries per user (a subscriber's blocks or sessions).
    pub const MAX_PER_USER: u32 = 3;
    /// Maximum active hosts or subscribers (the subscriber table is full).
    pub const MAX_SUBSCRIBERS: u32 = 4;
    /// Maximum fragments pending reassembly.
    pub const MAX_FRAGMENTS: u32 = 5;
}

/// natThresholdEvent (IE 467) values natrix sends.
pub mod threshold {
    /// Address pool high threshold: the pool's port blocks in use reached log.pool_threshold.
    pub const POOL_HIGH: u32 = 1;
}

/// One NAT event, as exported.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct NatEvent {
    /// When it happened: milliseconds since the Unix epoch, UTC (observationTimeMilliseconds).
    pub time_ms: u64,
    pub kind: NatEventKind,
    /// The subscriber (sourceIPv4Address), or 0.0.0.0 when the event names none.
    pub inside: Ipv4Addr,
    /// The pool address (postNATSourceIPv4Address), or 0.0.0.0 when the event names none.
    pub outside: Ipv4Addr,
    /// Block events: the block's first and last port (portRangeStart, portRangeEnd).
    pub port_start: u16,
    pub port_end: u16,
    /// Session events: IP protocol (protocolIdentifier), inside port (sourceTransportPort)
    /// and outside port (postNAPTSourceTransportPort); the ICMP identifier for ICMP.
    /// PortsExhausted: `proto` is the protocol of the mapping that found no port (RFC 8158
    /// reports port exhaustion per protocol), 0 when unknown.
    pub proto: u8,
    pub in_port: u16,
    pub out_port: u16,
    /// Session events with log.destinations: the remote endpoint
    /// (destinationIPv4Address, destinationTransportPort).
    pub remote: Option<SocketAddrV4>,
    /// QuotaExceeded: natQuotaExceededEvent (`quota::*`); ThresholdReached:
    /// natThresholdEvent (`threshold::*`); else 0.
    pub detail: u32,
    /// QuotaExceeded: the limit that was hit; ThresholdReached: the threshold in percent.
    pub limit: u32,
    /// AddressesExhausted and ThresholdReached: natPoolId (natrix has one pool: 1).
    pub pool_id: u32,
    /// BlockAlloc re-sent by interim logging (log.interim), not a new allocation.
    pub interim: bool,
}

impl NatEvent {
    /// An event of `kind` at `time_ms` with every other field empty.
    pub fn new(kind: NatEventKind, time_ms: u64) -> Self {
        NatEvent {
            time_ms,
            kind,
            inside: Ipv4Addr::UNSPECIFIED,
            outside: Ipv4Addr::UNSPECIFIED,
            port_start: 0,
            port_end: 0,
            proto: 0,
            in_port: 0,
            out_port: 0,
            remote: None,
            detail: 0,
            limit: 0,
            pool_id: 0,
            interim: false,
        }
    }
}
