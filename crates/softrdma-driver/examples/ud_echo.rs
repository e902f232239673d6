//! UD on the connection API: a datagram socket on each of two endpoints; the server answers
//! SIDR requests on UDP-space port 7174 (as a `udaddy` server), the client resolves it (a
//! SIDR REQ: the server's QPN and Q_Key) and sends; the server answers on the address the
//! datagram came from (`ibv_init_ah_from_wc`).
//!
//! ```text
//! cargo run -p softrdma-driver --example ud_echo -- 127.0.0.1 127.0.0.2
//! ```

use std::net::{IpAddr, SocketAddr};

use softrdma_driver::conn::Endpoint;

/// Runs the echo between a server endpoint on `server` and a client on `client`; returns
/// the client's answer.
pub fn run(server: IpAddr, client: IpAddr) -> Result<Vec<u8>, Box<dyn std::error::Error>> {
    let sep = Endpoint::bind(SocketAddr::new(server, 0))?;
    let ssock = sep.ud_socket()?;
    let _listener = sep.listen_ud(7174, &ssock)?;

    let cep = Endpoint::bind(SocketAddr::new(client, 0))?;
    let csock = cep.ud_socket()?;
    let peer = csock.resolve(SocketAddr::new(server, 7174))?;
    println!(
        "client: the server's QPN {:#x}, Q_Key {:#x}",
        peer.qpn, peer.qkey
    );

    csock.send_to(b"echo me", &peer)?;
    let (data, from) = ssock.recv_from()?;
    println!(
        "server: {:?} from {} (QPN {:#x})",
        String::from_utf8_lossy(&data),
        from.ip(),
        from.qpn
    );
    ssock.send_to(&data.to_ascii_uppercase(), &from)?;
    let (answer, _) = csock.recv_from()?;
    println!("client: {:?}", String::from_utf8_lossy(&answer));
    Ok(answer)
}

#[allow(dead_code)]
fn main() {
    let mut args = std::env::args().skip(1);
    let s = args.next().unwrap_or_else(|| "127.0.0.1".into());
    let c = args.next().unwrap_or_else(|| "127.0.0.2".into());
    let (Ok(s), Ok(c)) = (s.parse(), c.parse()) else {
        eprintln!("usage: ud_echo SERVER_IP CLIENT_IP");
        std::process::exit(2);
    };
    if let Err(e) = run(s, c) {
        eprintln!("ud_echo: {e}");
        std::process::exit(1);
    }
}
