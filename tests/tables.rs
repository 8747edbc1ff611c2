// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//! Reading whole tables back: what the sweep and the CLI see must be every entry, at any
//! size (a batched read that stops at the first short batch once saw 25k of 10M sessions).

use libbpf_rs::{MapCore, MapFlags};
use natrix::config::Config;
use natrix::dataplane::{Dataplane, Persistence};
use natrix::skel::types::{nx_map, nx_map_key, nx_sess, nx_sess_key};
use natrix::tables::bytes_of;

const N: u32 = 100_000;

fn config() -> Config {
    Config::from_toml_str(&format!(
        r#"
        [interfaces]
        inside = ["lan0"]
        outside = ["wan0"]
        [pool]
        addresses = ["203.0.113.16/29"]
        [limits]
        max_sessions = {n}
        max_mappings = {n}
        "#,
        n = N + 1000
    ))
    .expect("test config")
}

#[test]
fn dumps_see_every_entry_of_large_tables() {
    let dp = Dataplane::load(&config(), Persistence::Private).expect("load the data plane (root?)");
    let t = &dp.tables;
    for i in 0..N {
        let ip = u32::from_ne_bytes([100, 64, (i >> 8) as u8, i as u8]);
        let port = (1024 + (i >> 16)) as u16;
        let sk = nx_sess_key {
            in_ip: ip,
            rem_ip: 0x0201a8c0,
            in_port: port.to_be(),
            rem_port: 53u16.to_be(),
            proto: 17,
            pad: [0; 3],
        };
        let sv = nx_sess { expire: i, ..Default::default() };
        t.sess.update(bytes_of(&sk), bytes_of(&sv), MapFlags::NO_EXIST).expect("insert a session");
        let mk = nx_map_key { in_ip: ip, in_port: port.to_be(), proto: 17, pad: 0 };
        let mv = nx_map { out_ip: 1, out_port: 2, flags: 0, nsess: 1, expire: i };
        t.maps.update(bytes_of(&mk), bytes_of(&mv), MapFlags::NO_EXIST).expect("insert a mapping");
    }
    let sessions = t.sessions().expect("dump sessions");
    assert_eq!(sessions.len(), N as usize, "every session read back");
    let mut expires: Vec<u32> = sessions.iter().map(|(_, s)| s.expire).collect();
    expires.sort_unstable();
    assert!(expires.iter().copied().eq(0..N), "each session exactly once, values intact");
    assert_eq!(t.mappings().expect("dump mappings").len(), N as usize, "every mapping read back");
}
