// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//! The generator of the packet test vectors (tests/vectors/*.json, tests/vectors/README.md).
//!
//! Each vector is defined here with the frame builders of tests/common/pkt.rs: the frames
//! are sent through a private data plane (BPF_PROG_TEST_RUN, as the runner does), and every
//! output frame is checked against one rebuilt from scratch (and by the independent
//! checksum routine) before it is written, so a file records what was checked, never merely
//! what the data plane did. The only values taken from the data plane's output are the
//! outside endpoints it chose (placed by the vector's fixed hash seed; the runner then holds
//! them to the bytes) and the IP identification of the ICMP errors natrix generates
//! (random: `output_dont_care`).
//!
//! The checked-in files are the source of truth: tests/packet_vectors.rs runs them. This
//! writes them only when asked: `NATRIX_VECTORS_REGEN=1 cargo test --release --test
//! gen_vectors`; without the variable it does nothing. Needs root.

mod common;

use std::collections::BTreeMap;
use std::net::Ipv4Addr;

use common::packet_helpers::*;
use common::pkt::*;
use common::vectors::{self, Step, Vector, VectorFile};

/// The tables' hash seed of every vector.
const SEED: u32 = 0x4e58_5631;

/// Records the steps of one vector while checking them.
struct Rec<'a> {
    env: &'a Env,
    steps: Vec<Step>,
    /// The last step's output, while no rebuilt frame was compared with it yet.
    unchecked: Option<Vec<u8>>,
}

impl Rec<'_> {
    /// Sends a frame; checks the verdict and that `reason` moved; records the step.
    /// Returns the output frame, which the caller must then check ([`Rec::expect`]) unless
    /// the verdict is XDP_DROP.
    fn send(&mut self, side: Side, f: &[u8], verdict: u32, reason: &str) -> Vec<u8> {
        assert!(self.unchecked.is_none(), "step {}: the previous output was never checked", self.steps.len());
        let what = format!("step {}", self.steps.len());
        let before = self.env.stats();
        let (v, out) = self.env.run(side, f);
        let counters = vectors::moved(&before, &self.env.stats());
        assert_eq!(
            verdict_name(v),
            verdict_name(verdict),
            "{what}: expected verdict {} (counters {counters:?})",
            verdict_name(verdict)
        );
        assert!(counters.contains_key(reason), "{what}: expected {reason} to move, counters {counters:?}");
        self.steps.push(Step {
            program: vectors::side_name(side).into(),
            input: vectors::to_hex(f),
            verdict: verdict_name(v).into(),
            reason: reason.into(),
            counters,
            output: (v != XDP_DROP).then(|| vectors::to_hex(&out)),
            output_dont_care: Vec::new(),
        });
        if v != XDP_DROP {
            self.unchecked = Some(out.clone());
        }
        out
    }

    /// Checks the last output against `exp` (rebuilt from scratch), byte for byte except
    /// the `dont_care` ranges, and its checksums independently.
    fn expect_masked(&mut self, exp: &[u8], dont_care: &[[usize; 2]]) {
        let out = self.unchecked.take().expect("expected an output to check");
        let what = format!("step {}", self.steps.len() - 1);
        assert_frame_eq(&vectors::masked(&out, dont_care), &vectors::masked(exp, dont_care), &what);
        let input = vectors::from_hex(&self.steps.last().expect("step").input).expect("hex");
        if out != input {
            vectors::check_output_csums(&out, &what);
        }
        self.steps.last_mut().expect("step").output_dont_care = dont_care.to_vec();
    }

    fn expect(&mut self, exp: &[u8]) {
        self.expect_masked(exp, &[]);
    }

    /// Asserts the last step moved exactly these counters.
    fn counters_exactly(&self, c: &[(&str, u64)]) {
        let s = self.steps.last().expect("step");
        let want: BTreeMap<String, u64> = c.iter().map(|(n, v)| (n.to_string(), *v)).collect();
        assert_eq!(s.counters, want, "step {}: expected exactly these counters", self.steps.len() - 1);
    }

    fn rx(side: Side) -> &'static str {
        match side {
            Side::Inside => "rx_inside",
            Side::Outside => "rx_outside",
        }
    }

    /// A frame dropped for `reason`: exactly the rx counter and the reason move.
    fn drop(&mut self, side: Side, f: &[u8], reason: &str) {
        self.send(side, f, XDP_DROP, reason);
        self.counters_exactly(&[(Self::rx(side), 1), (reason, 1)]);
    }

    /// A frame handed to the kernel unchanged for `reason`: exactly the rx counter and it.
    fn pass(&mut self, side: Side, f: &[u8], reason: &str) {
        self.send(side, f, XDP_PASS, reason);
        self.expect(f);
        self.counters_exactly(&[(Self::rx(side), 1), (reason, 1)]);
    }

    /// An outbound packet translated and redirected out of out0 (xlate_out); returns the
    /// outside endpoint the data plane chose.
    fn out(&mut self, p: &Pkt) -> Ep {
        let out = self.send(Side::Inside, &p.build(), XDP_REDIRECT, "translated_out");
        let o = (src_ip(&out), sport(&out));
        assert!(
            self.env.cfg.pool.addresses.contains(&o.0),
            "expected a pool address as the translated source, got {}",
            o.0
        );
        self.expect(&p.clone().with_src(o.0, o.1).forwarded().build());
        o
    }

    /// The same, to an outside endpoint known already.
    fn out_to(&mut self, p: &Pkt, o: Ep) {
        assert_eq!(self.out(p), o, "expected the existing mapping's outside endpoint");
    }

    /// An inbound packet translated to `to` and redirected out of in0 (xlate_in).
    fn inn(&mut self, p: &Pkt, to: Ep) {
        self.send(Side::Outside, &p.build(), XDP_REDIRECT, "translated_in");
        self.expect(&p.clone().with_dst(to.0, to.1).forwarded().build());
    }

    /// An ICMP error natrix generates about `f` (sent back where `f` came from), from
    /// `src`: compared with its IP identification (random) and so the IP header checksum
    /// left out.
    fn expect_generated_error(&mut self, f: &[u8], src: Ipv4Addr, typ: u8, code: u8, mtu: u16) {
        let out = self.unchecked.clone().expect("an output");
        let exp = icmp_error_about(f, src, typ, code, mtu, ip_ident(&out));
        self.expect_masked(&exp, &[[ETH_LEN + 4, 2], [ETH_LEN + 10, 2]]);
    }
}

/// One vector's definition: its name, what it shows, its configuration, and the frames.
struct Def {
    file: &'static str,
    name: String,
    doc: String,
    cfg: Cfg,
    /// Interface MTUs other than 1500.
    mtu: BTreeMap<String, u32>,
    body: Box<dyn Fn(&mut Rec) + Send + Sync>,
}

fn def(
    file: &'static str,
    name: &str,
    doc: &str,
    cfg: Cfg,
    body: impl Fn(&mut Rec) + Send + Sync + 'static,
) -> Def {
    Def { file, name: name.into(), doc: doc.into(), cfg, mtu: BTreeMap::new(), body: Box::new(body) }
}

fn generate(d: &Def) -> Vector {
    let mut steps = None;
    with_env(&d.cfg, |env| {
        vectors::set_seed(env, SEED);
        vectors::set_mtus(env, &d.mtu);
        let mut r = Rec { env, steps: Vec::new(), unchecked: None };
        (d.body)(&mut r);
        assert!(r.unchecked.is_none(), "{}: the last output was never checked", d.name);
        steps = Some(r.steps);
    });
    let mut setup = steps.expect("steps");
    let packet = setup.pop().unwrap_or_else(|| panic!("{}: no step", d.name));
    Vector {
        name: d.name.clone(),
        doc: d.doc.clone(),
        config: vectors::config_json(&d.cfg.toml()),
        tab_seed: SEED,
        mtu: d.mtu.clone(),
        setup,
        packet,
    }
}

fn describe(file: &str) -> &'static str {
    match file {
        "malformed.json" => "Malformed and not-for-us frames: dropped with their reason, or passed to the kernel unchanged.",
        "translate.json" => "Translation of UDP, TCP and ICMP echo both ways; checksums, options, padding; mapping (EIM) and filtering (EIF, ADF, APDF); inbound without a mapping.",
        "hairpin.json" => "Hairpinning: a subscriber to another's outside endpoint.",
        "icmp.json" => "ICMP errors translated both ways (RFC 5508), and the ones natrix generates.",
        "policy.json" => "Policy: subscriber prefixes, exclusions, unsolicited inbound TCP, first packet must be a SYN.",
        "kernel.json" => "Frames natrix hands to the kernel: TTL, local destinations, no route, no neighbour.",
        _ => panic!("no description for {file}"),
    }
}

#[test]
fn regenerate_vectors() {
    if std::env::var("NATRIX_VECTORS_REGEN").as_deref() != Ok("1") {
        eprintln!("gen_vectors: set NATRIX_VECTORS_REGEN=1 to rewrite tests/vectors/*.json");
        return;
    }
    let mut files: BTreeMap<&str, Vec<Vector>> = BTreeMap::new();
    for d in defs() {
        eprintln!("generating {}/{}", d.file, d.name);
        files.entry(d.file).or_default().push(generate(&d));
    }
    let dir = vectors::dir();
    std::fs::create_dir_all(&dir).expect("creating tests/vectors");
    for e in std::fs::read_dir(&dir).expect("tests/vectors") {
        let p = e.expect("entry").path();
        if p.extension().is_some_and(|x| x == "json") {
            std::fs::remove_file(&p).expect("removing an old vector file");
        }
    }
    for (file, vs) in files {
        let f =
            VectorFile { format: vectors::FORMAT.into(), description: describe(file).into(), vectors: vs };
        let text = serde_json::to_string_pretty(&f).expect("json") + "\n";
        vectors::parse(&text).unwrap_or_else(|e| panic!("{file}: the generated file does not parse: {e}"));
        std::fs::write(dir.join(file), text).expect("writing a vector file");
    }
}

// =============================================================================================
// The definitions
// =============================================================================================

fn defs() -> Vec<Def> {
    let mut v = Vec::new();
    malformed(&mut v);
    translate(&mut v);
    hairpin(&mut v);
    icmp(&mut v);
    policy(&mut v);
    kernel(&mut v);
    v
}

// ---- malformed ------------------------------------------------------------------------------

/// Inside base packets: UDP / TCP / ICMP from subscriber 1 to the server.
fn in_udp() -> Vec<u8> {
    Pkt::udp(sub(1), 40000, SERVER, 53).payload(b"0123456789").build()
}
fn in_tcp() -> Vec<u8> {
    Pkt::tcp(sub(1), 40000, SERVER, 80, SYN).tcp_options(&[]).payload(b"012345").build()
}
fn in_icmp() -> Vec<u8> {
    Pkt::echo_request(sub(1), SERVER, 9).build()
}
/// Outside base packets: to the outside endpoint `o` of an existing UDP mapping (the case
/// opens it first), so that a lax parser would translate them.
fn out_udp(o: Ep) -> Vec<u8> {
    Pkt::udp(SERVER, 53, o.0, o.1).payload(b"0123456789").build()
}
fn out_tcp(o: Ep) -> Vec<u8> {
    Pkt::tcp(SERVER, 53, o.0, o.1, SYN).tcp_options(&[]).payload(b"012345").build()
}
fn out_icmp(o: Ep) -> Vec<u8> {
    Pkt::echo_reply(SERVER, o.0, o.1).build()
}
/// The IP packet natrix sent out for the flow the outside cases open, as an ICMP error
/// from the outside quotes it (source = the outside endpoint `o`).
fn sent_quote(o: Ep) -> Vec<u8> {
    ip_bytes(&Pkt::udp(sub(1), 40000, SERVER, 53).with_src(o.0, o.1).forwarded().build(), 548)
}
fn truncate_l4(mut f: Vec<u8>, l4_bytes: usize) -> Vec<u8> {
    let o = l4_off(&f);
    f.truncate(o + l4_bytes);
    let tot = (f.len() - ETH_LEN) as u16;
    set_tot_len(&mut f, tot);
    f
}
fn set_byte(mut f: Vec<u8>, off: usize, v: u8) -> Vec<u8> {
    f[off] = v;
    f
}
fn ip_byte(f: Vec<u8>, off: usize, v: u8) -> Vec<u8> {
    let mut f = set_byte(f, ETH_LEN + off, v);
    fix_ip_csum(&mut f);
    f
}
fn l4_u16(mut f: Vec<u8>, off: usize, v: u16) -> Vec<u8> {
    let o = l4_off(&f) + off;
    f[o..o + 2].copy_from_slice(&v.to_be_bytes());
    f
}
fn tot_len(mut f: Vec<u8>, delta: i32) -> Vec<u8> {
    let t = (ip_tot_len(&f) as i32 + delta) as u16;
    set_tot_len(&mut f, t);
    f
}
fn arp() -> Vec<u8> {
    let mut f = vec![0xff; 6];
    f.extend_from_slice(&mac_of(sub(1)));
    f.extend_from_slice(&[0x08, 0x06, 0, 1, 0x08, 0, 6, 4, 0, 1]);
    f.extend_from_slice(&mac_of(sub(1)));
    f.extend_from_slice(&sub(1).octets());
    f.extend_from_slice(&[0; 6]);
    f.extend_from_slice(&GW_IN.octets());
    f
}
fn ipv6() -> Vec<u8> {
    let mut f = Vec::new();
    etherparse::PacketBuilder::ethernet2(mac_of(sub(1)), IN_MAC)
        .ipv6(
            [0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2],
            [0x20, 1, 0xd, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1],
            64,
        )
        .udp(40000, 53)
        .write(&mut f, b"v6")
        .expect("ipv6");
    f
}

type Build = fn(Ep) -> Vec<u8>;

fn malformed(v: &mut Vec<Def>) {
    use Side::*;
    let rows: Vec<(&str, Side, Build, u32, &str)> = vec![
        // ---- inside ----
        ("in_arp_passes", Inside, |_| arp(), XDP_PASS, "pass_not_ipv4"),
        ("in_ipv6_passes", Inside, |_| ipv6(), XDP_PASS, "pass_not_ipv4"),
        ("in_ethernet_header_only", Inside, |_| in_udp()[..ETH_LEN].to_vec(), XDP_DROP, "malformed_ip"),
        ("in_truncated_ip_header", Inside, |_| in_udp()[..ETH_LEN + 10].to_vec(), XDP_DROP, "malformed_ip"),
        ("in_ip_version_6", Inside, |_| ip_byte(in_udp(), 0, 0x65), XDP_DROP, "malformed_ip"),
        ("in_ihl_below_5", Inside, |_| ip_byte(in_udp(), 0, 0x44), XDP_DROP, "malformed_ip"),
        ("in_ihl_beyond_data", Inside, |_| ip_byte(in_udp(), 0, 0x4f), XDP_DROP, "malformed_ip"),
        ("in_tot_len_beyond_frame", Inside, |_| tot_len(in_udp(), 1), XDP_DROP, "malformed_ip"),
        (
            "in_tot_len_below_header",
            Inside,
            |_| {
                let mut f = in_udp();
                set_tot_len(&mut f, 19);
                f
            },
            XDP_DROP,
            "malformed_ip",
        ),
        (
            "in_bad_ip_checksum",
            Inside,
            |_| {
                let mut f = in_udp();
                f[ETH_LEN + 10] ^= 0x5a;
                f
            },
            XDP_DROP,
            "malformed_ip",
        ),
        ("in_truncated_tcp_header", Inside, |_| truncate_l4(in_tcp(), 12), XDP_DROP, "malformed_l4"),
        ("in_tcp_header_cut_by_tot_len", Inside, |_| tot_len(in_tcp(), -14), XDP_DROP, "malformed_l4"),
        (
            "in_tcp_doff_below_5",
            Inside,
            |_| {
                let mut f = in_tcp();
                let o = l4_off(&f);
                f[o + 12] = 0x40;
                f
            },
            XDP_DROP,
            "malformed_l4",
        ),
        (
            "in_tcp_doff_beyond_packet",
            Inside,
            |_| {
                let mut f = in_tcp();
                let o = l4_off(&f);
                f[o + 12] = 0xf0;
                f
            },
            XDP_DROP,
            "malformed_l4",
        ),
        ("in_truncated_udp_header", Inside, |_| truncate_l4(in_udp(), 4), XDP_DROP, "malformed_l4"),
        ("in_udp_len_below_8", Inside, |_| l4_u16(in_udp(), 4, 7), XDP_DROP, "malformed_l4"),
        ("in_udp_len_beyond_ip_payload", Inside, |_| l4_u16(in_udp(), 4, 19), XDP_DROP, "malformed_l4"),
        ("in_truncated_icmp_header", Inside, |_| truncate_l4(in_icmp(), 4), XDP_DROP, "malformed_l4"),
        (
            "in_icmp_header_cut_by_tot_len",
            Inside,
            |_| tot_len(in_icmp(), -(ip_tot_len(&in_icmp()) as i32 - 24)),
            XDP_DROP,
            "malformed_l4",
        ),
        (
            "in_gre_unsupported",
            Inside,
            |_| Pkt::other(sub(1), SERVER, 47).build(),
            XDP_DROP,
            "unsupported_proto",
        ),
        (
            "in_sctp_unsupported",
            Inside,
            |_| Pkt::other(sub(1), SERVER, 132).build(),
            XDP_DROP,
            "unsupported_proto",
        ),
        (
            "in_icmp_timestamp_unsupported",
            Inside,
            |_| Pkt::icmp(sub(1), SERVER, 13, 0).build(),
            XDP_DROP,
            "unsupported_icmp",
        ),
        (
            "in_icmp_redirect_unsupported",
            Inside,
            |_| Pkt::icmp(sub(1), SERVER, 5, 1).build(),
            XDP_DROP,
            "unsupported_icmp",
        ),
        (
            "in_icmp_error_truncated_quote",
            Inside,
            |_| Pkt::icmp_err(sub(1), SERVER, 3, 3, [0; 4], &delivered_quote()[..20]).build(),
            XDP_DROP,
            "icmp_malformed",
        ),
        (
            "in_icmp_error_about_nothing_delivered",
            Inside,
            |_| Pkt::icmp_err(sub(1), SERVER, 3, 3, [0; 4], &delivered_quote()).build(),
            XDP_DROP,
            "no_mapping",
        ),
        // ---- outside ----
        ("out_arp_passes", Outside, |_| arp(), XDP_PASS, "pass_not_ipv4"),
        (
            "out_truncated_ip_header",
            Outside,
            |o| out_udp(o)[..ETH_LEN + 16].to_vec(),
            XDP_DROP,
            "malformed_ip",
        ),
        ("out_ip_version_6", Outside, |o| ip_byte(out_udp(o), 0, 0x65), XDP_DROP, "malformed_ip"),
        ("out_ihl_below_5", Outside, |o| ip_byte(out_udp(o), 0, 0x43), XDP_DROP, "malformed_ip"),
        ("out_tot_len_beyond_frame", Outside, |o| tot_len(out_udp(o), 7), XDP_DROP, "malformed_ip"),
        (
            "out_bad_ip_checksum",
            Outside,
            |o| {
                let mut f = out_udp(o);
                f[ETH_LEN + 11] ^= 1;
                f
            },
            XDP_DROP,
            "malformed_ip",
        ),
        ("out_truncated_tcp_header", Outside, |o| truncate_l4(out_tcp(o), 19), XDP_DROP, "malformed_l4"),
        (
            "out_tcp_doff_beyond_packet",
            Outside,
            |o| {
                let mut f = out_tcp(o);
                let x = l4_off(&f);
                f[x + 12] = 0x70;
                f
            },
            XDP_DROP,
            "malformed_l4",
        ),
        ("out_truncated_udp_header", Outside, |o| truncate_l4(out_udp(o), 7), XDP_DROP, "malformed_l4"),
        ("out_udp_len_below_8", Outside, |o| l4_u16(out_udp(o), 4, 0), XDP_DROP, "malformed_l4"),
        ("out_udp_len_beyond_ip_payload", Outside, |o| l4_u16(out_udp(o), 4, 100), XDP_DROP, "malformed_l4"),
        ("out_truncated_icmp_header", Outside, |o| truncate_l4(out_icmp(o), 6), XDP_DROP, "malformed_l4"),
        (
            "out_fragment_not_for_pool_passes",
            Outside,
            |_| ip_byte(Pkt::udp(SERVER, 53, GW_OUT, 53).build(), 6, 0x20),
            XDP_PASS,
            "pass_local",
        ),
        (
            "out_gre_to_pool_unsupported",
            Outside,
            |o| Pkt::other(SERVER, o.0, 47).build(),
            XDP_DROP,
            "unsupported_proto",
        ),
        (
            "out_icmp_timestamp_unsupported",
            Outside,
            |o| Pkt::icmp(SERVER, o.0, 13, 0).build(),
            XDP_DROP,
            "unsupported_icmp",
        ),
        (
            "out_icmp_error_truncated_quote",
            Outside,
            |o| Pkt::icmp_err(SERVER, o.0, 3, 3, [0; 4], &sent_quote(o)[..24]).build(),
            XDP_DROP,
            "icmp_malformed",
        ),
        (
            "out_icmp_error_quote_not_ipv4",
            Outside,
            |o| {
                let mut q = sent_quote(o);
                q[0] = 0x65;
                Pkt::icmp_err(SERVER, o.0, 3, 3, [0; 4], &q).build()
            },
            XDP_DROP,
            "icmp_malformed",
        ),
        (
            "out_icmp_error_bad_icmp_checksum",
            Outside,
            |o| {
                let mut f = Pkt::icmp_err(SERVER, o.0, 3, 3, [0; 4], &sent_quote(o)).build();
                let x = l4_off(&f);
                f[x + 2] ^= 0x10;
                f
            },
            XDP_DROP,
            "icmp_bad_checksum",
        ),
        (
            "out_icmp_error_bad_quoted_ip_checksum",
            Outside,
            |o| {
                let mut q = sent_quote(o);
                q[10] ^= 0x10;
                Pkt::icmp_err(SERVER, o.0, 3, 3, [0; 4], &q).build()
            },
            XDP_DROP,
            "icmp_bad_checksum",
        ),
        (
            "out_icmp_error_about_an_icmp_error",
            Outside,
            |o| {
                let inner = Pkt::icmp_err(o.0, SERVER, 3, 3, [0; 4], &sent_quote(o)).build();
                Pkt::icmp_err(SERVER, o.0, 11, 0, [0; 4], &ip_bytes(&inner, 548)).build()
            },
            XDP_DROP,
            "unsupported_icmp",
        ),
        (
            "out_icmp_error_about_gre",
            Outside,
            |o| {
                let gre = Pkt::other(o.0, SERVER, 47).payload(b"12345678").build();
                Pkt::icmp_err(SERVER, o.0, 3, 2, [0; 4], &ip_bytes(&gre, 548)).build()
            },
            XDP_DROP,
            "unsupported_proto",
        ),
        (
            "out_icmp_error_about_an_unmapped_port",
            Outside,
            |o| Pkt::icmp_err(SERVER, o.0, 3, 3, [0; 4], &sent_quote((o.0, o.1 ^ 0x40))).build(),
            XDP_DROP,
            "no_mapping",
        ),
    ];
    for (name, side, build, verdict, reason) in rows {
        let doc = match side {
            Side::Inside => format!("{name}: from a subscriber, with no state; {reason}"),
            Side::Outside => {
                format!("{name}: from outside, next to one UDP mapping (the setup opens it); {reason}")
            }
        };
        v.push(def("malformed.json", name, &doc, cfg(), move |r| {
            let o = match side {
                Side::Inside => (POOL0, 40000),
                Side::Outside => r.out(&Pkt::udp(sub(1), 40000, SERVER, 53)),
            };
            let f = build(o);
            if verdict == XDP_PASS {
                r.pass(side, &f, reason);
            } else {
                r.drop(side, &f, reason);
            }
        }));
    }
}

// ---- translation -------------------------------------------------------------------------------

fn adf() -> Cfg {
    cfg().set("nat", "filtering", "\"address-dependent\"")
}
fn apdf() -> Cfg {
    cfg().set("nat", "filtering", "\"address-and-port-dependent\"")
}

/// Word w that makes the UDP checksum of `translated` (with payload w) compute to 0.
fn zero_sum_word(translated: &Pkt) -> [u8; 2] {
    let mut f = translated.clone().payload(&[0, 0]).build();
    let c = l4_off(&f) + 6;
    f[c] = 0;
    f[c + 1] = 0;
    (0xffff - l4_sum(&f)).to_be_bytes()
}

fn translate(v: &mut Vec<Def>) {
    let f = "translate.json";
    v.push(def(f, "udp_out", "The first UDP packet of a subscriber: a mapping in its home block, the source rewritten, TTL - 1, new MACs, checksums updated.", cfg(), |r| {
        r.out(&Pkt::udp(sub(1), 40000, SERVER, 53).payload(b"a DNS query, more or less"));
    }));
    v.push(def(
        f,
        "udp_reply_in",
        "The reply to a UDP packet, translated back to the subscriber.",
        cfg(),
        |r| {
            let p = Pkt::udp(sub(1), 40000, SERVER, 53).payload(b"a DNS query, more or less");
            let o = r.out(&p);
            r.inn(&reply(&p, o), (sub(1), 40000));
        },
    ));
    v.push(def(f, "udp_same_flow_reuses_the_mapping", "A second packet of a UDP flow, after its reply: the same outside endpoint, no mapping or session created.", cfg(), |r| {
        let p = Pkt::udp(sub(1), 40000, SERVER, 53).payload(b"a DNS query, more or less");
        let o = r.out(&p);
        r.inn(&reply(&p, o), (sub(1), 40000));
        r.out_to(&p.clone().payload(b"second"), o);
        r.inn(&reply(&p, o).payload(b"second reply"), (sub(1), 40000));
    }));
    v.push(def(
        f,
        "udp_zero_checksum_stays_zero",
        "A UDP checksum of 0 (none) stays 0, both ways.",
        cfg(),
        |r| {
            let p = Pkt::udp(sub(1), 40001, SERVER, 53).no_udp_csum().payload(b"no checksum here");
            let o = r.out(&p);
            r.inn(&reply(&p, o), (sub(1), 40001));
            r.out_to(&p, o);
        },
    ));
    v.push(def(
        f,
        "udp_checksum_computing_to_zero_out",
        "A translated UDP checksum that computes to 0 is sent as 0xffff (outbound).",
        cfg(),
        |r| {
            let base = Pkt::udp(sub(1), 40002, SERVER, 53).payload(&[0, 0]);
            let o = r.out(&base);
            let p = base.clone().payload(&zero_sum_word(&base.clone().with_src(o.0, o.1).forwarded()));
            r.out_to(&p, o);
            let s = r.steps.last().expect("step");
            let out = vectors::from_hex(s.output.as_ref().expect("output")).expect("hex");
            assert_eq!(l4_csum(&out), 0xffff, "expected 0xffff");
        },
    ));
    v.push(def(
        f,
        "udp_checksum_computing_to_zero_in",
        "A translated UDP checksum that computes to 0 is sent as 0xffff (inbound).",
        cfg(),
        |r| {
            let base = Pkt::udp(sub(1), 40002, SERVER, 53).payload(&[0, 0]);
            let o = r.out(&base);
            let rb = reply(&base, o).payload(&[0, 0]);
            let rp = rb.clone().payload(&zero_sum_word(&rb.clone().with_dst(sub(1), 40002).forwarded()));
            r.inn(&rp, (sub(1), 40002));
            let s = r.steps.last().expect("step");
            let out = vectors::from_hex(s.output.as_ref().expect("output")).expect("hex");
            assert_eq!(l4_csum(&out), 0xffff, "expected 0xffff");
        },
    ));
    v.push(def(f, "tcp_syn_out", "A TCP SYN (MSS option) out.", cfg(), |r| {
        r.out(&Pkt::tcp(sub(1), 40000, SERVER, 80, SYN));
    }));
    v.push(def(
        f,
        "tcp_handshake_and_data",
        "SYN out, SYN-ACK in, ACK and data out, 1200 bytes of data in.",
        cfg(),
        |r| {
            let (me, srv) = ((sub(1), 40000), (SERVER, 80));
            let o = r.out(&Pkt::tcp(me.0, me.1, srv.0, srv.1, SYN));
            r.inn(&Pkt::tcp(srv.0, srv.1, o.0, o.1, SYN | ACK), me);
            r.out_to(&Pkt::tcp(me.0, me.1, srv.0, srv.1, ACK).seq_no(1_000_001).payload(&[]), o);
            r.out_to(&Pkt::tcp(me.0, me.1, srv.0, srv.1, PSH | ACK).payload(b"GET / HTTP/1.0\r\n\r\n"), o);
            r.inn(&Pkt::tcp(srv.0, srv.1, o.0, o.1, PSH | ACK).payload(&[0xab; 1200]), me);
        },
    ));
    v.push(def(f, "tcp_simultaneous_open", "SYN out, then a SYN without ACK in.", cfg(), |r| {
        let (me, peer) = ((sub(1), 42003), (SERVER, 42003));
        let o = r.out(&Pkt::tcp(me.0, me.1, peer.0, peer.1, SYN));
        r.inn(&Pkt::tcp(peer.0, peer.1, o.0, o.1, SYN), me);
    }));
    let echo_pl = b"0123456789abcdefghijklmnopqrstuvwxyz";
    v.push(def(
        f,
        "icmp_echo_request_out",
        "An echo request out: the identifier is the port.",
        cfg(),
        move |r| {
            r.out(&Pkt::echo_request(sub(1), SERVER, 0x4242).payload(echo_pl));
        },
    ));
    v.push(def(f, "icmp_echo_reply_in", "The echo reply, translated back.", cfg(), move |r| {
        let ping = Pkt::echo_request(sub(1), SERVER, 0x4242).payload(echo_pl);
        let o = r.out(&ping);
        r.inn(&reply(&ping, o).payload(echo_pl), (sub(1), 0x4242));
        r.out_to(&Pkt::echo_request(sub(1), SERVER, 0x4242), o);
    }));
    for (name, p) in [
        ("in_no_mapping_udp", Pkt::udp(SERVER, 53, POOL0, 40000)),
        ("in_no_mapping_tcp_syn", Pkt::tcp(SERVER, 80, POOL0, 40000, SYN)),
        ("in_no_mapping_echo_reply", Pkt::echo_reply(SERVER, POOL0, 40000)),
        ("in_no_mapping_echo_request", Pkt::echo_request(SERVER, POOL0, 1234)),
        ("in_no_mapping_last_pool_address", Pkt::udp(SERVER, 53, Ipv4Addr::new(203, 0, 113, 23), 2000)),
        ("in_no_mapping_below_the_port_range", Pkt::udp(SERVER, 53, POOL0, 53)),
    ] {
        v.push(def(f, name, "Inbound to a pool address and port no mapping holds.", cfg(), move |r| {
            r.drop(Side::Outside, &p.build(), "no_mapping");
        }));
    }
    v.push(def(
        f,
        "in_tcp_to_a_udp_mapping",
        "A mapping is per protocol: TCP to a UDP mapping's port.",
        cfg(),
        |r| {
            let o = r.out(&Pkt::udp(sub(1), 40000, SERVER, 53));
            r.drop(Side::Outside, &Pkt::tcp(SERVER, 53, o.0, o.1, SYN).build(), "no_mapping");
        },
    ));
    v.push(def(
        f,
        "in_echo_reply_to_a_udp_mapping",
        "A mapping is per protocol: an echo reply whose identifier is a UDP mapping's port.",
        cfg(),
        |r| {
            let o = r.out(&Pkt::udp(sub(1), 40000, SERVER, 53));
            r.drop(Side::Outside, &Pkt::echo_reply(SERVER, o.0, o.1).build(), "no_mapping");
        },
    ));
    v.push(def(f, "eim_one_mapping_for_two_remotes", "Endpoint-independent mapping (RFC 4787 REQ-1): one inside endpoint, two remotes, one outside endpoint; replies from both.", cfg(), |r| {
        let a = Pkt::udp(sub(1), 40000, SERVER, 53);
        let b = Pkt::udp(sub(1), 40000, SERVER2, 123);
        let o = r.out(&a);
        r.out_to(&b, o);
        r.inn(&reply(&a, o), (sub(1), 40000));
        r.inn(&reply(&b, o), (sub(1), 40000));
    }));
    v.push(def(f, "eif_admits_an_unknown_remote", "Endpoint-independent filtering (the default): a remote never contacted reaches the mapping, an inbound session is created.", cfg(), |r| {
        let o = r.out(&Pkt::udp(sub(1), 40000, SERVER, 53));
        r.inn(&Pkt::udp(SERVER2, 9999, o.0, o.1), (sub(1), 40000));
    }));
    v.push(def(
        f,
        "adf_drops_an_unknown_address",
        "Address-dependent filtering: a remote address never contacted is filtered.",
        adf(),
        |r| {
            let p = Pkt::udp(sub(1), 40000, SERVER, 53);
            let o = r.out(&p);
            r.inn(&reply(&p, o), (sub(1), 40000));
            r.drop(Side::Outside, &Pkt::udp(SERVER2, 53, o.0, o.1).build(), "filtered");
        },
    ));
    v.push(def(
        f,
        "adf_admits_another_port_of_a_contacted_address",
        "Address-dependent filtering (RFC 4787 section 5): any port of a contacted address is admitted.",
        adf(),
        |r| {
            let o = r.out(&Pkt::udp(sub(1), 40000, SERVER, 53));
            r.inn(&Pkt::udp(SERVER, 5353, o.0, o.1), (sub(1), 40000));
        },
    ));
    v.push(def(
        f,
        "apdf_drops_another_port_of_a_contacted_address",
        "Address-and-port-dependent filtering: another port of the contacted address is filtered.",
        apdf(),
        |r| {
            let p = Pkt::udp(sub(1), 40000, SERVER, 53);
            let o = r.out(&p);
            r.inn(&reply(&p, o), (sub(1), 40000));
            r.drop(Side::Outside, &Pkt::udp(SERVER, 5353, o.0, o.1).build(), "filtered");
        },
    ));
    v.push(def(f, "ip_options_carried_through", "IPv4 options (router alert, IHL 6) both ways: covered by the header checksum natrix verifies and updates.", cfg(), |r| {
        let ra = [0x94, 0x04, 0x00, 0x00];
        let p = Pkt::udp(sub(1), 40000, SERVER, 53).ip_options(&ra);
        let o = r.out(&p);
        r.inn(&reply(&p, o).ip_options(&ra), (sub(1), 40000));
    }));
    v.push(def(
        f,
        "tcp_options_carried_through",
        "TCP with MSS, SACK-permitted and timestamps (data offset 10), both ways.",
        cfg(),
        |r| {
            let opts = [2, 4, 5, 0xb4, 4, 2, 8, 10, 0, 0, 0, 1, 0, 0, 0, 0, 1, 1, 1, 0];
            let o = r.out(&Pkt::tcp(sub(1), 40001, SERVER, 443, SYN).tcp_options(&opts));
            r.inn(&Pkt::tcp(SERVER, 443, o.0, o.1, SYN | ACK).tcp_options(&opts), (sub(1), 40001));
        },
    ));
    v.push(def(
        f,
        "padded_echo_both_ways",
        "A 28-byte ICMP packet in a 60-byte frame: translated by the IP length, padding untouched.",
        cfg(),
        |r| {
            let ping = Pkt::echo_request(sub(1), SERVER, 0x0101).payload(&[]).padded(18);
            let o = r.out(&ping);
            r.inn(&reply(&ping, o).payload(&[]).padded(18), (sub(1), 0x0101));
        },
    ));
    v.push(def(
        f,
        "padded_udp_both_ways",
        "60-byte UDP frames with link-layer padding after the UDP length.",
        cfg(),
        |r| {
            let u = Pkt::udp(sub(1), 40000, SERVER, 53).payload(&[1, 2]).padded(16);
            let o = r.out(&u);
            r.inn(&reply(&u, o).payload(&[3]).padded(17), (sub(1), 40000));
        },
    ));
    v.push(def(f, "padded_tcp_both_ways", "60-byte SYN and SYN-ACK frames with padding.", cfg(), |r| {
        let syn = Pkt::tcp(sub(1), 40001, SERVER, 80, SYN).padded(2);
        let o = r.out(&syn);
        r.inn(&reply(&syn, o).padded(2), (sub(1), 40001));
    }));
}

// ---- hairpinning --------------------------------------------------------------------------------

fn hairpin(v: &mut Vec<Def>) {
    let f = "hairpin.json";
    v.push(def(f, "hairpin_between_two_subscribers", "B sends to A's outside endpoint: delivered to A's inside address from B's outside endpoint, out of in0; A's answer goes back the same way.", cfg(), |r| {
        let (a_in, b_in) = ((sub(1), 40000), (sub(2), 41000));
        let a_out = r.out(&Pkt::udp(a_in.0, a_in.1, SERVER, 53));
        let b_out = r.out(&Pkt::udp(b_in.0, b_in.1, SERVER, 53));
        let p = Pkt::udp(b_in.0, b_in.1, a_out.0, a_out.1).payload(b"hello A");
        r.send(Side::Inside, &p.build(), XDP_REDIRECT, "translated_out");
        r.expect(&p.clone().with_src(b_out.0, b_out.1).with_dst(a_in.0, a_in.1).forwarded().build());
        let back = Pkt::udp(a_in.0, a_in.1, b_out.0, b_out.1).payload(b"hello B");
        r.send(Side::Inside, &back.build(), XDP_REDIRECT, "translated_in");
        r.expect(&back.clone().with_src(a_out.0, a_out.1).with_dst(b_in.0, b_in.1).forwarded().build());
    }));
    v.push(def(
        f,
        "hairpin_new_mapping",
        "B's first packet is to A's outside endpoint: B's mapping is made by the hairpinned packet itself.",
        cfg(),
        |r| {
            let (a_in, b_in) = ((sub(1), 40000), (sub(2), 41000));
            let a_out = r.out(&Pkt::udp(a_in.0, a_in.1, SERVER, 53));
            let p = Pkt::udp(b_in.0, b_in.1, a_out.0, a_out.1).payload(b"hello A");
            let out = r.send(Side::Inside, &p.build(), XDP_REDIRECT, "translated_out");
            let b_out = (src_ip(&out), sport(&out));
            assert!(r.env.cfg.pool.addresses.contains(&b_out.0), "expected B's outside source");
            r.expect(&p.clone().with_src(b_out.0, b_out.1).with_dst(a_in.0, a_in.1).forwarded().build());
        },
    ));
    v.push(def(
        f,
        "hairpin_disabled_drops",
        "nat.hairpinning = false: B to A's outside endpoint is dropped.",
        cfg().set("nat", "hairpinning", "false"),
        |r| {
            let a_out = r.out(&Pkt::udp(sub(1), 40000, SERVER, 53));
            r.drop(Side::Inside, &Pkt::udp(sub(2), 41000, a_out.0, a_out.1).build(), "hairpin_disabled");
        },
    ));
    v.push(def(
        f,
        "hairpin_to_an_unmapped_pool_port_drops",
        "To a pool port nobody holds, from the inside.",
        cfg(),
        |r| {
            r.send(Side::Inside, &Pkt::udp(sub(2), 41000, POOL0, 7).build(), XDP_DROP, "no_mapping");
        },
    ));
}

// ---- ICMP errors ---------------------------------------------------------------------------------

fn icmp(v: &mut Vec<Def>) {
    let f = "icmp.json";
    v.push(def(f, "error_in_about_udp", "A remote's port unreachable about our UDP packet: the quote's source becomes the inside endpoint again (IP and UDP checksums too), the outer destination the subscriber.", cfg(), |r| {
        let p = Pkt::udp(sub(1), 40000, SERVER, 53).payload(b"query");
        let o = r.out(&p);
        let sent = ip_bytes(&p.clone().with_src(o.0, o.1).forwarded().build(), 548);
        let as_inside = ip_bytes(&p.clone().forwarded().build(), 548);
        r.send(Side::Outside, &Pkt::icmp_err(SERVER, o.0, 3, 3, [0; 4], &sent).build(), XDP_REDIRECT, "icmp_errors_in");
        r.expect(&Pkt::icmp_err(SERVER, sub(1), 3, 3, [0; 4], &as_inside).forwarded().build());
    }));
    v.push(def(f, "error_in_about_tcp_short_quote", "A router's time exceeded about a SYN quoting the IP header and 8 bytes (no TCP checksum in the quote).", cfg(), |r| {
        let p = Pkt::tcp(sub(1), 40001, SERVER, 443, SYN);
        let o = r.out(&p);
        let sent = ip_bytes(&p.clone().with_src(o.0, o.1).forwarded().build(), 28);
        let as_inside = ip_bytes(&p.clone().forwarded().build(), 28);
        r.send(Side::Outside, &Pkt::icmp_err(SERVER2, o.0, 11, 0, [0; 4], &sent).build(), XDP_REDIRECT, "icmp_errors_in");
        r.expect(&Pkt::icmp_err(SERVER2, sub(1), 11, 0, [0; 4], &as_inside).forwarded().build());
    }));
    v.push(def(f, "error_in_about_echo", "Host unreachable about an echo request.", cfg(), |r| {
        let p = Pkt::echo_request(sub(1), SERVER, 0x3131);
        let o = r.out(&p);
        let sent = ip_bytes(&p.clone().with_src(o.0, o.1).forwarded().build(), 548);
        let as_inside = ip_bytes(&p.clone().forwarded().build(), 548);
        r.send(
            Side::Outside,
            &Pkt::icmp_err(SERVER2, o.0, 3, 1, [0; 4], &sent).build(),
            XDP_REDIRECT,
            "icmp_errors_in",
        );
        r.expect(&Pkt::icmp_err(SERVER2, sub(1), 3, 1, [0; 4], &as_inside).forwarded().build());
    }));
    v.push(def(f, "error_in_short_tcp_quote_with_link_padding", "Time exceeded quoting 8 bytes of TCP in a padded frame: the padding is not updated as if it were the TCP checksum.", cfg(), |r| {
        let p = Pkt::tcp(sub(1), 40001, SERVER, 443, SYN);
        let o = r.out(&p);
        let sent = ip_bytes(&p.clone().with_src(o.0, o.1).forwarded().build(), 28);
        let as_inside = ip_bytes(&p.clone().forwarded().build(), 28);
        r.send(Side::Outside, &Pkt::icmp_err(SERVER2, o.0, 11, 0, [0; 4], &sent).padded(16).build(), XDP_REDIRECT, "icmp_errors_in");
        r.expect(&Pkt::icmp_err(SERVER2, sub(1), 11, 0, [0; 4], &as_inside).forwarded().padded(16).build());
    }));
    v.push(def(f, "error_out_from_a_subscriber", "A subscriber's port unreachable about a packet natrix delivered: the quote's destination becomes the outside endpoint, the outer source the pool address.", cfg(), |r| {
        let p = Pkt::udp(sub(1), 40000, SERVER, 53);
        let o = r.out(&p);
        let rp = reply(&p, o);
        r.inn(&rp, (sub(1), 40000));
        let received = ip_bytes(&rp.clone().with_dst(sub(1), 40000).forwarded().build(), 548);
        let as_sent = ip_bytes(&rp.clone().forwarded().build(), 548);
        r.send(Side::Inside, &Pkt::icmp_err(sub(1), SERVER, 3, 3, [0; 4], &received).build(), XDP_REDIRECT, "icmp_errors_out");
        let mut exp = Pkt::icmp_err(sub(1), SERVER, 3, 3, [0; 4], &as_sent).forwarded();
        exp.src = o.0;
        r.expect(&exp.build());
    }));
    for (name, max, tc, rest) in [
        ("error_out_about_tcp_full_quote", 548, (3, 3), [0; 4]),
        ("error_out_about_tcp_quote_to_the_checksum", 38, (3, 2), [0; 4]),
        ("error_out_parameter_problem_short_quote", 28, (12, 0), [20, 0, 0, 0]),
    ] {
        v.push(def(f, name, "A subscriber's error about a TCP segment natrix delivered: the embedded destination and TCP checksum (when quoted) restored; a parameter problem keeps its pointer.", cfg(), move |r| {
            let (me, srv) = ((sub(1), 42010), (SERVER, 80));
            let o = r.out(&Pkt::tcp(me.0, me.1, srv.0, srv.1, SYN));
            r.inn(&Pkt::tcp(srv.0, srv.1, o.0, o.1, SYN | ACK), me);
            let seg = Pkt::tcp(srv.0, srv.1, o.0, o.1, PSH | ACK).payload(b"HTTP/1.0 200 OK\r\n\r\nbody");
            r.inn(&seg, me);
            let received = seg.clone().with_dst(me.0, me.1).forwarded().build();
            let as_sent = seg.clone().forwarded().build();
            let err = Pkt::icmp_err(me.0, srv.0, tc.0, tc.1, rest, &ip_bytes(&received, max));
            r.send(Side::Inside, &err.build(), XDP_REDIRECT, "icmp_errors_out");
            let mut exp = Pkt::icmp_err(me.0, srv.0, tc.0, tc.1, rest, &ip_bytes(&as_sent, max)).forwarded();
            exp.src = o.0;
            r.expect(&exp.build());
        }));
    }
    v.push(def(f, "error_hairpinned", "A answers B's hairpinned packet with port unreachable to B's outside address: translated out and in, delivered to B quoting B's packet as B sent it.", cfg(), |r| {
        let (a_in, b_in) = ((sub(1), 40000), (sub(2), 41000));
        let a_out = r.out(&Pkt::udp(a_in.0, a_in.1, SERVER, 53));
        let b_out = r.out(&Pkt::udp(b_in.0, b_in.1, SERVER, 53));
        let p = Pkt::udp(b_in.0, b_in.1, a_out.0, a_out.1).payload(b"hello A");
        r.send(Side::Inside, &p.build(), XDP_REDIRECT, "translated_out");
        let at_a = p.clone().with_src(b_out.0, b_out.1).with_dst(a_in.0, a_in.1).forwarded();
        r.expect(&at_a.build());
        let err = Pkt::icmp_err(a_in.0, b_out.0, 3, 3, [0; 4], &ip_bytes(&at_a.build(), 548));
        r.send(Side::Inside, &err.build(), XDP_REDIRECT, "icmp_errors_out");
        let mut exp = Pkt::icmp_err(a_in.0, b_in.0, 3, 3, [0; 4], &ip_bytes(&p.clone().forwarded().build(), 548)).forwarded();
        exp.src = a_out.0;
        r.expect(&exp.build());
    }));
    v.push(def(
        f,
        "error_in_bad_icmp_checksum",
        "RFC 5508 REQ-3: an inbound error with a wrong ICMP checksum is dropped.",
        cfg(),
        |r| {
            let p = Pkt::udp(sub(1), 40000, SERVER, 53);
            let o = r.out(&p);
            let sent = ip_bytes(&p.clone().with_src(o.0, o.1).forwarded().build(), 548);
            let mut e = Pkt::icmp_err(SERVER, o.0, 3, 3, [0; 4], &sent).build();
            let x = l4_off(&e);
            e[x + 2] ^= 0x01;
            r.drop(Side::Outside, &e, "icmp_bad_checksum");
        },
    ));
    v.push(def(
        f,
        "error_out_bad_icmp_checksum",
        "RFC 5508 REQ-3: a subscriber's error with a wrong ICMP checksum is dropped.",
        cfg(),
        |r| {
            let p = Pkt::udp(sub(1), 40000, SERVER, 53);
            let o = r.out(&p);
            let rp = reply(&p, o);
            r.inn(&rp, (sub(1), 40000));
            let received = ip_bytes(&rp.clone().with_dst(sub(1), 40000).forwarded().build(), 548);
            let mut e = Pkt::icmp_err(sub(1), SERVER, 3, 3, [0; 4], &received).build();
            let x = l4_off(&e);
            e[x + 3] ^= 0x80;
            r.drop(Side::Inside, &e, "icmp_bad_checksum");
        },
    ));
    v.push(def(
        f,
        "error_in_without_mapping",
        "RFC 5508 REQ-4: an inbound error about an outside endpoint no mapping holds.",
        cfg(),
        |r| {
            let q = ip_bytes(&Pkt::udp(POOL0, 40000, SERVER, 53).forwarded().build(), 548);
            r.drop(Side::Outside, &Pkt::icmp_err(SERVER, POOL0, 3, 3, [0; 4], &q).build(), "no_mapping");
        },
    ));
    let mut d = def(f, "frag_needed_for_the_inside_link", "Too big for in0 (MTU 1280) with DF: natrix answers the remote with fragmentation needed from the pool address (its IP identification is natrix's choice).", cfg(), |r| {
        let p = Pkt::udp(sub(1), 40000, SERVER, 53);
        let o = r.out(&p);
        let big = reply(&p, o).payload(&[0x44; 1300]).build();
        r.send(Side::Outside, &big, XDP_REDIRECT, "mtu_exceeded");
        r.expect_generated_error(&big, o.0, 3, 4, 1280);
    });
    d.mtu.insert(IN_IF.into(), 1280);
    v.push(d);
    v.push(def(
        f,
        "refused_new_flow_gets_admin_prohibited",
        "A subscriber over its session quota: ICMP 3/13 from in0's address back to it.",
        cfg().set("limits", "max_sessions_per_subscriber", "1"),
        |r| {
            r.out(&Pkt::udp(sub(1), 40000, SERVER, 53));
            let f = Pkt::udp(sub(1), 40001, SERVER, 53).build();
            r.send(Side::Inside, &f, XDP_REDIRECT, "session_quota");
            let code = r.env.cfg.nat.unreachable_code.code();
            r.expect_generated_error(&f, GW_IN, 3, code, 0);
        },
    ));
}

// ---- policy -----------------------------------------------------------------------------------------

fn policy(v: &mut Vec<Def>) {
    let f = "policy.json";
    let subs = || cfg().set("nat", "subscribers", "[\"100.64.0.0/29\"]");
    let outsider = Ipv4Addr::new(100, 64, 0, 77);
    for (name, p) in [
        ("not_subscriber_udp", Pkt::udp(outsider, 5000, SERVER, 53)),
        ("not_subscriber_tcp_syn", Pkt::tcp(outsider, 5000, SERVER, 80, SYN)),
        ("not_subscriber_echo", Pkt::echo_request(outsider, SERVER, 9)),
    ] {
        v.push(def(
            f,
            name,
            "nat.subscribers: a source outside the prefixes makes nothing and goes nowhere.",
            subs(),
            move |r| {
                r.drop(Side::Inside, &p.build(), "not_subscriber");
            },
        ));
    }
    v.push(def(
        f,
        "not_subscriber_icmp_error",
        "An outsider's ICMP error quoting a subscriber's live mapping.",
        subs(),
        move |r| {
            let o = r.out(&Pkt::udp(sub(1), 6000, SERVER, 53));
            let quoted = Pkt::udp(SERVER, 53, o.0, o.1).forwarded().build();
            r.drop(
                Side::Inside,
                &Pkt::icmp_err(outsider, SERVER, 3, 3, [0; 4], &quoted[14..]).build(),
                "not_subscriber",
            );
        },
    ));
    v.push(def(
        f,
        "excluded_destination_routed_untranslated",
        "RFC 6888 REQ-6: a destination in [[exclude]] is routed as is by XDP (TTL - 1, new MACs).",
        cfg().raw("[[exclude]]\nprefix = \"198.51.100.3/32\""),
        |r| {
            let p = Pkt::udp(sub(1), 40000, SERVER2, 53);
            r.send(Side::Inside, &p.build(), XDP_REDIRECT, "pass_excluded");
            r.expect(&p.clone().forwarded().build());
        },
    ));
    for (name, flags) in [
        ("tcp_first_packet_ack", ACK),
        ("tcp_first_packet_fin", FIN | ACK),
        ("tcp_first_packet_rst", RST),
        ("tcp_first_packet_syn_rst", SYN | RST),
    ] {
        v.push(def(f, name, "Only a SYN creates a TCP mapping (RFC 5382, RFC 7857).", cfg(), move |r| {
            r.drop(Side::Inside, &Pkt::tcp(sub(1), 43000, SERVER, 80, flags).build(), "tcp_no_syn");
        }));
    }
    v.push(def(f, "unsolicited_syn_apdf", "RFC 5382 REQ-4: an unsolicited SYN from a remote never contacted is dropped silently (address-and-port-dependent filtering).", apdf(), |r| {
        let (me, srv) = ((sub(1), 42020), (SERVER, 80));
        let o = r.out(&Pkt::tcp(me.0, me.1, srv.0, srv.1, SYN));
        r.inn(&Pkt::tcp(srv.0, srv.1, o.0, o.1, SYN | ACK), me);
        r.drop(Side::Outside, &Pkt::tcp(srv.0, 8080, o.0, o.1, SYN).build(), "filtered");
    }));
    for (name, flags) in
        [("unsolicited_ack_eif", ACK), ("unsolicited_rst_eif", RST), ("unsolicited_syn_rst_eif", SYN | RST)]
    {
        v.push(def(f, name, "Under endpoint-independent filtering only a SYN opens a session from outside: other segments from a new remote are filtered.", cfg(), move |r| {
            let (me, srv) = ((sub(1), 42030), (SERVER, 80));
            let o = r.out(&Pkt::tcp(me.0, me.1, srv.0, srv.1, SYN));
            r.inn(&Pkt::tcp(srv.0, srv.1, o.0, o.1, SYN | ACK), me);
            r.drop(Side::Outside, &Pkt::tcp(SERVER2, 5555, o.0, o.1, flags).build(), "filtered");
        }));
    }
    v.push(def(
        f,
        "inbound_syn_through_eif_mapping",
        "Through an existing TCP mapping (EIF), a SYN from a new remote opens an inbound session.",
        cfg(),
        |r| {
            let (me, srv) = ((sub(1), 42040), (SERVER, 80));
            let o = r.out(&Pkt::tcp(me.0, me.1, srv.0, srv.1, SYN));
            r.inn(&Pkt::tcp(srv.0, srv.1, o.0, o.1, SYN | ACK), me);
            r.inn(&Pkt::tcp(SERVER2, 5555, o.0, o.1, SYN), me);
        },
    ));
}

// ---- handed to the kernel ---------------------------------------------------------------------------

fn kernel(v: &mut Vec<Def>) {
    let f = "kernel.json";
    for (name, p, reason) in [
        ("out_ttl_1", Pkt::udp(sub(1), 40000, SERVER, 53).ttl(1), "pass_ttl"),
        ("out_ttl_0", Pkt::udp(sub(1), 40000, SERVER, 53).ttl(0), "pass_ttl"),
        ("out_to_the_gateway_inside", Pkt::udp(sub(1), 40000, GW_IN, 53), "pass_local"),
        ("out_ping_to_the_gateway", Pkt::echo_request(sub(1), GW_IN, 1), "pass_local"),
        ("out_inside_to_inside", Pkt::udp(sub(1), 40000, sub(2), 53), "pass_local"),
        ("out_no_route", Pkt::udp(sub(1), 40000, Ipv4Addr::new(192, 0, 2, 1), 53), "pass_local"),
        (
            "out_icmp_error_ttl_1",
            Pkt::icmp_err(sub(1), SERVER, 3, 3, [0; 4], &delivered_quote()).ttl(1),
            "pass_ttl",
        ),
    ] {
        v.push(def(f, name, "Outbound, for the kernel untranslated (TTL expiring here, for the gateway, inside to inside, no route).", cfg(), move |r| {
            r.pass(Side::Inside, &p.build(), reason);
        }));
    }
    for (name, p) in [
        ("in_to_the_gateway", Pkt::udp(SERVER, 53, GW_OUT, 40000)),
        ("in_to_an_inside_address", Pkt::udp(SERVER, 53, sub(1), 40000)),
        ("in_to_an_unrelated_address", Pkt::udp(SERVER, 53, Ipv4Addr::new(192, 0, 2, 7), 40000)),
    ] {
        v.push(def(f, name, "Inbound, not for the pool: to the kernel unchanged.", cfg(), move |r| {
            r.pass(Side::Outside, &p.build(), "pass_local");
        }));
    }
    v.push(def(f, "in_ttl_1", "A reply with TTL 1: to the kernel untranslated.", cfg(), |r| {
        let p = Pkt::udp(sub(1), 40000, SERVER, 53);
        let o = r.out(&p);
        r.pass(Side::Outside, &reply(&p, o).ttl(1).build(), "pass_ttl");
    }));
    v.push(def(f, "out_no_neighbour_passes_translated", "To a remote whose neighbour is unresolved: translated, handed to the kernel (no TTL decrement, MACs untouched).", cfg(), |r| {
        let p = Pkt::udp(sub(1), 40000, NO_NEIGH_REMOTE, 53);
        let out = r.send(Side::Inside, &p.build(), XDP_PASS, "pass_no_neigh");
        let o = (src_ip(&out), sport(&out));
        r.expect(&p.clone().with_src(o.0, o.1).build());
    }));
}
