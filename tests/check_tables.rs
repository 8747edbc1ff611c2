// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//! The table checker (src/check.rs, `natrix check-tables`): silent on a healthy busy data
//! plane, and naming exactly the damage done to a table on purpose.
//! Needs root. Run: `cargo test --release --test check_tables -- --test-threads=2`.

mod common;

use std::net::Ipv4Addr;
use std::sync::atomic::Ordering;
use std::thread::sleep;
use std::time::Duration;

use common::pkt::*;
use libbpf_rs::MapCore;
use natrix::abi::{
    sub_key, MAPS_W0_KEY, SLOT_CTL_SHIFT, SLOT_GEN_MASK, SLOT_LIVE, SLOT_STATE_MASK, SUB_LIVE,
};
use natrix::check::{check_once, check_tables, Options, Report};
use natrix::dataplane::ip_be;
use natrix::skel::types::{nx_map_key, nx_sess_key};
use natrix::tables::{MmapWords, Tables};

fn short() -> Cfg {
    Cfg::default()
        .set("timeouts", "udp", "\"1s\"")
        .set("timeouts", "icmp", "\"1s\"")
        .set("timeouts", "tcp_transitory", "\"1s\"")
        .set("timeouts", "port_hold_down", "\"1s\"")
        .set("nat", "icmp_errors_per_sec", "0")
}

fn assert_healthy(t: &Tables, what: &str) -> Report {
    let r = check_once(t, &Options::default()).expect("expected the checker to read the tables");
    assert!(r.problems.is_empty(), "{what}: expected no broken invariant, found:\n{}", r.text());
    r
}

/// Asserts the report has a problem of `kind` whose detail names `entry`.
fn assert_found(r: &Report, kind: &str, entry: &str, what: &str) {
    assert!(
        r.problems.iter().any(|p| p.kind == kind && p.detail.contains(entry)),
        "{what}: expected a {kind} problem naming {entry}, found:\n{}",
        r.text()
    );
}

/// Opens flows of subscribers 1..=5 in every protocol, answered from outside too.
fn busy(env: &Env, base: u16, n: u16) {
    for s in 1..=5u8 {
        for i in 0..n {
            let (oip, oport) = env.open(&Pkt::udp(sub(s), base + i, SERVER, 53));
            let (v, _) = env.outside(&Pkt::udp(SERVER, 53, oip, oport).build());
            assert_eq!(verdict_name(v), "XDP_REDIRECT", "reply to udp flow {i} of subscriber {s}");
            if i % 4 == 0 {
                let (oip, oport) = env.open(&Pkt::tcp(sub(s), base + i, SERVER, 80, SYN));
                let (v, _) = env.outside(&Pkt::tcp(SERVER, 80, oip, oport, SYN | ACK).build());
                assert_eq!(verdict_name(v), "XDP_REDIRECT", "SYN-ACK to tcp flow {i} of subscriber {s}");
                let (v, _) = env.inside(&Pkt::tcp(sub(s), base + i, SERVER, 80, ACK).build());
                assert_eq!(verdict_name(v), "XDP_REDIRECT", "ACK of tcp flow {i} of subscriber {s}");
                let (oip, oid) = env.open(&Pkt::echo_request(sub(s), SERVER2, base + i));
                let (v, _) = env.outside(&Pkt::echo_reply(SERVER2, oip, oid).build());
                assert_eq!(verdict_name(v), "XDP_REDIRECT", "echo reply {i} of subscriber {s}");
            }
            // a second remote on the same mapping
            if i % 3 == 0 {
                env.open(&Pkt::udp(sub(s), base + i, SERVER2, 5353));
            }
        }
    }
}

/// (a) a healthy, busy data plane, some of its state expired by a sweep: nothing reported,
/// with the home walk (default) and with every mapping in the table.
#[test]
fn healthy_tables_report_nothing() {
    for home_probe in ["8", "0"] {
        with_env(&short().set("nat", "home_probe", home_probe), |env| {
            let t = &env.dp.tables;
            busy(env, 10000, 60);
            assert_healthy(t, "after the first flows");
            sleep(Duration::from_millis(1300));
            busy(env, 20000, 60);
            let r = env.sweep();
            assert!(r.sessions_expired > 0, "expected the sweep to expire the first flows: {r:?}");
            let rep = check_tables(t).expect("check");
            assert!(rep.healthy(), "home_probe {home_probe}: after a sweep:\n{}", rep.text());
            assert!(rep.checked.sessions > 0 && rep.checked.port_words_held > 0, "{:?}", rep.checked);
            if home_probe == "0" {
                assert!(rep.checked.table_mappings > 0, "{:?}", rep.checked);
            } else {
                assert!(rep.checked.walk_mappings > 0, "{:?}", rep.checked);
            }
            eprintln!("home_probe {home_probe}: {}", rep.text());
        });
    }
}

/// The 32-byte slot of the mapping table holding (ip, port, proto); its word index.
fn map_slot(w: &MmapWords, ip: Ipv4Addr, port: u16, proto: u8) -> usize {
    let key = natrix::tables::map_k0(&nx_map_key { in_ip: ip_be(ip), in_port: port.to_be(), proto, pad: 0 });
    w.words()
        .chunks_exact(4)
        .position(|e| {
            let w0 = e[0].load(Ordering::Acquire);
            (w0 & SLOT_STATE_MASK) >> SLOT_CTL_SHIFT == SLOT_LIVE && w0 & MAPS_W0_KEY == key
        })
        .map(|i| i * 4)
        .unwrap_or_else(|| panic!("expected the mapping of {ip}:{port} in the table"))
}

/// The word index of the subscriber entry of `ip` in nx_subs.
fn sub_entry(w: &MmapWords, ip: Ipv4Addr) -> usize {
    let want = sub_key(SUB_LIVE, ip_be(ip));
    let words = std::mem::size_of::<natrix::skel::types::nx_sub>() / 8;
    w.words()
        .chunks_exact(words)
        .position(|e| e[0].load(Ordering::Acquire) == want)
        .map(|i| i * words)
        .unwrap_or_else(|| panic!("expected a subscriber entry of {ip}"))
}

/// (b) damage done on purpose is named: kind and entry; undone, the tables are healthy again.
#[test]
fn corruption_is_named() {
    with_env(&short().set("nat", "home_probe", "0"), |env| {
        let t = &env.dp.tables;
        busy(env, 10000, 20);
        assert_healthy(t, "before");
        let once = || check_once(t, &Options::default()).expect("check");
        let maps = MmapWords::new(&t.maps, "nx_maps").expect("mmap nx_maps");
        let m = map_slot(&maps, sub(1), 10001, UDP);
        let mw = &maps.words()[m..m + 4];
        let out_ip = mw[1].load(Ordering::Acquire) as u32;
        let out_port = u16::from_be((mw[1].load(Ordering::Acquire) >> 32) as u16);
        let addr = env.pool_index(natrix::dataplane::ip_from_be(out_ip));
        let out = format!("{}:{out_port}/udp", natrix::dataplane::ip_from_be(out_ip));

        // 1. a mapping's nsess one too many
        mw[2].fetch_add(1, Ordering::AcqRel);
        assert_found(&once(), "mapping_nsess_mismatch", &format!("{}:10001/udp", sub(1)), "nsess bumped");
        mw[2].fetch_sub(1, Ordering::AcqRel);
        assert_healthy(t, "nsess restored");

        // 2. its port word naming another inside endpoint
        let idx = natrix::tables::port_index(addr, UDP, out_port);
        let good = env.port_word(addr, UDP, out_port);
        let bad = PORT_USED << PORT_STATE_SHIFT | (ip_be(sub(1)) as u64) << 16 | 10999;
        t.ports.update(&idx.to_ne_bytes(), &bad.to_ne_bytes(), libbpf_rs::MapFlags::ANY).expect("write word");
        let r = once();
        assert_found(&r, "mapping_port_word_mismatch", &format!("{}:10001/udp", sub(1)), "word repointed");
        assert_found(&r, "port_word_without_mapping", &out, "word repointed");
        t.ports
            .update(&idx.to_ne_bytes(), &good.to_ne_bytes(), libbpf_rs::MapFlags::ANY)
            .expect("write word");
        assert_healthy(t, "word restored");

        // 3. a subscriber's session count one too many (nx_sub.nsess: byte 48 of the entry)
        let subs = MmapWords::new(&t.subs, "nx_subs").expect("mmap nx_subs");
        let e = sub_entry(&subs, sub(2));
        subs.words()[e + 6].fetch_add(1, Ordering::AcqRel);
        assert_found(&once(), "subscriber_nsess_mismatch", &sub(2).to_string(), "nx_sub.nsess bumped");
        subs.words()[e + 6].fetch_sub(1, Ordering::AcqRel);
        assert_healthy(t, "nx_sub.nsess restored");

        // 4. a HELD word released long ago (a port-class port: in no block)
        let now_s = (natrix::tables::now_ns() / 1_000_000_000) as u64;
        let held = PORT_HELD << PORT_STATE_SHIFT | (now_s - 1000);
        let idx = natrix::tables::port_index(0, UDP, 500);
        t.ports
            .update(&idx.to_ne_bytes(), &held.to_ne_bytes(), libbpf_rs::MapFlags::ANY)
            .expect("write word");
        assert_found(&once(), "held_past_hold_down", &format!("{POOL0}:500/udp"), "stale HELD word");
        t.ports
            .update(&idx.to_ne_bytes(), &0u64.to_ne_bytes(), libbpf_rs::MapFlags::ANY)
            .expect("write word");
        assert_healthy(t, "HELD word freed");

        // 5. a session whose mapping does not exist, written into an empty second slot
        let sess = MmapWords::new(&t.sess, "nx_sess").expect("mmap nx_sess");
        let sw = sess.words();
        let slot = (0..sw.len() / 4)
            .filter(|i| i % 2 == 1)
            .find(|i| (sw[i * 4].load(Ordering::Acquire) & SLOT_STATE_MASK) >> SLOT_CTL_SHIFT == 0)
            .expect("an empty slot")
            * 4;
        let old: Vec<u64> = (0..4).map(|j| sw[slot + j].load(Ordering::Acquire)).collect();
        let expire = natrix::tables::now_tick().wrapping_add(1000) as u64;
        sw[slot + 1].store(ip_be(sub(1)) as u64 | (ip_be(SERVER) as u64) << 32, Ordering::Release);
        sw[slot + 2].store(out_ip as u64 | expire << 32, Ordering::Release);
        sw[slot + 3].store(old[3] & !0xffff_ffff | 44444u16.to_be() as u64, Ordering::Release);
        sw[slot].store(
            natrix::tables::sess_k0(&nx_sess_key {
                in_port: 40000u16.to_be(),
                rem_port: 53u16.to_be(),
                proto: UDP,
                ..Default::default()
            }) | (old[0] & SLOT_GEN_MASK)
                | SLOT_LIVE << SLOT_CTL_SHIFT,
            Ordering::Release,
        );
        let r = once();
        assert_found(
            &r,
            "session_without_mapping",
            &format!("{}:40000/udp {SERVER}:53/udp", sub(1)),
            "session added",
        );
        assert_found(&r, "table_count_mismatch", "nx_sess", "session added behind the count's back");
        for (j, v) in old.iter().enumerate().rev() {
            sw[slot + j].store(*v, Ordering::Release);
        }
        assert_healthy(t, "session removed");

        // 6. the same damage seen by the two-pass check (it stays)
        mw[2].fetch_add(2, Ordering::AcqRel);
        let r = check_tables(t).expect("check");
        assert_eq!(r.checked.passes, 2, "expected a second pass to confirm");
        assert_found(&r, "mapping_nsess_mismatch", &format!("{}:10001/udp", sub(1)), "two passes");
        mw[2].fetch_sub(2, Ordering::AcqRel);
        assert!(check_tables(t).expect("check").healthy());
    });
}

/// (b') a home-walk mapping's session count (bits 61..48 of its word) is checked too.
#[test]
fn walk_word_corruption_is_named() {
    with_env(&short(), |env| {
        let t = &env.dp.tables;
        let (oip, oport) = env.open(&Pkt::udp(sub(3), 12345, SERVER, 53));
        assert_healthy(t, "before");
        let addr = env.pool_index(oip);
        let w = env.port_word(addr, UDP, oport);
        assert_eq!(
            w >> natrix::abi::PORT_NSESS_SHIFT & natrix::abi::PORT_NSESS_MAX,
            1,
            "expected a walk word counting its session: {w:#x}"
        );
        let idx = natrix::tables::port_index(addr, UDP, oport);
        let bad = w + (1 << natrix::abi::PORT_NSESS_SHIFT);
        t.ports.update(&idx.to_ne_bytes(), &bad.to_ne_bytes(), libbpf_rs::MapFlags::ANY).expect("write");
        assert_found(
            &check_once(t, &Options::default()).expect("check"),
            "mapping_nsess_mismatch",
            &format!("{}:12345/udp", sub(3)),
            "walk word's count bumped",
        );
        t.ports.update(&idx.to_ne_bytes(), &w.to_ne_bytes(), libbpf_rs::MapFlags::ANY).expect("write");
        assert_healthy(t, "restored");

        // the session counts on its subscriber's home block word (bpf/nx_limits.h): one too
        // many there is named for the subscriber
        let cfg = t.config().expect("config");
        let gid = natrix::tables::home_block(&cfg, ip_be(sub(3))).expect("a home block");
        let bw = env.block_word(gid);
        assert_eq!(
            natrix::tables::block_nsess(bw),
            1,
            "expected the home block word to count the session: {bw:#x}"
        );
        let bad = bw + (1 << natrix::abi::BLOCK_NSESS_SHIFT);
        t.blocks.update(&gid.to_ne_bytes(), &bad.to_ne_bytes(), libbpf_rs::MapFlags::ANY).expect("write");
        assert_found(
            &check_once(t, &Options::default()).expect("check"),
            "subscriber_nsess_mismatch",
            &sub(3).to_string(),
            "home block's session count bumped",
        );
        t.blocks.update(&gid.to_ne_bytes(), &bw.to_ne_bytes(), libbpf_rs::MapFlags::ANY).expect("write");
        assert_healthy(t, "home block count restored");
    });
}

/// (c) the CLI on a pinned instance: exit 0 healthy, 1 damaged, 2 without tables; JSON out.
#[test]
fn cli_on_pinned_tables() {
    use natrix::dataplane::{self, Dataplane, Persistence};
    let pin = std::path::PathBuf::from(format!("/sys/fs/bpf/natrix-check-{}", std::process::id()));
    let natrix_bin = env!("CARGO_BIN_EXE_natrix");
    let cli = |pin: &std::path::Path| {
        std::process::Command::new(natrix_bin)
            .args(["check-tables", "--json", "--pin"])
            .arg(pin)
            .output()
            .expect("run natrix check-tables")
    };
    let ns = pkt_netns();
    let name = ns.name().to_owned();
    let pin2 = pin.clone();
    let res = std::thread::scope(|s| {
        s.spawn(move || {
            enter_netns(&name);
            let cfg = natrix::config::Config::from_toml_str(&short().toml()).expect("config");
            let ifaces = dataplane::resolve_interfaces(&cfg).expect("interfaces");
            dataplane::ensure_bpffs(&pin2).expect("bpffs");
            let dp = Dataplane::load(&cfg, Persistence::Pinned(pin2.clone())).expect("load pinned");
            dp.configure(&cfg, &ifaces).expect("configure");
            let in_if = ifaces.iter().find(|i| i.name == IN_IF).map(|i| i.ifindex).expect("in0");
            let fd = std::os::fd::AsRawFd::as_raw_fd(&std::os::fd::AsFd::as_fd(&dp.skel.progs.nx_xdp_inside));
            for i in 0..50u16 {
                let (v, _) =
                    xdp_run_fd(fd, in_if, &Pkt::udp(sub(1 + (i % 4) as u8), 30000 + i, SERVER, 53).build());
                assert_eq!(verdict_name(v), "XDP_REDIRECT", "flow {i}");
            }
            let o = cli(&pin2);
            let j: serde_json::Value = serde_json::from_slice(&o.stdout).expect("JSON output");
            assert_eq!(o.status.code(), Some(0), "healthy: {j}\n{}", String::from_utf8_lossy(&o.stderr));
            assert_eq!(j["problems"].as_array().map(|a| a.len()), Some(0), "{j}");
            assert_eq!(j["checked"]["sessions"], 50, "{j}");
            // damage through the pinned map: a subscriber's session count
            let t = Tables::open_pinned(&pin2).expect("open pinned");
            let subs = MmapWords::new(&t.subs, "nx_subs").expect("mmap");
            let e = sub_entry(&subs, sub(2));
            subs.words()[e + 6].fetch_add(3, Ordering::AcqRel);
            let o = cli(&pin2);
            let j: serde_json::Value = serde_json::from_slice(&o.stdout).expect("JSON output");
            assert_eq!(o.status.code(), Some(1), "damaged: {j}");
            let probs = j["problems"].as_array().expect("problems");
            assert!(
                probs.iter().any(|p| p["kind"] == "subscriber_nsess_mismatch"
                    && p["detail"].as_str().is_some_and(|d| d.contains(&sub(2).to_string()))),
                "{j}"
            );
            drop(subs);
            drop(t);
            drop(dp);
        })
        .join()
    });
    let _ = dataplane::down(&pin);
    let _ = std::fs::remove_dir(&pin);
    drop(ns);
    if let Err(p) = res {
        std::panic::resume_unwind(p);
    }
    let o = cli(std::path::Path::new("/sys/fs/bpf/natrix-check-nonexistent"));
    assert_eq!(o.status.code(), Some(2), "no tables: {}", String::from_utf8_lossy(&o.stderr));
}

/// A static forward removed from the config: its port goes on hold-down like a released
/// one (HELD, counted in its block), then is freed and the block counted back down to 0;
/// the checker finds nothing wrong at either point (the block's count was once counted
/// below zero: a STATIC word is not counted in its block, the sweep counted it down).
#[test]
fn a_removed_static_forward_is_held_then_freed_with_its_block_count() {
    let c = Cfg::default()
        .set("timeouts", "port_hold_down", "\"1s\"")
        .raw("[[forward]]\nproto = \"udp\"\noutside = \"203.0.113.16:5353\"\ninside = \"100.64.0.2:53\"");
    with_env(&c, |env| {
        let gid = env.block_of(0, 5353);
        assert_eq!(env.port_word(0, UDP, 5353) >> PORT_STATE_SHIFT, PORT_STATIC);
        let before = env.block_word(gid);
        let mut without = env.cfg.clone();
        without.forwards.clear();
        env.dp.install_forwards(&without).expect("expected the forward removed");
        let w = env.port_word(0, UDP, 5353);
        assert_eq!(w >> PORT_STATE_SHIFT, PORT_HELD, "expected the forward's port HELD, word {w:#x}");
        let held = env.block_word(gid);
        assert_eq!(
            natrix::tables::block_used(held),
            natrix::tables::block_used(before) + 1,
            "the HELD word counted in its block"
        );
        let r = check_tables(&env.dp.tables).expect("check");
        assert!(r.healthy(), "while held: {}", r.text());
        sleep(Duration::from_millis(2300));
        env.sweep();
        assert_eq!(env.port_word(0, UDP, 5353), 0, "expected the port free after its hold-down");
        let after = env.block_word(gid);
        assert_eq!(after, before, "the block's word as before the forward was removed");
        let r = check_tables(&env.dp.tables).expect("check");
        assert!(r.healthy(), "after the hold-down: {}", r.text());
    });
}
