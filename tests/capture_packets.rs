// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//! Packet tests (BPF_PROG_TEST_RUN) of the capture chain (bpf/nx_cap.h): the stages
//! `natrix capture` generates (src/capture/stage.rs) put in the data plane's program array,
//! a packet run through the entry program, and the record it leaves in nx_cap_rb compared
//! byte for byte with what the test sent (the received form) and what the program returned
//! (the sent form), with the verdict the program returned. Also: no record when the filter
//! matches neither form, a match on the sent form alone, drops, the snap length, `--drops`,
//! an empty emit slot (the packet keeps its verdict, the stage counts it), and nothing at
//! all once the stages are gone. Needs root. Run: `cargo test --release --test capture_packets`.

mod common;

use std::os::fd::{AsFd, AsRawFd, OwnedFd};

use common::packet_helpers::*;
use common::pkt::*;
use libbpf_rs::{MapCore, MapFlags};
use natrix::capture::pcapng::Record;
use natrix::capture::stage::{load_stage, Stage};
use natrix::capture::{compile, translate};
use natrix::skel::types::{nx_cap_buf, nx_cap_ctl};

/// The capture's stages for `filter`, in place in env's program array, and its settings.
fn install(env: &Env, filter: &str, snap: u32, flags: u32) -> Vec<OwnedFd> {
    let f = translate(&compile(filter, 262_144).unwrap()).unwrap();
    let m = &env.dp.skel.maps;
    let ctl = nx_cap_ctl { owner: 1, flags, snap, ..Default::default() };
    m.nx_cap_ctl.update(&0u32.to_ne_bytes(), bytemuck::bytes_of(&ctl), MapFlags::ANY).unwrap();
    Stage::ALL
        .iter()
        .map(|s| {
            let fd = load_stage(*s, &f, m.nx_cap_buf.as_fd(), m.nx_progs.as_fd()).unwrap();
            m.nx_progs.update(&s.slot().to_ne_bytes(), &fd.as_raw_fd().to_ne_bytes(), MapFlags::ANY).unwrap();
            fd
        })
        .collect()
}

fn uninstall(env: &Env) {
    for s in Stage::ALL {
        env.dp.skel.maps.nx_progs.delete(&s.slot().to_ne_bytes()).unwrap();
    }
}

/// Every record in the ring, consumed, as owned bytes.
fn drain(env: &Env) -> Vec<Vec<u8>> {
    let got = std::cell::RefCell::new(Vec::new());
    let mut b = libbpf_rs::RingBufferBuilder::new();
    b.add(&env.dp.skel.maps.nx_cap_rb, |rec: &[u8]| {
        got.borrow_mut().push(rec.to_vec());
        0
    })
    .unwrap();
    b.build().unwrap().consume().unwrap();
    got.into_inner()
}

/// Every CPU's nx_cap_buf counters summed: (records, lost, stage_fail).
fn counters(env: &Env) -> (u64, u64, u64) {
    let v = env.dp.skel.maps.nx_cap_buf.lookup_percpu(&0u32.to_ne_bytes(), MapFlags::ANY).unwrap().unwrap();
    let at = |b: &[u8], off: usize| u64::from_ne_bytes(b[off..off + 8].try_into().unwrap());
    v.iter().fold((0, 0, 0), |(r, l, f), b| {
        (
            r + at(b, std::mem::offset_of!(nx_cap_buf, records)),
            l + at(b, std::mem::offset_of!(nx_cap_buf, lost)),
            f + at(b, std::mem::offset_of!(nx_cap_buf, stage_fail)),
        )
    })
}

/// A translated packet's record: the received form is the frame sent in, the sent form the
/// frame the program returned, the verdict the program's; the pair shares one id, the
/// time is now. Then the reply, inbound, the same way.
#[test]
fn a_record_holds_both_forms_byte_for_byte() {
    with_env(&Cfg::default(), |env| {
        let _stages = install(env, "udp and host 100.64.0.2", 9216, 0);
        let p = Pkt::udp(sub(1), 5000, SERVER, 53).build();
        let before = std::time::SystemTime::now();
        let (v, out) = env.inside(&p);
        assert_eq!(v, XDP_REDIRECT);
        let recs = drain(env);
        assert_eq!(recs.len(), 1);
        let r = Record::parse(&recs[0]).expect("a whole record");
        assert_eq!(r.rx, &p[..], "the received form is the frame sent in");
        assert_eq!(r.tx, &out[..], "the sent form is the frame the program returned");
        assert_eq!((r.rx_len as usize, r.tx_len as usize), (p.len(), out.len()));
        assert_eq!(
            (r.action(), natrix::capture::pcapng::reason_name(r.reason())),
            (XDP_REDIRECT, "redirected")
        );
        assert_eq!((r.rx_ifindex, r.tx_ifindex), (env.in_ifindex, env.out_ifindex));
        assert!(r.matched_rx() && !r.matched_tx(), "the sent form's source is the pool's");
        let utc = (i128::from(r.tai_ns) + i128::from(natrix::natlog::source::tai_to_utc_ns())) as u128;
        let t0 = before.duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos();
        assert!(utc >= t0 && utc < t0 + 5_000_000_000, "stamped when received");
        // the reply: matched on its sent form only (its received form is to the pool)
        let o: Ep = (
            std::net::Ipv4Addr::from(<[u8; 4]>::try_from(&out[26..30]).unwrap()),
            u16::from_be_bytes([out[34], out[35]]),
        );
        let back = reply(&Pkt::udp(sub(1), 5000, SERVER, 53), o).build();
        let (v, inb) = env.outside(&back);
        assert_eq!(v, XDP_REDIRECT);
        let recs = drain(env);
        assert_eq!(recs.len(), 1, "the filter matches the reply's sent form");
        let r2 = Record::parse(&recs[0]).unwrap();
        assert_eq!((r2.rx, r2.tx), (&back[..], &inb[..]));
        assert!(!r2.matched_rx() && r2.matched_tx());
        assert_eq!((r2.rx_ifindex, r2.tx_ifindex), (env.out_ifindex, env.in_ifindex));
        assert_ne!(r.id, r2.id);
        assert_eq!(counters(env), (2, 0, 0));
    });
}

/// No match on either form: no record, and the packet goes its way as without a capture.
/// A drop: the received form only, with its reason. The snap length cuts both forms.
/// --drops: only drops.
#[test]
fn no_match_drops_snap_length_and_drops_only() {
    with_env(&Cfg::default(), |env| {
        let stages = install(env, "host 192.0.2.99", 9216, 0);
        let p = Pkt::udp(sub(3), 5000, SERVER, 53).build();
        assert_eq!(env.inside(&p).0, XDP_REDIRECT);
        assert!(drain(env).is_empty());
        drop(stages);

        let _s = install(env, "", 64, 0);
        let mut big = Pkt::udp(sub(3), 5001, SERVER, 53);
        big.payload = vec![0x77; 600];
        let big = big.build();
        let (v, out) = env.inside(&big);
        assert_eq!(v, XDP_REDIRECT);
        let unsolicited = Pkt::udp(SERVER, 53, POOL0, 40000).build();
        assert_eq!(env.outside(&unsolicited).0, XDP_DROP);
        let recs = drain(env);
        assert_eq!(recs.len(), 2);
        let r = Record::parse(&recs[0]).unwrap();
        assert_eq!((r.rx, r.tx), (&big[..64], &out[..64]), "64 bytes of each form");
        assert_eq!((r.rx_len as usize, r.tx_len as usize), (big.len(), out.len()), "and their lengths");
        let d = Record::parse(&recs[1]).unwrap();
        assert_eq!((d.action(), natrix::capture::pcapng::reason_name(d.reason())), (XDP_DROP, "no_mapping"));
        assert!(unsolicited.len() < 64);
        assert_eq!(
            (d.rx, d.tx.len(), d.tx_len),
            (&unsolicited[..], 0, 0),
            "whole (shorter than 64), no sent form"
        );

        let _s = install(env, "", 9216, natrix::skel::types::nx_cap_flags::NX_CAPF_DROPS.0);
        assert_eq!(env.inside(&p).0, XDP_REDIRECT);
        assert_eq!(env.outside(&unsolicited).0, XDP_DROP);
        let recs = drain(env);
        assert_eq!(recs.len(), 1, "--drops: the drop only");
        assert_eq!(Record::parse(&recs[0]).unwrap().action(), XDP_DROP);
    });
}

/// The emit stage's slot empty (a capture ending mid-packet): the packet keeps its verdict
/// and output, the stage counts the miss. The stages gone: nothing is recorded, and the
/// packet is what it is without a capture.
#[test]
fn an_empty_slot_keeps_the_verdict_and_no_stages_record_nothing() {
    with_env(&Cfg::default(), |env| {
        let _s = install(env, "", 9216, 0);
        let p = Pkt::udp(sub(4), 5000, SERVER, 53).build();
        let (v0, out0) = env.inside(&p);
        assert_eq!(drain(env).len(), 1);
        let emit = natrix::skel::types::nx_prog::NX_PROG_CAP_EMIT.0;
        env.dp.skel.maps.nx_progs.delete(&emit.to_ne_bytes()).unwrap();
        let (v, out) = env.inside(&p);
        assert_eq!((v, &out), (v0, &out0), "the same verdict and frame");
        assert!(drain(env).is_empty());
        assert_eq!(counters(env).2, 1, "one stage found its next slot empty");
        uninstall(env);
        let (v, out) = env.inside(&p);
        assert_eq!((v, &out), (v0, &out0));
        assert!(drain(env).is_empty());
        assert_eq!(counters(env).2, 1, "no stage ran");
    });
}
