//! `softrdma srpt`: argument refusals, the startup lines (GUID, add_target) and a clean exit
//! on SIGTERM, on a loopback address.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn srpt(args: &[&str]) -> std::process::Output {
    common::output(
        Command::new(env!("CARGO_BIN_EXE_softrdma"))
            .arg("srpt")
            .args(args),
    )
}

#[test]
fn refusals_are_one_line() {
    for (args, want) in [
        (&["-a", "127.0.83.1"][..], "give at least one LUN"),
        (&["--lun", "mem:1M"][..], "give the address to listen on"),
        (&["-a", "127.0.83.1", "--lun", "mem:1X"][..], "not a size"),
        (
            &["-a", "127.0.83.1", "--lun", "disk:1M"][..],
            "expected mem:SIZE or file:PATH",
        ),
        (
            &["-a", "127.0.83.1", "--lun", "mem:1M", "--guid", "12"][..],
            "16 hex digits",
        ),
        (
            &["-a", "127.0.83.1", "--lun", "mem:1M", "--allow", "nobody"][..],
            "port identifier",
        ),
        (
            &[
                "-a",
                "127.0.83.1",
                "--lun",
                "mem:1M",
                "--max-req-size",
                "100",
            ][..],
            "at least 996",
        ),
    ] {
        let o = srpt(args);
        assert_eq!(o.status.code(), Some(1), "{args:?}");
        let e = String::from_utf8_lossy(&o.stderr);
        assert!(e.contains(want), "{args:?}: {e}");
        assert_eq!(e.trim_end().lines().count(), 1, "{args:?}: {e}");
    }
}

#[test]
fn prints_add_target_and_exits_0_on_sigterm() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_softrdma"))
        .args([
            "srpt",
            "-a",
            "127.0.83.2",
            "--guid",
            "5054:00ff:fe77:0001",
            "--lun",
            "mem:4M",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn");
    let out = child.stdout.take().expect("stdout");
    let mut lines = BufReader::new(out).lines();
    let first = lines.next().expect("line").expect("utf8");
    assert_eq!(first, "target GUID 505400fffe770001 (5054:00ff:fe77:0001)");
    let second = lines.next().expect("line").expect("utf8");
    assert_eq!(
        second,
        "add_target: id_ext=505400fffe770001,ioc_guid=505400fffe770001,dest=127.0.83.2:5555"
    );
    let st = Command::new("kill")
        .arg(child.id().to_string())
        .status()
        .expect("kill");
    assert!(st.success());
    let end = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(s) = child.try_wait().expect("wait") {
            assert_eq!(s.code(), Some(0));
            break;
        }
        assert!(Instant::now() < end, "srpt did not exit after SIGTERM");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A target serving until dropped (SIGTERM, then waited for); its add_target line.
struct Serving {
    child: std::process::Child,
    line: String,
}

impl Serving {
    fn start(args: &[&str]) -> Serving {
        let mut child = Command::new(env!("CARGO_BIN_EXE_softrdma"))
            .arg("srpt")
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn");
        let out = child.stdout.take().expect("stdout");
        // Stopped when dropped, should the wait for its line fail too; its stdout is read on
        // after the line (a closed pipe would end the target).
        let mut s = Serving {
            child,
            line: String::new(),
        };
        s.line = common::add_target_line(out);
        s
    }
}

impl Drop for Serving {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .arg(self.child.id().to_string())
            .status();
        let _ = self.child.wait();
    }
}

fn login(target: &str, src: &str) -> std::process::Output {
    common::output(Command::new(env!("CARGO_BIN_EXE_softrdma")).args([
        "srp",
        "login",
        &format!("{target},src={src}"),
        "--login-timeout",
        "20",
    ]))
}

/// Closed by default, as LIO: no ACL, every login refused with reason 0x00010006; an ACL
/// entry (the initiator's address, or its port identifier in the short form) lets it in,
/// and so does --demo.
#[test]
fn closed_by_default_allow_and_demo() {
    let t = Serving::start(&["-a", "127.0.84.1", "--lun", "mem:1M"]);
    let o = login(&t.line, "127.0.84.2");
    assert_eq!(o.status.code(), Some(1));
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(e.contains("0x00010006"), "{e}");
    drop(t);
    let t = Serving::start(&[
        "-a",
        "127.0.84.1",
        "--lun",
        "mem:1M",
        "--allow",
        "127.0.84.9",
        "--allow",
        "127.0.84.2",
    ]);
    let o = login(&t.line, "127.0.84.2");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let o = login(&t.line, "127.0.84.3");
    assert_eq!(o.status.code(), Some(1));
    drop(t);
    let t = Serving::start(&["-a", "127.0.84.1", "--lun", "mem:1M", "--demo"]);
    let o = login(&t.line, "127.0.84.3");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

fn ctl(socket: &str, words: &[&str]) -> std::process::Output {
    common::output(
        Command::new(env!("CARGO_BIN_EXE_softrdma"))
            .args(["srpt", "ctl", socket])
            .args(words),
    )
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// `softrdma srpt ctl`: LUNs added and removed while the target serves (a login sees the
/// new LUN), and an ACL entry removed ends that initiator's session.
#[test]
fn ctl_luns_and_acl_while_serving() {
    let dir = std::env::temp_dir().join(format!("softrdma-srpt-ctl-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let sock = dir.join("ctl.sock");
    let s = sock.to_str().expect("path");
    let t = Serving::start(&[
        "-a",
        "127.0.85.1",
        "--lun",
        "mem:4M",
        "--allow",
        "127.0.85.2",
        "--ctl",
        s,
    ]);
    let o = ctl(s, &["show"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let out = text(&o.stdout);
    assert!(out.contains("lun 0: 8192 blocks of 512 bytes"), "{out}");
    assert!(out.contains("acl: 127.0.85.2"), "{out}");
    // A LUN added while serving is there at the next login.
    let o = ctl(s, &["lun", "add", "3", "mem:1M"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let o = login(&t.line, "127.0.85.2");
    assert!(o.status.success(), "{}", text(&o.stderr));
    let out = text(&o.stdout);
    assert!(out.contains("LUN 3:"), "{out}");
    assert!(ctl(s, &["lun", "remove", "3"]).status.success());
    assert!(!text(&ctl(s, &["show"]).stdout).contains("lun 3"));
    // Refusals: exit 1, one line.
    for bad in [
        &["lun", "remove", "9"][..],
        &["lun", "add", "0", "mem:1M"],
        &["frobnicate"],
    ] {
        let o = ctl(s, bad);
        assert_eq!(o.status.code(), Some(1), "{bad:?}");
        assert_eq!(text(&o.stderr).trim_end().lines().count(), 1, "{bad:?}");
    }
    // A session running a workload; removing its ACL entry ends it.
    let mut bench = Command::new(env!("CARGO_BIN_EXE_softrdma"))
        .args([
            "srp",
            "bench",
            &format!("{},src=127.0.85.2", t.line),
            "--rw",
            "randread",
            "--bs",
            "4k",
            "--iodepth",
            "4",
            "--runtime",
            "30",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("bench");
    let end = Instant::now() + Duration::from_secs(20);
    while !text(&ctl(s, &["show"]).stdout).contains("channel") {
        assert!(Instant::now() < end, "no session");
        std::thread::sleep(Duration::from_millis(100));
    }
    let o = ctl(s, &["acl", "remove", "127.0.85.2"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(
        text(&o.stdout).contains("logged out"),
        "{}",
        text(&o.stdout)
    );
    assert!(
        !text(&o.stdout).contains(" 0 channel"),
        "{}",
        text(&o.stdout)
    );
    let end = Instant::now() + Duration::from_secs(20);
    loop {
        if bench.try_wait().expect("wait").is_some() {
            break;
        }
        assert!(Instant::now() < end, "the session did not end");
        std::thread::sleep(Duration::from_millis(100));
    }
    // And the initiator cannot log in again.
    assert_eq!(login(&t.line, "127.0.85.2").status.code(), Some(1));
    drop(t);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A node ACL with mapped LUNs (`[[node_acl]]` in --config): the initiator sees its own LUN
/// numbers; another initiator admitted by `--allow` sees the target's.
#[test]
fn node_acl_mapped_luns() {
    let dir = std::env::temp_dir().join(format!("softrdma-srpt-nacl-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let cfg = dir.join("t.toml");
    std::fs::write(
        &cfg,
        "[[lun]]\nmem = \"1M\"\n[[lun]]\nmem = \"2M\"\n\
         [[node_acl]]\ninitiator = \"127.0.86.2\"\n\
         mapped_lun = [{ lun = 7, tpg_lun = 1, read_only = true }]\n",
    )
    .expect("config");
    let c = cfg.to_str().expect("path");
    let sock = dir.join("ctl.sock");
    let s = sock.to_str().expect("path");
    let t = Serving::start(&[
        "-a",
        "127.0.86.1",
        "--config",
        c,
        "--allow",
        "127.0.86.3",
        "--ctl",
        s,
    ]);
    let o = login(&t.line, "127.0.86.2");
    assert!(o.status.success(), "{}", text(&o.stderr));
    let out = text(&o.stdout);
    assert!(out.contains("LUN 7:"), "{out}");
    assert!(!out.contains("LUN 0:"), "{out}");
    let o = login(&t.line, "127.0.86.3");
    assert!(o.status.success(), "{}", text(&o.stderr));
    let out = text(&o.stdout);
    assert!(out.contains("LUN 0:") && out.contains("LUN 1:"), "{out}");
    // A mapped LUN given to it while serving: from then on it sees only that.
    let o = ctl(s, &["map", "add", "127.0.86.3", "4", "1", "ro"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let o = login(&t.line, "127.0.86.3");
    let out = text(&o.stdout);
    assert!(out.contains("LUN 4:") && !out.contains("LUN 0:"), "{out}");
    assert_eq!(
        ctl(s, &["map", "add", "127.0.86.3", "5", "9"])
            .status
            .code(),
        Some(1)
    );
    drop(t);
    // A mapping to a LUN the target does not have: refused at start, one line.
    std::fs::write(
        &cfg,
        "[[lun]]\nmem = \"1M\"\n[[node_acl]]\ninitiator = \"127.0.86.2\"\n\
         mapped_lun = [{ lun = 0, tpg_lun = 4 }]\n",
    )
    .expect("config");
    let o = srpt(&["-a", "127.0.86.1", "--config", c]);
    assert_eq!(o.status.code(), Some(1));
    assert!(text(&o.stderr).contains("tpg_lun 4"), "{}", text(&o.stderr));
    let _ = std::fs::remove_dir_all(&dir);
}
