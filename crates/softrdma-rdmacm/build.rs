//! Link-time identity of the library: soname `librdmacm.so.1`, and rdma-core 44's symbol
//! versions from `src/symbols.txt` (a version script plus one `.symver` directive per export).
//!
//! Links with lld (`-fuse-ld=lld`): it accepts our version script next to rustc's own
//! anonymous one (GNU ld refuses the pair). rustc ≥ 1.90 brings its own (rust-lld, found
//! through the `gcc-ld` directory it hands the C compiler); older toolchains need Debian's
//! `lld` package. The `.symver ...,
//! remove` directives leave only the versioned names; rustc's export list still names the
//! `sv__*` implementations, hence `--undefined-version` (the symbol-set test in
//! `tests/symbols.rs` does the checking that switches off).

use std::fmt::Write as _;
use std::path::PathBuf;

fn main() {
    let table = "src/symbols.txt";
    println!("cargo:rerun-if-changed={table}");
    println!("cargo:rerun-if-changed=build.rs");
    let text = std::fs::read_to_string(table).expect("src/symbols.txt");
    let mut nodes: Vec<(String, Option<String>, Vec<String>)> = Vec::new();
    let mut asm = String::new();
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let f: Vec<&str> = line.split_whitespace().collect();
        if f[0] == "node" {
            nodes.push((
                f[1].to_string(),
                f.get(2).map(|s| s.to_string()),
                Vec::new(),
            ));
            continue;
        }
        let (ver, name, compat) = (f[0], f[1], f.get(2) == Some(&"compat"));
        let node = nodes
            .iter_mut()
            .find(|n| n.0 == ver)
            .unwrap_or_else(|| panic!("{table}: {name}: no node {ver}"));
        if !node.2.iter().any(|n| n == name) {
            node.2.push(name.to_string());
        }
        let (imp, at) = if compat {
            (format!("sv10__{name}"), "@")
        } else {
            (format!("sv__{name}"), "@@@")
        };
        let _ = writeln!(asm, "    \".symver {imp}, {name}{at}{ver}, remove\",");
    }
    let mut map = String::new();
    for (i, (name, parent, syms)) in nodes.iter().enumerate() {
        let _ = writeln!(map, "{name} {{");
        if !syms.is_empty() {
            let _ = writeln!(map, "  global:");
            for s in syms {
                let _ = writeln!(map, "    {s};");
            }
        }
        if i == 0 {
            let _ = writeln!(map, "  local: *;");
        }
        match parent {
            Some(p) => {
                let _ = writeln!(map, "}} {p};");
            }
            None => {
                let _ = writeln!(map, "}};");
            }
        }
    }
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR"));
    let map_path = out.join("librdmacm.map");
    std::fs::write(&map_path, map).expect("write the version script");
    std::fs::write(
        out.join("symver.rs"),
        format!("core::arch::global_asm!(\n{asm});\n"),
    )
    .expect("write symver.rs");
    println!("cargo:rustc-cdylib-link-arg=-fuse-ld=lld");
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,librdmacm.so.1");
    println!(
        "cargo:rustc-cdylib-link-arg=-Wl,--version-script={}",
        map_path.display()
    );
    println!("cargo:rustc-cdylib-link-arg=-Wl,--undefined-version");
}
