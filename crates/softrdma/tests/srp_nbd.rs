//! `softrdma srp nbd` against `softrdma srpt` on loopback: the NBD clients storage people use
//! (`qemu-img convert`, `nbdcopy`, fio's nbd engine) move data through it intact, and
//! malformed NBD input is answered as the protocol says (or the connection closed), never
//! a crash: the server keeps serving other clients afterwards.
//!
//! The target is started with an explicit ACL for the initiator's address (`--allow`), so
//! these tests keep working with a target that is closed by default.
//!
//! Needs `qemu-img` (Debian: qemu-utils), `nbdcopy` (libnbd-bin) and `fio` built with its
//! nbd engine (fio); CI installs them (`.ci/run`). A missing one fails the test saying so.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use softrdma_wire::nbd::{
    Cmd, Errno, GreetingRepr, InfoRepr, InfoRequestRepr, InfoType, OptionCode, OptionReplyRepr,
    OptionRepr, ReplyType, RequestRepr, SimpleReplyRepr, CLIENT_FIXED_NEWSTYLE, CLIENT_NO_ZEROES,
};

/// A child process killed (SIGTERM) and reaped when dropped.
struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = Command::new("kill").arg(self.0.id().to_string()).status();
        let _ = self.0.wait();
    }
}

/// Reads the child's stdout until a line holding `marker` (what follows it), at most a minute;
/// the rest of its output is drained.
fn wait_line(p: &mut Proc, marker: &str) -> String {
    let out = p.0.stdout.take().expect("stdout");
    common::line_after(out, marker, Duration::from_secs(60))
        .unwrap_or_else(|e| panic!("no {marker:?} line (within a minute): {e}"))
}

/// `softrdma srpt` with a 64 MiB memory LUN on `addr`, allowing `ini` only; and `softrdma
/// srp nbd` logged in to it from `ini`, on a free TCP port. Returns both and the NBD URI.
fn export(addr: &str, ini: &str) -> (Proc, Proc, String) {
    export_on(addr, ini, &["--listen", "127.0.0.1:0"])
}

/// [`export`] listening where `listen` says.
fn export_on(addr: &str, ini: &str, listen: &[&str]) -> (Proc, Proc, String) {
    let t = Command::new(env!("CARGO_BIN_EXE_softrdma"))
        .args(["srpt", "-a", addr, "--lun", "mem:64M", "--allow", ini])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn srpt");
    let mut t = Proc(t);
    let line = wait_line(&mut t, "add_target: ");
    assert!(!line.is_empty(), "srpt printed no add_target line");
    let n = Command::new(env!("CARGO_BIN_EXE_softrdma"))
        .args([
            "srp",
            "nbd",
            &format!("{line},src={ini}"),
            "--login-timeout",
            "10",
        ])
        .args(listen)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn srp nbd");
    let mut n = Proc(n);
    let uri = wait_line(&mut n, "exported as ");
    assert!(uri.starts_with("nbd"), "no export line: {uri:?}");
    (t, n, uri)
}

/// Runs a client tool; a missing tool is a failure that says what to install.
fn tool(prog: &str, package: &str, args: &[&str]) -> std::process::Output {
    match Command::new(prog).args(args).output() {
        Ok(o) => o,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            panic!(
                "{prog} is not installed: `apt-get install {package}` (CI installs it in .ci/run)"
            )
        }
        Err(e) => panic!("{prog}: {e}"),
    }
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Deterministic, non-repeating bytes (a block copied to the wrong place shows).
fn pattern(n: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

#[test]
fn qemu_img_nbdcopy_and_fio_through_srp_nbd() {
    let (_t, _n, uri) = export("127.0.86.1", "127.0.86.2");
    let dir = std::env::temp_dir().join(format!("softrdma-srp-nbd-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("tmp dir");
    let img = dir.join("img.raw");
    let back = dir.join("back.raw");
    let mut data = pattern(64 << 20, 25);
    // A zeroed 4 MiB stretch: qemu-img sends it as NBD_CMD_WRITE_ZEROES.
    data[8 << 20..12 << 20].fill(0);
    std::fs::write(&img, &data).expect("write image");
    let (i, b) = (img.to_str().unwrap(), back.to_str().unwrap());

    // Onto the LUN and back with qemu-img (-n: the export exists; write it, do not create).
    let o = tool(
        "qemu-img",
        "qemu-utils",
        &["convert", "-n", "-f", "raw", "-O", "raw", i, &uri],
    );
    assert!(
        o.status.success(),
        "qemu-img to the LUN: {}",
        text(&o.stderr)
    );
    let o = tool(
        "qemu-img",
        "qemu-utils",
        &["convert", "-f", "raw", "-O", "raw", &uri, b],
    );
    assert!(
        o.status.success(),
        "qemu-img from the LUN: {}",
        text(&o.stderr)
    );
    assert!(
        std::fs::read(&back).expect("back") == data,
        "qemu-img: the image came back different"
    );

    // nbdcopy the other way round: a different image, so that stale data cannot pass.
    let data2 = pattern(64 << 20, 4791);
    std::fs::write(&img, &data2).expect("write image");
    let _ = std::fs::remove_file(&back);
    let o = tool("nbdcopy", "libnbd-bin", &[i, &uri]);
    assert!(
        o.status.success(),
        "nbdcopy to the LUN: {}",
        text(&o.stderr)
    );
    let o = tool("nbdcopy", "libnbd-bin", &[&uri, b]);
    assert!(
        o.status.success(),
        "nbdcopy from the LUN: {}",
        text(&o.stderr)
    );
    assert!(
        std::fs::read(&back).expect("back") == data2,
        "nbdcopy: the image came back different"
    );

    // fio's nbd engine, a verified random workload at queue depth 16.
    let o = tool(
        "fio",
        "fio",
        &[
            "--name=nbdverify",
            "--ioengine=nbd",
            &format!("--uri={uri}"),
            "--rw=randwrite",
            "--bs=4k",
            "--iodepth=16",
            "--size=8m",
            "--verify=crc32c",
            "--do_verify=1",
            "--verify_fatal=1",
            // No verify state file left in the working directory.
            "--verify_state_save=0",
            "--output-format=json",
        ],
    );
    let out = text(&o.stdout);
    assert!(o.status.success(), "fio: {}{out}", text(&o.stderr));
    let j: serde_json::Value = serde_json::from_str(&out[out.find('{').unwrap_or(0)..])
        .unwrap_or_else(|e| panic!("fio json: {e}: {out}"));
    let job = &j["jobs"][0];
    assert_eq!(job["error"], 0, "{job}");
    // Every block written was read back and checked.
    assert_eq!(job["read"]["io_bytes"], 8 << 20, "{job}");
    assert_eq!(job["write"]["io_bytes"], 8 << 20, "{job}");
    let _ = std::fs::remove_dir_all(&dir);
}

// -------------------------------------------------------------------------------------
// The protocol by hand
// -------------------------------------------------------------------------------------

fn connect(uri: &str) -> TcpStream {
    let hp = uri.trim_start_matches("nbd://");
    let hp = &hp[..hp.find('/').unwrap_or(hp.len())];
    let s = TcpStream::connect(hp).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    s
}

fn greet(s: &mut TcpStream) {
    let mut g = [0u8; 18];
    s.read_exact(&mut g).expect("greeting");
    GreetingRepr::parse(&g).expect("greeting parses");
    s.write_all(&(CLIENT_FIXED_NEWSTYLE | CLIENT_NO_ZEROES).to_be_bytes())
        .expect("flags");
}

fn option(s: &mut TcpStream, o: OptionCode, data: &[u8]) {
    let mut m = OptionRepr {
        option: o,
        length: data.len() as u32,
    }
    .to_bytes();
    m.extend_from_slice(data);
    s.write_all(&m).expect("option");
}

fn opt_reply(s: &mut TcpStream) -> (OptionReplyRepr, Vec<u8>) {
    let mut h = [0u8; 20];
    s.read_exact(&mut h).expect("option reply");
    let r = OptionReplyRepr::parse(&h).expect("option reply parses");
    let mut d = vec![0u8; r.length as usize];
    s.read_exact(&mut d).expect("option reply data");
    (r, d)
}

/// After `GO`: the export's size and block size, and the stream in transmission.
fn go(s: &mut TcpStream, name: &[u8]) -> (u64, u32) {
    let req = InfoRequestRepr {
        name: name.to_vec(),
        requests: vec![InfoType::BLOCK_SIZE],
    };
    option(s, OptionCode::GO, &req.to_bytes());
    let (mut size, mut bs) = (0, 0);
    loop {
        let (r, d) = opt_reply(s);
        match r.reply {
            ReplyType::INFO => match InfoRepr::parse(&d).expect("info parses") {
                InfoRepr::Export { size: z, .. } => size = z,
                InfoRepr::BlockSize { min, .. } => bs = min,
                InfoRepr::Text { .. } => {}
            },
            ReplyType::ACK => return (size, bs),
            other => panic!("GO answered {other}"),
        }
    }
}

fn request(s: &mut TcpStream, cmd: Cmd, handle: u64, offset: u64, length: u32, data: &[u8]) {
    let mut m = RequestRepr {
        flags: 0,
        cmd,
        handle,
        offset,
        length,
    }
    .to_bytes();
    m.extend_from_slice(data);
    s.write_all(&m).expect("request");
}

fn reply(s: &mut TcpStream) -> SimpleReplyRepr {
    let mut h = [0u8; 16];
    s.read_exact(&mut h).expect("reply");
    SimpleReplyRepr::parse(&h).expect("reply parses")
}

/// The connection was closed by the server (EOF, or a reset).
fn closed(s: &mut TcpStream) -> bool {
    let mut b = [0u8; 1];
    matches!(s.read(&mut b), Ok(0) | Err(_))
}

#[test]
fn malformed_nbd_input_is_refused_per_the_protocol() {
    let (_t, _n, uri) = export("127.0.87.1", "127.0.87.2");

    // Handshake: bad option data, an unknown export, an unknown option, LIST.
    let mut s = connect(&uri);
    greet(&mut s);
    option(&mut s, OptionCode::GO, &[0xff, 0xff, 0xff, 0xff, 0, 0]);
    assert_eq!(opt_reply(&mut s).0.reply, ReplyType::ERR_INVALID);
    let bad_count = {
        let mut b = InfoRequestRepr::default().to_bytes();
        b[5] = 3; // three info requests promised, none there
        b
    };
    option(&mut s, OptionCode::INFO, &bad_count);
    assert_eq!(opt_reply(&mut s).0.reply, ReplyType::ERR_INVALID);
    let unknown = InfoRequestRepr {
        name: b"nonesuch".to_vec(),
        requests: vec![],
    };
    option(&mut s, OptionCode::GO, &unknown.to_bytes());
    assert_eq!(opt_reply(&mut s).0.reply, ReplyType::ERR_UNKNOWN);
    option(&mut s, OptionCode(0x4242), b"junk");
    assert_eq!(opt_reply(&mut s).0.reply, ReplyType::ERR_UNSUP);
    option(&mut s, OptionCode::STRUCTURED_REPLY, &[]);
    assert_eq!(opt_reply(&mut s).0.reply, ReplyType::ERR_UNSUP);
    option(&mut s, OptionCode::LIST, &[]);
    let (r, d) = opt_reply(&mut s);
    assert_eq!(r.reply, ReplyType::SERVER);
    assert_eq!(&d[4..], b"srp");
    assert_eq!(opt_reply(&mut s).0.reply, ReplyType::ACK);

    // Transmission: the named export is the default one too.
    let (size, bs) = go(&mut s, b"srp");
    assert_eq!((size, bs), (64 << 20, 512));
    let blk = pattern(4096, 7);
    request(&mut s, Cmd::WRITE, 1, 1 << 20, 4096, &blk);
    assert_eq!(
        reply(&mut s),
        SimpleReplyRepr {
            error: Errno::OK,
            handle: 1
        }
    );
    request(&mut s, Cmd::READ, 2, 1 << 20, 4096, &[]);
    assert_eq!(
        reply(&mut s),
        SimpleReplyRepr {
            error: Errno::OK,
            handle: 2
        }
    );
    let mut got = vec![0u8; 4096];
    s.read_exact(&mut got).expect("read data");
    assert!(got == blk, "read back differs");
    // WRITE_ZEROES, then the block reads as zeros; TRIM and FLUSH succeed.
    request(&mut s, Cmd::WRITE_ZEROES, 3, 1 << 20, 4096, &[]);
    assert_eq!(reply(&mut s).error, Errno::OK);
    request(&mut s, Cmd::READ, 4, 1 << 20, 4096, &[]);
    assert_eq!(reply(&mut s).error, Errno::OK);
    s.read_exact(&mut got).expect("read data");
    assert!(got.iter().all(|&b| b == 0), "WRITE_ZEROES left data");
    request(&mut s, Cmd::TRIM, 5, 0, 65536, &[]);
    assert_eq!(reply(&mut s).error, Errno::OK);
    request(&mut s, Cmd::FLUSH, 6, 0, 0, &[]);
    assert_eq!(reply(&mut s).error, Errno::OK);
    // Unaligned, past the end, an unknown command, too large: EINVAL/ENOSPC, and the
    // connection goes on (a write's payload is consumed).
    request(&mut s, Cmd::READ, 7, 100, 512, &[]);
    assert_eq!(
        reply(&mut s),
        SimpleReplyRepr {
            error: Errno::EINVAL,
            handle: 7
        }
    );
    request(&mut s, Cmd::READ, 8, size - 512, 1024, &[]);
    assert_eq!(reply(&mut s).error, Errno::EINVAL);
    request(&mut s, Cmd::WRITE, 9, size, 512, &[0u8; 512]);
    assert_eq!(reply(&mut s).error, Errno::ENOSPC);
    request(&mut s, Cmd::READ, 10, u64::MAX - 511, 512, &[]);
    assert_eq!(reply(&mut s).error, Errno::EINVAL);
    request(&mut s, Cmd(77), 11, 0, 0, &[]);
    assert_eq!(reply(&mut s).error, Errno::EINVAL);
    request(&mut s, Cmd::READ, 12, 0, 64 << 20, &[]);
    assert_eq!(reply(&mut s).error, Errno::EINVAL);
    request(&mut s, Cmd::WRITE, 13, 0, 513, &[1u8; 513]);
    assert_eq!(reply(&mut s).error, Errno::EINVAL);
    request(&mut s, Cmd::READ, 14, 1 << 20, 512, &[]);
    assert_eq!(reply(&mut s).error, Errno::OK);
    s.read_exact(&mut got[..512]).expect("read data");
    // A wrong request magic: nothing to answer; the connection is closed.
    s.write_all(&[0u8; 28]).expect("garbage");
    assert!(closed(&mut s), "a bad magic left the connection open");

    // A bad option magic, unknown client flags, a huge option: closed too.
    let mut s = connect(&uri);
    greet(&mut s);
    s.write_all(&[0x55u8; 16]).expect("garbage");
    assert!(closed(&mut s));
    let mut s = connect(&uri);
    let mut g = [0u8; 18];
    s.read_exact(&mut g).expect("greeting");
    s.write_all(&0x8000_0000u32.to_be_bytes()).expect("flags");
    assert!(closed(&mut s));
    let mut s = connect(&uri);
    greet(&mut s);
    s.write_all(
        &OptionRepr {
            option: OptionCode::GO,
            length: u32::MAX,
        }
        .to_bytes(),
    )
    .expect("option");
    assert!(closed(&mut s));
    // A client that hangs up half way through a request.
    let mut s = connect(&uri);
    greet(&mut s);
    go(&mut s, b"");
    s.write_all(&[0x25, 0x60, 0x95]).expect("half");
    drop(s);

    // ABORT is acknowledged; and after all that, two clients at once still get their data.
    let mut s = connect(&uri);
    greet(&mut s);
    option(&mut s, OptionCode::ABORT, &[]);
    assert_eq!(opt_reply(&mut s).0.reply, ReplyType::ACK);
    let mut a = connect(&uri);
    let mut b = connect(&uri);
    greet(&mut a);
    greet(&mut b);
    go(&mut a, b"");
    go(&mut b, b"srp");
    let da = pattern(8192, 1);
    let db = pattern(8192, 2);
    request(&mut a, Cmd::WRITE, 1, 2 << 20, 8192, &da);
    request(&mut b, Cmd::WRITE, 1, 3 << 20, 8192, &db);
    assert_eq!(reply(&mut a).error, Errno::OK);
    assert_eq!(reply(&mut b).error, Errno::OK);
    request(&mut a, Cmd::READ, 2, 3 << 20, 8192, &[]);
    request(&mut b, Cmd::READ, 2, 2 << 20, 8192, &[]);
    let mut ga = vec![0u8; 8192];
    let mut gb = vec![0u8; 8192];
    assert_eq!(reply(&mut a).error, Errno::OK);
    a.read_exact(&mut ga).expect("a");
    assert_eq!(reply(&mut b).error, Errno::OK);
    b.read_exact(&mut gb).expect("b");
    assert!(
        ga == db && gb == da,
        "each client reads what the other wrote"
    );
    request(&mut a, Cmd::DISC, 3, 0, 0, &[]);
    assert!(closed(&mut a), "DISC did not close");
}

#[test]
fn a_unix_socket_export_for_nbdcopy() {
    let dir = std::env::temp_dir().join(format!("softrdma-srp-nbd-unix-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("tmp dir");
    let sock = dir.join("srp.sock");
    let (_t, _n, uri) = export_on(
        "127.0.91.1",
        "127.0.91.2",
        &["--unix", sock.to_str().unwrap(), "--export-name", "disk"],
    );
    assert_eq!(uri, format!("nbd+unix:///disk?socket={}", sock.display()));
    let img = dir.join("in.raw");
    let back = dir.join("out.raw");
    let data = pattern(4 << 20, 91);
    std::fs::write(&img, &data).expect("image");
    // nbdcopy copies the whole export: a 4 MiB image onto the first 4 MiB, then that back.
    let o = tool(
        "nbdcopy",
        "libnbd-bin",
        &[img.to_str().unwrap(), &uri, "--destination-is-zero"],
    );
    assert!(o.status.success(), "{}", text(&o.stderr));
    let o = tool("nbdcopy", "libnbd-bin", &[&uri, back.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let got = std::fs::read(&back).expect("back");
    assert_eq!(got.len(), 64 << 20);
    assert!(got[..4 << 20] == data[..], "the image came back different");
    let _ = std::fs::remove_dir_all(&dir);
}
