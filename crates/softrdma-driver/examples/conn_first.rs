//! The README's first example ("Connections from Rust") as a program: a server thread and a
//! client in one process, on loopback. `connect` and `accept` each block until the other
//! side answers, so the two sides need two threads (or two processes: `conn_server` and
//! `conn_client`); read top to bottom in one thread, the connect would wait for an accept
//! that never comes.
//!
//! ```text
//! cargo run -p softrdma-driver --example conn_first
//! ```
//!
//! `tests/conn.rs` runs it (on other loopback addresses), and `crates/softrdma/tests/
//! newcomer.rs` checks that the README's snippet is this file's code.

use std::net::{IpAddr, SocketAddr};
use std::thread;
use std::time::Duration;

use softrdma_driver::conn::{ConnError, Endpoint};

/// A server thread on `server` echoes one message from a client on `client`; returns the
/// echo.
pub fn run(server: SocketAddr, client: IpAddr) -> Result<Vec<u8>, Box<dyn std::error::Error>> {
    // The server: its own endpoint (a device on the server's address, UDP port 4791) and a
    // listener on the RDMA CM port; accept blocks, so it runs on its own thread.
    let server_ep = Endpoint::bind(server)?;
    let listener = server_ep.listen()?;
    let server_thread = thread::spawn(move || -> Result<(), ConnError> {
        let conn = listener.accept()?; // REQ in, REP out, RTU in
        let msg = conn.recv_msg()?; // the client's SEND
        conn.send_msg(&msg)?; // echoed back
        conn.next_event(Duration::from_secs(30)); // DISCONNECTED: the client hung up
        conn.disconnect() // DREP
    });

    // The client: an endpoint on another address, then the connection.
    let ep = Endpoint::bind(SocketAddr::new(client, 0))?;
    let conn = ep.connect(server)?; // REQ / REP / RTU, as librdmacm would
    conn.send_msg(b"ping")?; // RC SEND, waits for the ACK
    let reply = conn.recv_msg()?; // into the connection's receive ring
    conn.disconnect()?; // DREQ, waits for DISCONNECTED
    server_thread
        .join()
        .map_err(|_| "the server thread panicked")??;
    Ok(reply)
}

#[allow(dead_code)]
fn main() -> Result<(), Box<dyn std::error::Error>> {
    let server: SocketAddr = "127.0.0.1:7471".parse()?;
    let client: IpAddr = "127.0.0.2".parse()?;
    let reply = run(server, client)?;
    println!("client: got {:?} back", String::from_utf8_lossy(&reply));
    Ok(())
}
