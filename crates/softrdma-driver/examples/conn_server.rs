//! A server on the connection API (`softrdma_driver::conn`): accept one connection, offer a
//! buffer for the client's RDMA WRITE in the REP's private data, answer its message, read
//! what it wrote, and answer its disconnect.
//!
//! ```text
//! cargo run -p softrdma-driver --example conn_server -- 127.0.0.1:7471
//! cargo run -p softrdma-driver --example conn_client -- 127.0.0.1:7471 127.0.0.2
//! ```
//!
//! `tests/conn.rs` runs this and `conn_client` against each other on loopback.

use std::net::SocketAddr;
use std::time::Duration;

use softrdma_driver::conn::{ConnEvent, ConnOptions, Endpoint};

/// What the server saw: the client's REQ data, its message, and what it RDMA WROTE.
#[derive(Debug, PartialEq, Eq)]
pub struct Seen {
    pub hello: Vec<u8>,
    pub message: Vec<u8>,
    pub written: Vec<u8>,
}

/// Serves one connection on `addr`; `ready` is called with the address once listening.
pub fn run(
    addr: SocketAddr,
    ready: impl FnOnce(SocketAddr),
) -> Result<Seen, Box<dyn std::error::Error>> {
    let ep = Endpoint::bind(addr)?;
    let listener = ep.listen()?;
    ready(listener.local_addr());

    // The request, before deciding: who, and what its REQ says.
    let incoming = listener.incoming(Duration::from_secs(30))?;
    let hello = until_nul(incoming.private_data());
    println!(
        "server: request from {}: {:?}",
        incoming
            .remote_addr()
            .map_or_else(|| "(unknown)".to_string(), |a| a.to_string()),
        String::from_utf8_lossy(&hello)
    );

    // A buffer the client may write into; its address, rkey and length go in the REP.
    let target = ep.register(256)?;
    let rep = ConnOptions::default().with_private_data(&target.remote().to_bytes());
    let conn = incoming.accept_with(&rep)?;

    // SEND both ways.
    let message = conn.recv_msg()?;
    println!("server: got {:?}", String::from_utf8_lossy(&message));
    conn.send_msg(b"pong from the server")?;

    // The client RDMA WRITEs into `target` (no receive, no event here), then says so.
    let note = conn.recv_msg()?;
    let n = note.first().copied().unwrap_or(0) as usize;
    let written = target.to_vec(0..n)?;
    println!(
        "server: the client wrote {:?}",
        String::from_utf8_lossy(&written)
    );

    // The client disconnects: DISCONNECTED, answered with our DREP.
    match conn.next_event(Duration::from_secs(30)) {
        Some(ConnEvent::Disconnected { .. }) => conn.disconnect()?,
        other => return Err(format!("expected DISCONNECTED, got {other:?}").into()),
    }
    println!("server: disconnected");
    Ok(Seen {
        hello,
        message,
        written,
    })
}

fn until_nul(b: &[u8]) -> Vec<u8> {
    b.iter().take_while(|&&c| c != 0).copied().collect()
}

#[allow(dead_code)]
fn main() {
    let addr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:7471".into());
    let addr: SocketAddr = match addr.parse() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("conn_server: {addr}: {e} (give ADDR:PORT)");
            std::process::exit(2);
        }
    };
    match run(addr, |a| println!("server: listening on {a}")) {
        Ok(_) => {}
        Err(e) => {
            eprintln!("conn_server: {e}");
            std::process::exit(1);
        }
    }
}
