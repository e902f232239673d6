//! What the C-ABI crates' tests check of themselves, written once:
//!
//! - the `unsafe` audit each runs over its own `src/` (and this crate's over its own):
//!   `unsafe` is allowed only in the named modules, every `unsafe` block there has a
//!   `// SAFETY:` comment above it, and the crate root denies `unsafe_code` and
//!   `unsafe_op_in_unsafe_fn` (so the compiler enforces the rest);
//! - [`dynamic_exports`]: a shared library's export set as the dynamic loader sees it, which
//!   `tests/symbols.rs` compares with Debian's;
//! - [`check_layout`]: a library's `#[repr(C)]` sizes and offsets against the C compiler's
//!   from the system's headers.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

/// Compiles the C program `src` (it includes `header`, which `package` installs) and compares
/// every `NAME VALUE` line it prints with `layout` (the Rust side's sizes and offsets), both
/// ways; the program must print at least `min_lines` of them.
pub fn check_layout(
    src: &Path,
    header: &str,
    package: &str,
    layout: &[(&str, usize)],
    min_lines: usize,
) -> Result<(), String> {
    if !Path::new("/usr/include").join(header).exists() {
        return Err(format!("<{header}> missing: install Debian's {package}"));
    }
    let stem = src
        .parent()
        .and_then(|d| d.parent())
        .and_then(|d| d.parent())
        .and_then(|d| d.file_name())
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let exe = std::env::temp_dir().join(format!("{stem}-layout-{}", std::process::id()));
    let st = Command::new("cc")
        .args(["-std=gnu11", "-Wall", "-Werror", "-o"])
        .arg(&exe)
        .arg(src)
        .status()
        .map_err(|e| format!("run cc: {e}"))?;
    if !st.success() {
        return Err(format!("cc {} failed", src.display()));
    }
    let out = Command::new(&exe).output();
    let _ = std::fs::remove_file(&exe);
    let out = out.map_err(|e| format!("run the layout program: {e}"))?;
    let text = String::from_utf8_lossy(&out.stdout);
    let c: Vec<(String, usize)> = text
        .lines()
        .filter_map(|l| {
            let (n, v) = l.split_once(' ')?;
            Some((n.to_string(), v.trim().parse().ok()?))
        })
        .collect();
    if c.len() < min_lines {
        return Err(format!("the C side printed {} lines", c.len()));
    }
    for (name, value) in layout {
        let got = c.iter().find(|(n, _)| n == name);
        if got.map(|g| g.1) != Some(*value) {
            return Err(format!("{name}: Rust says {value}, C says {got:?}"));
        }
    }
    if let Some((name, _)) = c.iter().find(|(n, _)| !layout.iter().any(|(l, _)| l == n)) {
        return Err(format!(
            "{name} printed by {} is not checked on the Rust side",
            src.display()
        ));
    }
    Ok(())
}

/// An export: `(version, name, default)`, `default` false for a `NAME@VERSION` compat one.
pub type Export = (String, String, bool);

/// The defined dynamic functions and objects of the shared library at `path`, from
/// `objdump -T` (binutils).
pub fn dynamic_exports(path: &Path) -> Result<BTreeSet<Export>, String> {
    let out = Command::new("objdump")
        .arg("-T")
        .arg(path)
        .output()
        .map_err(|e| format!("objdump (binutils): {e}"))?;
    if !out.status.success() {
        return Err(format!("objdump -T {}: {}", path.display(), out.status));
    }
    Ok(parse_objdump_t(&String::from_utf8_lossy(&out.stdout)))
}

/// The exports in `objdump -T`'s text: global, defined, function or object lines; the version
/// column is `(VERSION)` for a non-default version.
pub fn parse_objdump_t(text: &str) -> BTreeSet<Export> {
    text.lines()
        .filter(|l| {
            l.contains(" g ") && !l.contains("*UND*") && (l.contains(" DF ") || l.contains(" DO "))
        })
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let [.., ver, name] = f.as_slice() else {
                return None;
            };
            Some((
                ver.trim_matches(|c| c == '(' || c == ')').to_string(),
                name.to_string(),
                !ver.starts_with('('),
            ))
        })
        .collect()
}

/// The lint attribute, spelled in two pieces so that this file, which is not audited, does
/// not itself contain it.
const ALLOW: &str = concat!("allow", "(unsafe_code)");

/// Checks the `.rs` files directly in `src` against the rules above; `audited` are the file
/// names allowed `unsafe` by the module-level lint attribute (each must carry it). `Err` says what is wrong.
pub fn check_unsafe_confined(src: &Path, audited: &[&str]) -> Result<(), String> {
    let entries = std::fs::read_dir(src).map_err(|e| format!("{}: {e}", src.display()))?;
    let mut seen = Vec::new();
    for e in entries {
        let p = e.map_err(|e| e.to_string())?.path();
        if p.extension().and_then(|e| e.to_str()) != Some("rs") {
            continue;
        }
        let name = p
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let text = std::fs::read_to_string(&p).map_err(|e| format!("{name}: {e}"))?;
        if !audited.contains(&name.as_str()) {
            if text.contains(ALLOW) {
                return Err(format!("{name} allows unsafe code"));
            }
            continue;
        }
        seen.push(name.clone());
        if !text.contains(&format!("#![{ALLOW}]")) {
            return Err(format!("{name}: audited but without #![{ALLOW}]"));
        }
        let lines: Vec<&str> = text.lines().collect();
        for (i, l) in lines.iter().enumerate() {
            let t = l.trim_start();
            if !t.contains("unsafe {") || t.starts_with("//") {
                continue;
            }
            // The comment sits on one of the lines above the block (a multi-line one may
            // start a few lines up).
            let above = lines[i.saturating_sub(6)..i].join("\n");
            if !above.contains("SAFETY") {
                return Err(format!(
                    "{name}:{}: `unsafe` block without a SAFETY comment above it",
                    i + 1
                ));
            }
        }
    }
    if let Some(missing) = audited.iter().find(|a| !seen.iter().any(|s| s == *a)) {
        return Err(format!("{missing}: audited module not found"));
    }
    let lib_rs = std::fs::read_to_string(src.join("lib.rs")).map_err(|e| format!("lib.rs: {e}"))?;
    if !(lib_rs.contains("#![deny(unsafe_code)]")
        && lib_rs.contains("#![deny(unsafe_op_in_unsafe_fn)]"))
    {
        return Err("lib.rs does not deny unsafe_code and unsafe_op_in_unsafe_fn".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree(files: &[(&str, &str)]) -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!(
            "softrdma-ffi-audit-{}-{}",
            std::process::id(),
            files.len()
        ));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        for (n, t) in files {
            std::fs::write(d.join(n), t).unwrap();
        }
        d
    }

    const LIB: &str = "#![deny(unsafe_code)]\n#![deny(unsafe_op_in_unsafe_fn)]\n";

    #[test]
    fn objdump_lines_to_exports() {
        let t = "\
0000000000012340 g    DF .text\t0000000000000010  IBVERBS_1.1 ibv_get_device_list
0000000000012350 g    DF .text\t0000000000000010 (IBVERBS_1.0) ibv_get_device_list
0000000000000000      DF *UND*\t0000000000000000  GLIBC_2.2.5 malloc
0000000000000000 g    DO .data\t0000000000000008  SOFTRDMA_PRIVATE_1 softrdma_rdmacm_ops
0000000000000000 g    D  *ABS*\t0000000000000000  IBVERBS_1.1 IBVERBS_1.1
";
        let e: Vec<Export> = parse_objdump_t(t).into_iter().collect();
        let x = |v: &str, n: &str, d| (v.to_string(), n.to_string(), d);
        assert_eq!(
            e,
            [
                x("IBVERBS_1.0", "ibv_get_device_list", false),
                x("IBVERBS_1.1", "ibv_get_device_list", true),
                x("SOFTRDMA_PRIVATE_1", "softrdma_rdmacm_ops", true),
            ]
        );
    }

    #[test]
    fn layout_comparison_fails_both_ways() {
        let d = tree(&[(
            "layout.c",
            "#include <stdio.h>\nint main(void) { printf(\"x 4\\n\"); return 0; }\n",
        )]);
        let src = d.join("layout.c");
        assert_eq!(
            check_layout(&src, "stdio.h", "libc6-dev", &[("x", 4)], 1),
            Ok(())
        );
        assert!(check_layout(&src, "stdio.h", "libc6-dev", &[("x", 5)], 1).is_err());
        assert!(check_layout(&src, "stdio.h", "libc6-dev", &[("x", 4), ("y", 1)], 1).is_err());
        assert!(
            check_layout(&src, "stdio.h", "libc6-dev", &[], 1).is_err(),
            "x unchecked"
        );
        assert!(check_layout(&src, "stdio.h", "libc6-dev", &[("x", 4)], 2).is_err());
        assert!(check_layout(&src, "no/such.h", "nothing", &[("x", 4)], 1).is_err());
    }

    #[test]
    fn each_rule_can_fail() {
        let ok = &format!("#![{ALLOW}]\n// SAFETY: fine.\nunsafe {{ f() }}\n");
        let d = tree(&[("lib.rs", LIB), ("a.rs", ok)]);
        assert_eq!(check_unsafe_confined(&d, &["a.rs"]), Ok(()));
        assert!(check_unsafe_confined(&d, &[]).is_err(), "a.rs not audited");
        assert!(
            check_unsafe_confined(&d, &["a.rs", "b.rs"]).is_err(),
            "b.rs missing"
        );
        let d = tree(&[
            ("lib.rs", LIB),
            ("a.rs", ok),
            ("c.rs", &format!("#![{ALLOW}]\nunsafe {{ f() }}\n")),
        ]);
        assert!(
            check_unsafe_confined(&d, &["a.rs", "c.rs"]).is_err(),
            "no SAFETY"
        );
        let d = tree(&[
            ("lib.rs", "#![deny(unsafe_code)]\n"),
            ("a.rs", ok),
            ("c.rs", ""),
            ("e.rs", ""),
        ]);
        assert!(check_unsafe_confined(&d, &["a.rs"]).is_err(), "lib.rs lint");
    }
}
