// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//! Packets built by hand and sent through raw sockets, for the namespace tests that need
//! what a socket cannot send (fragments in any order, spoofed sources): IPv4, UDP and
//! their checksums, and the sockets to send them from inside a namespace.

use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::os::fd::{AsRawFd, OwnedFd};
use std::time::Duration;

use super::netns::*;

pub fn assert_pool(a: SocketAddrV4, what: &str) {
    assert!(is_pool(*a.ip()), "{what}: {a} is not a pool address");
    assert!(!is_subscriber(*a.ip()), "{what}: {a} is a subscriber address (not translated)");
}

pub fn any_port(ip: Ipv4Addr) -> SocketAddrV4 {
    SocketAddrV4::new(ip, 0)
}

pub fn local_of(s: &UdpSocket) -> SocketAddrV4 {
    v4_of(s.local_addr().unwrap())
}

/// Receives one datagram of any size (up to 64 KiB), or None on timeout.
pub fn recv_big(s: &UdpSocket) -> Option<(Vec<u8>, SocketAddrV4)> {
    let mut buf = vec![0u8; 65536];
    match s.recv_from(&mut buf) {
        Ok((n, from)) => Some((buf[..n].to_vec(), v4_of(from))),
        Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => None,
        Err(e) => panic!("udp recv on {:?}: {e}", s.local_addr()),
    }
}

/// A subscriber socket (bound to any port in `ns`) that has sent one datagram to `server`,
/// and the outside endpoint the server saw: a UDP mapping.
pub fn udp_mapping(ns: &str, server: &UdpSocket) -> (UdpSocket, SocketAddrV4) {
    let c = udp_socket(ns, any_port(Ipv4Addr::UNSPECIFIED), Duration::from_secs(3));
    let hello = format!("mapping for {ns}");
    c.send_to(hello.as_bytes(), local_of(server)).unwrap();
    let (d, from) = udp_recv(server).unwrap_or_else(|| panic!("{ns}: the server got nothing"));
    assert_eq!(d, hello.as_bytes());
    assert_pool(from, "source the server saw");
    (c, from)
}

pub fn setsockopt_int(fd: i32, level: i32, name: i32, value: i32) {
    // SAFETY: a valid fd and a pointer to an int of the size passed.
    let rc = unsafe {
        libc::setsockopt(fd, level, name, (&value as *const i32).cast(), std::mem::size_of::<i32>() as u32)
    };
    assert_eq!(rc, 0, "setsockopt({level}, {name}): {}", std::io::Error::last_os_error());
}

/// The Internet checksum of `data` (RFC 1071), with `init` already summed in.
pub fn csum(data: &[u8], init: u32) -> u16 {
    let mut sum = init;
    for c in data.chunks(2) {
        sum += u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)]));
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// The pseudo-header sum of a TCP or UDP segment.
pub fn pseudo_sum(src: Ipv4Addr, dst: Ipv4Addr, proto: u8, len: usize) -> u32 {
    let mut p = Vec::with_capacity(12);
    p.extend_from_slice(&src.octets());
    p.extend_from_slice(&dst.octets());
    p.extend_from_slice(&[0, proto]);
    p.extend_from_slice(&(len as u16).to_be_bytes());
    p.chunks(2).map(|c| u32::from(u16::from_be_bytes([c[0], c[1]]))).sum()
}

/// A UDP header plus payload, checksum over the pseudo-header included.
pub fn udp_datagram(src: SocketAddrV4, dst: SocketAddrV4, payload: &[u8]) -> Vec<u8> {
    let len = 8 + payload.len();
    let mut d = Vec::with_capacity(len);
    d.extend_from_slice(&src.port().to_be_bytes());
    d.extend_from_slice(&dst.port().to_be_bytes());
    d.extend_from_slice(&(len as u16).to_be_bytes());
    d.extend_from_slice(&[0, 0]);
    d.extend_from_slice(payload);
    let mut c = csum(&d, pseudo_sum(*src.ip(), *dst.ip(), 17, len));
    if c == 0 {
        c = 0xffff;
    }
    d[6..8].copy_from_slice(&c.to_be_bytes());
    d
}

/// An IPv4 packet carrying `data` at fragment offset `offset` (bytes, a multiple of 8).
pub fn ip_packet(
    src: Ipv4Addr,
    dst: Ipv4Addr,
    proto: u8,
    id: u16,
    offset: usize,
    more: bool,
    data: &[u8],
) -> Vec<u8> {
    assert_eq!(offset % 8, 0);
    let mut p = vec![0u8; 20];
    p[0] = 0x45;
    p[2..4].copy_from_slice(&((20 + data.len()) as u16).to_be_bytes());
    p[4..6].copy_from_slice(&id.to_be_bytes());
    let frag = ((offset / 8) as u16) | if more { 0x2000 } else { 0 };
    p[6..8].copy_from_slice(&frag.to_be_bytes());
    p[8] = 64;
    p[9] = proto;
    p[12..16].copy_from_slice(&src.octets());
    p[16..20].copy_from_slice(&dst.octets());
    let c = csum(&p, 0);
    p[10..12].copy_from_slice(&c.to_be_bytes());
    p.extend_from_slice(data);
    p
}

/// A UDP datagram from `src` to `dst` as IP fragments of at most `chunk` payload bytes
/// each, first fragment first.
pub fn udp_fragments(
    src: SocketAddrV4,
    dst: SocketAddrV4,
    id: u16,
    payload: &[u8],
    chunk: usize,
) -> Vec<Vec<u8>> {
    assert_eq!(chunk % 8, 0);
    let l4 = udp_datagram(src, dst, payload);
    let mut out = Vec::new();
    let mut off = 0;
    while off < l4.len() {
        let end = (off + chunk).min(l4.len());
        out.push(ip_packet(*src.ip(), *dst.ip(), 17, id, off, end < l4.len(), &l4[off..end]));
        off = end;
    }
    out
}

/// `socket(AF_INET, SOCK_RAW, IPPROTO_RAW)` in `ns` (IP_HDRINCL implied: whole packets,
/// any source address).
pub fn raw_ip_socket(ns: &str) -> OwnedFd {
    socket_in(ns, libc::AF_INET, libc::SOCK_RAW, libc::IPPROTO_RAW)
}

/// Sends a whole IPv4 packet; Err when the kernel refuses it (ENOBUFS under a flood).
pub fn raw_try_send(fd: &OwnedFd, packet: &[u8]) -> std::io::Result<()> {
    let dst: [u8; 4] = packet[16..20].try_into().unwrap();
    let sa = libc::sockaddr_in {
        sin_family: libc::AF_INET as u16,
        sin_port: 0,
        sin_addr: libc::in_addr { s_addr: u32::from_ne_bytes(dst) },
        sin_zero: [0; 8],
    };
    // SAFETY: a valid buffer and sockaddr_in.
    let n = unsafe {
        libc::sendto(
            fd.as_raw_fd(),
            packet.as_ptr().cast(),
            packet.len(),
            0,
            (&sa as *const libc::sockaddr_in).cast(),
            std::mem::size_of::<libc::sockaddr_in>() as u32,
        )
    };
    if n == packet.len() as isize {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

pub fn raw_send(fd: &OwnedFd, packet: &[u8]) {
    raw_try_send(fd, packet).unwrap_or_else(|e| panic!("raw sendto: {e}"));
}
