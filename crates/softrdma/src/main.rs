//! `softrdma`: the command-line tool.

fn main() {
    eprintln!("softrdma: no subcommands yet");
    std::process::exit(2);
}
