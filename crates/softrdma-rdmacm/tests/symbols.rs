//! The library as the dynamic loader sees it: soname `librdmacm.so.1`, every export versioned
//! as rdma-core 44 versions it (Debian 12's `librdmacm.so.1` is the reference when installed,
//! and nothing of it may be missing), no implementation name leaking, and the CM's table
//! imported from libibverbs at run time (no softrdma stack linked in).

#![allow(clippy::unwrap_used)] // tests: a failed unwrap is a failed test

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::Command;

fn lib() -> PathBuf {
    // `cargo test` builds the cdylib next to this test, in target/<profile>/deps/.
    let exe = std::env::current_exe().unwrap();
    let l = exe.parent().unwrap().join("libsoftrdma_rdmacm.so");
    assert!(l.exists(), "{} missing", l.display());
    l
}

/// `(version, name, default)` of every defined dynamic function or object (`objdump -T`).
fn exports(path: &std::path::Path) -> BTreeSet<(String, String, bool)> {
    softrdma_ffi::audit::dynamic_exports(path).unwrap()
}

#[test]
fn every_debian_export_is_here_with_its_version() {
    let dump = Command::new("objdump")
        .arg("-T")
        .arg(lib())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&dump.stdout).into_owned();
    let undefined: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("*UND*") && (l.contains("sv__") || l.contains("ibv_")))
        .collect();
    assert!(
        undefined.is_empty(),
        "calls to renamed implementations or link-time libibverbs imports: {undefined:?}"
    );
    let ours = exports(&lib());
    assert!(ours.len() >= 68, "{ours:?}");
    for (ver, name, default) in &ours {
        assert!(ver.starts_with("RDMACM_1."), "{name} is exported at {ver}");
        assert!(*default, "{name}@{ver} is not the default version");
        assert!(
            !name.starts_with("sv"),
            "{name}: an implementation name leaked"
        );
    }
    let debian = std::path::Path::new("/usr/lib/x86_64-linux-gnu/librdmacm.so.1");
    if !debian.exists() {
        eprintln!("SKIPPED the comparison: Debian's librdmacm1 is not installed");
        return;
    }
    // GNU ld exports each version node's name as an absolute symbol; lld does not.
    let theirs: BTreeSet<_> = exports(debian)
        .into_iter()
        .filter(|(_, name, _)| !name.starts_with("RDMACM_"))
        .collect();
    assert_eq!(
        ours.symmetric_difference(&theirs).collect::<Vec<_>>(),
        Vec::<&(String, String, bool)>::new(),
        "the export sets differ"
    );
}

#[test]
fn soname_and_version_nodes() {
    let out = Command::new("readelf")
        .args(["-d", "-V"])
        .arg(lib())
        .output()
        .expect("readelf");
    let s = String::from_utf8(out.stdout).unwrap();
    assert!(s.contains("Library soname: [librdmacm.so.1]"), "{s}");
    for v in ["1.0", "1.1", "1.2", "1.3"] {
        assert!(
            s.contains(&format!("Name: RDMACM_{v}\n")) || s.contains(&format!("Name: RDMACM_{v} ")),
            "RDMACM_{v} not defined"
        );
    }
}

/// `unsafe` lives in the FFI modules alone, and every `unsafe` block says why it is sound.
#[test]
fn unsafe_code_is_confined_to_the_audited_modules_with_safety_comments() {
    // `entry` and the object registry are softrdma-ffi's (audited by its own tests).
    let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("src");
    softrdma_ffi::audit::check_unsafe_confined(&src, &["exports.rs", "private.rs"]).unwrap();
}

/// A program loading our librdmacm without softrdma's libibverbs gets no second stack: every
/// call fails with ENODEV (Debian's libibverbs has no `SOFTRDMA_PRIVATE_1`).
#[test]
fn without_softrdma_libibverbs_the_calls_fail_with_enodev() {
    if !std::path::Path::new("/usr/include/rdma/rdma_cma.h").exists()
        || !std::path::Path::new("/usr/lib/x86_64-linux-gnu/libibverbs.so.1").exists()
    {
        eprintln!("SKIPPED: librdmacm-dev or Debian's libibverbs1 missing");
        return;
    }
    let tmp = std::env::temp_dir().join(format!("softrdma-rdmacm-enodev-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();
    let link = tmp.join("librdmacm.so.1");
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(lib(), &link).unwrap();
    let src = tmp.join("t.c");
    std::fs::write(
        &src,
        r#"#include <errno.h>
#include <stdio.h>
#include <rdma/rdma_cma.h>
int main(void) {
    struct rdma_event_channel *c = rdma_create_event_channel();
    printf("%s %d\n", c ? "channel" : "null", errno);
    return 0;
}
"#,
    )
    .unwrap();
    let exe = tmp.join("t");
    let st = Command::new("cc")
        .arg("-o")
        .arg(&exe)
        .arg(&src)
        .arg("-lrdmacm")
        .status()
        .unwrap();
    assert!(st.success());
    let out = Command::new(&exe)
        .env("LD_LIBRARY_PATH", &tmp)
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(&tmp);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        // ENODEV
        "null 19"
    );
}
