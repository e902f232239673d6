//! The connection API from async code (tokio here; any executor works): a server task and
//! a client in one runtime — accept, SEND both ways, RDMA WRITE, disconnect.
//!
//! ```text
//! cargo run -p softrdma-driver --example conn_async -- 127.0.0.1 127.0.0.2
//! ```

use std::net::{IpAddr, SocketAddr};

use softrdma_driver::conn::{ConnEvent, ConnOptions, Endpoint, RemoteRegion};

/// Runs both sides; returns what the server found in its buffer after the client's WRITE.
pub async fn run(
    server: IpAddr,
    client: IpAddr,
) -> Result<Vec<u8>, Box<dyn std::error::Error + Send + Sync>> {
    let sep = Endpoint::bind(SocketAddr::new(server, 7471))?;
    let listener = sep.listen()?;
    let target = sep.register(64)?;
    let offer = ConnOptions::default().with_private_data(&target.remote().to_bytes());
    let srv = tokio::spawn(async move {
        let conn = listener
            .incoming_async()
            .await?
            .accept_with_async(&offer)
            .await?;
        let m = conn.recv_msg_async().await?;
        conn.send_msg_async(&m).await?;
        let n = conn.recv_msg_async().await?.first().copied().unwrap_or(0) as usize;
        let written = target.to_vec(0..n)?;
        if let ConnEvent::Disconnected { .. } = conn.next_event_async().await {
            conn.disconnect_async().await?;
        }
        Ok::<_, softrdma_driver::conn::ConnError>(written)
    });

    let cep = Endpoint::bind(SocketAddr::new(client, 0))?;
    let conn = cep.connect_async(SocketAddr::new(server, 7471)).await?;
    let remote =
        RemoteRegion::from_bytes(conn.peer_private_data()).ok_or("no buffer in the REP")?;
    conn.send_msg_async(b"async hello").await?;
    let echo = conn.recv_msg_async().await?;
    println!("client: echo {:?}", String::from_utf8_lossy(&echo));
    let src = cep.register(16)?;
    src.write_at(0, b"async write")?;
    conn.write_async(&src, 0..11, &remote, 0).await?;
    conn.send_msg_async(&[11]).await?;
    conn.disconnect_async().await?;
    let written = srv.await??;
    println!("server: found {:?}", String::from_utf8_lossy(&written));
    Ok(written)
}

#[allow(dead_code)]
fn main() {
    let mut args = std::env::args().skip(1);
    let s = args.next().unwrap_or_else(|| "127.0.0.1".into());
    let c = args.next().unwrap_or_else(|| "127.0.0.2".into());
    let (Ok(s), Ok(c)) = (s.parse(), c.parse()) else {
        eprintln!("usage: conn_async SERVER_IP CLIENT_IP");
        std::process::exit(2);
    };
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_time()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("conn_async: {e}");
            std::process::exit(1);
        }
    };
    if let Err(e) = rt.block_on(run(s, c)) {
        eprintln!("conn_async: {e}");
        std::process::exit(1);
    }
}
