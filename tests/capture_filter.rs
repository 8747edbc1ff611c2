// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//! The capture filter (src/capture/filter.rs) against libpcap, which is the oracle
//! throughout, never natrix's code:
//!
//! * real tcpdump expressions, compiled by libpcap and translated, run in the kernel
//!   (BPF_PROG_TEST_RUN) on thousands of random and mutated frames (Ethernet, VLAN, IPv4
//!   with options and fragments, TCP, UDP, ICMP, ARP, IPv6, truncated, corrupted), must
//!   return exactly what libpcap's own interpreter (`pcap_offline_filter`) returns for the
//!   same program and frame;
//! * so must random classic programs that use every instruction the interpreter knows,
//!   edge cases included (division by X = 0, shifts by X >= 32, loads past the end);
//! * what `compile` gives is what Wireshark's dumpcap compiles (`dumpcap -d`), and an
//!   invalid expression's error is libpcap's message as dumpcap prints it;
//! * loaded in place of the global function `nx_cap_filter` of a clang-built XDP object
//!   (tests/bpf/nx_cap_stub.bpf.c) as a freplace extension, the filter decides that
//!   program's verdicts; freplace and tail calls exclude each other (what the kernel says).
//!
//! Needs root (BPF_PROG_TEST_RUN, BPF_PROG_LOAD) and dumpcap (wireshark-common, `make
//! deps-test`): without them the tests fail saying so, they never skip.

#[path = "common/rng.rs"]
mod rng;

mod stub {
    #![allow(
        clippy::all,
        clippy::undocumented_unsafe_blocks,
        non_camel_case_types,
        non_snake_case,
        non_upper_case_globals,
        dead_code,
        unused
    )]
    include!(concat!(env!("OUT_DIR"), "/cap_stub.skel.rs"));
}

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd};
use std::process::Command;

use libbpf_rs::libbpf_sys;
use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use libbpf_rs::MapCore;
use natrix::capture::filter::MAX_SNAPLEN;
use natrix::capture::{
    attach_freplace, compile, func_btf_id, load_freplace, load_xdp, translate, CbpfInsn, CbpfProgram,
    EbpfInsn, FilterError, LoadError, FILTER_FUNC,
};
use rng::Rng;

fn need_root() {
    // SAFETY: a plain getter.
    let euid = unsafe { libc::geteuid() };
    assert_eq!(
        euid, 0,
        "tests/capture_filter.rs needs root: it loads BPF programs and runs them with BPF_PROG_TEST_RUN"
    );
}

/// BPF_PROG_TEST_RUN of an XDP program on `frame`: its return value.
fn test_run(fd: BorrowedFd<'_>, frame: &[u8]) -> u32 {
    let mut opts = libbpf_sys::bpf_test_run_opts {
        sz: std::mem::size_of::<libbpf_sys::bpf_test_run_opts>() as _,
        data_in: frame.as_ptr().cast(),
        data_size_in: frame.len() as u32,
        repeat: 1,
        ..Default::default()
    };
    // SAFETY: a valid program fd; the frame outlives the call, nothing is written back.
    let rc = unsafe { libbpf_sys::bpf_prog_test_run_opts(fd.as_raw_fd(), &mut opts) };
    assert_eq!(
        rc,
        0,
        "BPF_PROG_TEST_RUN of a {}-byte frame: {}",
        frame.len(),
        std::io::Error::from_raw_os_error(-rc)
    );
    opts.retval
}

fn hex(b: &[u8]) -> String {
    b.iter().fold(String::new(), |mut s, x| {
        let _ = write!(s, "{x:02x}");
        s
    })
}

// ---- frames --------------------------------------------------------------------------

const MACS: [[u8; 6]; 4] =
    [[0x00, 0x11, 0x22, 0x33, 0x44, 0x55], [0x02, 0, 0, 0, 0, 1], [0xff; 6], [0x01, 0x00, 0x5e, 0, 0, 1]];
const ADDRS: [[u8; 4]; 8] = [
    [100, 64, 0, 2],
    [100, 64, 0, 3],
    [100, 64, 7, 9],
    [203, 0, 113, 7],
    [203, 0, 113, 200],
    [198, 51, 100, 1],
    [10, 0, 0, 1],
    [8, 8, 8, 8],
];
const PORTS: [u16; 10] = [53, 80, 443, 999, 1000, 1500, 2000, 2001, 8080, 65535];
const ETH_IP: u16 = 0x0800;
const ETH_ARP: u16 = 0x0806;
const ETH_IP6: u16 = 0x86dd;

/// Frames built from the fields filters look at, drawn so that each expression below both
/// matches and misses, then sometimes truncated, corrupted or padded.
struct Frames(Rng);

impl Frames {
    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.0.u8()).collect()
    }
    fn mac(&mut self) -> [u8; 6] {
        if self.0.chance(75) {
            *self.0.pick(&MACS)
        } else {
            self.bytes(6).try_into().unwrap()
        }
    }
    fn addr(&mut self) -> [u8; 4] {
        if self.0.chance(75) {
            *self.0.pick(&ADDRS)
        } else {
            self.bytes(4).try_into().unwrap()
        }
    }
    fn port(&mut self) -> u16 {
        if self.0.chance(70) {
            *self.0.pick(&PORTS)
        } else {
            self.0.u16()
        }
    }
    fn payload(&mut self) -> Vec<u8> {
        let n = match self.0.below(10) {
            0..=6 => self.0.below(40),
            7 | 8 => 40 + self.0.below(160),
            _ => 900 + self.0.below(500),
        };
        let mut p = self.bytes(n as usize);
        if p.len() >= 4 && self.0.chance(25) {
            p[..4].copy_from_slice(&[1, 2, 3, 4]);
        }
        p
    }

    fn tcp(&mut self) -> Vec<u8> {
        let mut h = Vec::new();
        h.extend(self.port().to_be_bytes());
        h.extend(self.port().to_be_bytes());
        h.extend(self.bytes(8)); // seq, ack
        let doff = if self.0.chance(80) { 5 } else { 5 + self.0.below(11) as u8 };
        h.push(doff << 4);
        let flags = match self.0.below(5) {
            0 => 0x02,
            1 => 0x12,
            2 => 0x10,
            3 => 0x18,
            _ => self.0.u8(),
        };
        h.push(flags);
        h.extend(self.bytes(6)); // window, checksum, urgent pointer
        h.extend(self.bytes((doff as usize - 5) * 4));
        h.extend(self.payload());
        h
    }
    fn udp(&mut self) -> Vec<u8> {
        let payload = self.payload();
        let mut h = Vec::new();
        h.extend(self.port().to_be_bytes());
        h.extend(self.port().to_be_bytes());
        let len = if self.0.chance(90) { 8 + payload.len() as u16 } else { self.0.u16() };
        h.extend(len.to_be_bytes());
        h.extend(self.bytes(2));
        h.extend(payload);
        h
    }
    fn icmp(&mut self) -> Vec<u8> {
        let ty = *self.0.pick(&[0u8, 8, 3, 11, 5, 13, 0xff]);
        let mut h = vec![ty, self.0.below(16) as u8];
        h.extend(self.bytes(6));
        h.extend(self.payload());
        h
    }
    fn l4(&mut self, proto: u8) -> Vec<u8> {
        match proto {
            6 => self.tcp(),
            17 => self.udp(),
            1 | 58 => self.icmp(),
            _ => self.payload(),
        }
    }
    fn ipv4(&mut self) -> Vec<u8> {
        let proto = match self.0.below(20) {
            0..=6 => 6,
            7..=13 => 17,
            14..=17 => 1,
            _ => self.0.u8(),
        };
        let ihl = if self.0.chance(80) { 5 } else { 6 + self.0.below(10) as usize };
        let payload = self.l4(proto);
        let total = if self.0.chance(92) { (ihl * 4 + payload.len()) as u16 } else { self.0.u16() };
        let frag: u16 = match self.0.below(20) {
            0..=13 => *self.0.pick(&[0x4000, 0]),
            14..=16 => 0x2000, // a first fragment
            // a later one, the last or not
            _ => (1 + self.0.below(0x1fff) as u16) | if self.0.chance(50) { 0x2000 } else { 0 },
        };
        let any = self.0.u8();
        let ttl = *self.0.pick(&[0u8, 1, 64, 255, 17, any]);
        let mut h = vec![0x40 | ihl as u8, self.0.u8()];
        h.extend(total.to_be_bytes());
        h.extend(self.bytes(2));
        h.extend(frag.to_be_bytes());
        h.push(ttl);
        h.push(proto);
        h.extend([0, 0]);
        h.extend(self.addr());
        h.extend(self.addr());
        h.extend(self.bytes((ihl - 5) * 4));
        let sum = csum(&h);
        h[10..12].copy_from_slice(&sum.to_be_bytes());
        h.extend(payload);
        h
    }
    fn ipv6(&mut self) -> Vec<u8> {
        let any = self.0.u8();
        let next = *self.0.pick(&[6u8, 17, 58, 0, 44, 59, any]);
        let payload = self.l4(next);
        let mut h = vec![0x60, 0, 0, 0];
        h.extend((payload.len() as u16).to_be_bytes());
        h.push(next);
        h.push(64);
        for _ in 0..2 {
            if self.0.chance(50) {
                h.extend([0x20, 0x01, 0x0d, 0xb8]);
                h.extend([0; 11]);
                h.push(self.0.below(3) as u8);
            } else {
                h.extend(self.bytes(16));
            }
        }
        h.extend(payload);
        h
    }
    fn arp(&mut self) -> Vec<u8> {
        let mut h = vec![0, 1, 8, 0, 6, 4, 0, *self.0.pick(&[1u8, 2, 3])];
        for _ in 0..2 {
            h.extend(self.mac());
            h.extend(self.addr());
        }
        h
    }
    /// An ethertype and what follows it.
    fn l3(&mut self, depth: u32) -> (u16, Vec<u8>) {
        match self.0.below(100) {
            0..=59 => (ETH_IP, self.ipv4()),
            60..=69 => (ETH_ARP, self.arp()),
            70..=79 => (ETH_IP6, self.ipv6()),
            80..=93 if depth < 2 => {
                let tpid = *self.0.pick(&[0x8100u16, 0x88a8, 0x9100]);
                let any = self.0.u16() & 0xfff;
                let vid = *self.0.pick(&[100u16, 200, any]);
                let (inner, rest) = self.l3(depth + 1);
                let mut v = ((self.0.u16() & 0xf000) | vid).to_be_bytes().to_vec();
                v.extend(inner.to_be_bytes());
                v.extend(rest);
                (tpid, v)
            }
            _ => (self.0.u16(), self.payload()),
        }
    }
    fn frame(&mut self) -> Vec<u8> {
        let mut f = if self.0.chance(5) {
            let n = 14 + self.0.below(120) as usize;
            self.bytes(n)
        } else {
            let mut f = Vec::new();
            f.extend(self.mac());
            f.extend(self.mac());
            let (ty, rest) = self.l3(0);
            f.extend(ty.to_be_bytes());
            f.extend(rest);
            f
        };
        if self.0.chance(25) {
            let n = 14 + self.0.below(f.len() as u64 - 13) as usize;
            f.truncate(n);
        }
        if self.0.chance(10) {
            for _ in 0..1 + self.0.below(4) {
                let i = self.0.below(f.len() as u64) as usize;
                f[i] ^= 1 << self.0.below(8);
            }
        }
        if self.0.chance(5) && f.len() < 1500 {
            let n = self.0.below(1600 - f.len() as u64) as usize;
            let pad = self.bytes(n);
            f.extend(pad);
        }
        f
    }
}

fn csum(b: &[u8]) -> u16 {
    let mut s: u32 = b.chunks(2).map(|c| u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)]) as u32).sum();
    while s > 0xffff {
        s = (s & 0xffff) + (s >> 16);
    }
    !(s as u16)
}

fn frames(seed: u64, n: usize) -> Vec<Vec<u8>> {
    let mut g = Frames(Rng(seed));
    (0..n).map(|_| g.frame()).collect()
}

// ---- expressions against libpcap ------------------------------------------------------

/// Which frames of the corpus an expression must match: some but not all, every one,
/// none. (A test that never sees both outcomes tests little.)
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Expect {
    Some,
    All,
    None,
}

const EXPRS: &[(&str, u32, Expect)] = &[
    ("", MAX_SNAPLEN, Expect::All),
    ("", 128, Expect::All),
    ("udp and host 100.64.0.2 and port 53", MAX_SNAPLEN, Expect::Some),
    ("tcp[tcpflags] & tcp-syn != 0", MAX_SNAPLEN, Expect::Some),
    ("tcp[tcpflags] & (tcp-syn|tcp-ack) == tcp-syn", 96, Expect::Some),
    ("icmp", MAX_SNAPLEN, Expect::Some),
    ("icmp[icmptype] = icmp-echo or icmp[icmptype] = icmp-echoreply", MAX_SNAPLEN, Expect::Some),
    ("net 203.0.113.0/24", MAX_SNAPLEN, Expect::Some),
    ("src net 100.64.0.0/10 and dst net 203.0.113.0/24", 65535, Expect::Some),
    ("ip[6:2] & 0x1fff != 0", MAX_SNAPLEN, Expect::Some),
    ("ip[6] & 0x20 != 0 or ip[6:2] & 0x1fff != 0", MAX_SNAPLEN, Expect::Some),
    ("greater 1000", MAX_SNAPLEN, Expect::Some),
    ("len < 100", MAX_SNAPLEN, Expect::Some),
    ("len >= 60 and len <= 80", 1, Expect::Some),
    ("vlan", MAX_SNAPLEN, Expect::Some),
    ("vlan 100", MAX_SNAPLEN, Expect::Some),
    ("vlan and udp port 53", MAX_SNAPLEN, Expect::Some),
    ("vlan and vlan and ip", MAX_SNAPLEN, Expect::Some),
    ("ether host 00:11:22:33:44:55", MAX_SNAPLEN, Expect::Some),
    ("ether broadcast or ether multicast", MAX_SNAPLEN, Expect::Some),
    ("not arp", MAX_SNAPLEN, Expect::Some),
    ("arp and arp[7] = 2", MAX_SNAPLEN, Expect::Some),
    ("portrange 1000-2000", MAX_SNAPLEN, Expect::Some),
    ("udp[8:4] = 0x01020304", MAX_SNAPLEN, Expect::Some),
    ("tcp port 80 or udp port 53", MAX_SNAPLEN, Expect::Some),
    ("host 100.64.0.2", 1514, Expect::Some),
    ("tcp[13] = 2 and tcp[2:2] > 1000", MAX_SNAPLEN, Expect::Some),
    ("udp and udp[4:2] > 100", MAX_SNAPLEN, Expect::Some),
    ("ip[0] & 0xf > 5", MAX_SNAPLEN, Expect::Some),
    ("ip6", MAX_SNAPLEN, Expect::Some),
    ("ip6 and tcp port 80", MAX_SNAPLEN, Expect::Some),
    ("ip6 dst net 2001:db8::/32 and udp", MAX_SNAPLEN, Expect::Some),
    // arithmetic: every ALU operation, with a constant and with X
    ("ip[2:2] / 4 > 10", MAX_SNAPLEN, Expect::Some),
    ("ip[2:2] / ip[8] > 10", MAX_SNAPLEN, Expect::Some), // TTL 0: division by 0
    ("ip[2:2] % ip[8] = 1", MAX_SNAPLEN, Expect::Some),
    ("ip[2:2] % 7 = 1", MAX_SNAPLEN, Expect::Some),
    ("ip[8] * ip[9] > 1000", MAX_SNAPLEN, Expect::Some),
    ("ip[2:2] * 3 - 100 > 200", MAX_SNAPLEN, Expect::Some),
    ("ip[8] + ip[9] = 70", MAX_SNAPLEN, Expect::Some),
    ("ip[2:2] - ip[8] > 20", MAX_SNAPLEN, Expect::Some),
    ("ip[8] | ip[9] = 0x7f", MAX_SNAPLEN, Expect::Some),
    ("ip[8] & ip[9] != 0", MAX_SNAPLEN, Expect::Some),
    ("(ip[4:2] ^ ip[10:2]) & 1 = 1", MAX_SNAPLEN, Expect::Some),
    ("ip[1] << ip[9] > 100", MAX_SNAPLEN, Expect::Some), // protocols >= 32: shifted out
    ("ip[12:4] >> ip[9] = 0", MAX_SNAPLEN, Expect::Some),
    ("ip[1] << 3 > 100 and ip[12:4] >> 28 = 6", MAX_SNAPLEN, Expect::Some),
    ("-ip[8] & 0xff > 200", MAX_SNAPLEN, Expect::Some),
    ("ip[8] > ip[9]", MAX_SNAPLEN, Expect::Some),
    ("ip[8] >= ip[9]", MAX_SNAPLEN, Expect::Some),
    ("ip[8] = ip[9]", MAX_SNAPLEN, Expect::Some),
    ("ip[8] < ip[9] or ip[8] <= 1", MAX_SNAPLEN, Expect::Some),
    ("ip[8] != ip[9] and ip[8] != 64", MAX_SNAPLEN, Expect::Some),
    ("ether[len - 1] & 1 = 1", MAX_SNAPLEN, Expect::Some), // X = len, an indexed load
    ("ip[ip[0] & 0xf] > 100", MAX_SNAPLEN, Expect::Some),
    ("ether[1500:4] != 0 or ether[60000] = 1", MAX_SNAPLEN, Expect::Some),
    // the filter that matches nothing: no frame has this address
    ("host 192.0.2.99", MAX_SNAPLEN, Expect::None),
];

#[test]
fn expressions_return_what_libpcap_returns() {
    need_root();
    let corpus = frames(0x5eed_cafe, 3000);
    let mut bad = Vec::new();
    for &(expr, snaplen, expect) in EXPRS {
        let prog = compile(expr, snaplen).unwrap_or_else(|e| panic!("{expr:?}: {e}"));
        let insns = translate(&prog).unwrap_or_else(|e| panic!("{expr:?}: {e}\n{}", prog.dump()));
        let fd = load_xdp(&insns).unwrap_or_else(|e| panic!("{expr:?}: {e}\n{}", prog.dump()));
        let mut matched = 0;
        let mut wrong = 0;
        for f in &corpus {
            let want = prog.libpcap_filter(f).unwrap();
            let got = test_run(fd.as_fd(), f);
            if got != want {
                wrong += 1;
                if wrong <= 3 {
                    bad.push(format!("{expr:?}: kernel {got}, libpcap {want}, frame {}", hex(f)));
                }
            }
            if want != 0 {
                assert_eq!(want, snaplen, "{expr:?}: libpcap asks for {want} bytes, not the snap length");
                matched += 1;
            }
        }
        let ok = match expect {
            Expect::Some => matched > 0 && matched < corpus.len(),
            Expect::All => matched == corpus.len(),
            Expect::None => matched == 0,
        };
        assert!(ok, "{expr:?} matched {matched} of {} frames, expected {expect:?}", corpus.len());
        if wrong > 0 {
            bad.push(format!("{expr:?}: {wrong} frames wrong; libpcap's program:\n{}", prog.dump()));
        }
        println!(
            "{expr:?}: {} cBPF, {} eBPF instructions, {matched} of {} frames",
            prog.insns().len(),
            insns.len(),
            corpus.len()
        );
    }
    assert!(bad.is_empty(), "the kernel disagrees with libpcap:\n{}", bad.join("\n"));
}

/// A large filter (hundreds of classic instructions, as a list of subscribers makes) is
/// translated about instruction for instruction, verified, and agrees with libpcap.
#[test]
fn a_large_filter_agrees_with_libpcap() {
    need_root();
    let mut terms: Vec<String> = (0..60).map(|i| format!("port {}", 990 + i * 17)).collect();
    terms.extend((0..60).map(|i| format!("host 100.64.{}.{}", i / 8, 2 + i % 8)));
    terms.push("net 203.0.113.0/24".into());
    let expr = terms.join(" or ");
    let prog = compile(&expr, MAX_SNAPLEN).unwrap();
    let insns = translate(&prog).unwrap();
    assert!(prog.insns().len() > 300, "{} instructions", prog.insns().len());
    assert!(insns.len() < 2 * prog.insns().len(), "{} eBPF for {} cBPF", insns.len(), prog.insns().len());
    let fd = load_xdp(&insns).unwrap_or_else(|e| panic!("{e}"));
    let mut matched = 0;
    for f in &frames(0x1a26_e000, 1500) {
        let want = prog.libpcap_filter(f).unwrap();
        assert_eq!(test_run(fd.as_fd(), f), want, "frame {}", hex(f));
        matched += usize::from(want != 0);
    }
    assert!(matched > 0, "nothing matched");
}

// ---- random classic programs against libpcap's interpreter --------------------------------

/// Classic BPF encodings (pcap/bpf.h), for programs made by hand.
use natrix::capture::filter::c;
/// The ALU operations that take an operand (add, sub, mul, div, mod, and, or, xor, lsh,
/// rsh) and the conditional jumps (jeq, jgt, jge, jset), to draw from.
const ALU_OPS: [u16; 10] = [0x00, 0x10, 0x20, 0x30, 0x90, 0x50, 0x40, 0xa0, 0x60, 0x70];
const JCOND: [u16; 4] = [0x10, 0x20, 0x30, 0x40];

fn ins(code: u16, jt: u8, jf: u8, k: u32) -> CbpfInsn {
    CbpfInsn { code, jt, jf, k }
}

/// A packet offset: mostly inside the frames, sometimes at their ends, sometimes far off.
fn offset(r: &mut Rng) -> u32 {
    match r.below(10) {
        0..=6 => r.below(64) as u32,
        7 => 1400 + r.below(300) as u32,
        8 => 32_760 + r.below(16) as u32,
        _ => r.u32_any(),
    }
}

/// A random program libpcap's interpreter runs: every scratch word stored first (its
/// memory is not initialised), then `body` random instructions with forward jumps, then a
/// RET. Returns it with the opcodes it used.
fn random_program(r: &mut Rng, body: usize) -> (CbpfProgram, BTreeSet<u16>) {
    use c::*;
    let mut v = Vec::new();
    for m in 0..16 {
        v.push(ins(LD, 0, 0, r.u32_any()));
        v.push(ins(ST, 0, 0, m));
    }
    let total = v.len() + body + 1;
    while v.len() < total - 1 {
        let here = v.len();
        let left = total - here - 1; // instructions after this one
        let jump = |r: &mut Rng| r.below(left.min(256) as u64) as u8;
        let size = *r.pick(&[W, H, B]);
        let i = match r.below(24) {
            0..=3 => ins(LD | size | ABS, 0, 0, offset(r)),
            4 | 5 => ins(LD | size | IND, 0, 0, offset(r)),
            6 => ins(LDX | MSH | B, 0, 0, offset(r)),
            7 => ins(if r.chance(50) { LD } else { LDX } | W | LEN, 0, 0, 0),
            8 => ins(if r.chance(50) { LD } else { LDX }, 0, 0, r.u32_any()),
            9 => ins(if r.chance(50) { LD } else { LDX } | MEM, 0, 0, r.below(16) as u32),
            10 => ins(if r.chance(50) { ST } else { STX }, 0, 0, r.below(16) as u32),
            11..=14 => {
                let op = *r.pick(&ALU_OPS);
                if r.chance(50) {
                    ins(ALU | op | X, 0, 0, 0)
                } else {
                    let k = match op {
                        0x60 | 0x70 => r.below(32) as u32,
                        0x30 | 0x90 => r.u32_any().max(1),
                        _ => r.u32_any(),
                    };
                    ins(ALU | op, 0, 0, k)
                }
            }
            15 => ins(ALU | NEG, 0, 0, 0),
            16 => ins(MISC | if r.chance(50) { 0 } else { TXA }, 0, 0, 0),
            17..=20 => {
                let op = *r.pick(&JCOND);
                let src = if r.chance(40) { X } else { 0 };
                ins(JMP | op | src, jump(r), jump(r), r.u32_any())
            }
            21 => ins(JMP, 0, 0, jump(r) as u32),
            22 => ins(RET, 0, 0, r.u32_any()),
            _ => ins(RET | A, 0, 0, 0),
        };
        v.push(i);
    }
    v.push(if r.chance(50) { ins(RET | A, 0, 0, 0) } else { ins(RET, 0, 0, r.u32_any()) });
    let ops = v.iter().map(|i| i.code).collect();
    (CbpfProgram::new(v), ops)
}

#[test]
fn random_programs_return_what_libpcap_returns() {
    need_root();
    let corpus = frames(0xb0b0_1234, 300);
    let mut r = Rng(0x00c0_ffee_f00d);
    let mut seen = BTreeSet::new();
    let mut bad = Vec::new();
    // programs whose value differs between frames: their packet-dependent paths ran
    let mut varied = 0;
    let programs = 1500;
    for n in 0..programs {
        let (prog, ops) = random_program(&mut r, 4 + n % 40);
        seen.extend(ops);
        prog.validate().unwrap_or_else(|e| panic!("program {n} is no valid one: {e}\n{}", prog.dump()));
        let insns = translate(&prog).unwrap_or_else(|e| panic!("program {n}: {e}\n{}", prog.dump()));
        let fd = match load_xdp(&insns) {
            Ok(fd) => fd,
            Err(e) => panic!("program {n}: {e}\n{}", prog.dump()),
        };
        let mut values = BTreeSet::new();
        for f in &corpus {
            let want = prog.libpcap_filter(f).unwrap();
            let got = test_run(fd.as_fd(), f);
            if got != want {
                bad.push(format!(
                    "program {n}: kernel {got}, libpcap {want}, frame {}\n{}",
                    hex(f),
                    prog.dump()
                ));
                break;
            }
            values.insert(want);
        }
        varied += usize::from(values.len() > 1);
        if bad.len() >= 3 {
            break;
        }
    }
    assert!(bad.is_empty(), "the kernel disagrees with libpcap:\n{}", bad.join("\n"));
    println!("{varied} of {programs} programs gave different values for different frames");
    assert!(varied * 4 > programs, "only {varied} of {programs} programs depend on the frame");
    // every opcode libpcap's interpreter knows was made
    let all: BTreeSet<u16> = {
        use c::*;
        let mut a = BTreeSet::from([
            LDX | MSH | B,
            LD | W | LEN,
            LDX | W | LEN,
            LD,
            LDX,
            LD | MEM,
            LDX | MEM,
            ST,
            STX,
        ]);
        a.extend([RET, RET | A, JMP, ALU | NEG, MISC, MISC | TXA]);
        for s in [W, H, B] {
            a.extend([LD | s | ABS, LD | s | IND]);
        }
        for op in ALU_OPS {
            a.extend([ALU | op, ALU | op | X]);
        }
        for op in JCOND {
            a.extend([JMP | op, JMP | op | X]);
        }
        a
    };
    let missing: Vec<_> = all.difference(&seen).collect();
    assert!(missing.is_empty(), "opcodes never generated: {missing:x?}");
}

/// Edge cases of the classic machine, one at a time, against the interpreter.
#[test]
fn edge_cases_return_what_libpcap_returns() {
    use c::*;
    need_root();
    let frame: Vec<u8> = (0..64u8).collect();
    let short: Vec<u8> = (0..14u8).collect();
    let cases: Vec<(&str, Vec<CbpfInsn>)> = vec![
        ("division by X = 0", vec![ins(LD, 0, 0, 9), ins(ALU | 0x30 | X, 0, 0, 0), ins(RET, 0, 0, 5)]),
        ("modulo by X = 0", vec![ins(LD, 0, 0, 9), ins(ALU | 0x90 | X, 0, 0, 0), ins(RET, 0, 0, 5)]),
        (
            "shift left by X = 32",
            vec![ins(LD, 0, 0, 9), ins(LDX, 0, 0, 32), ins(ALU | 0x60 | X, 0, 0, 0), ins(RET | A, 0, 0, 0)],
        ),
        (
            "shift right by X = 31",
            vec![
                ins(LD, 0, 0, u32::MAX),
                ins(LDX, 0, 0, 31),
                ins(ALU | 0x70 | X, 0, 0, 0),
                ins(RET | A, 0, 0, 0),
            ],
        ),
        ("word at the last 4 bytes", vec![ins(LD | W | ABS, 0, 0, 60), ins(RET | A, 0, 0, 0)]),
        ("word 1 byte past the end", vec![ins(LD | W | ABS, 0, 0, 61), ins(RET, 0, 0, 1)]),
        ("byte at k = 2^32 - 1", vec![ins(LD | B | ABS, 0, 0, u32::MAX), ins(RET, 0, 0, 1)]),
        (
            "X + k wrapping 2^32",
            vec![ins(LDX, 0, 0, u32::MAX), ins(LD | B | IND, 0, 0, 2), ins(RET, 0, 0, 1)],
        ),
        (
            "indexed half at the end",
            vec![ins(LDX, 0, 0, 60), ins(LD | H | IND, 0, 0, 2), ins(RET | A, 0, 0, 0)],
        ),
        ("MSH past the end", vec![ins(LDX | MSH | B, 0, 0, 64), ins(RET, 0, 0, 1)]),
        ("MSH", vec![ins(LDX | MSH | B, 0, 0, 14), ins(MISC | TXA, 0, 0, 0), ins(RET | A, 0, 0, 0)]),
        ("len", vec![ins(LD | W | LEN, 0, 0, 0), ins(ALU, 0, 0, 1000), ins(RET | A, 0, 0, 0)]),
        (
            "jset, k with the top bit",
            vec![
                ins(LD, 0, 0, 0x8000_0000),
                ins(JMP | 0x40, 0, 1, 0x8000_0001),
                ins(RET, 0, 0, 0),
                ins(RET, 0, 0, 2),
            ],
        ),
        (
            "unsigned compare above 2^31",
            vec![
                ins(LD, 0, 0, 0xffff_fff0),
                ins(JMP | 0x20, 1, 0, 0x7fff_ffff),
                ins(RET, 0, 0, 3),
                ins(RET, 0, 0, 4),
            ],
        ),
        ("ret of a large k", vec![ins(RET, 0, 0, u32::MAX)]),
        ("neg", vec![ins(LD, 0, 0, 1), ins(ALU | NEG, 0, 0, 0), ins(RET | A, 0, 0, 0)]),
        ("a far load from IND", vec![ins(LDX, 0, 0, 1), ins(LD | W | IND, 0, 0, 0xfffc), ins(RET, 0, 0, 1)]),
    ];
    for (what, v) in cases {
        let prog = CbpfProgram::new(v);
        let fd = load_xdp(&translate(&prog).unwrap()).unwrap_or_else(|e| panic!("{what}: {e}"));
        for f in [&frame, &short] {
            let want = prog.libpcap_filter(f).unwrap();
            assert_eq!(test_run(fd.as_fd(), f), want, "{what}, a {}-byte frame:\n{}", f.len(), prog.dump());
        }
    }
}

// ---- compile: what dumpcap compiles, libpcap's messages ---------------------------------

fn dumpcap(expr: &str) -> std::process::Output {
    Command::new("dumpcap").args(["-d", "-i", "lo", "-f", expr]).output().unwrap_or_else(|e| {
        panic!("running dumpcap (Debian package wireshark-common; `make deps-test` installs it): {e}")
    })
}

/// `compile` gives the program Wireshark's dumpcap (through libpcap on a live Ethernet-type
/// interface, snap length 262144) gives, instruction for instruction. (No `vlan` here: on
/// a live Linux socket libpcap reads VLAN tags from the kernel's metadata instead.)
#[test]
fn compile_is_what_dumpcap_compiles() {
    need_root();
    for expr in [
        "udp and host 100.64.0.2 and port 53",
        "tcp[tcpflags] & tcp-syn != 0",
        "greater 1000",
        "not arp",
        "portrange 1000-2000",
        "ip[2:2] / ip[8] > 10",
        "",
    ] {
        let ours = compile(expr, MAX_SNAPLEN).unwrap().dump();
        let out = dumpcap(expr);
        assert!(out.status.success(), "dumpcap -d -f {expr:?}: {}", String::from_utf8_lossy(&out.stderr));
        assert_eq!(ours, String::from_utf8_lossy(&out.stdout), "{expr:?}");
    }
}

/// An invalid expression returns libpcap's own message, the one dumpcap prints.
#[test]
fn invalid_expressions_give_libpcaps_message() {
    need_root();
    for expr in [
        "udp and",
        "port 99999",
        "tcp[tcpflags] & tcp-nosuch != 0",
        "ip and arp",
        "ip[0] << 40 = 1",
        "net 10.0.0.0/33",
    ] {
        let msg = match compile(expr, MAX_SNAPLEN) {
            Err(FilterError::Syntax(m)) => m,
            r => panic!("{expr:?}: {r:?}"),
        };
        assert!(!msg.is_empty());
        // dumpcap -d exits 0 all the same: its message says
        let theirs = String::from_utf8_lossy(&dumpcap(expr).stderr).into_owned();
        assert!(theirs.contains("Invalid capture filter"), "dumpcap takes {expr:?}: {theirs}");
        assert!(theirs.contains(&format!("({msg})")), "{expr:?}: ours {msg:?}, dumpcap's {theirs:?}");
        // the CLI prints it as it is
        assert_eq!(FilterError::Syntax(msg.clone()).to_string(), msg);
    }
    // no interface netmask: as tcpdump on an interface without IPv4
    match compile("ip broadcast", MAX_SNAPLEN) {
        Err(FilterError::Syntax(m)) => assert!(m.contains("netmask"), "{m}"),
        r => panic!("{r:?}"),
    }
    // libpcap's protochain loops: compiled, not translated
    let p = compile("ip6 protochain 6", MAX_SNAPLEN).unwrap();
    assert!(matches!(translate(&p), Err(FilterError::Unsupported { .. })));
}

// ---- the filter inside other programs --------------------------------------------------

/// Loads the stub object (tests/bpf/nx_cap_stub.bpf.c).
fn stub() -> stub::NxCapStubSkel<'static> {
    let storage: &'static mut MaybeUninit<libbpf_rs::OpenObject> = Box::leak(Box::new(MaybeUninit::uninit()));
    let open =
        stub::NxCapStubSkelBuilder::default().open(storage).expect("opening tests/bpf/nx_cap_stub.bpf.c");
    open.load().expect("loading tests/bpf/nx_cap_stub.bpf.c")
}

/// What the stub's `nx_cap_filter` answers; what `nx_cap_tail` answers with an empty slot.
const STUB_RET: u32 = 77777;
const TAIL_MISS: u32 = 88888;

/// A clang-built XDP program tail-calls the filter, loaded by `load_xdp`, through a
/// program array: the filter's value is that program's verdict. (A route to the filter
/// that needs no BPF_PROG_TYPE_EXT.)
#[test]
fn a_clang_built_program_tail_calls_the_filter() {
    need_root();
    let skel = stub();
    let tail = skel.progs.nx_cap_tail.as_fd();
    let corpus = frames(0x7a11_ca11, 500);
    assert_eq!(test_run(tail, &corpus[0]), TAIL_MISS);
    let prog = compile("udp and host 100.64.0.2 and port 53 or tcp[tcpflags] & tcp-syn != 0", 200).unwrap();
    let fd = load_xdp(&translate(&prog).unwrap()).unwrap_or_else(|e| panic!("{e}"));
    let key = 0u32.to_ne_bytes();
    skel.maps
        .nx_cap_progs
        .update(&key, &(fd.as_raw_fd() as u32).to_ne_bytes(), libbpf_rs::MapFlags::ANY)
        .unwrap();
    let mut matched = 0;
    for f in &corpus {
        let want = prog.libpcap_filter(f).unwrap();
        assert_eq!(test_run(tail, f), want, "frame {}", hex(f));
        matched += usize::from(want != 0);
    }
    assert!(matched > 0 && matched < corpus.len(), "{matched} of {} frames matched", corpus.len());
    skel.maps.nx_cap_progs.delete(&key).unwrap();
    assert_eq!(test_run(tail, &corpus[0]), TAIL_MISS);
}

/// The translation is a BPF function: called (BPF_PSEUDO_CALL) from a program that keeps
/// values in R6–R9 and on its stack, it returns the filter's value and leaves them as
/// they were. `main` here: R6–R9 and a stack word set, the call, then 0xdead if any of
/// them changed, else the filter's value.
#[test]
fn the_filter_is_a_bpf_function_a_program_can_call() {
    need_root();
    let e = |code, dst, src, off, imm| EbpfInsn::new(code, dst, src, off, imm);
    let prog = compile("tcp port 80 or udp port 53 or len < 100", 1500).unwrap();
    let filter = translate(&prog).unwrap();
    let mut main = vec![
        e(0xb7, 6, 0, 0, 0x606),    // r6 = 0x606
        e(0xb7, 7, 0, 0, 0x707),    // r7 = 0x707
        e(0xb7, 8, 0, 0, 0x808),    // r8 = 0x808
        e(0xb7, 9, 0, 0, 0x909),    // r9 = 0x909
        e(0x62, 10, 0, -8, 0x1010), // *(u32 *)(r10 - 8) = 0x1010
        e(0x85, 0, 1, 0, 0),        // call the filter (offset patched below)
        e(0x55, 6, 0, 6, 0x606),    // if r6 != 0x606 goto bad
        e(0x55, 7, 0, 5, 0x707),    // if r7 != 0x707 goto bad
        e(0x55, 8, 0, 4, 0x808),    // if r8 != 0x808 goto bad
        e(0x55, 9, 0, 3, 0x909),    // if r9 != 0x909 goto bad
        e(0x61, 1, 10, -8, 0),      // r1 = *(u32 *)(r10 - 8)
        e(0x55, 1, 0, 1, 0x1010),   // if r1 != 0x1010 goto bad
        e(0x95, 0, 0, 0, 0),        // exit (r0: the filter's)
        e(0xb4, 0, 0, 0, 0xdead),   // bad: w0 = 0xdead
        e(0x95, 0, 0, 0, 0),        // exit
    ];
    main[5].imm = (main.len() - 6) as i32;
    main.extend(filter);
    let lic = c"Dual BSD/GPL";
    // SAFETY: EbpfInsn has struct bpf_insn's layout; the instructions and strings outlive
    // the call; no options.
    let fd = unsafe {
        libbpf_sys::bpf_prog_load(
            libbpf_sys::BPF_PROG_TYPE_XDP,
            c"nx_cap_caller".as_ptr(),
            lic.as_ptr(),
            main.as_ptr().cast(),
            main.len() as _,
            std::ptr::null_mut(),
        )
    };
    assert!(fd >= 0, "loading a program that calls the filter: {}", std::io::Error::from_raw_os_error(-fd));
    // SAFETY: a new descriptor nothing else owns.
    let fd = unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) };
    for f in &frames(0xca11_ab1e, 500) {
        let want = prog.libpcap_filter(f).unwrap();
        assert_eq!(test_run(fd.as_fd(), f), want, "frame {}", hex(f));
    }
}

/// freplace: the filter loaded as BPF_PROG_TYPE_EXT in place of the global function
/// `nx_cap_filter` of the stub's two programs decides their verdicts, and stops when its
/// links go; a program in a program array cannot be extended, an extended one cannot go
/// in one (kernel 6.12 on).
///
/// Where the kernel refuses every BPF_PROG_TYPE_EXT program (this project's machines do:
/// EPERM before the verifier runs, as for fentry programs, whatever the capabilities),
/// what can run here does: the target function's BTF id is found, a missing function is
/// reported, and the refusal is the kernel's blanket one (a two-instruction extension is
/// refused alike), which the message below says.
#[test]
fn freplace_puts_the_filter_in_place_of_nx_cap_filter_where_the_kernel_loads_extensions() {
    need_root();
    let skel = stub();
    let (p1, p2) = (skel.progs.nx_cap_stub.as_fd(), skel.progs.nx_cap_stub2.as_fd());
    let corpus = frames(0xf4e9_1ace, 400);
    for f in &corpus[..10] {
        assert_eq!(test_run(p1, f), STUB_RET);
    }
    assert!(func_btf_id(p1, FILTER_FUNC).unwrap() > 0);
    match func_btf_id(p1, "nx_no_such_func") {
        Err(LoadError::NoFunc { func, .. }) => assert_eq!(func, "nx_no_such_func"),
        r => panic!("{r:?}"),
    }
    let prog = compile("udp and host 100.64.0.2 and port 53 or tcp[tcpflags] & tcp-syn != 0", 200).unwrap();
    let insns = translate(&prog).unwrap();
    let ext = match load_freplace(&insns, p1, FILTER_FUNC) {
        Ok(ext) => ext,
        Err(LoadError::Verifier { source, log, .. }) if source.raw_os_error() == Some(libc::EPERM) => {
            let trivial = [EbpfInsn::new(0xb4, 0, 0, 0, 0), EbpfInsn::new(0x95, 0, 0, 0, 0)];
            match load_freplace(&trivial, p1, FILTER_FUNC) {
                Err(LoadError::Verifier { source, .. }) if source.raw_os_error() == Some(libc::EPERM) => {}
                r => panic!("the filter was refused ({log}) but a trivial extension was not: {r:?}"),
            }
            eprintln!(
                "NOTE: freplace not exercised: this kernel ({}) refuses BPF_PROG_TYPE_EXT programs (EPERM, no verifier \
                 log); the filter reaches nx_cap_filter's callers by tail call here (a_clang_built_program_tail_calls_the_filter)",
                kernel_release()
            );
            return;
        }
        Err(e) => panic!("{e}"),
    };
    // loaded, not linked: nothing changes yet
    assert_eq!(test_run(p1, &corpus[0]), STUB_RET);
    let link1 = attach_freplace(ext.as_fd(), None).unwrap_or_else(|e| panic!("{e}"));
    // the same extension program in the second program's function too
    let link2 = attach_freplace(ext.as_fd(), Some((p2, FILTER_FUNC))).unwrap_or_else(|e| panic!("{e}"));
    let mut matched = 0;
    for f in &corpus {
        let want = prog.libpcap_filter(f).unwrap();
        assert_eq!(test_run(p1, f), want, "frame {}", hex(f));
        assert_eq!(test_run(p2, f), want, "frame {}", hex(f));
        matched += usize::from(want != 0);
    }
    assert!(matched > 0 && matched < corpus.len(), "{matched} of {} frames matched", corpus.len());
    // a link gone, the stub answers again there
    drop(link1);
    assert_eq!(test_run(p1, &corpus[0]), STUB_RET);

    // tail calls: p2 is extended, so it cannot enter a program array; p1, once in one,
    // cannot be extended
    let key = 0u32.to_ne_bytes();
    let err = skel
        .maps
        .nx_cap_progs
        .update(&key, &(p2.as_raw_fd() as u32).to_ne_bytes(), libbpf_rs::MapFlags::ANY)
        .expect_err("an extended program put in a program array");
    assert!(format!("{err:?}").contains("16") || err.to_string().to_lowercase().contains("busy"), "{err}");
    drop(link2);
    assert_eq!(test_run(p2, &corpus[0]), STUB_RET);
    skel.maps
        .nx_cap_progs
        .update(&key, &(p1.as_raw_fd() as u32).to_ne_bytes(), libbpf_rs::MapFlags::ANY)
        .unwrap();
    let ext = load_freplace(&insns, p1, FILTER_FUNC).unwrap_or_else(|e| panic!("{e}"));
    match attach_freplace(ext.as_fd(), None) {
        Err(LoadError::Sys { source, .. }) => {
            assert_eq!(source.raw_os_error(), Some(libc::EBUSY), "{source}")
        }
        r => panic!("extending a tail-call target: {r:?}"),
    }
}

fn kernel_release() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default().trim().to_owned()
}
