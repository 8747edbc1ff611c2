// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//! `natrix sessions` and `natrix stats`: the live state, for people and for programs.

use std::collections::{BTreeMap, HashMap};

use serde::Serialize;

use crate::abi::{PROTO_TCP, SF_INBOUND, SF_PERMIT, TAB_MAPS, TAB_SESS};
use crate::dataplane::ip_from_be;
use crate::skel::types::nx_map_key;
use crate::tables::{
    is_drop, now_tick, proto_name, tcp_state_name, ticks_to_secs, TableError, Tables, STATS,
};

/// One row of `natrix sessions --json` (the JSON contract: these field names stay).
#[derive(Debug, Serialize, Clone, PartialEq)]
pub struct SessionRow {
    pub proto: &'static str,
    pub inside: String,
    pub outside: String,
    pub remote: String,
    pub state: &'static str,
    pub expires_in: i64,
    pub direction: &'static str,
}

pub fn sessions(t: &Tables) -> Result<Vec<SessionRow>, TableError> {
    let now = now_tick();
    let maps: HashMap<[u8; 8], (u32, u16)> =
        t.mappings()?.into_iter().map(|(k, m)| (key8(&k), (m.out_ip, m.out_port))).collect();
    let mut rows: Vec<SessionRow> = t
        .sessions()?
        .into_iter()
        // address-dependent filtering records are filter state, not connections
        .filter(|(_, s)| s.flags & SF_PERMIT == 0)
        .map(|(k, s)| {
            let mk = nx_map_key { in_ip: k.in_ip, in_port: k.in_port, proto: k.proto, pad: 0 };
            let outside = maps
                .get(&key8(&mk))
                .map(|(ip, port)| format!("{}:{}", ip_from_be(*ip), u16::from_be(*port)))
                .unwrap_or_else(|| "-".into());
            SessionRow {
                proto: proto_name(k.proto),
                inside: format!("{}:{}", ip_from_be(k.in_ip), u16::from_be(k.in_port)),
                outside,
                remote: format!("{}:{}", ip_from_be(k.rem_ip), u16::from_be(k.rem_port)),
                state: if k.proto == PROTO_TCP { tcp_state_name(s.state) } else { "active" },
                expires_in: ticks_to_secs(s.expire, now).max(0),
                direction: if s.flags & SF_INBOUND != 0 { "in" } else { "out" },
            }
        })
        .collect();
    rows.sort_by(|a, b| (a.proto, &a.inside, &a.remote).cmp(&(b.proto, &b.inside, &b.remote)));
    Ok(rows)
}

fn key8(k: &nx_map_key) -> [u8; 8] {
    let mut b = [0u8; 8];
    b[..4].copy_from_slice(&k.in_ip.to_ne_bytes());
    b[4..6].copy_from_slice(&k.in_port.to_ne_bytes());
    b[6] = k.proto;
    b
}

pub fn sessions_table(rows: &[SessionRow]) -> String {
    let mut out = format!(
        "{:<5} {:<21} {:<21} {:<21} {:<12} {:>8}\n",
        "PROTO", "INSIDE", "OUTSIDE", "REMOTE", "STATE", "EXPIRES"
    );
    for r in rows {
        out += &format!(
            "{:<5} {:<21} {:<21} {:<21} {:<12} {:>7}s\n",
            r.proto, r.inside, r.outside, r.remote, r.state, r.expires_in
        );
    }
    out += &format!("{} session(s)\n", rows.len());
    out
}

/// `natrix stats --json`: counters by name, drops by reason, and table occupancy.
#[derive(Debug, Serialize)]
pub struct Stats {
    pub counters: BTreeMap<&'static str, u64>,
    pub drops: BTreeMap<&'static str, u64>,
    pub drops_total: u64,
    pub sessions: u64,
    pub mappings: u64,
    pub subscribers: u64,
    pub blocks_in_use: u64,
    pub blocks_total: u64,
    pub ports_in_use: u64,
    /// shape of the session and mapping tables: configured size, slots, live entries, the
    /// longest displacement from a home bucket (bpf/nx_tab.h)
    pub session_table: TableShape,
    pub mapping_table: TableShape,
    /// the subscriber table (bpf/nx_subs.h): live entries, tombstones, displacement
    pub subscriber_table: SubTableShape,
    /// deterministic mode only (bpf/nx_det.h): its ranges, whose port words are the
    /// mappings (`mappings` and `ports_in_use` then count those words)
    #[serde(skip_serializing_if = "Option::is_none")]
    pub deterministic: Option<crate::tables::DetHealth>,
    /// dynamic mode only (bpf/nx_home.h): the home blocks their subscribers own, whose port
    /// words are mappings (counted in `mappings` beside the mapping table's entries)
    #[serde(skip_serializing_if = "Option::is_none")]
    pub home_walk: Option<crate::tables::HomeHealth>,
}

#[derive(Debug, Serialize)]
pub struct SubTableShape {
    pub max_entries: u32,
    #[serde(flatten)]
    pub health: crate::tables::SubHealth,
}

#[derive(Debug, Serialize)]
pub struct TableShape {
    pub max_entries: u32,
    #[serde(flatten)]
    pub health: crate::tables::TabHealth,
}

pub fn stats(t: &Tables) -> Result<Stats, TableError> {
    let v = t.stats()?;
    let mut counters = BTreeMap::new();
    let mut drops = BTreeMap::new();
    for (s, name) in STATS {
        let n = v.get(s.0 as usize).copied().unwrap_or(0);
        if is_drop(*s) {
            drops.insert(*name, n);
        } else {
            counters.insert(*name, n);
        }
    }
    let (blocks_in_use, blocks_total, ports_in_use) = crate::expiry::usage(t)?;
    let cfg = t.config()?;
    let shape = |tab: usize| -> Result<TableShape, TableError> {
        Ok(TableShape { max_entries: cfg.tab_max[tab], health: t.tab_health(tab)? })
    };
    let (session_table, mapping_table) = (shape(TAB_SESS)?, shape(TAB_MAPS)?);
    let sub = t.sub_health()?;
    let det = t.det_health()?;
    let home = t.home_health()?;
    Ok(Stats {
        drops_total: drops.values().sum(),
        counters,
        drops,
        sessions: session_table.health.live,
        mappings: det.map_or(mapping_table.health.live + home.map_or(0, |h| h.mappings), |d| d.mappings),
        subscribers: sub.live,
        blocks_in_use,
        blocks_total,
        ports_in_use: det.map_or(ports_in_use, |d| d.mappings + d.held),
        session_table,
        mapping_table,
        subscriber_table: SubTableShape { max_entries: cfg.sub_max, health: sub },
        deterministic: det,
        home_walk: home,
    })
}

pub fn stats_table(s: &Stats) -> String {
    let mut out = String::new();
    out += &if s.deterministic.is_some() {
        // no subscriber entries and no blocks: the ranges line below says the rest
        format!(
            "sessions {}  mappings {}  ports in use {}\n\ntables:\n",
            s.sessions, s.mappings, s.ports_in_use
        )
    } else {
        format!(
            "sessions {}  mappings {}  subscribers {}  blocks {}/{}  ports in use {}\n\ntables:\n",
            s.sessions, s.mappings, s.subscribers, s.blocks_in_use, s.blocks_total, s.ports_in_use
        )
    };
    for (name, t) in [("sessions", &s.session_table), ("mappings", &s.mapping_table)] {
        out += &format!(
            "  {name:<9} {} of {} configured, {} slots ({:.0}% used), {} away from their first home bucket, longest displacement {} bucket(s){}\n",
            t.health.live,
            t.max_entries,
            t.health.slots,
            100.0 * t.health.live as f64 / t.health.slots.max(1) as f64,
            t.health.away,
            t.health.max_displacement,
            if t.health.overflow_wrong > 0 { " (overflow counts changing: read during inserts)" } else { "" }
        );
    }
    if let Some(d) = &s.deterministic {
        out += &format!(
            "  {:<9} {} subscribers x {} ports a protocol: {} mapping(s), {} held, {} on the other parity (fallen back), longest walk {} word(s), {} full range(s)\n",
            "ranges",
            d.subscribers,
            d.ports_each,
            d.mappings,
            d.held,
            d.fallen_back,
            d.longest_walk,
            d.full_ranges
        );
    }
    if let Some(h) = &s.home_walk {
        out += &format!(
            "  {:<9} {} owned by their subscriber: {} mapping(s), {} held, {} on the other parity (fallen back), longest walk {} word(s), {} with table mappings too (mixed)\n",
            "home blocks",
            h.blocks,
            h.mappings,
            h.held,
            h.fallen_back,
            h.longest_walk,
            h.mixed
        );
    }
    let st = &s.subscriber_table;
    out += &format!(
        "  {:<9} {} of {} configured, {} slots ({:.0}% used), {} tombstone(s), {} away from their home slot, longest displacement {} slot(s)\n",
        "subscribers",
        st.health.live,
        st.max_entries,
        st.health.slots,
        100.0 * st.health.live as f64 / st.health.slots.max(1) as f64,
        st.health.tombstones,
        st.health.away,
        st.health.max_displacement
    );
    out += "\ncounters:\n";
    for (k, v) in &s.counters {
        out += &format!("  {k:<22} {v}\n");
    }
    out += &format!("drops ({} total):\n", s.drops_total);
    for (k, v) in &s.drops {
        out += &format!("  {k:<22} {v}\n");
    }
    out
}
