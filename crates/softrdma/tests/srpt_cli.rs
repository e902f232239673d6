//! `softrdma srpt`: argument refusals, the startup lines (GUID, add_target) and a clean exit
//! on SIGTERM, on a loopback address.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn srpt(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_softrdma"))
        .arg("srpt")
        .args(args)
        .output()
        .expect("run softrdma")
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
