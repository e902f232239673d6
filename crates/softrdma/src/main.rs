//! `softrdma`: the command-line tool.

use clap::{Parser, Subcommand};
use std::process::ExitCode;

mod cmtime;
mod cmtool;
mod decode;
mod demo;
mod mckey;
mod narrow_link;
mod perf;
mod perf_cm;
mod perf_live;
mod perf_srp;
mod pingpong;
mod pingpong_exch;
mod relay;
mod rping;
mod run;
mod srp;
mod srp_bench;
mod srp_nbd;
mod srpt;
mod ucmatose;
mod udaddy;
mod udtool;

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
    /// The main job: an SRP target with a memory LUN and an SRP initiator in this process,
    /// over RoCEv2 on loopback: login, a verified workload, logout, and what happened.
    Demo(demo::Args),
    /// Decode a pcap/pcapng capture field by field, tshark -V style (RoCEv2, IB CM, RDMA CM,
    /// SRP, SCSI), checking every ICRC.
    Decode(decode::Args),
    /// A peer of ibv_rc_pingpong / ibv_ud_pingpong (rdma-core): same flags, TCP side channel
    /// and output, over a softrdma device named by its IP address (-d 10.77.0.1).
    Pingpong(pingpong::Args),
    /// Measurements on loopback, each against a baseline in the same run: perftest-style
    /// send/write/read bw and lat against TCP, RDMA CM connection setup (cm), connections
    /// held at once (live), SRP block I/O against fio + nbdkit (srp).
    Perf(perf::PerfArgs),
    /// A peer of rdma-core's rping (RDMA CM + RC SEND/RDMA READ/RDMA WRITE) over a softrdma
    /// device and softrdma's own IB CM / RDMA CM.
    Rping(rping::Args),
    /// A peer of rdma-core's ucmatose (cmatose.c): N RDMA CM connections, messages each way,
    /// disconnect.
    Ucmatose(ucmatose::Args),
    /// A userspace SRP target (ib_srpt's logins and I/O) that Linux's ib_srp initiator mounts.
    Srpt(srpt::Args),
    /// An SRP initiator (what Linux's ib_srp does): log in to TARGET (the string ib_srp's
    /// add_target takes), read, write, benchmark, discover targets.
    Srp(srp::Args),
    /// A peer of rdma-core 44's cmtime: N RDMA CM connections set up step by step, each step
    /// timed.
    Cmtime(cmtime::Args),
    /// A peer of rdma-core 44's udaddy (udaddy.c): N UD "connections" over the RDMA CM (SIDR),
    /// SENDs with immediate each way.
    Udaddy(udaddy::Args),
    /// A peer of rdma-core 44's mckey (mckey.c): UD ids join an IP multicast group over the
    /// RDMA CM; the sender (-s) sends to the group, the receiver counts what arrives.
    Mckey(mckey::Args),
    /// Runs an unmodified verbs program (ibv_devinfo, ibv_rc_pingpong, …) over softrdma: its
    /// libibverbs.so.1 first on LD_LIBRARY_PATH.
    Run(run::Args),
    /// The frame relay of the narrow link (root): forwards Ethernet frames unchanged
    /// between two interfaces of a namespace, with random loss, delay/jitter and ECN
    /// marking (`scripts/narrow-link.sh` with LOSS=…).
    Relay(relay::Args),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Demo(args) => demo::run(&args),
        Command::Decode(args) => decode::run(&args),
        Command::Pingpong(args) => pingpong::run(&args),
        Command::Perf(args) => perf::run_cmd(args),
        Command::Rping(args) => rping::run(&args),
        Command::Ucmatose(args) => ucmatose::run(args),
        Command::Cmtime(args) => cmtime::run(&args),
        Command::Srpt(args) => srpt::run(args),
        Command::Udaddy(args) => udaddy::run(args),
        Command::Mckey(args) => mckey::run(args),
        Command::Srp(args) => srp::run(args),
        Command::Run(args) => run::run(args),
        Command::Relay(args) => relay::run_cmd(&args),
    }
}
