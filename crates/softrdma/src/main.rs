//! `softrdma`: the command-line tool.

use clap::{Parser, Subcommand};
use std::process::ExitCode;

mod decode;
mod perf;
mod perf_node;

/// softrdma: the Linux RDMA connection-management stack (IB CM, RDMA CM, SRP) in userspace,
/// over RoCEv2.
#[derive(Debug, Parser)]
#[command(name = "softrdma", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Decode a pcap/pcapng capture field by field, tshark -V style (RoCEv2, IB CM, RDMA CM,
    /// SRP, SCSI), checking every ICRC.
    Decode(decode::Args),
    /// perftest-style bandwidth / latency between two softrdma devices on loopback, with a
    /// TCP baseline in the same run.
    Perf(perf::Args),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Decode(args) => decode::run(&args),
        Command::Perf(args) => perf::run(&args),
    }
}
