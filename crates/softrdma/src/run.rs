//! `softrdma run -- PROGRAM ARGS…`: runs an unmodified verbs program over softrdma, with
//! softrdma's `libibverbs.so.1` (crate `softrdma-verbs`) — and its `librdmacm.so.1` (crate
//! `softrdma-rdmacm`) when built, found in the same directory — first on `LD_LIBRARY_PATH`.
//!
//! Where the library is looked for, first found wins:
//! 1. `--lib-dir DIR` or `$SOFTRDMA_LIB_DIR`;
//! 2. `<dir of this executable>/../lib/softrdma/` (the README's install layout);
//! 3. `<dir of this executable>/softrdma-lib/`;
//! 4. the workspace's build output: when this executable sits in `target/<profile>/` and
//!    `libsoftrdma_verbs.so` was built there (`cargo build` leaves it in `target/<profile>/`,
//!    `cargo test` only in `target/<profile>/deps/`: the newer of the two wins), the build step
//!    is done here — `softrdma-lib/libibverbs.so.1` is made a symbolic link to it (Cargo cannot
//!    name an output `libibverbs.so.1`; the soname inside is already `libibverbs.so.1`), so
//!    later builds are picked up.

use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

/// The library's file name, as programs' `DT_NEEDED` names it.
pub const LIB: &str = "libibverbs.so.1";

/// softrdma's librdmacm (crate `softrdma-rdmacm`), found in the same directory when built.
pub const RDMACM_LIB: &str = "librdmacm.so.1";

/// Runs a program over softrdma's libibverbs.so.1.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Print the library directory and the LD_LIBRARY_PATH set (to stderr).
    #[arg(short, long)]
    verbose: bool,
    /// The directory holding libibverbs.so.1 (default: $SOFTRDMA_LIB_DIR, else found beside
    /// this executable).
    #[arg(long)]
    lib_dir: Option<PathBuf>,
    /// The program, then its arguments (after `--`).
    #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true)]
    program: Vec<OsString>,
}

/// Finds (or, in a build tree, makes) the directory holding `libibverbs.so.1`.
pub fn find_lib_dir(explicit: Option<&Path>) -> Result<PathBuf, String> {
    if let Some(d) = explicit {
        return if d.join(LIB).exists() {
            Ok(d.to_path_buf())
        } else {
            Err(format!("{} has no {LIB}", d.display()))
        };
    }
    let exe = std::env::current_exe().map_err(|e| format!("where am I: {e}"))?;
    let dir = exe
        .parent()
        .ok_or_else(|| format!("{} has no directory", exe.display()))?;
    let installed = dir.join("../lib/softrdma");
    if installed.join(LIB).exists() {
        return Ok(installed);
    }
    let beside = dir.join("softrdma-lib");
    if link_newest(dir, &beside, "libsoftrdma_verbs.so", LIB)? {
        // librdmacm.so.1 beside it when it was built (`cargo build -p softrdma-rdmacm`).
        link_newest(dir, &beside, "libsoftrdma_rdmacm.so", RDMACM_LIB)?;
        return Ok(beside);
    }
    if beside.join(LIB).exists() {
        return Ok(beside);
    }
    Err(format!(
        "no {LIB} found beside {} (looked in {}, {}; build it with \
         `cargo build -p softrdma-verbs`, or pass --lib-dir)",
        exe.display(),
        installed.display(),
        beside.display()
    ))
}

/// In a build tree: makes `beside/lib` a symbolic link to the newer of `dir/built` and
/// `dir/deps/built`; false when neither exists.
fn link_newest(dir: &Path, beside: &Path, built: &str, lib: &str) -> Result<bool, String> {
    let newest = [built.to_string(), format!("deps/{built}")]
        .into_iter()
        .filter_map(|rel| {
            let m = std::fs::metadata(dir.join(&rel)).ok()?.modified().ok()?;
            Some((m, rel))
        })
        .max();
    let Some((_, rel)) = newest else {
        return Ok(false);
    };
    std::fs::create_dir_all(beside).map_err(|e| format!("create {}: {e}", beside.display()))?;
    let link = beside.join(lib);
    let target = Path::new("..").join(rel);
    if std::fs::read_link(&link).ok() != Some(target.clone()) {
        // Replaced atomically: another `softrdma run` may be starting a program through it.
        let tmp = beside.join(format!(".{lib}.{}", std::process::id()));
        let _ = std::fs::remove_file(&tmp);
        std::os::unix::fs::symlink(&target, &tmp)
            .and_then(|()| std::fs::rename(&tmp, &link))
            .map_err(|e| format!("link {}: {e}", link.display()))?;
    }
    Ok(true)
}

/// The command.
pub fn run(args: Args) -> ExitCode {
    let explicit = args
        .lib_dir
        .clone()
        .or_else(|| std::env::var_os("SOFTRDMA_LIB_DIR").map(PathBuf::from));
    let dir = match find_lib_dir(explicit.as_deref()) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("softrdma run: {e}");
            return ExitCode::from(2);
        }
    };
    let dir = dir.canonicalize().unwrap_or(dir);
    let mut path = OsString::from(dir.as_os_str());
    if let Some(old) = std::env::var_os("LD_LIBRARY_PATH").filter(|o| !o.is_empty()) {
        path.push(":");
        path.push(old);
    }
    if args.verbose {
        eprintln!("softrdma run: {LIB} from {}", dir.display());
        if dir.join(RDMACM_LIB).exists() {
            eprintln!("softrdma run: {RDMACM_LIB} from {}", dir.display());
        }
        eprintln!("softrdma run: LD_LIBRARY_PATH={}", path.to_string_lossy());
    }
    let (prog, rest) = args.program.split_first().expect("clap requires a program");
    let err = Command::new(prog)
        .args(rest)
        .env("LD_LIBRARY_PATH", &path)
        .exec();
    eprintln!("softrdma run: {}: {err}", prog.to_string_lossy());
    ExitCode::from(127)
}
