//! The TCP side channel of `ibv_rc_pingpong` / `ibv_ud_pingpong` (rdma-core
//! `libibverbs/examples/{rc,ud}_pingpong.c`), byte for byte:
//!
//! - one 52-byte message each way: `"LLLL:QQQQQQ:PPPPPP:GGGG…G"` + NUL — LID (4 hex digits),
//!   QPN (6), PSN (6), and the GID as 32 hex digits in byte order (the tools print the four
//!   32-bit words of the GID big-endian, which is the bytes in order);
//! - the client connects, writes its message, reads the server's, writes `"done"` + NUL
//!   (5 bytes) and closes;
//! - the server accepts one connection, reads the client's message, connects its QP (RTR/RTS,
//!   or the UD AH) *before* it answers, writes its own message, then reads the `"done"`.
//!
//! `g_pingpong.pcap` shows exactly this: 52 bytes from the client, 52 back, 5 from the client.

use std::io::{self, Read, Write};
use std::net::{IpAddr, Ipv6Addr, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};

use softrdma_wire::Gid;

/// Bytes of one address message, with its NUL (`sizeof "0000:000000:000000:" + 32`).
pub const MSG_LEN: usize = 52;

/// One side's address: what the message carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dest {
    pub lid: u16,
    pub qpn: u32,
    pub psn: u32,
    pub gid: Gid,
}

impl Dest {
    /// The wire message (52 bytes, NUL-terminated).
    pub fn to_msg(self) -> [u8; MSG_LEN] {
        let mut s = format!(
            "{:04x}:{:06x}:{:06x}:",
            self.lid,
            self.qpn & 0xff_ffff,
            self.psn & 0xff_ffff
        );
        for b in self.gid.0 {
            s.push_str(&format!("{b:02x}"));
        }
        let mut m = [0u8; MSG_LEN];
        let n = s.len().min(MSG_LEN - 1);
        m[..n].copy_from_slice(&s.as_bytes()[..n]);
        m
    }

    /// Parses a message the way the tools' `sscanf("%x:%x:%x:%s")` + `wire_gid_to_gid` do.
    pub fn parse(msg: &[u8]) -> Option<Dest> {
        let end = msg.iter().position(|&b| b == 0).unwrap_or(msg.len());
        let s = std::str::from_utf8(msg.get(..end)?).ok()?;
        let mut it = s.splitn(4, ':');
        let lid = u32::from_str_radix(it.next()?, 16).ok()?;
        let qpn = u32::from_str_radix(it.next()?, 16).ok()?;
        let psn = u32::from_str_radix(it.next()?, 16).ok()?;
        let g = it.next()?;
        if g.len() < 32 {
            return None;
        }
        let mut gid = [0u8; 16];
        for (i, b) in gid.iter_mut().enumerate() {
            *b = u8::from_str_radix(g.get(2 * i..2 * i + 2)?, 16).ok()?;
        }
        Some(Dest {
            lid: lid as u16,
            qpn,
            psn,
            gid: Gid(gid),
        })
    }

    /// The GID as `inet_ntop(AF_INET6)` prints it (`::ffff:10.77.0.1`, `::`).
    pub fn gid_text(&self) -> String {
        Ipv6Addr::from(self.gid.0).to_string()
    }

    /// Whether the tools would build a GRH from it (`gid.global.interface_id != 0`).
    pub fn has_gid(&self) -> bool {
        self.gid.interface_id() != 0
    }
}

/// The client side: returns the server's address and the server's IP as TCP saw it.
pub fn client_exchange(server: &str, port: u16, me: &Dest) -> Result<(Dest, IpAddr), String> {
    let addrs: Vec<SocketAddr> = (server, port)
        .to_socket_addrs()
        .map_err(|e| format!("{e} for {server}:{port}"))?
        .collect();
    let mut stream = None;
    for a in &addrs {
        if let Ok(s) = TcpStream::connect(a) {
            stream = Some(s);
            break;
        }
    }
    let mut s = stream.ok_or_else(|| format!("Couldn't connect to {server}:{port}"))?;
    let peer = s
        .peer_addr()
        .map(|a| a.ip())
        .map_err(|e| format!("Couldn't connect to {server}:{port}: {e}"))?;
    s.write_all(&me.to_msg())
        .map_err(|e| format!("Couldn't send local address: {e}"))?;
    let mut msg = [0u8; MSG_LEN];
    s.read_exact(&mut msg)
        .and_then(|_| s.write_all(b"done\0"))
        .map_err(|e| format!("client read/write: {e}\nCouldn't read/write remote address"))?;
    let rem = Dest::parse(&msg).ok_or("Couldn't parse remote address")?;
    Ok((rem, peer))
}

/// The server's listening socket (bound before the exchange so the caller can announce it).
pub fn listen(port: u16) -> Result<TcpListener, String> {
    // Like getaddrinfo(NULL, AI_PASSIVE): the IPv6 wildcard (dual-stack on Linux) if the host
    // has IPv6, else IPv4. std sets SO_REUSEADDR, as the tools do.
    TcpListener::bind(SocketAddr::new(IpAddr::V6(Ipv6Addr::UNSPECIFIED), port))
        .or_else(|_| TcpListener::bind(SocketAddr::new([0, 0, 0, 0].into(), port)))
        .map_err(|e| format!("Couldn't listen to port {port}: {e}"))
}

/// The server side: accepts one client, reads its address, calls `connect` (which must bring
/// the QP up before the server answers), sends `me`, reads the "done".
pub fn server_exchange(
    listener: TcpListener,
    me: &Dest,
    connect: impl FnOnce(&Dest, IpAddr) -> Result<(), String>,
) -> Result<(Dest, IpAddr), String> {
    let (mut s, peer) = listener
        .accept()
        .map_err(|e| format!("accept() failed: {e}"))?;
    drop(listener);
    let peer = canonical(peer.ip());
    let mut msg = [0u8; MSG_LEN];
    s.read_exact(&mut msg)
        .map_err(|e| format!("server read: {e}\nCouldn't read remote address"))?;
    let rem = Dest::parse(&msg).ok_or("Couldn't parse remote address")?;
    connect(&rem, peer).map_err(|e| format!("{e}\nCouldn't connect to remote QP"))?;
    s.write_all(&me.to_msg())
        .map_err(|e| format!("Couldn't send/recv local address: {e}"))?;
    // The client's "done" (5 bytes); a client that just closes is fine too.
    let mut done = [0u8; MSG_LEN];
    match s.read(&mut done) {
        Ok(_) => {}
        Err(e) if e.kind() == io::ErrorKind::ConnectionReset => {}
        Err(e) => return Err(format!("Couldn't send/recv local address: {e}")),
    }
    Ok((rem, peer))
}

/// An IPv4-mapped IPv6 peer address (dual-stack listener) as the IPv4 address it is.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_match_the_capture() {
        // g_pingpong.pcap, frame 4: the client's message.
        let wire = b"0000:0000df:26588a:00000000000000000000ffff0a4d000b\0";
        assert_eq!(wire.len(), MSG_LEN);
        let d = Dest::parse(wire).expect("parse");
        assert_eq!(d.lid, 0);
        assert_eq!(d.qpn, 0xdf);
        assert_eq!(d.psn, 0x26588a);
        assert_eq!(d.gid_text(), "::ffff:10.77.0.11");
        assert!(d.has_gid());
        assert_eq!(&d.to_msg(), wire);
        let zero = Dest {
            gid: Gid::ZERO,
            ..d
        };
        assert_eq!(zero.gid_text(), "::");
        assert!(!zero.has_gid());
        assert!(Dest::parse(b"garbage").is_none());
        assert!(Dest::parse(b"0000:0000df:26588a:0000").is_none());
    }
}
