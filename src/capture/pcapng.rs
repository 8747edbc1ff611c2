// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//! The capture's records (`struct nx_cap_rec` and the bytes after it, from the ring
//! nx_cap_rb) written as pcapng: one interface description block per interface and point
//! (`in0 rx`, `out0 tx`, `in0 kernel` for packets passed to the kernel), one enhanced
//! packet block per form of a packet. Both forms of one packet carry the same packet id
//! (epb_packetid), the XDP verdict (epb_verdict, type Linux eBPF XDP), the direction
//! (epb_flags: rx inbound, tx outbound), and a comment: the verdict's reason and, for a
//! translated packet, the mapping used. The pcapng blocks are written by the pcap-file
//! crate; timestamps are nanoseconds (if_tsresol 9), UTC.

use std::collections::HashMap;
use std::io::Write;
use std::net::Ipv4Addr;

use crate::skel::types::{nx_cap_match, nx_cap_rec};
use crate::tables::{proto_name, STATS};

/// Block types (pcapng, draft-ietf-opsawg-pcapng section 4)
const SHB: u32 = 0x0A0D_0D0A;
const IDB: u32 = 1;
const EPB: u32 = 6;
const BYTE_ORDER_MAGIC: u32 = 0x1A2B_3C4D;
const LINKTYPE_ETHERNET: u16 = 1;
/// Option codes: opt_comment, shb_userappl, if_name, if_description, if_tsresol,
/// epb_flags, epb_packetid, epb_verdict
const OPT_COMMENT: u16 = 1;
const SHB_USERAPPL: u16 = 4;
const IF_NAME: u16 = 2;
const IF_DESCRIPTION: u16 = 3;
const IF_TSRESOL: u16 = 9;
const EPB_FLAGS: u16 = 2;
const EPB_PACKETID: u16 = 5;
const EPB_VERDICT: u16 = 7;
/// epb_verdict's type octet for a Linux eBPF XDP verdict (its value: the XDP action)
const VERDICT_XDP: u8 = 2;
/// epb_flags' direction bits
const FLAG_INBOUND: u32 = 1;
const FLAG_OUTBOUND: u32 = 2;

const XDP_ABORTED: u32 = 0;
const XDP_DROP: u32 = 1;
const XDP_PASS: u32 = 2;
const XDP_TX: u32 = 3;
const XDP_REDIRECT: u32 = 4;

/// One record of the ring: a packet's received form and, unless it was dropped, its sent
/// form.
#[derive(Debug, Clone)]
pub struct Record<'a> {
    /// received, CLOCK_TAI nanoseconds
    pub tai_ns: u64,
    pub id: u64,
    pub rx_ifindex: u32,
    pub tx_ifindex: u32,
    /// XDP action << 16 | reason (enum nx_stat)
    pub verdict: u32,
    pub rx_len: u32,
    pub tx_len: u32,
    /// enum nx_cap_match
    pub matched: u8,
    pub rx: &'a [u8],
    pub tx: &'a [u8],
}

impl<'a> Record<'a> {
    /// The record in `b` (as nx_xdp_cap_emit wrote it); None when it is shorter than its
    /// header says.
    pub fn parse(b: &'a [u8]) -> Option<Record<'a>> {
        let n = std::mem::size_of::<nx_cap_rec>();
        if b.len() < n {
            return None;
        }
        let h: nx_cap_rec = bytemuck::pod_read_unaligned(&b[..n]);
        let rx_end = n + usize::from(h.rx_cap);
        let tx_end = rx_end + usize::from(h.tx_cap);
        if b.len() < tx_end {
            return None;
        }
        Some(Record {
            tai_ns: h.tai_ns,
            id: h.id,
            rx_ifindex: h.rx_ifindex,
            tx_ifindex: h.tx_ifindex,
            verdict: h.verdict,
            rx_len: h.rx_len,
            tx_len: h.tx_len,
            matched: h.matched,
            rx: &b[n..rx_end],
            tx: &b[rx_end..tx_end],
        })
    }

    pub fn action(&self) -> u32 {
        self.verdict >> 16
    }

    pub fn reason(&self) -> u32 {
        self.verdict & 0xffff
    }

    pub fn dropped(&self) -> bool {
        self.action() == XDP_DROP
    }

    pub fn matched_rx(&self) -> bool {
        self.matched & nx_cap_match::NX_CAPM_RX.0 as u8 != 0
    }

    pub fn matched_tx(&self) -> bool {
        self.matched & nx_cap_match::NX_CAPM_TX.0 as u8 != 0
    }
}

/// XDP action by name (what tshark shows as the eBPF XDP verdict's number).
pub fn action_name(a: u32) -> &'static str {
    match a {
        XDP_ABORTED => "aborted",
        XDP_DROP => "drop",
        XDP_PASS => "pass",
        XDP_TX => "tx",
        XDP_REDIRECT => "redirect",
        _ => "unknown",
    }
}

/// A counter's name (`natrix stats`' names: no_mapping, redirected, pass_local, ...).
pub fn reason_name(r: u32) -> &'static str {
    STATS.iter().find(|(s, _)| s.0 == r).map_or("unknown", |(_, n)| n)
}

/// Where a form was seen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Point {
    /// received by natrix on the interface
    Rx,
    /// sent out of the interface (translated, forwarded, hairpinned, an ICMP error)
    Tx,
    /// passed to the kernel's stack from the interface (XDP_PASS)
    Kernel,
}

impl Point {
    fn name(self) -> &'static str {
        match self {
            Point::Rx => "rx",
            Point::Tx => "tx",
            Point::Kernel => "kernel",
        }
    }
}

/// An IPv4 packet's addresses and ports (ICMP query: the identifier as both ports), from an
/// Ethernet frame (an 802.1Q tag or two skipped).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Flow {
    proto: u8,
    src: Ipv4Addr,
    dst: Ipv4Addr,
    sport: u16,
    dport: u16,
    /// an ICMP error: the ports are not the packet's own
    icmp_error: bool,
}

fn flow(frame: &[u8]) -> Option<Flow> {
    let be16 = |o: usize| frame.get(o..o + 2).map(|b| u16::from_be_bytes([b[0], b[1]]));
    let mut off = 12;
    let mut et = be16(off)?;
    while et == 0x8100 || et == 0x88a8 {
        off += 4;
        et = be16(off)?;
    }
    if et != 0x0800 {
        return None;
    }
    let ip = off + 2;
    let vihl = *frame.get(ip)?;
    if vihl >> 4 != 4 {
        return None;
    }
    let l4 = ip + usize::from(vihl & 0xf) * 4;
    let proto = *frame.get(ip + 9)?;
    let addr = |o: usize| frame.get(o..o + 4).map(|b| Ipv4Addr::new(b[0], b[1], b[2], b[3]));
    let (src, dst) = (addr(ip + 12)?, addr(ip + 16)?);
    let frag_off = be16(ip + 6)? & 0x1fff;
    let (mut sport, mut dport, mut icmp_error) = (0, 0, false);
    if frag_off == 0 {
        match proto {
            6 | 17 => {
                sport = be16(l4).unwrap_or(0);
                dport = be16(l4 + 2).unwrap_or(0);
            }
            1 => match frame.get(l4) {
                Some(0 | 8 | 13 | 14) => {
                    sport = be16(l4 + 4).unwrap_or(0);
                    dport = sport;
                }
                Some(_) => icmp_error = true,
                None => {}
            },
            _ => {}
        }
    }
    Some(Flow { proto, src, dst, sport, dport, icmp_error })
}

/// The comment of both forms of a packet: its verdict and reason, and for a translated
/// packet the mapping(s) used, read from what changed between the forms: the source for a
/// packet going out (inside endpoint -> outside endpoint), the destination for one coming
/// in (outside endpoint -> inside endpoint).
pub fn comment(r: &Record<'_>) -> String {
    let mut s = format!("{}: {}", action_name(r.action()), reason_name(r.reason()));
    let (Some(a), Some(b)) = (flow(r.rx), flow(r.tx)) else {
        return s;
    };
    if a.proto != b.proto {
        return s;
    }
    let name = if a.proto == 1 && a.icmp_error { "icmp-error" } else { proto_name(a.proto) };
    let ep = |ip: Ipv4Addr, port: u16, err: bool| {
        if err || !matches!(a.proto, 1 | 6 | 17) {
            ip.to_string()
        } else {
            format!("{ip}:{port}")
        }
    };
    if (a.src, a.sport) != (b.src, b.sport) {
        s += &format!(
            "; mapping {name} {} -> {}",
            ep(a.src, a.sport, a.icmp_error),
            ep(b.src, b.sport, b.icmp_error)
        );
    }
    if (a.dst, a.dport) != (b.dst, b.dport) {
        s += &format!(
            "; mapping {name} {} <- {}",
            ep(b.dst, b.dport, b.icmp_error),
            ep(a.dst, a.dport, a.icmp_error)
        );
    }
    s
}

/// What the writer writes of each record.
#[derive(Debug, Clone, Default)]
pub struct WriteOptions {
    /// --no-pair: the received form only
    pub no_pair: bool,
    /// -i: the interfaces (ifindex) whose points are written; empty: all
    pub ifaces: Vec<u32>,
    /// the snap length (the interface blocks' snaplen)
    pub snaplen: u32,
}

/// A block being built: its body, then framed by [`Block::finish`].
struct Block {
    kind: u32,
    body: Vec<u8>,
}

impl Block {
    fn new(kind: u32) -> Block {
        Block { kind, body: Vec::with_capacity(256) }
    }

    fn u16(&mut self, v: u16) -> &mut Self {
        self.body.extend_from_slice(&v.to_ne_bytes());
        self
    }

    fn u32(&mut self, v: u32) -> &mut Self {
        self.body.extend_from_slice(&v.to_ne_bytes());
        self
    }

    /// bytes padded to 32 bits
    fn padded(&mut self, b: &[u8]) -> &mut Self {
        self.body.extend_from_slice(b);
        self.body.resize(self.body.len().next_multiple_of(4), 0);
        self
    }

    fn opt(&mut self, code: u16, value: &[u8]) -> &mut Self {
        // an option's value is at most 65535 bytes: a longer one (a comment never is) is cut
        let v = &value[..value.len().min(0xfffc)];
        self.u16(code).u16(v.len() as u16).padded(v)
    }

    /// opt_endofopt, then the block: type, total length, body, total length.
    fn finish(&mut self, out: &mut impl Write) -> std::io::Result<()> {
        self.u16(0).u16(0);
        let total = (self.body.len() + 12) as u32;
        out.write_all(&self.kind.to_ne_bytes())?;
        out.write_all(&total.to_ne_bytes())?;
        out.write_all(&self.body)?;
        out.write_all(&total.to_ne_bytes())
    }
}

/// A pcapng stream of capture records (host byte order, as the section header says).
pub struct Writer<W: Write> {
    w: W,
    opts: WriteOptions,
    /// ifindex -> name
    names: Box<dyn Fn(u32) -> String>,
    ids: HashMap<(u32, Point), u32>,
    /// enhanced packet blocks written
    pub written: u64,
}

impl<W: Write> Writer<W> {
    /// A pcapng section (its header block written now) for records whose interfaces are
    /// named by `names`.
    pub fn new(mut out: W, opts: WriteOptions, names: Box<dyn Fn(u32) -> String>) -> std::io::Result<Self> {
        let mut shb = Block::new(SHB);
        shb.u32(BYTE_ORDER_MAGIC).u16(1).u16(0);
        shb.body.extend_from_slice(&(-1i64).to_ne_bytes()); // section length: not known
        shb.opt(SHB_USERAPPL, format!("natrix {} capture", env!("CARGO_PKG_VERSION")).as_bytes());
        shb.finish(&mut out)?;
        Ok(Writer { w: out, opts, names, ids: HashMap::new(), written: 0 })
    }

    fn iface(&mut self, ifindex: u32, point: Point) -> std::io::Result<u32> {
        if let Some(id) = self.ids.get(&(ifindex, point)) {
            return Ok(*id);
        }
        let id = self.ids.len() as u32;
        let name = format!("{} {}", (self.names)(ifindex), point.name());
        let desc = format!(
            "natrix XDP fast path, ifindex {ifindex}, {}",
            match point {
                Point::Rx => "as received",
                Point::Tx => "as sent",
                Point::Kernel => "as passed to the kernel",
            }
        );
        let mut idb = Block::new(IDB);
        idb.u16(LINKTYPE_ETHERNET).u16(0).u32(self.opts.snaplen);
        idb.opt(IF_NAME, name.as_bytes()).opt(IF_DESCRIPTION, desc.as_bytes()).opt(IF_TSRESOL, &[9]);
        idb.finish(&mut self.w)?;
        self.ids.insert((ifindex, point), id);
        Ok(id)
    }

    fn selected(&self, ifindex: u32) -> bool {
        self.opts.ifaces.is_empty() || self.opts.ifaces.contains(&ifindex)
    }

    /// The forms of `r` this capture writes: (point, ifindex, bytes, wire length).
    pub fn forms<'r>(&self, r: &Record<'r>) -> Vec<(Point, u32, &'r [u8], u32)> {
        let mut v = Vec::with_capacity(2);
        if self.selected(r.rx_ifindex) {
            v.push((Point::Rx, r.rx_ifindex, r.rx, r.rx_len));
        }
        if !r.dropped() && !self.opts.no_pair && r.tx_len > 0 && self.selected(r.tx_ifindex) {
            let point = if r.action() == XDP_PASS { Point::Kernel } else { Point::Tx };
            v.push((point, r.tx_ifindex, r.tx, r.tx_len));
        }
        v
    }

    /// Writes the forms of `r`, at most `max` of them; how many were written.
    /// `tai_to_utc_ns`: CLOCK_REALTIME minus CLOCK_TAI.
    pub fn write(&mut self, r: &Record<'_>, tai_to_utc_ns: i64, max: u64) -> std::io::Result<u64> {
        let forms = self.forms(r);
        if forms.is_empty() || max == 0 {
            return Ok(0);
        }
        let ts = (i128::from(r.tai_ns) + i128::from(tai_to_utc_ns)).max(0) as u64;
        let text = comment(r);
        let mut verdict = vec![VERDICT_XDP];
        verdict.extend_from_slice(&u64::from(r.action()).to_ne_bytes());
        let mut n = 0;
        for (point, ifindex, data, len) in forms.into_iter().take(max.min(2) as usize) {
            let interface_id = self.iface(ifindex, point)?;
            let mut epb = Block::new(EPB);
            epb.u32(interface_id).u32((ts >> 32) as u32).u32(ts as u32);
            epb.u32(data.len() as u32).u32(len).padded(data);
            epb.opt(
                EPB_FLAGS,
                &(if point == Point::Rx { FLAG_INBOUND } else { FLAG_OUTBOUND }).to_ne_bytes(),
            );
            epb.opt(EPB_PACKETID, &r.id.to_ne_bytes());
            epb.opt(EPB_VERDICT, &verdict);
            epb.opt(OPT_COMMENT, text.as_bytes());
            epb.finish(&mut self.w)?;
            n += 1;
        }
        self.written += n;
        Ok(n)
    }

    pub fn flush(&mut self) -> std::io::Result<()> {
        self.w.flush()
    }
}
