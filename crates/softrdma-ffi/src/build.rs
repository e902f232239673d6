//! What both libraries' build scripts do (this crate is their build-dependency): link-time
//! identity, a soname and rdma-core 44's symbol versions from `src/symbols.txt` (a version
//! script plus one `.symver` directive per export, written to `$OUT_DIR/symver.rs` for the
//! exports module to `include!`).
//!
//! `src/symbols.txt`: `node NAME [PARENT]` lines declare the version nodes in the map's order;
//! `VERSION NAME [compat]` lines bind the implementation `sv__NAME` to `NAME@@VERSION` (or
//! `sv10__NAME` to the non-default `NAME@VERSION` with `compat`).
//!
//! Links with lld (`-fuse-ld=lld`): it accepts our version script next to rustc's own
//! anonymous one (GNU ld refuses the pair). rustc ≥ 1.90 brings its own (rust-lld, found
//! through the `gcc-ld` directory it hands the C compiler); older toolchains need Debian's
//! `lld` package. The `.symver ..., remove` directives leave only the versioned names;
//! rustc's export list still names the `sv__*` implementations, hence `--undefined-version`
//! (each library's `tests/symbols.rs` does the checking that switches off).

use std::fmt::Write as _;
use std::path::PathBuf;

/// A version node of the map: its name, its parent, its symbols in table order.
#[derive(Debug, PartialEq, Eq)]
pub struct Node {
    pub name: String,
    pub parent: Option<String>,
    pub symbols: Vec<String>,
}

/// The nodes and the `.symver` directives (one `"…",` string per line, for `global_asm!`)
/// of a symbol table's text; `Err` names the line that refers to an undeclared node.
pub fn parse_table(text: &str) -> Result<(Vec<Node>, String), String> {
    let mut nodes: Vec<Node> = Vec::new();
    let mut asm = String::new();
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let f: Vec<&str> = line.split_whitespace().collect();
        if f[0] == "node" {
            let name = f
                .get(1)
                .ok_or_else(|| format!("{line}: node without a name"))?;
            nodes.push(Node {
                name: name.to_string(),
                parent: f.get(2).map(|s| s.to_string()),
                symbols: Vec::new(),
            });
            continue;
        }
        let (ver, name, compat) = match f.as_slice() {
            [ver, name] => (*ver, *name, false),
            [ver, name, "compat"] => (*ver, *name, true),
            _ => return Err(format!("{line}: not `VERSION NAME [compat]`")),
        };
        let node = nodes
            .iter_mut()
            .find(|n| n.name == ver)
            .ok_or_else(|| format!("{name}: no node {ver}"))?;
        if !node.symbols.iter().any(|n| n == name) {
            node.symbols.push(name.to_string());
        }
        let (imp, at) = if compat {
            (format!("sv10__{name}"), "@")
        } else {
            (format!("sv__{name}"), "@@@")
        };
        let _ = writeln!(asm, "    \".symver {imp}, {name}{at}{ver}, remove\",");
    }
    Ok((nodes, asm))
}

/// The version script of `nodes` (the first one holds `local: *`).
pub fn version_script(nodes: &[Node]) -> String {
    let mut map = String::new();
    for (i, n) in nodes.iter().enumerate() {
        let _ = writeln!(map, "{} {{", n.name);
        if !n.symbols.is_empty() {
            let _ = writeln!(map, "  global:");
            for s in &n.symbols {
                let _ = writeln!(map, "    {s};");
            }
        }
        if i == 0 {
            let _ = writeln!(map, "  local: *;");
        }
        match &n.parent {
            Some(p) => {
                let _ = writeln!(map, "}} {p};");
            }
            None => {
                let _ = writeln!(map, "}};");
            }
        }
    }
    map
}

/// The whole build script of a library whose file `soname` is (`libibverbs.so.1`): reads
/// `src/symbols.txt`, writes `$OUT_DIR/<stem>.map` and `$OUT_DIR/symver.rs`, and tells cargo
/// the cdylib's link arguments. Panics (failing the build) on a malformed table.
pub fn symbol_versions(soname: &str) {
    let table = "src/symbols.txt";
    println!("cargo:rerun-if-changed={table}");
    println!("cargo:rerun-if-changed=build.rs");
    let text = std::fs::read_to_string(table).expect("src/symbols.txt");
    let (nodes, asm) = parse_table(&text).unwrap_or_else(|e| panic!("{table}: {e}"));
    let stem = soname.split(".so").next().unwrap_or(soname);
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR"));
    let map_path = out.join(format!("{stem}.map"));
    std::fs::write(&map_path, version_script(&nodes)).expect("write the version script");
    std::fs::write(
        out.join("symver.rs"),
        format!("core::arch::global_asm!(\n{asm});\n"),
    )
    .expect("write symver.rs");
    println!("cargo:rustc-cdylib-link-arg=-fuse-ld=lld");
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,{soname}");
    println!(
        "cargo:rustc-cdylib-link-arg=-Wl,--version-script={}",
        map_path.display()
    );
    println!("cargo:rustc-cdylib-link-arg=-Wl,--undefined-version");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_to_map_and_directives() {
        let (nodes, asm) = parse_table(
            "# c\nnode A_1.0\nnode A_1.1 A_1.0\nA_1.0 f\nA_1.1 g\nA_1.0 g compat\nA_1.0 f\n",
        )
        .unwrap();
        assert_eq!(nodes.len(), 2);
        assert_eq!(nodes[0].symbols, ["f", "g"]);
        assert_eq!(
            version_script(&nodes),
            "A_1.0 {\n  global:\n    f;\n    g;\n  local: *;\n};\nA_1.1 {\n  global:\n    g;\n} A_1.0;\n"
        );
        assert_eq!(
            asm,
            "    \".symver sv__f, f@@@A_1.0, remove\",\n    \".symver sv__g, g@@@A_1.1, remove\",\n    \".symver sv10__g, g@A_1.0, remove\",\n    \".symver sv__f, f@@@A_1.0, remove\",\n"
        );
        assert!(parse_table("A_1.0 f\n").is_err());
        assert!(parse_table("node A\nA f g h\n").is_err());
    }
}
