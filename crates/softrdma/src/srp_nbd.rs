//! `softrdma srp nbd TARGET [--listen ADDR:PORT | --unix PATH]`: one SRP LUN served as an
//! NBD export, so that `qemu-img`, `qemu-nbd --connect`, `nbdcopy`, `nbdfuse` and fio's nbd
//! engine use an SRP LUN with no kernel module on this side.
//!
//! Threads, and why: the SRP session ([`Session`]) is single-threaded state (the engine
//! under the CM's lock), so one thread — the caller's — owns it and does every SCSI command.
//! Each NBD client gets a reader thread (the handshake, then parsing requests and reading
//! write payloads, so that a slow or hostile client never stalls the session) and a writer
//! thread (replies, so that the session thread never blocks on a client's socket). Readers
//! hand [`Job`]s to the session thread through one queue and wake its device loop; the
//! session thread cuts each job into SCSI commands of at most [`SLOT`] bytes, each with its
//! own slice of the registered buffer, keeps up to [`SLOTS`] of them in flight across all
//! clients, and sends the reply when the last one ends. Replies may leave out of order, as
//! the protocol allows.
//!
//! Malformed input is answered as the protocol says (NBD_REP_ERR_INVALID, EINVAL, ...);
//! what cannot be answered (a wrong magic: the stream cannot be resynchronised) closes that
//! client's connection and nothing else.

use std::collections::{HashMap, VecDeque};
use std::io::{BufReader, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};

use softrdma_driver::Device;
use softrdma_srp::initiator::cdb;
use softrdma_srp::{Command, DataDir, IoError, ScsiResult, Segment, SubmitError};
use softrdma_wire::nbd::{
    cmd_flag, tflag, Cmd, Errno, ExportNameReplyRepr, GreetingRepr, InfoRepr, InfoRequestRepr,
    InfoType, OptionCode, OptionReplyRepr, OptionRepr, ReplyType, RequestRepr, SimpleReplyRepr,
    CLIENT_FIXED_NEWSTYLE, CLIENT_NO_ZEROES, FLAG_FIXED_NEWSTYLE, FLAG_NO_ZEROES,
};
use softrdma_wire::scsi::ScsiStatus;

use crate::cmtool::SIGNAL_SLICE;
use crate::srp::{LunInfo, Session, IOVA};

/// The most one SCSI command moves (ib_srp's default `max_sectors`, 1024 blocks of 512).
pub const SLOT: usize = 512 << 10;
/// SCSI commands in flight at once (each with its own `SLOT` of the registered buffer).
pub const SLOTS: usize = 32;
/// The largest READ or WRITE a client may send (NBD_INFO_BLOCK_SIZE's maximum); larger
/// ones are refused with EINVAL (a write's payload is then read and dropped).
pub const MAX_PAYLOAD: u32 = 32 << 20;
/// The most option data the handshake reads; more closes the connection (no client sends
/// more than a name and a few info requests).
const MAX_OPTION_DATA: u32 = 64 << 10;
/// The blocks of one WRITE SAME or UNMAP (zeroing or trimming needs no buffer of that size).
const WRITE_SAME_BLOCKS: u32 = 1 << 16;

/// `softrdma srp nbd`'s own flags.
#[derive(Debug, Clone, clap::Args)]
pub struct NbdArgs {
    /// Serve on this TCP address (port 0: any free port; the line on stdout says which).
    #[arg(
        long,
        value_name = "ADDR:PORT",
        default_value = "127.0.0.1:10809",
        conflicts_with = "unix"
    )]
    pub listen: String,
    /// Serve on this Unix socket instead of TCP (removed and created anew).
    #[arg(long, value_name = "PATH")]
    pub unix: Option<PathBuf>,
    /// The LUN to export (0, 1, ... as `softrdma srp login` lists them).
    #[arg(long, default_value_t = 0)]
    pub lun: u64,
    /// The export's name (the default export, "", is this one too).
    #[arg(long, default_value = "srp")]
    pub export_name: String,
}

/// What the handshake tells the clients.
#[derive(Debug, Clone)]
pub struct Export {
    pub name: String,
    pub size: u64,
    pub block_size: u32,
    pub flags: u16,
}

impl Export {
    fn new(name: &str, info: &LunInfo) -> Export {
        Export {
            name: name.to_string(),
            size: info.bytes(),
            block_size: info.block_size,
            // One session behind every connection, so a FLUSH on one covers the writes of
            // all: CAN_MULTI_CONN holds.
            flags: tflag::HAS_FLAGS
                | tflag::SEND_FLUSH
                | tflag::SEND_FUA
                | tflag::SEND_TRIM
                | tflag::SEND_WRITE_ZEROES
                | tflag::CAN_MULTI_CONN,
        }
    }
    fn names(&self, asked: &[u8]) -> bool {
        asked.is_empty() || asked == self.name.as_bytes()
    }
}

// -------------------------------------------------------------------------------------
// The client side: a stream, the handshake, the request reader
// -------------------------------------------------------------------------------------

/// A client's connection, TCP or Unix.
enum Stream {
    Tcp(TcpStream),
    Unix(UnixStream),
}

impl Stream {
    fn try_clone(&self) -> std::io::Result<Stream> {
        Ok(match self {
            Stream::Tcp(s) => Stream::Tcp(s.try_clone()?),
            Stream::Unix(s) => Stream::Unix(s.try_clone()?),
        })
    }
    fn shutdown(&self) {
        let _ = match self {
            Stream::Tcp(s) => s.shutdown(Shutdown::Both),
            Stream::Unix(s) => s.shutdown(Shutdown::Both),
        };
    }
}

impl Read for Stream {
    fn read(&mut self, b: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.read(b),
            Stream::Unix(s) => s.read(b),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.write(b),
            Stream::Unix(s) => s.write(b),
        }
    }
    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Stream::Tcp(s) => s.flush(),
            Stream::Unix(s) => s.flush(),
        }
    }
}

/// A client's stream with its reads buffered (a client at queue depth 32 sends requests
/// back to back: one read call takes several) and its writes passed straight through.
struct Buffered(BufReader<Stream>);

impl Read for Buffered {
    fn read(&mut self, b: &mut [u8]) -> std::io::Result<usize> {
        self.0.read(b)
    }
}

impl Write for Buffered {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.get_mut().write(b)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.0.get_mut().flush()
    }
}

/// Why a client's connection ended.
#[derive(Debug)]
enum ConnEnd {
    /// NBD_OPT_ABORT, NBD_CMD_DISC, or the client closed its end between messages.
    Client,
    /// What the protocol has no answer for (a wrong magic, unknown client flags, an unknown
    /// name in NBD_OPT_EXPORT_NAME, option data too large): the connection is closed.
    Violation(String),
    Io(std::io::Error),
}

impl From<std::io::Error> for ConnEnd {
    fn from(e: std::io::Error) -> ConnEnd {
        if e.kind() == std::io::ErrorKind::UnexpectedEof {
            ConnEnd::Client
        } else {
            ConnEnd::Io(e)
        }
    }
}

fn opt_reply(
    s: &mut Buffered,
    option: OptionCode,
    reply: ReplyType,
    data: &[u8],
) -> Result<(), ConnEnd> {
    s.write_all(&OptionReplyRepr::with_data(option, reply, data))?;
    Ok(())
}

/// The fixed newstyle handshake. `Ok(true)`: the client is in the transmission phase;
/// `Ok(false)`: it aborted.
fn handshake(s: &mut Buffered, ex: &Export) -> Result<bool, ConnEnd> {
    let g = GreetingRepr {
        handshake_flags: FLAG_FIXED_NEWSTYLE | FLAG_NO_ZEROES,
    };
    s.write_all(&g.to_bytes())?;
    let mut f = [0u8; 4];
    s.read_exact(&mut f)?;
    let cflags = u32::from_be_bytes(f);
    if cflags & !(CLIENT_FIXED_NEWSTYLE | CLIENT_NO_ZEROES) != 0 {
        return Err(ConnEnd::Violation(format!(
            "unknown client flags {cflags:#x}"
        )));
    }
    let no_zeroes = cflags & CLIENT_NO_ZEROES != 0;
    loop {
        let mut h = [0u8; 16];
        s.read_exact(&mut h)?;
        let o = OptionRepr::parse(&h).map_err(|e| ConnEnd::Violation(e.to_string()))?;
        if o.length > MAX_OPTION_DATA {
            return Err(ConnEnd::Violation(format!(
                "{} with {} bytes of data (at most {MAX_OPTION_DATA})",
                o.option, o.length
            )));
        }
        let mut data = vec![0u8; o.length as usize];
        s.read_exact(&mut data)?;
        match o.option {
            OptionCode::EXPORT_NAME => {
                if !ex.names(&data) {
                    // No error reply exists for this option: the protocol closes.
                    return Err(ConnEnd::Violation(format!(
                        "NBD_OPT_EXPORT_NAME of an unknown export {:?}",
                        String::from_utf8_lossy(&data)
                    )));
                }
                let r = ExportNameReplyRepr {
                    size: ex.size,
                    flags: ex.flags,
                    zeroes: !no_zeroes,
                };
                s.write_all(&r.to_bytes())?;
                return Ok(true);
            }
            OptionCode::ABORT => {
                let _ = opt_reply(s, o.option, ReplyType::ACK, &[]);
                return Ok(false);
            }
            OptionCode::LIST => {
                if !data.is_empty() {
                    opt_reply(
                        s,
                        o.option,
                        ReplyType::ERR_INVALID,
                        b"NBD_OPT_LIST takes no data",
                    )?;
                    continue;
                }
                let mut d = (ex.name.len() as u32).to_be_bytes().to_vec();
                d.extend_from_slice(ex.name.as_bytes());
                opt_reply(s, o.option, ReplyType::SERVER, &d)?;
                opt_reply(s, o.option, ReplyType::ACK, &[])?;
            }
            OptionCode::INFO | OptionCode::GO => {
                let req = match InfoRequestRepr::parse(&data) {
                    Ok(r) => r,
                    Err(e) => {
                        opt_reply(
                            s,
                            o.option,
                            ReplyType::ERR_INVALID,
                            e.to_string().as_bytes(),
                        )?;
                        continue;
                    }
                };
                if !ex.names(&req.name) {
                    opt_reply(s, o.option, ReplyType::ERR_UNKNOWN, b"no such export")?;
                    continue;
                }
                let mut infos = vec![
                    InfoRepr::Export {
                        size: ex.size,
                        flags: ex.flags,
                    },
                    // Sent whether asked or not: a client that ignores it still gets
                    // EINVAL, not corrupted data, for an unaligned request.
                    InfoRepr::BlockSize {
                        min: ex.block_size,
                        preferred: ex.block_size.max(4096),
                        max: MAX_PAYLOAD,
                    },
                ];
                if req.requests.contains(&InfoType::NAME) {
                    infos.push(InfoRepr::Text {
                        ty: InfoType::NAME,
                        text: ex.name.as_bytes().to_vec(),
                    });
                }
                for i in infos {
                    opt_reply(s, o.option, ReplyType::INFO, &i.to_bytes())?;
                }
                opt_reply(s, o.option, ReplyType::ACK, &[])?;
                if o.option == OptionCode::GO {
                    return Ok(true);
                }
            }
            // Structured replies, metadata contexts, TLS, extended headers: not spoken; a
            // client falls back to simple replies.
            _ => opt_reply(s, o.option, ReplyType::ERR_UNSUP, &[])?,
        }
    }
}

/// A request on its way to the session thread.
pub struct Job {
    handle: u64,
    cmd: Cmd,
    flags: u16,
    offset: u64,
    length: u32,
    /// A write's payload.
    data: Vec<u8>,
    reply: mpsc::Sender<Vec<u8>>,
}

/// The session thread's inbox.
pub struct Inbox {
    q: Mutex<VecDeque<Job>>,
    nonempty: AtomicBool,
    dev: Device,
}

impl Inbox {
    fn push(&self, j: Job) {
        self.q
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push_back(j);
        // One wake-up for a run of jobs: the session thread takes them all at once.
        if !self.nonempty.swap(true, Ordering::SeqCst) {
            self.dev.wake();
        }
    }
    fn take(&self) -> Vec<Job> {
        self.nonempty.store(false, Ordering::SeqCst);
        self.q
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .drain(..)
            .collect()
    }
    fn has_work(&self) -> bool {
        self.nonempty.load(Ordering::SeqCst)
    }
}

fn simple_reply(handle: u64, error: Errno) -> Vec<u8> {
    SimpleReplyRepr { error, handle }.to_bytes()
}

/// Checks a request against the export: `Some(errno)` to refuse it at once.
fn check_request(r: &RequestRepr, ex: &Export) -> Option<Errno> {
    let bs = u64::from(ex.block_size);
    let ranged = matches!(
        r.cmd,
        Cmd::READ | Cmd::WRITE | Cmd::TRIM | Cmd::WRITE_ZEROES
    );
    match r.cmd {
        Cmd::READ | Cmd::WRITE | Cmd::FLUSH | Cmd::TRIM | Cmd::WRITE_ZEROES => {}
        _ => return Some(Errno::EINVAL),
    }
    if r.flags & !(cmd_flag::FUA | cmd_flag::NO_HOLE) != 0 {
        return Some(Errno::EINVAL);
    }
    if !ranged {
        return None;
    }
    if matches!(r.cmd, Cmd::READ | Cmd::WRITE) && r.length > MAX_PAYLOAD {
        return Some(Errno::EINVAL);
    }
    if r.offset % bs != 0 || u64::from(r.length) % bs != 0 {
        return Some(Errno::EINVAL);
    }
    if r.offset
        .checked_add(u64::from(r.length))
        .is_none_or(|e| e > ex.size)
    {
        return Some(if matches!(r.cmd, Cmd::WRITE | Cmd::WRITE_ZEROES) {
            Errno::ENOSPC
        } else {
            Errno::EINVAL
        });
    }
    None
}

/// The transmission phase of one client: requests in, jobs out.
fn read_requests(
    s: &mut Buffered,
    ex: &Export,
    inbox: &Inbox,
    tx: &mpsc::Sender<Vec<u8>>,
) -> Result<(), ConnEnd> {
    loop {
        let mut h = [0u8; 28];
        s.read_exact(&mut h)?;
        let r = RequestRepr::parse(&h).map_err(|e| ConnEnd::Violation(e.to_string()))?;
        if r.cmd == Cmd::DISC {
            return Ok(());
        }
        let refuse = check_request(&r, ex);
        let mut data = Vec::new();
        if r.has_payload() {
            if r.length > MAX_PAYLOAD {
                // Too large to hold: drop the payload as it comes, then refuse.
                std::io::copy(
                    &mut (&mut *s).take(u64::from(r.length)),
                    &mut std::io::sink(),
                )?;
            } else {
                data = vec![0u8; r.length as usize];
                s.read_exact(&mut data)?;
            }
        }
        if let Some(e) = refuse {
            let _ = tx.send(simple_reply(r.handle, e));
            continue;
        }
        if r.length == 0 && r.cmd != Cmd::FLUSH {
            let _ = tx.send(simple_reply(r.handle, Errno::OK));
            continue;
        }
        inbox.push(Job {
            handle: r.handle,
            cmd: r.cmd,
            flags: r.flags,
            offset: r.offset,
            length: r.length,
            data,
            reply: tx.clone(),
        });
    }
}

fn serve_client(s: Stream, who: String, ex: Arc<Export>, inbox: Arc<Inbox>, verbose: bool) {
    let mut s = Buffered(BufReader::with_capacity(256 << 10, s));
    let end = match handshake(&mut s, &ex) {
        Ok(true) => {
            if verbose {
                eprintln!("softrdma srp nbd: {who}: in the transmission phase");
            }
            let (tx, rx) = mpsc::channel::<Vec<u8>>();
            let writer = match s.0.get_ref().try_clone() {
                Ok(w) => std::thread::spawn(move || {
                    // Replies that are ready together leave in one write: buffered until
                    // nothing more is waiting, then flushed.
                    let mut w = std::io::BufWriter::with_capacity(256 << 10, w);
                    while let Ok(m) = rx.recv() {
                        let mut ok = w.write_all(&m).is_ok();
                        while let (true, Ok(m)) = (ok, rx.try_recv()) {
                            ok = w.write_all(&m).is_ok();
                        }
                        if !ok || w.flush().is_err() {
                            break;
                        }
                    }
                }),
                Err(e) => {
                    eprintln!("softrdma srp nbd: {who}: {e}");
                    return;
                }
            };
            let end = read_requests(&mut s, &ex, &inbox, &tx);
            // The writer ends when the last job of this client has replied (each job holds
            // a sender): every reply the client waits for goes out before the close.
            drop(tx);
            let _ = writer.join();
            end
        }
        Ok(false) => Err(ConnEnd::Client),
        Err(e) => Err(e),
    };
    match end {
        Ok(()) | Err(ConnEnd::Client) => {
            if verbose {
                eprintln!("softrdma srp nbd: {who}: disconnected");
            }
        }
        Err(ConnEnd::Violation(w)) => {
            eprintln!("softrdma srp nbd: {who}: protocol violation, connection closed: {w}")
        }
        Err(ConnEnd::Io(e)) => eprintln!("softrdma srp nbd: {who}: {e}"),
    }
    s.0.get_ref().shutdown();
}

// -------------------------------------------------------------------------------------
// The session side: jobs cut into SCSI commands
// -------------------------------------------------------------------------------------

/// What one SCSI command of a job does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Read,
    Write,
    /// WRITE of a zeroed slot (NBD_CMD_WRITE_ZEROES on a target without WRITE SAME).
    WriteZeros,
    WriteSame,
    Unmap,
    Flush,
}

/// One SCSI command in flight.
#[derive(Debug, Clone, Copy)]
struct Piece {
    job: u64,
    op: Op,
    /// Bytes, from the start of the LUN.
    off: u64,
    len: u32,
    slot: usize,
}

/// A request being carried out.
struct JobState {
    job: Job,
    /// The next byte not yet handed to a command.
    cursor: u64,
    /// Ranges to do again (after a UNIT ATTENTION, or as plain writes after a WRITE SAME
    /// the target does not have).
    redo: Vec<(u64, u32)>,
    flushed: bool,
    in_flight: usize,
    error: Option<Errno>,
    /// A read's data, filled piece by piece.
    read: Vec<u8>,
}

impl JobState {
    fn end(&self) -> u64 {
        self.job.offset + u64::from(self.job.length)
    }
    fn issued_all(&self) -> bool {
        self.redo.is_empty()
            && if self.job.cmd == Cmd::FLUSH {
                self.flushed
            } else {
                self.cursor >= self.end()
            }
    }
}

/// A piece ready to submit.
struct Prepared {
    cdb: [u8; 16],
    n: usize,
    dir: DataDir,
    dlen: u32,
    addr: u64,
}

/// What the target turned out not to have (learned from ILLEGAL REQUEST).
#[derive(Debug, Default)]
struct Lacks {
    write_same: bool,
    unmap: bool,
}

struct Server<'a> {
    s: &'a mut Session,
    lun: u64,
    bs: u64,
    free: Vec<usize>,
    jobs: HashMap<u64, JobState>,
    /// Jobs with commands still to issue, oldest first.
    queue: VecDeque<u64>,
    in_flight: HashMap<u64, Piece>,
    next_id: u64,
    lacks: Lacks,
    verbose: bool,
}

fn slot_addr(slot: usize) -> u64 {
    IOVA + (slot * SLOT) as u64
}

/// The NBD errno for a SCSI result that is not GOOD (what `sd` and the block layer turn
/// the same sense into: `blk_status_to_errno`).
fn errno_of(r: &ScsiResult) -> Errno {
    if r.status == ScsiStatus::RESERVATION_CONFLICT {
        return Errno::EPERM;
    }
    match r.sense_key() {
        // DATA PROTECT: SPACE ALLOCATION FAILED WRITE PROTECT (a thin LUN out of room),
        // then any other (write protected).
        Some((0x07, 0x27, 0x07)) => Errno::ENOSPC,
        Some((0x07, _, _)) => Errno::EPERM,
        // ILLEGAL REQUEST: LOGICAL BLOCK ADDRESS OUT OF RANGE.
        Some((0x05, 0x21, _)) => Errno::EINVAL,
        _ => Errno::EIO,
    }
}

impl Server<'_> {
    fn accept(&mut self, job: Job) {
        let id = self.next_id;
        self.next_id += 1;
        let read = if job.cmd == Cmd::READ {
            vec![0u8; job.length as usize]
        } else {
            Vec::new()
        };
        self.jobs.insert(
            id,
            JobState {
                cursor: job.offset,
                job,
                redo: Vec::new(),
                flushed: false,
                in_flight: 0,
                error: None,
                read,
            },
        );
        self.queue.push_back(id);
    }

    /// The next command of job `id`, if it has one left to issue.
    fn next_piece(&mut self, id: u64, slot: usize) -> Option<Piece> {
        let lacks_ws = self.lacks.write_same;
        let lacks_unmap = self.lacks.unmap;
        let bs = self.bs;
        let j = self.jobs.get_mut(&id)?;
        if j.error.is_some() {
            // A failed job issues nothing more; it replies when its commands are back.
            j.redo.clear();
            j.cursor = j.end();
            j.flushed = true;
            return None;
        }
        let op = match j.job.cmd {
            Cmd::READ => Op::Read,
            Cmd::WRITE => Op::Write,
            Cmd::FLUSH => {
                if j.flushed {
                    return None;
                }
                j.flushed = true;
                return Some(Piece {
                    job: id,
                    op: Op::Flush,
                    off: 0,
                    len: 0,
                    slot,
                });
            }
            Cmd::TRIM if lacks_unmap => {
                // TRIM is advisory: a target without UNMAP keeps the data, which is allowed.
                j.cursor = j.end();
                j.redo.clear();
                return None;
            }
            Cmd::TRIM => Op::Unmap,
            Cmd::WRITE_ZEROES if lacks_ws => Op::WriteZeros,
            Cmd::WRITE_ZEROES => Op::WriteSame,
            _ => return None,
        };
        let limit = match op {
            Op::WriteSame | Op::Unmap => u64::from(WRITE_SAME_BLOCKS) * bs,
            _ => SLOT as u64,
        };
        let (off, len) = if let Some((o, l)) = j.redo.pop() {
            let n = u64::from(l).min(limit);
            if n < u64::from(l) {
                j.redo.push((o + n, (u64::from(l) - n) as u32));
            }
            (o, n)
        } else if j.cursor < j.end() {
            let n = (j.end() - j.cursor).min(limit);
            let o = j.cursor;
            j.cursor += n;
            (o, n)
        } else {
            return None;
        };
        Some(Piece {
            job: id,
            op,
            off,
            len: len as u32,
            slot,
        })
    }

    /// Issues commands while slots, credits and jobs last.
    fn issue(&mut self) -> Result<(), String> {
        // What slots and jobs allow, prepared (data-out copied into its slot) first, then
        // submitted under one lock: their SRP_CMDs leave in one flush.
        let mut batch: Vec<(Piece, Prepared)> = Vec::new();
        while let (Some(&slot), Some(&id)) = (self.free.last(), self.queue.front()) {
            let Some(p) = self.next_piece(id, slot) else {
                self.queue.pop_front();
                self.maybe_reply(id);
                continue;
            };
            self.free.pop();
            // Counted at once: the job must not reply while its piece waits in the batch.
            if let Some(j) = self.jobs.get_mut(&id) {
                j.in_flight += 1;
            }
            let prep = self.prepare(&p)?;
            batch.push((p, prep));
        }
        if batch.is_empty() {
            return Ok(());
        }
        let results = self.submit_batch(&batch)?;
        for (k, (p, _)) in batch.iter().enumerate() {
            match results.get(k) {
                Some(Ok(tag)) => {
                    self.in_flight.insert(*tag, *p);
                    continue;
                }
                // Not tried after an earlier refusal, or no credit or tag: later.
                None | Some(Err(SubmitError::Busy)) => {}
                Some(Err(e)) => {
                    // The session is down for good (reconnects are the session's
                    // business): the request fails, as a dead disk's would.
                    if let Some(j) = self.jobs.get_mut(&p.job) {
                        j.error = Some(Errno::EIO);
                    }
                    if self.verbose {
                        eprintln!("softrdma srp nbd: {e}");
                    }
                }
            }
            self.free.push(p.slot);
            if let Some(j) = self.jobs.get_mut(&p.job) {
                j.in_flight -= 1;
            }
            self.unissue(p);
            if self.jobs.get(&p.job).is_some_and(|j| j.error.is_some()) {
                // A failed job replies once its other pieces are back.
                self.maybe_reply(p.job);
            } else if !self.queue.contains(&p.job) {
                self.queue.push_front(p.job);
            }
        }
        Ok(())
    }

    /// Puts a piece that could not be submitted back to be issued again.
    fn unissue(&mut self, p: &Piece) {
        if let Some(j) = self.jobs.get_mut(&p.job) {
            if p.op == Op::Flush {
                j.flushed = false;
            } else {
                j.redo.push((p.off, p.len));
            }
        }
    }

    /// A piece's CDB and data buffer, its data-out in its slot.
    fn prepare(&mut self, p: &Piece) -> Result<Prepared, String> {
        let addr = slot_addr(p.slot);
        let lba = p.off / self.bs;
        let blocks = (u64::from(p.len) / self.bs) as u32;
        let (cdb, n, dir, dlen): ([u8; 16], usize, DataDir, u32) = match p.op {
            Op::Read => {
                let (c, n) = cdb::rw(false, lba, blocks);
                (c, n, DataDir::FromTarget, p.len)
            }
            Op::Write | Op::WriteZeros => {
                let j = &self.jobs[&p.job];
                if p.op == Op::Write {
                    let at = (p.off - j.job.offset) as usize;
                    let d = &j.job.data[at..at + p.len as usize];
                    self.s
                        .dev
                        .write_mr(self.s.buf.lkey, addr, d)
                        .map_err(|e| e.to_string())?;
                } else {
                    let z = vec![0u8; p.len as usize];
                    self.s
                        .dev
                        .write_mr(self.s.buf.lkey, addr, &z)
                        .map_err(|e| e.to_string())?;
                }
                let (c, n) = if j.job.flags & cmd_flag::FUA != 0 {
                    cdb::write_fua(lba, blocks)
                } else {
                    cdb::rw(true, lba, blocks)
                };
                (c, n, DataDir::ToTarget, p.len)
            }
            Op::WriteSame => {
                let z = vec![0u8; self.bs as usize];
                self.s
                    .dev
                    .write_mr(self.s.buf.lkey, addr, &z)
                    .map_err(|e| e.to_string())?;
                // NO_HOLE asks that the zeros be written, not deallocated; without it the
                // target may unmap them (the UNMAP bit, as sd does for REQ_OP_WRITE_ZEROES).
                let unmap = self.jobs[&p.job].job.flags & cmd_flag::NO_HOLE == 0;
                (
                    cdb::write_same16(lba, blocks, unmap),
                    16,
                    DataDir::ToTarget,
                    self.bs as u32,
                )
            }
            Op::Unmap => {
                let (c, param) = cdb::unmap(lba, blocks);
                self.s
                    .dev
                    .write_mr(self.s.buf.lkey, addr, &param)
                    .map_err(|e| e.to_string())?;
                let mut full = [0u8; 16];
                full[..10].copy_from_slice(&c);
                (full, 10, DataDir::ToTarget, param.len() as u32)
            }
            Op::Flush => {
                let c = cdb::sync_cache();
                let mut full = [0u8; 16];
                full[..10].copy_from_slice(&c);
                (full, 10, DataDir::None, 0)
            }
        };
        Ok(Prepared {
            cdb,
            n,
            dir,
            dlen,
            addr,
        })
    }

    /// Submits the batch in order under one lock, stopping at the first refusal: the
    /// results of those tried.
    fn submit_batch(
        &mut self,
        batch: &[(Piece, Prepared)],
    ) -> Result<Vec<Result<u64, SubmitError>>, String> {
        let mr = self.s.buf;
        let lun = self.lun;
        let segs: Vec<[Segment; 1]> = batch
            .iter()
            .map(|(_, q)| {
                [Segment {
                    mr,
                    addr: q.addr,
                    len: q.dlen,
                }]
            })
            .collect();
        let cmds: Vec<Command<'_>> = batch
            .iter()
            .zip(&segs)
            .map(|((_, q), seg)| {
                let mut c = Command::new(lun, &q.cdb[..q.n]);
                if q.dlen > 0 {
                    c.dir = q.dir;
                    c.segs = seg;
                }
                c
            })
            .collect();
        let port = self.s.port;
        let ini = &mut self.s.ini;
        self.s
            .cm
            .with(port, |_, stack, now| {
                let mut out = Vec::with_capacity(cmds.len());
                for c in &cmds {
                    let r = ini.submit(now, stack, c);
                    let stop = r.is_err();
                    out.push(r);
                    if stop {
                        break;
                    }
                }
                out
            })
            .map_err(|e| e.to_string())
    }

    /// A command ended.
    fn complete(&mut self, tag: u64, result: Result<ScsiResult, IoError>) -> Result<(), String> {
        let Some(p) = self.in_flight.remove(&tag) else {
            return Ok(());
        };
        self.free.push(p.slot);
        let Some(j) = self.jobs.get_mut(&p.job) else {
            return Ok(());
        };
        j.in_flight -= 1;
        match result {
            Ok(r) if r.status == ScsiStatus::GOOD => {
                if p.op == Op::Read {
                    let at = (p.off - j.job.offset) as usize;
                    let dst = &mut j.read[at..at + p.len as usize];
                    self.s
                        .dev
                        .read_mr(self.s.buf.lkey, slot_addr(p.slot), dst)
                        .map_err(|e| e.to_string())?;
                }
            }
            Ok(r) => {
                let key = r.sense_key();
                match (key, p.op) {
                    // UNIT ATTENTION: done again, as the midlayer retries it.
                    (Some((0x06, _, _)), _) => self.unissue(&p),
                    (Some((0x05, asc, _)), Op::WriteSame) if asc == 0x20 || asc == 0x24 => {
                        if !self.lacks.write_same {
                            eprintln!(
                                "softrdma srp nbd: the target has no WRITE SAME(16): \
                                 NBD_CMD_WRITE_ZEROES writes zeros instead"
                            );
                        }
                        self.lacks.write_same = true;
                        self.unissue(&p);
                    }
                    (Some((0x05, asc, _)), Op::Unmap) if asc == 0x20 || asc == 0x24 => {
                        if !self.lacks.unmap {
                            eprintln!(
                                "softrdma srp nbd: the target has no UNMAP: NBD_CMD_TRIM \
                                 succeeds without deallocating (TRIM is advisory)"
                            );
                        }
                        self.lacks.unmap = true;
                    }
                    _ => {
                        if self.verbose {
                            eprintln!(
                                "softrdma srp nbd: {:?} of {} bytes at {}: {}",
                                p.op,
                                p.len,
                                p.off,
                                crate::srp::result_text(&r)
                            );
                        }
                        j.error.get_or_insert(errno_of(&r));
                    }
                }
            }
            // Its channel was lost and a reconnect is under way: done again afterwards (the
            // session holds commands until then), as the midlayer retries a DID_RESET.
            Err(IoError::ChannelDown(_)) if self.s.ini.will_retry() => self.unissue(&p),
            Err(e) => {
                if self.verbose {
                    eprintln!("softrdma srp nbd: {:?} at {}: {e}", p.op, p.off);
                }
                j.error.get_or_insert(Errno::EIO);
            }
        }
        // A job with something to redo goes back in line.
        if let Some(j) = self.jobs.get(&p.job) {
            if !j.issued_all() && !self.queue.contains(&p.job) {
                self.queue.push_back(p.job);
            }
        }
        self.maybe_reply(p.job);
        Ok(())
    }

    /// Replies to job `id` when its last command is back and nothing is left to issue.
    fn maybe_reply(&mut self, id: u64) {
        let done = self
            .jobs
            .get(&id)
            .is_some_and(|j| j.in_flight == 0 && (j.issued_all() || j.error.is_some()));
        if !done {
            return;
        }
        let Some(j) = self.jobs.remove(&id) else {
            return;
        };
        self.queue.retain(|&q| q != id);
        let err = j.error.unwrap_or(Errno::OK);
        let mut m = simple_reply(j.job.handle, err);
        if j.job.cmd == Cmd::READ && err == Errno::OK {
            m.extend_from_slice(&j.read);
        }
        // A client that went away takes its replies with it.
        let _ = j.job.reply.send(m);
    }
}

/// Starts the listener's thread; returns the address clients use (printed for them).
fn listen(
    a: &NbdArgs,
    ex: Arc<Export>,
    inbox: Arc<Inbox>,
    verbose: bool,
) -> Result<String, String> {
    if let Some(path) = &a.unix {
        let _ = std::fs::remove_file(path);
        let l = UnixListener::bind(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let uri = format!("nbd+unix:///{}?socket={}", ex.name, path.display());
        std::thread::spawn(move || {
            for (n, c) in l.incoming().enumerate() {
                match c {
                    Ok(c) => {
                        let (ex, inbox) = (ex.clone(), inbox.clone());
                        std::thread::spawn(move || {
                            serve_client(Stream::Unix(c), format!("client {n}"), ex, inbox, verbose)
                        });
                    }
                    Err(e) => eprintln!("softrdma srp nbd: accept: {e}"),
                }
            }
        });
        return Ok(uri);
    }
    let l = TcpListener::bind(&a.listen).map_err(|e| format!("--listen {}: {e}", a.listen))?;
    let at = l.local_addr().map_err(|e| e.to_string())?;
    let uri = format!("nbd://{at}/{}", ex.name);
    std::thread::spawn(move || {
        for c in l.incoming() {
            match c {
                Ok(c) => {
                    let _ = c.set_nodelay(true);
                    let who = c.peer_addr().map_or("client".into(), |p| p.to_string());
                    let (ex, inbox) = (ex.clone(), inbox.clone());
                    std::thread::spawn(move || {
                        serve_client(Stream::Tcp(c), who, ex, inbox, verbose)
                    });
                }
                Err(e) => eprintln!("softrdma srp nbd: accept: {e}"),
            }
        }
    });
    Ok(uri)
}

/// The buffer `softrdma srp nbd` registers: one slot per command in flight.
pub const BUFFER: usize = SLOTS * SLOT;

/// Serves the LUN until a signal (the caller logs out).
pub fn serve(s: &mut Session, a: &NbdArgs, verbose: bool) -> Result<(), String> {
    let info = crate::srp::lun_info(s, a.lun)?;
    let ex = Arc::new(Export::new(&a.export_name, &info));
    let inbox = Arc::new(Inbox {
        q: Mutex::new(VecDeque::new()),
        nonempty: AtomicBool::new(false),
        dev: s.dev.clone(),
    });
    let uri = listen(a, ex.clone(), inbox.clone(), verbose)?;
    println!(
        "softrdma srp nbd: LUN {} ({} {}, {} blocks of {} bytes) exported as {uri}",
        a.lun, info.vendor, info.product, info.blocks, info.block_size
    );
    let _ = std::io::stdout().flush();
    let mut sv = Server {
        s,
        lun: a.lun,
        bs: u64::from(info.block_size),
        free: (0..SLOTS).rev().collect(),
        jobs: HashMap::new(),
        queue: VecDeque::new(),
        in_flight: HashMap::new(),
        next_id: 1,
        lacks: Lacks::default(),
        verbose,
    };
    loop {
        for j in inbox.take() {
            sv.accept(j);
        }
        sv.issue()?;
        let wake = inbox.clone();
        sv.s.pump_or(SIGNAL_SLICE, &move || wake.has_work())?;
        for c in sv.s.take_done() {
            sv.complete(c.tag, c.result)?;
        }
        if sv.s.ini.is_done() {
            // The device is given up (dev_loss_tmo, or a loss with reconnects off): what
            // was waiting fails, and the export goes with it.
            for j in inbox.take() {
                sv.accept(j);
            }
            sv.issue()?;
            return Err(sv.s.why_down());
        }
    }
}
