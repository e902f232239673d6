//! `softrdma`: the command-line tool.

use clap::{Parser, Subcommand};
use std::process::ExitCode;

mod cmtime;
mod cmtool;
mod decode;
mod perf;
mod pingpong;
mod pingpong_exch;
mod rping;
mod ucmatose;
mod udaddy;

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
    /// A peer of ibv_rc_pingpong / ibv_ud_pingpong (rdma-core): same flags, TCP side channel
    /// and output, over a softrdma device named by its IP address (-d 10.77.0.1).
    Pingpong(pingpong::Args),
    /// perftest-style bandwidth / latency between two softrdma devices on loopback, with a
    /// TCP baseline in the same run.
    Perf(perf::Args),
    /// A peer of rdma-core's rping (RDMA CM + RC SEND/RDMA READ/RDMA WRITE) over a softrdma
    /// device and softrdma's own IB CM / RDMA CM.
    Rping(rping::Args),
    /// A peer of rdma-core's ucmatose (cmatose.c): N RDMA CM connections, messages each way,
    /// disconnect.
    Ucmatose(ucmatose::Args),
    /// A peer of rdma-core 44's cmtime: N RDMA CM connections set up step by step, each step
    /// timed.
    Cmtime(cmtime::Args),
    /// A peer of rdma-core 44's udaddy (udaddy.c): N UD "connections" over the RDMA CM (SIDR),
    /// SENDs with immediate each way.
    Udaddy(udaddy::Args),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Decode(args) => decode::run(&args),
        Command::Pingpong(args) => pingpong::run(&args),
        Command::Perf(args) => perf::run(&args),
        Command::Rping(args) => rping::run(&args),
        Command::Ucmatose(args) => ucmatose::run(args),
        Command::Cmtime(args) => cmtime::run(&args),
        Command::Udaddy(args) => udaddy::run(args),
    }
}
