// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//! IPFIX as an independent tool reads it: datagrams written to a pcap (LINKTYPE_RAW), decoded
//! by tshark's IPFIX dissector (cflow), each record turned back into a `NatEvent` from the
//! fields tshark shows. natrix's own encoder is not used here.

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::path::{Path, PathBuf};
use std::process::Command;

use natrix::natlog::{NatEvent, NatEventKind};
use serde_json::{Map, Value};

/// A pcap of IPv4/UDP datagrams (LINKTYPE_RAW: no link header).
pub struct Pcap(Vec<u8>, u32);

impl Pcap {
    pub fn new() -> Pcap {
        let mut b = Vec::new();
        b.extend_from_slice(&0xa1b2_c3d4u32.to_le_bytes()); // magic, microseconds
        b.extend_from_slice(&2u16.to_le_bytes());
        b.extend_from_slice(&4u16.to_le_bytes());
        b.extend_from_slice(&0i32.to_le_bytes()); // this zone
        b.extend_from_slice(&0u32.to_le_bytes()); // sigfigs
        b.extend_from_slice(&65535u32.to_le_bytes()); // snaplen
        b.extend_from_slice(&101u32.to_le_bytes()); // LINKTYPE_RAW
        Pcap(b, 0)
    }

    pub fn datagram(&mut self, src: SocketAddrV4, dst: SocketAddrV4, payload: &[u8]) {
        let total = 20 + 8 + payload.len();
        let mut ip = Vec::with_capacity(total);
        ip.extend_from_slice(&[0x45, 0]);
        ip.extend_from_slice(&(total as u16).to_be_bytes());
        ip.extend_from_slice(&[0, 0, 0x40, 0, 64, 17, 0, 0]); // id, DF, TTL, UDP, checksum
        ip.extend_from_slice(&src.ip().octets());
        ip.extend_from_slice(&dst.ip().octets());
        let sum = ip.chunks(2).map(|w| u32::from(u16::from_be_bytes([w[0], w[1]]))).sum::<u32>();
        let sum = (sum & 0xffff) + (sum >> 16);
        let sum = !(((sum & 0xffff) + (sum >> 16)) as u16);
        ip[10..12].copy_from_slice(&sum.to_be_bytes());
        ip.extend_from_slice(&src.port().to_be_bytes());
        ip.extend_from_slice(&dst.port().to_be_bytes());
        ip.extend_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
        ip.extend_from_slice(&[0, 0]); // no UDP checksum
        ip.extend_from_slice(payload);
        self.1 += 1;
        self.0.extend_from_slice(&1_767_225_600u32.to_le_bytes());
        self.0.extend_from_slice(&self.1.to_le_bytes());
        self.0.extend_from_slice(&(ip.len() as u32).to_le_bytes());
        self.0.extend_from_slice(&(ip.len() as u32).to_le_bytes());
        self.0.extend_from_slice(&ip);
    }

    pub fn write(&self, name: &str) -> PathBuf {
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
        let p = dir.join(format!("natlog-{name}-{}.pcap", std::process::id()));
        std::fs::write(&p, &self.0).expect("write the pcap");
        p
    }
}

/// One IPFIX message as tshark decoded it.
#[derive(Debug)]
pub struct Decoded {
    pub sequence: u32,
    pub domain: u32,
    /// Template ID → (element id, length) of each field.
    pub templates: BTreeMap<u16, Vec<(u16, u16)>>,
    /// (set id, fields of one record).
    pub records: Vec<(u16, Map<String, Value>)>,
}

pub fn tshark_present() {
    let ok = Command::new("tshark").arg("--version").output().map(|o| o.status.success()).unwrap_or(false);
    assert!(
        ok,
        "tshark is not installed: these tests decode natrix's IPFIX with it and cannot run without it \
         (scripts/deps.sh test installs it: apt-get install tshark)"
    );
}

/// The entries of `m` whose keys are `prefix` and a number ("Set 2 [id=256] ...",
/// "Field (3/6): ..."), in the number's order.
pub fn numbered<'a>(m: &'a Map<String, Value>, prefix: &str) -> Vec<(u32, &'a Value)> {
    let mut v: Vec<(u32, &Value)> = m
        .iter()
        .filter_map(|(k, v)| {
            let rest = k.strip_prefix(prefix)?;
            let digits: String =
                rest.trim_start_matches('(').chars().take_while(char::is_ascii_digit).collect();
            Some((digits.parse().ok()?, v))
        })
        .collect();
    v.sort_by_key(|(n, _)| *n);
    v
}

/// Equal event lists, or a message naming the first difference (not two lists of hundreds).
pub fn assert_events(got: &[NatEvent], want: &[NatEvent], what: &str) {
    if let Some(i) = (0..got.len().min(want.len())).find(|&i| got[i] != want[i]) {
        panic!("{what}: event {i} differs:\n got  {:?}\n want {:?}", got[i], want[i]);
    }
    assert_eq!(got.len(), want.len(), "{what}: {} events, {} sent", got.len(), want.len());
}

pub fn str_field<'a>(m: &'a Map<String, Value>, k: &str) -> &'a str {
    m.get(k).and_then(Value::as_str).unwrap_or_else(|| panic!("tshark gave no {k} in {m:?}"))
}

pub fn num<T: std::str::FromStr>(m: &Map<String, Value>, k: &str) -> T {
    str_field(m, k).parse().unwrap_or_else(|_| panic!("{k} is no number in {m:?}"))
}

/// Decodes every datagram to `port` in `pcap` with tshark's cflow dissector.
pub fn tshark(pcap: &Path, port: u16) -> Vec<Decoded> {
    tshark_present();
    let out = Command::new("tshark")
        .env("TZ", "UTC")
        .env("LC_ALL", "C")
        .arg("-r")
        .arg(pcap)
        .args(["-d", &format!("udp.port=={port},cflow"), "-T", "json"])
        .output()
        .expect("run tshark");
    assert!(out.status.success(), "tshark failed: {}", String::from_utf8_lossy(&out.stderr));
    let packets: Vec<Value> = serde_json::from_slice(&out.stdout).expect("tshark's JSON");
    let mut msgs = Vec::new();
    for p in packets {
        let cflow = p["_source"]["layers"]["cflow"]
            .as_object()
            .unwrap_or_else(|| panic!("tshark decoded no IPFIX in {p}"))
            .clone();
        assert_eq!(str_field(&cflow, "cflow.version"), "10");
        let mut d = Decoded {
            sequence: num(&cflow, "cflow.sequence"),
            domain: num(&cflow, "cflow.od_id"),
            templates: BTreeMap::new(),
            records: Vec::new(),
        };
        // serde_json's maps sort their keys: put "Set 10" after "Set 9", "Flow 10" after "Flow 9"
        for (_, set) in numbered(&cflow, "Set ") {
            let set = set.as_object().unwrap();
            let id: u16 = num(set, "cflow.flowset_id");
            for (k, v) in set {
                let Some(v) = v.as_object() else { continue };
                if k.starts_with("Template ") {
                    let fields = numbered(v, "Field ")
                        .into_iter()
                        .map(|(_, f)| {
                            let f = f.as_object().unwrap();
                            assert_eq!(str_field(f, "cflow.template_ipfix_pen_provided"), "0");
                            (num(f, "cflow.template_ipfix_field_type"), num(f, "cflow.template_field_length"))
                        })
                        .collect();
                    d.templates.insert(num(v, "cflow.template_id"), fields);
                }
            }
            for (_, r) in numbered(set, "Flow ") {
                d.records.push((id, r.as_object().unwrap().clone()));
            }
        }
        msgs.push(d);
    }
    msgs
}

/// tshark's rendering of an absolute time (`TZ=UTC`): "Jan  1, 2026 00:00:00.123000000 UTC".
pub fn parse_time(s: &str) -> u64 {
    let s = s.strip_suffix(" UTC").unwrap_or_else(|| panic!("not a UTC time: {s:?}"));
    let t = chrono::NaiveDateTime::parse_from_str(s, "%b %e, %Y %H:%M:%S%.f")
        .unwrap_or_else(|e| panic!("time {s:?}: {e}"));
    t.and_utc().timestamp_millis() as u64
}

/// The event a decoded record describes: every field tshark shows, none left over.
pub fn event_of(r: &Map<String, Value>) -> NatEvent {
    let code: u8 = num(r, "cflow.nat_event");
    let kind = NatEventKind::from_code(code).unwrap_or_else(|| panic!("natEvent {code}"));
    let mut ev = NatEvent::new(kind, 0);
    let (mut raddr, mut rport) = (None, None);
    for (k, v) in r {
        let v = v.as_str().unwrap_or_else(|| panic!("{k}: {v}"));
        let n = || -> u32 { v.parse().unwrap_or_else(|_| panic!("{k}={v}")) };
        let ip = || -> Ipv4Addr { v.parse().unwrap_or_else(|_| panic!("{k}={v}")) };
        match k.as_str() {
            "cflow.observation_time_milliseconds" => ev.time_ms = parse_time(v),
            "cflow.nat_event" => {}
            "cflow.srcaddr" => ev.inside = ip(),
            "cflow.post_natsource_ipv4_address" => ev.outside = ip(),
            "cflow.port_range_start" => ev.port_start = n() as u16,
            "cflow.port_range_end" => ev.port_end = n() as u16,
            "cflow.protocol" => ev.proto = n() as u8,
            "cflow.srcport" => ev.in_port = n() as u16,
            "cflow.post_naptsource_transport_port" => ev.out_port = n() as u16,
            "cflow.dstaddr" => raddr = Some(ip()),
            "cflow.dstport" => rport = Some(n() as u16),
            "cflow.nat_pool_id" => ev.pool_id = n(),
            "cflow.nat_quota_exceeded_event" | "cflow.nat_threshold_event" => ev.detail = n(),
            "cflow.max_session_entries"
            | "cflow.max_bib_entries"
            | "cflow.max_entries_per_user"
            | "cflow.max_subscribers"
            | "cflow.max_fragments_pending_reassembly"
            | "cflow.addresspool_highthreshold" => ev.limit = n(),
            other => panic!("unexpected field {other} in {r:?}"),
        }
    }
    match (raddr, rport) {
        (Some(a), Some(p)) => ev.remote = Some(SocketAddrV4::new(a, p)),
        (None, None) => {}
        _ => panic!("half a destination in {r:?}"),
    }
    ev
}
