//! A client on the connection API (`softrdma_driver::conn`): connect with private data,
//! SEND a message and receive the answer, RDMA WRITE into the buffer the server offered in
//! its REP, READ it back, tell the server, disconnect. See `conn_server` for how to run both.

use std::net::{IpAddr, SocketAddr};

use softrdma_driver::conn::{ConnOptions, Endpoint, RemoteRegion};

/// What the client got: the server's answer and what it READ back after its WRITE.
#[derive(Debug, PartialEq, Eq)]
pub struct Got {
    pub reply: Vec<u8>,
    pub read_back: Vec<u8>,
}

/// The bytes the client RDMA WRITEs.
pub const WRITTEN: &[u8] = b"written by the client's RDMA WRITE";

/// Connects from `local` to the server at `server`.
pub fn run(server: SocketAddr, local: IpAddr) -> Result<Got, Box<dyn std::error::Error>> {
    let ep = Endpoint::bind(SocketAddr::new(local, 0))?;
    let opts = ConnOptions::default().with_private_data(b"hello from the client");
    let conn = ep.connect_with(server, &opts)?;
    let text = |a: Option<SocketAddr>| a.map_or_else(|| "(unknown)".to_string(), |a| a.to_string());
    println!(
        "client: connected {} -> {}",
        text(conn.local_addr()),
        text(conn.remote_addr())
    );
    let remote =
        RemoteRegion::from_bytes(conn.peer_private_data()).ok_or("the REP carries no buffer")?;

    // SEND both ways.
    conn.send_msg(b"ping from the client")?;
    let reply = conn.recv_msg()?;
    println!("client: got {:?}", String::from_utf8_lossy(&reply));

    // RDMA WRITE into the server's buffer, READ it back, then tell the server (a SEND: a
    // WRITE alone completes nothing on the server's side).
    let src = ep.register(WRITTEN.len())?;
    src.write_at(0, WRITTEN)?;
    conn.write(&src, 0..WRITTEN.len(), &remote, 0)?;
    let back = ep.register(WRITTEN.len())?;
    conn.read(&back, 0..WRITTEN.len(), &remote, 0)?;
    let read_back = back.to_vec(0..WRITTEN.len())?;
    conn.send_msg(&[WRITTEN.len() as u8])?;

    conn.disconnect()?;
    println!("client: disconnected");
    Ok(Got { reply, read_back })
}

#[allow(dead_code)]
fn main() {
    let mut args = std::env::args().skip(1);
    let server = args.next().unwrap_or_else(|| "127.0.0.1:7471".into());
    let local = args.next().unwrap_or_else(|| "127.0.0.2".into());
    let (Ok(server), Ok(local)) = (server.parse::<SocketAddr>(), local.parse::<IpAddr>()) else {
        eprintln!("usage: conn_client SERVER:PORT LOCAL_IP");
        std::process::exit(2);
    };
    if let Err(e) = run(server, local) {
        eprintln!("conn_client: {e}");
        std::process::exit(1);
    }
}
