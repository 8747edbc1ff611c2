// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//! Fragments that arrived before their first fragment (RFC 4787 REQ-14, out of order).
//!
//! The data plane cannot know where an inbound later fragment goes until the first
//! fragment of its datagram has been translated (only the first carries the port). Such a
//! fragment is copied to the ring buffer `nx_frag_rb`; here it waits, at most
//! `fragments.max_held` of them for at most `fragments.timeout`, until the first
//! fragment's record appears in `nx_frags`. Then it is translated (destination and header
//! checksum) and sent on through a raw IP socket: the kernel routes it to the subscriber.

use std::collections::VecDeque;
use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use libbpf_rs::{MapCore, MapFlags, MapHandle};
use tracing::debug;

use crate::skel::types::{nx_frag, nx_frag_key};
use crate::tables::{now_tick, value};

/// Size of `struct nx_frag_hold` up to its data (key + len).
const HOLD_HDR: usize = std::mem::size_of::<nx_frag_key>() + 4;

struct Held {
    key: nx_frag_key,
    packet: Vec<u8>,
    deadline: Instant,
}

/// What became of held fragments since the daemon last took these counts
/// ([`FragHolder::take_stats`]) into `nx_stats`: reinjected, or dropped with a reason.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct FragStats {
    pub reinjected: u64,
    pub expired: u64,
    pub evicted: u64,
    pub send_failed: u64,
}

impl FragStats {
    /// (counter name in `natrix stats`, count), every one.
    pub fn counters(&self) -> [(&'static str, u64); 4] {
        [
            ("fragments_reinjected", self.reinjected),
            ("fragment_expired", self.expired),
            ("fragment_evicted", self.evicted),
            ("fragment_send_failed", self.send_failed),
        ]
    }
}

pub struct FragHolder {
    held: VecDeque<Held>,
    max_held: usize,
    timeout: Duration,
    sock: i32,
    stats: FragStats,
}

impl FragHolder {
    pub fn new(max_held: u32, timeout: Duration) -> std::io::Result<Self> {
        // SAFETY: plain socket(2); IPPROTO_RAW implies IP_HDRINCL: we send whole IP packets.
        let sock =
            unsafe { libc::socket(libc::AF_INET, libc::SOCK_RAW | libc::SOCK_CLOEXEC, libc::IPPROTO_RAW) };
        if sock < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(FragHolder {
            held: VecDeque::new(),
            max_held: max_held as usize,
            timeout,
            sock,
            stats: FragStats::default(),
        })
    }

    /// The counts since the last call, which start again from 0.
    pub fn take_stats(&mut self) -> FragStats {
        std::mem::take(&mut self.stats)
    }

    pub fn is_holding(&self) -> bool {
        !self.held.is_empty()
    }

    /// A record from the ring buffer (`struct nx_frag_hold`).
    pub fn push(&mut self, rec: &[u8]) {
        if rec.len() < HOLD_HDR {
            return;
        }
        let key: nx_frag_key = bytemuck::pod_read_unaligned(&rec[..std::mem::size_of::<nx_frag_key>()]);
        let len = u32::from_ne_bytes(rec[HOLD_HDR - 4..HOLD_HDR].try_into().expect("4 bytes")) as usize;
        let Some(packet) = rec.get(HOLD_HDR..HOLD_HDR + len) else { return };
        if self.held.len() >= self.max_held {
            self.held.pop_front();
            self.stats.evicted += 1;
        }
        self.held.push_back(Held { key, packet: packet.to_vec(), deadline: Instant::now() + self.timeout });
    }

    /// Sends what can be sent, forgets what waited too long.
    pub fn flush(&mut self, frags: &MapHandle) {
        let now = Instant::now();
        let tick = now_tick();
        let mut keep = VecDeque::with_capacity(self.held.len());
        while let Some(mut h) = self.held.pop_front() {
            let rec = frags
                .lookup(bytemuck::bytes_of(&h.key), MapFlags::ANY)
                .ok()
                .flatten()
                .map(|v| value::<nx_frag>(&v).expect("an nx_frag"));
            match rec {
                Some(r) if (r.expire.wrapping_sub(tick) as i32) > 0 => {
                    translate(&mut h.packet, r.in_ip);
                    if self.send(&h.packet, r.in_ip) {
                        self.stats.reinjected += 1;
                    } else {
                        self.stats.send_failed += 1;
                    }
                }
                _ if h.deadline <= now => self.stats.expired += 1,
                _ => keep.push_back(h),
            }
        }
        self.held = keep;
    }

    fn send(&self, packet: &[u8], dst_be: u32) -> bool {
        let sa = libc::sockaddr_in {
            sin_family: libc::AF_INET as u16,
            sin_port: 0,
            sin_addr: libc::in_addr { s_addr: dst_be },
            sin_zero: [0; 8],
        };
        // SAFETY: valid buffer and sockaddr_in.
        let n = unsafe {
            libc::sendto(
                self.sock,
                packet.as_ptr().cast(),
                packet.len(),
                0,
                (&sa as *const libc::sockaddr_in).cast(),
                std::mem::size_of::<libc::sockaddr_in>() as u32,
            )
        };
        if n < 0 {
            debug!(dst = %Ipv4Addr::from(dst_be.to_ne_bytes()), "re-injecting a fragment: {}", std::io::Error::last_os_error());
        }
        n >= 0
    }
}

impl Drop for FragHolder {
    fn drop(&mut self) {
        // SAFETY: closing our own socket.
        unsafe { libc::close(self.sock) };
    }
}

/// Destination address and IPv4 header checksum, recomputed from scratch.
pub fn translate(packet: &mut [u8], dst_be: u32) {
    if packet.len() < 20 {
        return;
    }
    let hlen = ((packet[0] & 0x0f) as usize * 4).clamp(20, packet.len().min(60));
    packet[16..20].copy_from_slice(&dst_be.to_ne_bytes());
    packet[10] = 0;
    packet[11] = 0;
    let mut sum: u32 =
        packet[..hlen].chunks(2).map(|c| u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)]) as u32).sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    packet[10..12].copy_from_slice(&(!(sum as u16)).to_be_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn translate_rewrites_destination_and_checksum() {
        // 20-byte header of a later fragment (offset 185*8), from 198.51.100.2 to 203.0.113.17
        let mut p =
            vec![0x45, 0, 0, 48, 0x12, 0x34, 0x00, 0xb9, 64, 17, 0, 0, 198, 51, 100, 2, 203, 0, 113, 17];
        p.extend_from_slice(&[0xab; 28]);
        translate(&mut p, u32::from_ne_bytes([100, 64, 0, 2]));
        assert_eq!(&p[16..20], &[100, 64, 0, 2]);
        let sum: u32 = p[..20].chunks(2).map(|c| u16::from_be_bytes([c[0], c[1]]) as u32).sum();
        let folded = (sum & 0xffff) + (sum >> 16);
        assert_eq!(folded as u16, 0xffff, "header checksum verifies");
        assert_eq!(&p[20..], &[0xab; 28][..], "payload untouched");
    }
}
