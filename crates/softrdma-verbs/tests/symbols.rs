//! The library as the dynamic loader sees it: soname `libibverbs.so.1`, every export versioned
//! as rdma-core 44 versions it (Debian 12's `libibverbs.so.1` is the reference when
//! installed), every version node of its map defined, and no implementation name leaking.
//! `--undefined-version` (build.rs) turns off the linker's own check; this is it.

#![allow(clippy::unwrap_used)] // tests: a failed unwrap is a failed test

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::Command;

fn lib() -> PathBuf {
    // `cargo test` builds the cdylib next to this test, in target/<profile>/deps/ (only
    // `cargo build` copies it up to target/<profile>/).
    let exe = std::env::current_exe().unwrap();
    let l = exe.parent().unwrap().join("libsoftrdma_verbs.so");
    assert!(l.exists(), "{} missing", l.display());
    l
}

/// `(version, name, default)` of every defined dynamic function or object (`objdump -T`).
fn exports(path: &std::path::Path) -> BTreeSet<(String, String, bool)> {
    softrdma_ffi::audit::dynamic_exports(path).unwrap()
}

#[test]
fn every_export_is_versioned_as_rdma_core_44_versions_it() {
    let dump = Command::new("objdump")
        .arg("-T")
        .arg(lib())
        .output()
        .unwrap();
    let undefined: Vec<String> = String::from_utf8_lossy(&dump.stdout)
        .lines()
        .filter(|l| l.contains("*UND*") && l.contains("sv"))
        .map(str::to_string)
        .collect();
    assert!(
        undefined.is_empty(),
        "calls to renamed implementations: {undefined:?}"
    );
    let ours = exports(&lib());
    assert!(ours.len() >= 40, "{ours:?}");
    // Ours alone: the RDMA CM's table for softrdma's librdmacm.so.1 (src/cm_abi.rs).
    let private = (
        "SOFTRDMA_PRIVATE_1".to_string(),
        "softrdma_rdmacm_ops".to_string(),
        true,
    );
    assert!(ours.contains(&private), "{private:?} is not exported");
    let ours: BTreeSet<_> = ours.into_iter().filter(|s| *s != private).collect();
    for (ver, name, _) in &ours {
        assert!(
            ver.starts_with("IBVERBS_"),
            "{name} is exported at {ver}: unversioned or leaked"
        );
        assert!(
            !name.starts_with("sv"),
            "{name}: an implementation name leaked"
        );
    }
    let debian = std::path::Path::new("/usr/lib/x86_64-linux-gnu/libibverbs.so.1");
    if !debian.exists() {
        eprintln!("SKIPPED the comparison: Debian's libibverbs1 is not installed");
        return;
    }
    let theirs = exports(debian);
    for s in &ours {
        assert!(
            theirs.contains(s),
            "{s:?} is not exported so by Debian's libibverbs.so.1"
        );
    }
    // GNU ld exports each version node's name as an absolute symbol; lld does not.
    let missing: Vec<_> = theirs
        .difference(&ours)
        .filter(|(_, name, _)| !name.starts_with("IBVERBS_"))
        .collect();
    // What is not exported yet: the kernel-structure copy helpers (librdmacm's, for its own
    // kernel paths). Anything else missing is a regression.
    for (_, name, _) in &missing {
        assert!(
            name.starts_with("ibv_copy_"),
            "{name} is no longer exported"
        );
    }
    eprintln!(
        "{} of Debian's {} exports not provided yet: {missing:?}",
        missing.len(),
        theirs.len()
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
    assert!(s.contains("Library soname: [libibverbs.so.1]"), "{s}");
    for v in [
        "1.0", "1.1", "1.5", "1.6", "1.7", "1.8", "1.9", "1.10", "1.11", "1.12", "1.13", "1.14",
    ] {
        assert!(
            s.contains(&format!("Name: IBVERBS_{v}\n"))
                || s.contains(&format!("Name: IBVERBS_{v} ")),
            "IBVERBS_{v} not defined"
        );
    }
    assert!(s.contains("IBVERBS_PRIVATE_34"));
}

/// `unsafe` lives in the FFI modules alone, and every `unsafe` block says why it is sound.
#[test]
fn unsafe_code_is_confined_to_the_audited_modules_with_safety_comments() {
    // `entry` and the object registry are softrdma-ffi's (audited by its own tests).
    let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("src");
    softrdma_ffi::audit::check_unsafe_confined(&src, &["ptr.rs", "exports.rs", "cm_exports.rs"])
        .unwrap();
}

/// Debian's provider libraries (libmlx5, libefa, libmana: perftest links the first two, all
/// `BIND_NOW`) load over our library: every `IBVERBS_PRIVATE_34` symbol they import resolves,
/// and their constructors' `verbs_register_driver_34` calls return; `mlx5dv_is_supported`
/// tells our devices from its own (their `verbs_device` frame's ops are not libmlx5's).
#[test]
fn debian_provider_libraries_load_bind_now() {
    let providers = ["libmlx5.so.1", "libefa.so.1", "libmana.so.1"];
    let sys = std::path::Path::new("/usr/lib/x86_64-linux-gnu");
    if !providers.iter().all(|p| sys.join(p).exists()) {
        eprintln!("SKIPPED: Debian's provider libraries are not installed (ibverbs-providers)");
        return;
    }
    let tmp = std::env::temp_dir().join(format!("softrdma-providers-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();
    let link = tmp.join("libibverbs.so.1");
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(lib(), &link).unwrap();
    let src = tmp.join("load.c");
    std::fs::write(
        &src,
        r#"#define _GNU_SOURCE
#include <dlfcn.h>
#include <link.h>
#include <stdio.h>
int main(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        if (!dlopen(argv[i], RTLD_NOW | RTLD_GLOBAL)) { printf("%s\n", dlerror()); return 1; }
    }
    /* The libibverbs that was loaded is ours: print its path. */
    void *self = dlopen("libibverbs.so.1", RTLD_NOW | RTLD_NOLOAD);
    struct link_map *map = NULL;
    if (!self || dlinfo(self, RTLD_DI_LINKMAP, &map) != 0) { printf("no libibverbs\n"); return 1; }
    /* libmlx5 recognises its devices by their verbs_device frame's ops: ours is no mlx5's. */
    void **(*list)(int *) = (void **(*)(int *))dlsym(self, "ibv_get_device_list");
    _Bool (*is_mlx5)(void *) = (_Bool (*)(void *))dlsym(RTLD_DEFAULT, "mlx5dv_is_supported");
    int n = 0;
    void **devs = list ? list(&n) : NULL;
    if (!devs || n < 1 || !is_mlx5) { printf("no devices or no mlx5dv_is_supported\n"); return 1; }
    for (int i = 0; i < n; i++) {
        if (is_mlx5(devs[i])) { printf("device %d taken for an mlx5 device\n", i); return 1; }
    }
    printf("%s\n", map->l_name);
    return 0;
}
"#,
    )
    .unwrap();
    let exe = tmp.join("load");
    let st = Command::new("cc")
        .arg("-o")
        .arg(&exe)
        .arg(&src)
        .arg("-ldl")
        .status()
        .unwrap();
    assert!(st.success());
    let out = Command::new(&exe)
        .args(providers)
        .env("LD_LIBRARY_PATH", &tmp)
        .env("LD_BIND_NOW", "1")
        .output()
        .unwrap();
    let s = String::from_utf8_lossy(&out.stdout).to_string();
    let maps_ok = out.status.success() && s.trim() == link.display().to_string();
    let _ = std::fs::remove_dir_all(&tmp);
    assert!(maps_ok, "{s}{}", String::from_utf8_lossy(&out.stderr));
}
