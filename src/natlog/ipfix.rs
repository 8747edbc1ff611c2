// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//! IPFIX (RFC 7011) encoding of NAT events with the templates of RFC 8158: one template per
//! event shape, messages of template and data sets kept under an MTU. Transport (sequence
//! numbers per transport session, template refresh, resending) is `export.rs`'s; this file
//! only lays out bytes. Hand-written (docs/design/natlog.md says why): every record is a
//! fixed layout of fixed-size fields.

use super::{quota, threshold, NatEvent, NatEventKind};

/// Version Number of an IPFIX Message Header (RFC 7011 section 3.1).
pub const VERSION: u16 = 10;
/// Bytes of a Message Header.
pub const HEADER_LEN: usize = 16;
/// Bytes of a Set Header.
pub const SET_HEADER_LEN: usize = 4;
/// Set ID of a Template Set (RFC 7011 section 3.3.2).
pub const TEMPLATE_SET_ID: u16 = 2;
/// The message size natrix keeps under by default: a UDP datagram within a 1500-byte path
/// MTU with room for tunnels, and a TCP message a collector reads in one piece.
pub const DEFAULT_MTU: usize = 1400;
/// The first Template ID (RFC 7011 section 3.4.1: 0-255 are reserved for sets).
pub const FIRST_TEMPLATE_ID: u16 = 256;

/// An information element natrix exports (IANA "IPFIX Information Elements"; RFC 8158
/// section 4.1 lists the NAT ones). Each is sent at its abstract data type's full size
/// (RFC 7011 section 6.1; no reduced-size encoding).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Element {
    /// protocolIdentifier (4), unsigned8.
    ProtocolIdentifier,
    /// sourceTransportPort (7), unsigned16.
    SourceTransportPort,
    /// sourceIPv4Address (8), ipv4Address: the subscriber.
    SourceIpv4Address,
    /// destinationTransportPort (11), unsigned16.
    DestinationTransportPort,
    /// destinationIPv4Address (12), ipv4Address.
    DestinationIpv4Address,
    /// postNATSourceIPv4Address (225), ipv4Address: the pool address.
    PostNatSourceIpv4Address,
    /// postNAPTSourceTransportPort (227), unsigned16.
    PostNaptSourceTransportPort,
    /// natEvent (230), unsigned8.
    NatEvent,
    /// natPoolId (283), unsigned32.
    NatPoolId,
    /// observationTimeMilliseconds (323), dateTimeMilliseconds: ms since the Unix epoch.
    ObservationTimeMilliseconds,
    /// portRangeStart (361), unsigned16.
    PortRangeStart,
    /// portRangeEnd (362), unsigned16.
    PortRangeEnd,
    /// natQuotaExceededEvent (466), unsigned32.
    NatQuotaExceededEvent,
    /// natThresholdEvent (467), unsigned32.
    NatThresholdEvent,
    /// maxSessionEntries (471), unsigned32.
    MaxSessionEntries,
    /// maxBIBEntries (472), unsigned32.
    MaxBibEntries,
    /// maxEntriesPerUser (473), unsigned32.
    MaxEntriesPerUser,
    /// maxSubscribers (474), unsigned32.
    MaxSubscribers,
    /// maxFragmentsPendingReassembly (475), unsigned32.
    MaxFragmentsPendingReassembly,
    /// addressPoolHighThreshold (476), unsigned32.
    AddressPoolHighThreshold,
}

impl Element {
    /// The Information Element identifier (IANA).
    pub fn id(self) -> u16 {
        match self {
            Self::ProtocolIdentifier => 4,
            Self::SourceTransportPort => 7,
            Self::SourceIpv4Address => 8,
            Self::DestinationTransportPort => 11,
            Self::DestinationIpv4Address => 12,
            Self::PostNatSourceIpv4Address => 225,
            Self::PostNaptSourceTransportPort => 227,
            Self::NatEvent => 230,
            Self::NatPoolId => 283,
            Self::ObservationTimeMilliseconds => 323,
            Self::PortRangeStart => 361,
            Self::PortRangeEnd => 362,
            Self::NatQuotaExceededEvent => 466,
            Self::NatThresholdEvent => 467,
            Self::MaxSessionEntries => 471,
            Self::MaxBibEntries => 472,
            Self::MaxEntriesPerUser => 473,
            Self::MaxSubscribers => 474,
            Self::MaxFragmentsPendingReassembly => 475,
            Self::AddressPoolHighThreshold => 476,
        }
    }

    /// Its name in the IANA registry (also the syslog structured-data parameter names).
    pub fn name(self) -> &'static str {
        match self {
            Self::ProtocolIdentifier => "protocolIdentifier",
            Self::SourceTransportPort => "sourceTransportPort",
            Self::SourceIpv4Address => "sourceIPv4Address",
            Self::DestinationTransportPort => "destinationTransportPort",
            Self::DestinationIpv4Address => "destinationIPv4Address",
            Self::PostNatSourceIpv4Address => "postNATSourceIPv4Address",
            Self::PostNaptSourceTransportPort => "postNAPTSourceTransportPort",
            Self::NatEvent => "natEvent",
            Self::NatPoolId => "natPoolId",
            Self::ObservationTimeMilliseconds => "observationTimeMilliseconds",
            Self::PortRangeStart => "portRangeStart",
            Self::PortRangeEnd => "portRangeEnd",
            Self::NatQuotaExceededEvent => "natQuotaExceededEvent",
            Self::NatThresholdEvent => "natThresholdEvent",
            Self::MaxSessionEntries => "maxSessionEntries",
            Self::MaxBibEntries => "maxBIBEntries",
            Self::MaxEntriesPerUser => "maxEntriesPerUser",
            Self::MaxSubscribers => "maxSubscribers",
            Self::MaxFragmentsPendingReassembly => "maxFragmentsPendingReassembly",
            Self::AddressPoolHighThreshold => "addressPoolHighThreshold",
        }
    }

    /// Bytes on the wire: the abstract data type's size.
    pub fn size(self) -> u16 {
        match self {
            Self::ProtocolIdentifier | Self::NatEvent => 1,
            Self::SourceTransportPort
            | Self::DestinationTransportPort
            | Self::PostNaptSourceTransportPort
            | Self::PortRangeStart
            | Self::PortRangeEnd => 2,
            Self::SourceIpv4Address
            | Self::DestinationIpv4Address
            | Self::PostNatSourceIpv4Address
            | Self::NatPoolId
            | Self::NatQuotaExceededEvent
            | Self::NatThresholdEvent
            | Self::MaxSessionEntries
            | Self::MaxBibEntries
            | Self::MaxEntriesPerUser
            | Self::MaxSubscribers
            | Self::MaxFragmentsPendingReassembly
            | Self::AddressPoolHighThreshold => 4,
            Self::ObservationTimeMilliseconds => 8,
        }
    }

    /// Appends the event's value of this element, network byte order.
    fn put(self, ev: &NatEvent, out: &mut Vec<u8>) {
        match self {
            Self::ProtocolIdentifier => out.push(ev.proto),
            Self::SourceTransportPort => out.extend_from_slice(&ev.in_port.to_be_bytes()),
            Self::SourceIpv4Address => out.extend_from_slice(&ev.inside.octets()),
            Self::DestinationTransportPort => {
                out.extend_from_slice(&ev.remote.map_or(0, |r| r.port()).to_be_bytes())
            }
            Self::DestinationIpv4Address => {
                out.extend_from_slice(&ev.remote.map_or([0; 4], |r| r.ip().octets()))
            }
            Self::PostNatSourceIpv4Address => out.extend_from_slice(&ev.outside.octets()),
            Self::PostNaptSourceTransportPort => out.extend_from_slice(&ev.out_port.to_be_bytes()),
            Self::NatEvent => out.push(ev.kind as u8),
            Self::NatPoolId => out.extend_from_slice(&ev.pool_id.to_be_bytes()),
            Self::ObservationTimeMilliseconds => out.extend_from_slice(&ev.time_ms.to_be_bytes()),
            Self::PortRangeStart => out.extend_from_slice(&ev.port_start.to_be_bytes()),
            Self::PortRangeEnd => out.extend_from_slice(&ev.port_end.to_be_bytes()),
            Self::NatQuotaExceededEvent | Self::NatThresholdEvent => {
                out.extend_from_slice(&ev.detail.to_be_bytes())
            }
            Self::MaxSessionEntries
            | Self::MaxBibEntries
            | Self::MaxEntriesPerUser
            | Self::MaxSubscribers
            | Self::MaxFragmentsPendingReassembly
            | Self::AddressPoolHighThreshold => out.extend_from_slice(&ev.limit.to_be_bytes()),
        }
    }
}

/// One Template: its ID and fields, in record order (RFC 8158 section 4.4's field lists,
/// the mandatory fields; the optional VRF and NAT64 fields are left out: natrix has neither).
#[derive(Debug, PartialEq, Eq)]
pub struct Template {
    pub id: u16,
    /// What it carries, for people reading logs and tests.
    pub name: &'static str,
    pub fields: &'static [Element],
}

impl Template {
    /// Bytes of one data record.
    pub fn record_len(&self) -> usize {
        self.fields.iter().map(|f| usize::from(f.size())).sum()
    }

    /// Bytes of this template's Template Record (RFC 7011 section 3.4.1).
    pub fn template_record_len(&self) -> usize {
        4 + 4 * self.fields.len()
    }

    /// Appends the Template Record: Template ID, Field Count, then each field's Information
    /// Element identifier and length (no enterprise bit: every element is IANA's).
    fn put_template_record(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.id.to_be_bytes());
        out.extend_from_slice(&(self.fields.len() as u16).to_be_bytes());
        for f in self.fields {
            out.extend_from_slice(&f.id().to_be_bytes());
            out.extend_from_slice(&f.size().to_be_bytes());
        }
    }

    /// Appends the event's data record.
    pub fn put_record(&self, ev: &NatEvent, out: &mut Vec<u8>) {
        for f in self.fields {
            f.put(ev, out);
        }
    }
}

use Element as E;

/// A template's fields: when and what happened (every record starts with them), then these.
macro_rules! fields {
    ($($f:ident),* $(,)?) => {
        &[E::ObservationTimeMilliseconds, E::NatEvent, $(E::$f),*]
    };
}

/// Every template natrix sends. The index is the ID's offset from `FIRST_TEMPLATE_ID`, and
/// IDs never change meaning: a new shape gets a new ID at the end.
pub static TEMPLATES: [Template; 11] = [
    Template {
        id: 256,
        name: "port block allocation/de-allocation (natEvent 16/17)",
        fields: fields![SourceIpv4Address, PostNatSourceIpv4Address, PortRangeStart, PortRangeEnd],
    },
    Template {
        id: 257,
        name: "NAT44 session create/delete (natEvent 4/5)",
        fields: fields![
            ProtocolIdentifier,
            SourceIpv4Address,
            SourceTransportPort,
            PostNatSourceIpv4Address,
            PostNaptSourceTransportPort,
        ],
    },
    Template {
        id: 258,
        name: "NAT44 session create/delete with the destination (natEvent 4/5, log.destinations)",
        fields: fields![
            ProtocolIdentifier,
            SourceIpv4Address,
            SourceTransportPort,
            PostNatSourceIpv4Address,
            PostNaptSourceTransportPort,
            DestinationIpv4Address,
            DestinationTransportPort,
        ],
    },
    Template { id: 259, name: "addresses exhausted (natEvent 3)", fields: fields![NatPoolId] },
    Template {
        id: 260,
        name: "ports exhausted (natEvent 12)",
        fields: fields![PostNatSourceIpv4Address, ProtocolIdentifier],
    },
    Template {
        id: 261,
        name: "quota exceeded: maximum session entries (natEvent 13, natQuotaExceededEvent 1)",
        fields: fields![NatQuotaExceededEvent, MaxSessionEntries],
    },
    Template {
        id: 262,
        name: "quota exceeded: maximum BIB entries (natEvent 13, natQuotaExceededEvent 2)",
        fields: fields![NatQuotaExceededEvent, MaxBibEntries],
    },
    Template {
        id: 263,
        name: "quota exceeded: maximum entries per user (natEvent 13, natQuotaExceededEvent 3)",
        fields: fields![NatQuotaExceededEvent, MaxEntriesPerUser, SourceIpv4Address],
    },
    Template {
        id: 264,
        name: "quota exceeded: maximum active subscribers (natEvent 13, natQuotaExceededEvent 4)",
        fields: fields![NatQuotaExceededEvent, MaxSubscribers],
    },
    Template {
        id: 265,
        name: "quota exceeded: maximum fragments pending reassembly (natEvent 13, natQuotaExceededEvent 5)",
        fields: fields![NatQuotaExceededEvent, MaxFragmentsPendingReassembly, SourceIpv4Address],
    },
    Template {
        id: 266,
        name: "threshold reached: address pool high (natEvent 18, natThresholdEvent 1)",
        fields: fields![NatThresholdEvent, NatPoolId, AddressPoolHighThreshold],
    },
];

/// The template an event is sent with, or None when natrix has none for it (a quota or
/// threshold event whose `detail` names no kind natrix knows).
pub fn template_for(ev: &NatEvent) -> Option<&'static Template> {
    let i = match ev.kind {
        NatEventKind::BlockAlloc | NatEventKind::BlockFree => 0,
        NatEventKind::SessionCreate | NatEventKind::SessionDelete if ev.remote.is_some() => 2,
        NatEventKind::SessionCreate | NatEventKind::SessionDelete => 1,
        NatEventKind::AddressesExhausted => 3,
        NatEventKind::PortsExhausted => 4,
        NatEventKind::QuotaExceeded => match ev.detail {
            quota::MAX_SESSIONS => 5,
            quota::MAX_BIB => 6,
            quota::MAX_PER_USER => 7,
            quota::MAX_SUBSCRIBERS => 8,
            quota::MAX_FRAGMENTS => 9,
            _ => return None,
        },
        NatEventKind::ThresholdReached => match ev.detail {
            threshold::POOL_HIGH => 10,
            _ => return None,
        },
    };
    Some(&TEMPLATES[i])
}

/// The smallest MTU every template and record fits in: a message header, a set header and
/// the largest template record or data record.
pub fn min_mtu() -> usize {
    let largest = TEMPLATES.iter().map(|t| t.record_len().max(t.template_record_len())).max().unwrap_or(0);
    HEADER_LEN + SET_HEADER_LEN + largest
}

/// One IPFIX Message, its header's Export Time and Sequence Number still to be stamped
/// (they belong to the moment and the transport session it is sent in).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    bytes: Vec<u8>,
    records: u32,
}

impl Message {
    /// The whole message, header included.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// Data records in it (0 for a template message).
    pub fn records(&self) -> u32 {
        self.records
    }

    /// Sets the Export Time (seconds since the Unix epoch) and the Sequence Number: the
    /// data records sent before this message in its transport session, for its
    /// Observation Domain, modulo 2^32 (RFC 7011 section 3.1).
    pub fn stamp(&mut self, export_time: u32, sequence: u32) {
        self.bytes[4..8].copy_from_slice(&export_time.to_be_bytes());
        self.bytes[8..12].copy_from_slice(&sequence.to_be_bytes());
    }
}

/// Builds messages of sets of records, starting a new set when the set ID changes and a new
/// message when the next record would take the message past the MTU.
struct Builder {
    domain: u32,
    mtu: usize,
    cur: Vec<u8>,
    records: u32,
    /// The open set: its ID and where its header starts.
    set: Option<(u16, usize)>,
    done: Vec<Message>,
}

impl Builder {
    fn new(domain: u32, mtu: usize) -> Builder {
        Builder { domain, mtu: mtu.max(min_mtu()), cur: Vec::new(), records: 0, set: None, done: Vec::new() }
    }

    fn start_message(&mut self) {
        self.cur = Vec::with_capacity(self.mtu);
        self.cur.extend_from_slice(&VERSION.to_be_bytes());
        self.cur.extend_from_slice(&[0; 2]); // length, at the end
        self.cur.extend_from_slice(&[0; 8]); // export time and sequence number, stamped later
        self.cur.extend_from_slice(&self.domain.to_be_bytes());
        self.records = 0;
        self.set = None;
    }

    fn close_set(&mut self) {
        if let Some((_, at)) = self.set.take() {
            let len = (self.cur.len() - at) as u16;
            self.cur[at + 2..at + 4].copy_from_slice(&len.to_be_bytes());
        }
    }

    /// Finishes the message under way (if it holds anything).
    fn finish_message(&mut self) {
        self.close_set();
        if self.cur.len() > HEADER_LEN {
            let len = self.cur.len() as u16;
            self.cur[2..4].copy_from_slice(&len.to_be_bytes());
            let bytes = std::mem::take(&mut self.cur);
            self.done.push(Message { bytes, records: self.records });
        }
        self.cur.clear();
    }

    /// Whether `len` more bytes in set `set_id` fit in the message under way.
    fn fits(&self, set_id: u16, len: usize) -> bool {
        if self.cur.is_empty() {
            return false;
        }
        let extra = match self.set {
            Some((id, _)) if id == set_id => len,
            _ => SET_HEADER_LEN + len,
        };
        self.cur.len() + extra <= self.mtu
    }

    /// Makes room for `len` bytes in set `set_id`: in the open set, a new set, or a new
    /// message. Returns false (and changes nothing) when they would not fit even alone.
    fn room(&mut self, set_id: u16, len: usize) -> bool {
        if HEADER_LEN + SET_HEADER_LEN + len > self.mtu {
            return false;
        }
        if !self.fits(set_id, len) {
            self.finish_message();
            self.start_message();
        }
        if self.set.map(|(id, _)| id) != Some(set_id) {
            self.close_set();
            self.set = Some((set_id, self.cur.len()));
            self.cur.extend_from_slice(&set_id.to_be_bytes());
            self.cur.extend_from_slice(&[0; 2]);
        }
        true
    }

    fn push_template(&mut self, t: &Template) {
        if self.room(TEMPLATE_SET_ID, t.template_record_len()) {
            t.put_template_record(&mut self.cur);
        }
    }

    fn push_record(&mut self, t: &Template, ev: &NatEvent) -> bool {
        if !self.room(t.id, t.record_len()) {
            return false;
        }
        t.put_record(ev, &mut self.cur);
        self.records += 1;
        true
    }

    fn into_messages(mut self) -> Vec<Message> {
        self.finish_message();
        self.done
    }
}

/// Every template, in as few messages under `mtu` as they fit (one, at the default).
pub fn template_messages(domain: u32, mtu: usize) -> Vec<Message> {
    let mut b = Builder::new(domain, mtu);
    for t in &TEMPLATES {
        b.push_template(t);
    }
    b.into_messages()
}

/// One message of data records for events from the front of `events`, as many as fit under
/// `mtu`. Returns the message (None if it holds no record) and how many events it used up:
/// the records in it and the events without a template (`template_for`) skipped on the way.
pub fn data_message(events: &[NatEvent], domain: u32, mtu: usize) -> (Option<Message>, usize) {
    let mut b = Builder::new(domain, mtu);
    b.start_message();
    let mut used = 0;
    for ev in events {
        let Some(t) = template_for(ev) else {
            used += 1;
            continue;
        };
        if !b.fits(t.id, t.record_len()) && b.records > 0 {
            break;
        }
        b.push_record(t, ev);
        used += 1;
    }
    (b.into_messages().pop(), used)
}

/// Messages of data records for every event of `events` that has a template, in order.
pub fn data_messages(events: &[NatEvent], domain: u32, mtu: usize) -> Vec<Message> {
    let mut out = Vec::new();
    let mut rest = events;
    while !rest.is_empty() {
        let (m, used) = data_message(rest, domain, mtu);
        out.extend(m);
        rest = &rest[used..];
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Ipv4Addr, SocketAddrV4};

    const T: u64 = 0x0000_0190_0000_0001; // some ms since the epoch
    const TIME_EVENT: [Element; 2] = [E::ObservationTimeMilliseconds, E::NatEvent];

    fn hex(s: &str) -> Vec<u8> {
        let s: String = s.chars().filter(|c| !c.is_whitespace()).collect();
        (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
    }

    fn rec(ev: &NatEvent) -> (u16, Vec<u8>) {
        let t = template_for(ev).expect("a template");
        let mut out = Vec::new();
        t.put_record(ev, &mut out);
        assert_eq!(out.len(), t.record_len());
        (t.id, out)
    }

    fn block(kind: NatEventKind) -> NatEvent {
        let mut ev = NatEvent::new(kind, T);
        ev.inside = Ipv4Addr::new(100, 64, 0, 1);
        ev.outside = Ipv4Addr::new(203, 0, 113, 5);
        ev.port_start = 1024;
        ev.port_end = 1279;
        ev
    }

    fn session(kind: NatEventKind, remote: Option<SocketAddrV4>) -> NatEvent {
        let mut ev = NatEvent::new(kind, T);
        ev.proto = 6;
        ev.inside = Ipv4Addr::new(100, 64, 0, 1);
        ev.in_port = 40000;
        ev.outside = Ipv4Addr::new(203, 0, 113, 5);
        ev.out_port = 1025;
        ev.remote = remote;
        ev
    }

    #[test]
    fn template_ids_are_stable_and_fields_match_rfc8158() {
        for (i, t) in TEMPLATES.iter().enumerate() {
            assert_eq!(t.id, FIRST_TEMPLATE_ID + i as u16, "{}", t.name);
            assert_eq!(t.fields[..2], TIME_EVENT, "{}: every record starts with time and natEvent", t.name);
        }
        let ids = |i: usize| TEMPLATES[i].fields.iter().map(|f| f.id()).collect::<Vec<_>>();
        assert_eq!(ids(0), [323, 230, 8, 225, 361, 362]);
        assert_eq!(ids(1), [323, 230, 4, 8, 7, 225, 227]);
        assert_eq!(ids(2), [323, 230, 4, 8, 7, 225, 227, 12, 11]);
        assert_eq!(ids(3), [323, 230, 283]);
        assert_eq!(ids(4), [323, 230, 225, 4]);
        assert_eq!(ids(5), [323, 230, 466, 471]);
        assert_eq!(ids(6), [323, 230, 466, 472]);
        assert_eq!(ids(7), [323, 230, 466, 473, 8]);
        assert_eq!(ids(8), [323, 230, 466, 474]);
        assert_eq!(ids(9), [323, 230, 466, 475, 8]);
        assert_eq!(ids(10), [323, 230, 467, 283, 476]);
    }

    #[test]
    fn block_records_byte_exact() {
        // time (8) natEvent (1) inside (4) outside (4) start (2) end (2)
        let want = hex("0000019000000001 10 64400001 cb007105 0400 04ff");
        assert_eq!(rec(&block(NatEventKind::BlockAlloc)), (256, want));
        let want = hex("0000019000000001 11 64400001 cb007105 0400 04ff");
        assert_eq!(rec(&block(NatEventKind::BlockFree)), (256, want));
    }

    #[test]
    fn session_records_byte_exact() {
        // time, natEvent 4, proto 6, inside, 40000 = 0x9c40, outside, 1025 = 0x0401
        let want = hex("0000019000000001 04 06 64400001 9c40 cb007105 0401");
        assert_eq!(rec(&session(NatEventKind::SessionCreate, None)), (257, want));
        let remote = SocketAddrV4::new(Ipv4Addr::new(198, 51, 100, 7), 443);
        let want = hex("0000019000000001 05 06 64400001 9c40 cb007105 0401 c6336407 01bb");
        assert_eq!(rec(&session(NatEventKind::SessionDelete, Some(remote))), (258, want));
    }

    #[test]
    fn exhaustion_quota_threshold_records_byte_exact() {
        let mut ev = NatEvent::new(NatEventKind::AddressesExhausted, T);
        ev.pool_id = 1;
        assert_eq!(rec(&ev), (259, hex("0000019000000001 03 00000001")));

        let mut ev = NatEvent::new(NatEventKind::PortsExhausted, T);
        ev.outside = Ipv4Addr::new(203, 0, 113, 5);
        ev.proto = 17;
        assert_eq!(rec(&ev), (260, hex("0000019000000001 0c cb007105 11")));

        let quota = |detail, limit, inside| {
            let mut ev = NatEvent::new(NatEventKind::QuotaExceeded, T);
            ev.detail = detail;
            ev.limit = limit;
            ev.inside = inside;
            ev
        };
        let sub = Ipv4Addr::new(100, 64, 0, 9);
        assert_eq!(rec(&quota(1, 1 << 20, sub)), (261, hex("0000019000000001 0d 00000001 00100000")));
        assert_eq!(rec(&quota(2, 1 << 20, sub)), (262, hex("0000019000000001 0d 00000002 00100000")));
        assert_eq!(rec(&quota(3, 4, sub)), (263, hex("0000019000000001 0d 00000003 00000004 64400009")));
        assert_eq!(rec(&quota(4, 65536, sub)), (264, hex("0000019000000001 0d 00000004 00010000")));
        assert_eq!(rec(&quota(5, 256, sub)), (265, hex("0000019000000001 0d 00000005 00000100 64400009")));
        assert!(template_for(&quota(6, 1, sub)).is_none());
        assert!(template_for(&quota(0, 1, sub)).is_none());

        let mut ev = NatEvent::new(NatEventKind::ThresholdReached, T);
        ev.detail = threshold::POOL_HIGH;
        ev.pool_id = 1;
        ev.limit = 90;
        assert_eq!(rec(&ev), (266, hex("0000019000000001 12 00000001 00000001 0000005a")));
        ev.detail = 2;
        assert!(template_for(&ev).is_none());
    }

    #[test]
    fn template_message_byte_exact() {
        let msgs = template_messages(7, DEFAULT_MTU);
        assert_eq!(msgs.len(), 1);
        let mut m = msgs[0].clone();
        assert_eq!(m.records(), 0);
        m.stamp(0x6500_0000, 42);
        let b = m.bytes();
        let fields: usize = TEMPLATES.iter().map(|t| t.fields.len()).sum();
        let len = HEADER_LEN + SET_HEADER_LEN + 4 * TEMPLATES.len() + 4 * fields;
        assert_eq!(b.len(), len);
        // header: version 10, length, export time, sequence 42, domain 7
        let mut want = hex("000a");
        want.extend_from_slice(&(len as u16).to_be_bytes());
        want.extend(hex("65000000 0000002a 00000007"));
        // one template set holding every template
        want.extend(hex("0002"));
        want.extend_from_slice(&((len - HEADER_LEN) as u16).to_be_bytes());
        // the first template, written out by hand: 256, 6 fields, (id, length) each
        want.extend(hex("0100 0006 0143 0008 00e6 0001 0008 0004 00e1 0004 0169 0002 016a 0002"));
        assert_eq!(b[..want.len()], want[..]);
        // and the last: 266, 5 fields
        let tail = hex("010a 0005 0143 0008 00e6 0001 01d3 0004 011b 0004 01dc 0004");
        assert_eq!(b[len - tail.len()..], tail[..]);
    }

    #[test]
    fn data_message_byte_exact() {
        let evs = [block(NatEventKind::BlockAlloc), block(NatEventKind::BlockFree)];
        let (m, used) = data_message(&evs, 1, DEFAULT_MTU);
        let mut m = m.unwrap();
        assert_eq!((used, m.records()), (2, 2));
        m.stamp(1, 5);
        let want = hex("000a 003e 00000001 00000005 00000001 \
             0100 002e \
             0000019000000001 10 64400001 cb007105 0400 04ff \
             0000019000000001 11 64400001 cb007105 0400 04ff");
        assert_eq!(m.bytes(), &want[..]);
    }

    #[test]
    fn a_new_set_where_the_template_changes() {
        let evs = [
            block(NatEventKind::BlockAlloc),
            session(NatEventKind::SessionCreate, None),
            session(NatEventKind::SessionCreate, None),
            block(NatEventKind::BlockFree),
        ];
        let (m, _) = data_message(&evs, 1, DEFAULT_MTU);
        let b = m.unwrap().bytes().to_vec();
        let mut at = HEADER_LEN;
        let mut sets = Vec::new();
        while at < b.len() {
            let id = u16::from_be_bytes([b[at], b[at + 1]]);
            let len = usize::from(u16::from_be_bytes([b[at + 2], b[at + 3]]));
            sets.push((id, len));
            at += len;
        }
        assert_eq!(at, b.len());
        assert_eq!(sets, [(256, 4 + 21), (257, 4 + 2 * 22), (256, 4 + 21)]);
    }

    #[test]
    fn messages_split_at_the_mtu_with_as_many_records_as_fit() {
        let evs: Vec<NatEvent> = (0..1000u16)
            .map(|i| {
                let mut ev = block(NatEventKind::BlockAlloc);
                ev.port_start = i;
                ev
            })
            .collect();
        // 21-byte records after 16 + 4 bytes of headers: (1400 - 20) / 21 = 65 a message
        let msgs = data_messages(&evs, 1, DEFAULT_MTU);
        let per = (DEFAULT_MTU - HEADER_LEN - SET_HEADER_LEN) / 21;
        assert_eq!(per, 65);
        assert_eq!(msgs.len(), 1000usize.div_ceil(per));
        let mut next = 0u16;
        for (i, m) in msgs.iter().enumerate() {
            let b = m.bytes();
            assert!(b.len() <= DEFAULT_MTU);
            assert_eq!(usize::from(u16::from_be_bytes([b[2], b[3]])), b.len());
            if i + 1 < msgs.len() {
                assert_eq!(m.records() as usize, per);
                assert_eq!(b.len(), HEADER_LEN + SET_HEADER_LEN + per * 21);
            }
            // records in order, none lost or repeated
            for r in 0..m.records() as usize {
                let at = HEADER_LEN + SET_HEADER_LEN + r * 21 + 17;
                assert_eq!(u16::from_be_bytes([b[at], b[at + 1]]), next);
                next += 1;
            }
        }
        assert_eq!(next, 1000);
        // a small MTU: exactly one record a message; below the minimum it is raised to it
        let small = HEADER_LEN + SET_HEADER_LEN + 21;
        assert_eq!(data_messages(&evs[..3], 1, small).len(), 3);
        assert_eq!(data_messages(&evs[..3], 1, 10).len(), 3);
        // templates at the smallest MTU: several messages, each under it, every template once
        let msgs = template_messages(1, 10);
        assert!(msgs.len() > 1);
        let mut ids = Vec::new();
        for m in &msgs {
            let b = m.bytes();
            assert!(b.len() <= min_mtu());
            let mut at = HEADER_LEN + SET_HEADER_LEN;
            assert_eq!(
                usize::from(u16::from_be_bytes([b[HEADER_LEN + 2], b[HEADER_LEN + 3]])),
                b.len() - HEADER_LEN
            );
            while at < b.len() {
                ids.push(u16::from_be_bytes([b[at], b[at + 1]]));
                at += 4 + 4 * usize::from(u16::from_be_bytes([b[at + 2], b[at + 3]]));
            }
            assert_eq!(at, b.len());
        }
        assert_eq!(ids, TEMPLATES.iter().map(|t| t.id).collect::<Vec<_>>());
    }

    #[test]
    fn events_without_a_template_are_skipped_and_counted_as_used() {
        let mut bad = NatEvent::new(NatEventKind::QuotaExceeded, T);
        bad.detail = 99;
        let evs = [bad.clone(), block(NatEventKind::BlockAlloc), bad];
        let (m, used) = data_message(&evs, 1, DEFAULT_MTU);
        assert_eq!((m.unwrap().records(), used), (1, 3));
        let (m, used) = data_message(&evs[2..], 1, DEFAULT_MTU);
        assert_eq!((m, used), (None, 1));
    }
}
