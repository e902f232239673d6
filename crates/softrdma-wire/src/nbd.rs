//! The NBD protocol (the Network Block Device, `doc/proto.md` of the NBD project): the fixed
//! newstyle handshake, the option haggling, and the transmission phase's requests and simple
//! replies. `softrdma srp nbd` serves an SRP LUN with it.
//!
//! Every structure is big-endian with fixed offsets; the variable parts (option data, a
//! write's payload, a read's data) follow a fixed header and are the caller's to read, so
//! that a server reads a header, learns how much follows, and decides (a limit, a refusal)
//! before reading it. Magics are checked by `parse`: a wrong magic is a protocol violation
//! the peer cannot recover from, and `parse` says which one.

use crate::dissect::{Dissect, Tree};
use crate::{Error, Result};

/// `NBDMAGIC`: the first 8 bytes a server sends.
pub const NBD_MAGIC: u64 = 0x4e42_444d_4147_4943;
/// `IHAVEOPT`: the newstyle magic, in the greeting and at the start of every option.
pub const IHAVEOPT: u64 = 0x4948_4156_454f_5054;
/// The magic of an option reply.
pub const OPTION_REPLY_MAGIC: u64 = 0x0003_e889_0455_65a9;
/// The magic of a transmission request.
pub const REQUEST_MAGIC: u32 = 0x2560_9513;
/// The magic of a simple reply.
pub const SIMPLE_REPLY_MAGIC: u32 = 0x6744_6698;

/// Handshake flag (server): fixed newstyle.
pub const FLAG_FIXED_NEWSTYLE: u16 = 1 << 0;
/// Handshake flag (server): the 124 zero bytes after NBD_OPT_EXPORT_NAME's reply may go.
pub const FLAG_NO_ZEROES: u16 = 1 << 1;
/// Client flag: the client speaks fixed newstyle.
pub const CLIENT_FIXED_NEWSTYLE: u32 = 1 << 0;
/// Client flag: the client wants no zero padding.
pub const CLIENT_NO_ZEROES: u32 = 1 << 1;

/// Transmission flags (the export's `flags` in NBD_INFO_EXPORT).
pub mod tflag {
    pub const HAS_FLAGS: u16 = 1 << 0;
    pub const READ_ONLY: u16 = 1 << 1;
    pub const SEND_FLUSH: u16 = 1 << 2;
    pub const SEND_FUA: u16 = 1 << 3;
    pub const ROTATIONAL: u16 = 1 << 4;
    pub const SEND_TRIM: u16 = 1 << 5;
    pub const SEND_WRITE_ZEROES: u16 = 1 << 6;
    pub const SEND_DF: u16 = 1 << 7;
    pub const CAN_MULTI_CONN: u16 = 1 << 8;
    pub const SEND_RESIZE: u16 = 1 << 9;
    pub const SEND_CACHE: u16 = 1 << 10;
    pub const SEND_FAST_ZERO: u16 = 1 << 11;
}

/// Command flags (a request's `flags`).
pub mod cmd_flag {
    pub const FUA: u16 = 1 << 0;
    pub const NO_HOLE: u16 = 1 << 1;
    pub const DF: u16 = 1 << 2;
    pub const REQ_ONE: u16 = 1 << 3;
    pub const FAST_ZERO: u16 = 1 << 4;
}

code_point! {
    /// An option the client sends during the handshake (`NBD_OPT_*`).
    pub struct OptionCode(u32) {
        EXPORT_NAME = 1 => "NBD_OPT_EXPORT_NAME",
        ABORT = 2 => "NBD_OPT_ABORT",
        LIST = 3 => "NBD_OPT_LIST",
        STARTTLS = 5 => "NBD_OPT_STARTTLS",
        INFO = 6 => "NBD_OPT_INFO",
        GO = 7 => "NBD_OPT_GO",
        STRUCTURED_REPLY = 8 => "NBD_OPT_STRUCTURED_REPLY",
        LIST_META_CONTEXT = 9 => "NBD_OPT_LIST_META_CONTEXT",
        SET_META_CONTEXT = 10 => "NBD_OPT_SET_META_CONTEXT",
        EXTENDED_HEADERS = 11 => "NBD_OPT_EXTENDED_HEADERS",
    }
}

code_point! {
    /// The type of an option reply (`NBD_REP_*`); bit 31 set means an error.
    pub struct ReplyType(u32) {
        ACK = 1 => "NBD_REP_ACK",
        SERVER = 2 => "NBD_REP_SERVER",
        INFO = 3 => "NBD_REP_INFO",
        META_CONTEXT = 4 => "NBD_REP_META_CONTEXT",
        ERR_UNSUP = 0x8000_0001 => "NBD_REP_ERR_UNSUP: unknown option",
        ERR_POLICY = 0x8000_0002 => "NBD_REP_ERR_POLICY: forbidden by policy",
        ERR_INVALID = 0x8000_0003 => "NBD_REP_ERR_INVALID: syntactically or semantically invalid",
        ERR_PLATFORM = 0x8000_0004 => "NBD_REP_ERR_PLATFORM: not supported on this platform",
        ERR_TLS_REQD = 0x8000_0005 => "NBD_REP_ERR_TLS_REQD: TLS required",
        ERR_UNKNOWN = 0x8000_0006 => "NBD_REP_ERR_UNKNOWN: no such export",
        ERR_SHUTDOWN = 0x8000_0007 => "NBD_REP_ERR_SHUTDOWN: the server is shutting down",
        ERR_BLOCK_SIZE_REQD = 0x8000_0008 => "NBD_REP_ERR_BLOCK_SIZE_REQD: block size constraints required",
        ERR_TOO_BIG = 0x8000_0009 => "NBD_REP_ERR_TOO_BIG: request or reply too large",
    }
}

impl ReplyType {
    pub fn is_error(self) -> bool {
        self.0 & 0x8000_0000 != 0
    }
}

code_point! {
    /// The type of an NBD_REP_INFO reply, and of an information request (`NBD_INFO_*`).
    pub struct InfoType(u16) {
        EXPORT = 0 => "NBD_INFO_EXPORT",
        NAME = 1 => "NBD_INFO_NAME",
        DESCRIPTION = 2 => "NBD_INFO_DESCRIPTION",
        BLOCK_SIZE = 3 => "NBD_INFO_BLOCK_SIZE",
    }
}

code_point! {
    /// A transmission command (`NBD_CMD_*`).
    pub struct Cmd(u16) {
        READ = 0 => "NBD_CMD_READ",
        WRITE = 1 => "NBD_CMD_WRITE",
        DISC = 2 => "NBD_CMD_DISC",
        FLUSH = 3 => "NBD_CMD_FLUSH",
        TRIM = 4 => "NBD_CMD_TRIM",
        CACHE = 5 => "NBD_CMD_CACHE",
        WRITE_ZEROES = 6 => "NBD_CMD_WRITE_ZEROES",
        BLOCK_STATUS = 7 => "NBD_CMD_BLOCK_STATUS",
        RESIZE = 8 => "NBD_CMD_RESIZE",
    }
}

code_point! {
    /// The error of a reply (the protocol's errno values, the same on every platform).
    pub struct Errno(u32) {
        OK = 0 => "success",
        EPERM = 1 => "EPERM: operation not permitted",
        EIO = 5 => "EIO: input/output error",
        ENOMEM = 12 => "ENOMEM: cannot allocate memory",
        EINVAL = 22 => "EINVAL: invalid argument",
        ENOSPC = 28 => "ENOSPC: no space left on device",
        EOVERFLOW = 75 => "EOVERFLOW: value too large",
        ENOTSUP = 95 => "ENOTSUP: operation not supported",
        ESHUTDOWN = 108 => "ESHUTDOWN: server shutting down",
    }
}

fn magic_err(field: &'static str, value: u64) -> Error {
    Error::BadValue { field, value }
}

// ---------------------------------------------------------------------------------------------
// The server's greeting (18 bytes)
// ---------------------------------------------------------------------------------------------

/// Field offsets of the newstyle greeting.
pub mod greeting_field {
    pub const NBD_MAGIC: usize = 0;
    pub const IHAVEOPT: usize = 8;
    pub const FLAGS: usize = 16;
    pub const LEN: usize = 18;
}

min_view!(
    /// A view of the server's greeting: `NBDMAGIC`, `IHAVEOPT`, the handshake flags.
    GreetingPacket,
    greeting_field::LEN,
    "nbd.greeting"
);

be_fields!(GreetingPacket {
    nbd_magic, set_nbd_magic: u64 @ greeting_field::NBD_MAGIC;
    ihaveopt, set_ihaveopt: u64 @ greeting_field::IHAVEOPT;
    handshake_flags, set_handshake_flags: u16 @ greeting_field::FLAGS;
});

/// The newstyle greeting.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct GreetingRepr {
    pub handshake_flags: u16,
}

impl GreetingRepr {
    pub fn parse(buf: &[u8]) -> Result<GreetingRepr> {
        let p = GreetingPacket::new_checked(buf)?;
        if p.nbd_magic() != NBD_MAGIC {
            return Err(magic_err("nbd.greeting.magic", p.nbd_magic()));
        }
        if p.ihaveopt() != IHAVEOPT {
            return Err(magic_err("nbd.greeting.ihaveopt", p.ihaveopt()));
        }
        Ok(GreetingRepr {
            handshake_flags: p.handshake_flags(),
        })
    }
    pub fn buffer_len(&self) -> usize {
        greeting_field::LEN
    }
    pub fn emit(&self, buf: &mut [u8]) {
        let mut p = GreetingPacket::new_unchecked(buf);
        p.set_nbd_magic(NBD_MAGIC);
        p.set_ihaveopt(IHAVEOPT);
        p.set_handshake_flags(self.handshake_flags);
    }
    to_bytes!();
}

impl Dissect for GreetingRepr {
    fn dissect(&self, t: &mut Tree) {
        t.subtree("nbd_greeting", "NBD greeting", |t| {
            t.hex("flags", "Handshake Flags", self.handshake_flags, 4);
            t.flag(
                "fixed_newstyle",
                "Fixed Newstyle",
                self.handshake_flags & FLAG_FIXED_NEWSTYLE != 0,
            );
            t.flag(
                "no_zeroes",
                "No Zeroes",
                self.handshake_flags & FLAG_NO_ZEROES != 0,
            );
        });
    }
}

// ---------------------------------------------------------------------------------------------
// An option request's header (16 bytes; `length` bytes of data follow)
// ---------------------------------------------------------------------------------------------

/// Field offsets of an option request.
pub mod option_field {
    pub const MAGIC: usize = 0;
    pub const OPTION: usize = 8;
    pub const LENGTH: usize = 12;
    pub const LEN: usize = 16;
}

min_view!(
    /// A view of an option request's header.
    OptionPacket,
    option_field::LEN,
    "nbd.option"
);

be_fields!(OptionPacket {
    magic, set_magic: u64 @ option_field::MAGIC;
    option, set_option: u32 @ option_field::OPTION;
    length, set_length: u32 @ option_field::LENGTH;
});

/// An option request's header: the option and how many bytes of data follow.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct OptionRepr {
    pub option: OptionCode,
    pub length: u32,
}

impl OptionRepr {
    pub fn parse(buf: &[u8]) -> Result<OptionRepr> {
        let p = OptionPacket::new_checked(buf)?;
        if p.magic() != IHAVEOPT {
            return Err(magic_err("nbd.option.magic", p.magic()));
        }
        Ok(OptionRepr {
            option: OptionCode(p.option()),
            length: p.length(),
        })
    }
    pub fn buffer_len(&self) -> usize {
        option_field::LEN
    }
    pub fn emit(&self, buf: &mut [u8]) {
        let mut p = OptionPacket::new_unchecked(buf);
        p.set_magic(IHAVEOPT);
        p.set_option(self.option.0);
        p.set_length(self.length);
    }
    to_bytes!();
}

impl Dissect for OptionRepr {
    fn dissect(&self, t: &mut Tree) {
        t.subtree("nbd_option", "NBD option", |t| {
            t.code("option", "Option", self.option.0, self.option);
            t.dec("length", "Data Length", self.length);
        });
    }
}

// ---------------------------------------------------------------------------------------------
// An option reply's header (20 bytes; `length` bytes of data follow)
// ---------------------------------------------------------------------------------------------

/// Field offsets of an option reply.
pub mod option_reply_field {
    pub const MAGIC: usize = 0;
    pub const OPTION: usize = 8;
    pub const REPLY: usize = 12;
    pub const LENGTH: usize = 16;
    pub const LEN: usize = 20;
}

min_view!(
    /// A view of an option reply's header.
    OptionReplyPacket,
    option_reply_field::LEN,
    "nbd.option_reply"
);

be_fields!(OptionReplyPacket {
    magic, set_magic: u64 @ option_reply_field::MAGIC;
    option, set_option: u32 @ option_reply_field::OPTION;
    reply, set_reply: u32 @ option_reply_field::REPLY;
    length, set_length: u32 @ option_reply_field::LENGTH;
});

/// An option reply's header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct OptionReplyRepr {
    pub option: OptionCode,
    pub reply: ReplyType,
    pub length: u32,
}

impl OptionReplyRepr {
    pub fn parse(buf: &[u8]) -> Result<OptionReplyRepr> {
        let p = OptionReplyPacket::new_checked(buf)?;
        if p.magic() != OPTION_REPLY_MAGIC {
            return Err(magic_err("nbd.option_reply.magic", p.magic()));
        }
        Ok(OptionReplyRepr {
            option: OptionCode(p.option()),
            reply: ReplyType(p.reply()),
            length: p.length(),
        })
    }
    pub fn buffer_len(&self) -> usize {
        option_reply_field::LEN
    }
    pub fn emit(&self, buf: &mut [u8]) {
        let mut p = OptionReplyPacket::new_unchecked(buf);
        p.set_magic(OPTION_REPLY_MAGIC);
        p.set_option(self.option.0);
        p.set_reply(self.reply.0);
        p.set_length(self.length);
    }
    to_bytes!();

    /// The header followed by `data` (its length put in the header).
    pub fn with_data(option: OptionCode, reply: ReplyType, data: &[u8]) -> Vec<u8> {
        let h = OptionReplyRepr {
            option,
            reply,
            length: data.len() as u32,
        };
        let mut v = h.to_bytes();
        v.extend_from_slice(data);
        v
    }
}

impl Dissect for OptionReplyRepr {
    fn dissect(&self, t: &mut Tree) {
        t.subtree("nbd_option_reply", "NBD option reply", |t| {
            t.code("option", "Option", self.option.0, self.option);
            t.code_hex("reply", "Reply Type", self.reply.0, 8, self.reply);
            t.dec("length", "Data Length", self.length);
        });
    }
}

// ---------------------------------------------------------------------------------------------
// NBD_OPT_INFO / NBD_OPT_GO data: the export name and the information requested
// ---------------------------------------------------------------------------------------------

/// The data of NBD_OPT_INFO and NBD_OPT_GO: `u32` name length, the name, `u16` count, the
/// information types asked for. The whole option data must be exactly this long (the
/// protocol's NBD_REP_ERR_INVALID otherwise).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct InfoRequestRepr {
    pub name: Vec<u8>,
    pub requests: Vec<InfoType>,
}

impl InfoRequestRepr {
    pub fn parse(buf: &[u8]) -> Result<InfoRequestRepr> {
        Error::check_len("nbd.info_request", 6, buf.len())?;
        let nlen = crate::field::read_u32(buf, 0) as usize;
        let need = 4usize.saturating_add(nlen).saturating_add(2);
        Error::check_len("nbd.info_request.name", need, buf.len())?;
        let name = buf[4..4 + nlen].to_vec();
        let count = usize::from(crate::field::read_u16(buf, 4 + nlen));
        let total = need + 2 * count;
        if buf.len() != total {
            return Err(Error::BadLength {
                what: "nbd.info_request",
                len: buf.len(),
            });
        }
        let requests = (0..count)
            .map(|i| InfoType(crate::field::read_u16(buf, need + 2 * i)))
            .collect();
        Ok(InfoRequestRepr { name, requests })
    }
    pub fn buffer_len(&self) -> usize {
        4 + self.name.len() + 2 + 2 * self.requests.len()
    }
    pub fn emit(&self, buf: &mut [u8]) {
        let n = self.name.len();
        crate::field::write_u32(buf, 0, n as u32);
        buf[4..4 + n].copy_from_slice(&self.name);
        crate::field::write_u16(buf, 4 + n, self.requests.len() as u16);
        for (i, r) in self.requests.iter().enumerate() {
            crate::field::write_u16(buf, 6 + n + 2 * i, r.0);
        }
    }
    to_bytes!();
}

impl Dissect for InfoRequestRepr {
    fn dissect(&self, t: &mut Tree) {
        t.subtree("nbd_info_request", "NBD_OPT_INFO/GO data", |t| {
            t.text("name", "Export Name", String::from_utf8_lossy(&self.name));
            t.list("requests", "Information Requests", |t| {
                for r in &self.requests {
                    t.code("request", "Request", r.0, r);
                }
            });
        });
    }
}

// ---------------------------------------------------------------------------------------------
// NBD_REP_INFO data
// ---------------------------------------------------------------------------------------------

/// The data of an NBD_REP_INFO reply the server sends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InfoRepr {
    /// NBD_INFO_EXPORT: the size and the transmission flags.
    Export { size: u64, flags: u16 },
    /// NBD_INFO_BLOCK_SIZE: minimum, preferred and maximum block sizes.
    BlockSize { min: u32, preferred: u32, max: u32 },
    /// NBD_INFO_NAME or NBD_INFO_DESCRIPTION: text.
    Text { ty: InfoType, text: Vec<u8> },
}

impl InfoRepr {
    pub fn parse(buf: &[u8]) -> Result<InfoRepr> {
        Error::check_len("nbd.info", 2, buf.len())?;
        let ty = InfoType(crate::field::read_u16(buf, 0));
        let exact = |n: usize| {
            if buf.len() == n {
                Ok(())
            } else {
                Err(Error::BadLength {
                    what: "nbd.info",
                    len: buf.len(),
                })
            }
        };
        match ty {
            InfoType::EXPORT => {
                exact(12)?;
                Ok(InfoRepr::Export {
                    size: crate::field::read_u64(buf, 2),
                    flags: crate::field::read_u16(buf, 10),
                })
            }
            InfoType::BLOCK_SIZE => {
                exact(14)?;
                Ok(InfoRepr::BlockSize {
                    min: crate::field::read_u32(buf, 2),
                    preferred: crate::field::read_u32(buf, 6),
                    max: crate::field::read_u32(buf, 10),
                })
            }
            InfoType::NAME | InfoType::DESCRIPTION => Ok(InfoRepr::Text {
                ty,
                text: buf[2..].to_vec(),
            }),
            _ => Err(Error::Unsupported {
                what: "nbd.info.type",
                value: u64::from(ty.0),
            }),
        }
    }
    pub fn buffer_len(&self) -> usize {
        match self {
            InfoRepr::Export { .. } => 12,
            InfoRepr::BlockSize { .. } => 14,
            InfoRepr::Text { text, .. } => 2 + text.len(),
        }
    }
    pub fn emit(&self, buf: &mut [u8]) {
        match self {
            InfoRepr::Export { size, flags } => {
                crate::field::write_u16(buf, 0, InfoType::EXPORT.0);
                crate::field::write_u64(buf, 2, *size);
                crate::field::write_u16(buf, 10, *flags);
            }
            InfoRepr::BlockSize {
                min,
                preferred,
                max,
            } => {
                crate::field::write_u16(buf, 0, InfoType::BLOCK_SIZE.0);
                crate::field::write_u32(buf, 2, *min);
                crate::field::write_u32(buf, 6, *preferred);
                crate::field::write_u32(buf, 10, *max);
            }
            InfoRepr::Text { ty, text } => {
                crate::field::write_u16(buf, 0, ty.0);
                buf[2..].copy_from_slice(text);
            }
        }
    }
    to_bytes!();
}

impl Dissect for InfoRepr {
    fn dissect(&self, t: &mut Tree) {
        t.subtree("nbd_info", "NBD_REP_INFO data", |t| match self {
            InfoRepr::Export { size, flags } => {
                t.code("type", "Type", InfoType::EXPORT.0, InfoType::EXPORT);
                t.dec("size", "Export Size", *size);
                t.hex("flags", "Transmission Flags", *flags, 4);
            }
            InfoRepr::BlockSize {
                min,
                preferred,
                max,
            } => {
                t.code("type", "Type", InfoType::BLOCK_SIZE.0, InfoType::BLOCK_SIZE);
                t.dec("min", "Minimum Block Size", *min);
                t.dec("preferred", "Preferred Block Size", *preferred);
                t.dec("max", "Maximum Block Size", *max);
            }
            InfoRepr::Text { ty, text } => {
                t.code("type", "Type", ty.0, ty);
                t.text("text", "Text", String::from_utf8_lossy(text));
            }
        });
    }
}

// ---------------------------------------------------------------------------------------------
// A transmission request (28 bytes; a write's payload follows)
// ---------------------------------------------------------------------------------------------

/// Field offsets of a transmission request.
pub mod request_field {
    pub const MAGIC: usize = 0;
    pub const FLAGS: usize = 4;
    pub const TYPE: usize = 6;
    pub const HANDLE: usize = 8;
    pub const OFFSET: usize = 16;
    pub const LENGTH: usize = 24;
    pub const LEN: usize = 28;
}

min_view!(
    /// A view of a transmission request.
    RequestPacket,
    request_field::LEN,
    "nbd.request"
);

be_fields!(RequestPacket {
    magic, set_magic: u32 @ request_field::MAGIC;
    flags, set_flags: u16 @ request_field::FLAGS;
    cmd, set_cmd: u16 @ request_field::TYPE;
    handle, set_handle: u64 @ request_field::HANDLE;
    offset, set_offset: u64 @ request_field::OFFSET;
    length, set_length: u32 @ request_field::LENGTH;
});

/// A transmission request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RequestRepr {
    /// Command flags ([`cmd_flag`]).
    pub flags: u16,
    pub cmd: Cmd,
    /// The client's cookie, echoed in the reply.
    pub handle: u64,
    pub offset: u64,
    pub length: u32,
}

impl RequestRepr {
    pub fn parse(buf: &[u8]) -> Result<RequestRepr> {
        let p = RequestPacket::new_checked(buf)?;
        if p.magic() != REQUEST_MAGIC {
            return Err(magic_err("nbd.request.magic", u64::from(p.magic())));
        }
        Ok(RequestRepr {
            flags: p.flags(),
            cmd: Cmd(p.cmd()),
            handle: p.handle(),
            offset: p.offset(),
            length: p.length(),
        })
    }
    pub fn buffer_len(&self) -> usize {
        request_field::LEN
    }
    pub fn emit(&self, buf: &mut [u8]) {
        let mut p = RequestPacket::new_unchecked(buf);
        p.set_magic(REQUEST_MAGIC);
        p.set_flags(self.flags);
        p.set_cmd(self.cmd.0);
        p.set_handle(self.handle);
        p.set_offset(self.offset);
        p.set_length(self.length);
    }
    to_bytes!();

    /// Whether a payload of `length` bytes follows the header (NBD_CMD_WRITE only).
    pub fn has_payload(&self) -> bool {
        self.cmd == Cmd::WRITE
    }
}

impl Dissect for RequestRepr {
    fn dissect(&self, t: &mut Tree) {
        t.subtree("nbd_request", "NBD request", |t| {
            t.hex("flags", "Command Flags", self.flags, 4);
            t.code("type", "Type", self.cmd.0, self.cmd);
            t.hex("handle", "Handle", self.handle, 16);
            t.dec("offset", "Offset", self.offset);
            t.dec("length", "Length", self.length);
        });
    }
}

// ---------------------------------------------------------------------------------------------
// A simple reply (16 bytes; a successful read's data follows)
// ---------------------------------------------------------------------------------------------

/// Field offsets of a simple reply.
pub mod simple_reply_field {
    pub const MAGIC: usize = 0;
    pub const ERROR: usize = 4;
    pub const HANDLE: usize = 8;
    pub const LEN: usize = 16;
}

min_view!(
    /// A view of a simple reply.
    SimpleReplyPacket,
    simple_reply_field::LEN,
    "nbd.simple_reply"
);

be_fields!(SimpleReplyPacket {
    magic, set_magic: u32 @ simple_reply_field::MAGIC;
    error, set_error: u32 @ simple_reply_field::ERROR;
    handle, set_handle: u64 @ simple_reply_field::HANDLE;
});

/// A simple reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SimpleReplyRepr {
    pub error: Errno,
    pub handle: u64,
}

impl SimpleReplyRepr {
    pub fn parse(buf: &[u8]) -> Result<SimpleReplyRepr> {
        let p = SimpleReplyPacket::new_checked(buf)?;
        if p.magic() != SIMPLE_REPLY_MAGIC {
            return Err(magic_err("nbd.simple_reply.magic", u64::from(p.magic())));
        }
        Ok(SimpleReplyRepr {
            error: Errno(p.error()),
            handle: p.handle(),
        })
    }
    pub fn buffer_len(&self) -> usize {
        simple_reply_field::LEN
    }
    pub fn emit(&self, buf: &mut [u8]) {
        let mut p = SimpleReplyPacket::new_unchecked(buf);
        p.set_magic(SIMPLE_REPLY_MAGIC);
        p.set_error(self.error.0);
        p.set_handle(self.handle);
    }
    to_bytes!();
}

impl Dissect for SimpleReplyRepr {
    fn dissect(&self, t: &mut Tree) {
        t.subtree("nbd_simple_reply", "NBD simple reply", |t| {
            t.code("error", "Error", self.error.0, self.error);
            t.hex("handle", "Handle", self.handle, 16);
        });
    }
}

// ---------------------------------------------------------------------------------------------
// NBD_OPT_EXPORT_NAME's reply (10 bytes, then 124 zeros unless NO_ZEROES was agreed)
// ---------------------------------------------------------------------------------------------

/// The answer to NBD_OPT_EXPORT_NAME: the size, the transmission flags, and the zero padding
/// unless both sides agreed to drop it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ExportNameReplyRepr {
    pub size: u64,
    pub flags: u16,
    pub zeroes: bool,
}

impl ExportNameReplyRepr {
    /// Parses the 10-byte form (the padding, if any, is the caller's to skip).
    pub fn parse(buf: &[u8]) -> Result<ExportNameReplyRepr> {
        Error::check_len("nbd.export_name_reply", 10, buf.len())?;
        Ok(ExportNameReplyRepr {
            size: crate::field::read_u64(buf, 0),
            flags: crate::field::read_u16(buf, 8),
            zeroes: false,
        })
    }
    pub fn buffer_len(&self) -> usize {
        if self.zeroes {
            134
        } else {
            10
        }
    }
    pub fn emit(&self, buf: &mut [u8]) {
        crate::field::write_u64(buf, 0, self.size);
        crate::field::write_u16(buf, 8, self.flags);
        buf[10..].fill(0);
    }
    to_bytes!();
}

impl Dissect for ExportNameReplyRepr {
    fn dissect(&self, t: &mut Tree) {
        t.subtree("nbd_export_name_reply", "NBD_OPT_EXPORT_NAME reply", |t| {
            t.dec("size", "Export Size", self.size);
            t.hex("flags", "Transmission Flags", self.flags, 4);
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The bytes as the protocol document lays them out, and back.
    #[test]
    fn layouts_and_magics() {
        let g = GreetingRepr {
            handshake_flags: FLAG_FIXED_NEWSTYLE | FLAG_NO_ZEROES,
        }
        .to_bytes();
        assert_eq!(&g[..8], b"NBDMAGIC");
        assert_eq!(&g[8..16], b"IHAVEOPT");
        assert_eq!(&g[16..], &[0, 3]);
        assert_eq!(GreetingRepr::parse(&g).unwrap().handshake_flags, 3);

        let r = RequestRepr {
            flags: cmd_flag::FUA,
            cmd: Cmd::WRITE,
            handle: 0x0102_0304_0506_0708,
            offset: 4096,
            length: 512,
        };
        let b = r.to_bytes();
        assert_eq!(&b[..4], &[0x25, 0x60, 0x95, 0x13]);
        assert_eq!(&b[4..8], &[0, 1, 0, 1]);
        assert_eq!(RequestRepr::parse(&b), Ok(r));
        let mut bad = b.clone();
        bad[0] ^= 1;
        assert!(matches!(
            RequestRepr::parse(&bad),
            Err(Error::BadValue {
                field: "nbd.request.magic",
                ..
            })
        ));
        assert!(RequestRepr::parse(&b[..27]).is_err());

        let s = SimpleReplyRepr {
            error: Errno::EINVAL,
            handle: 9,
        }
        .to_bytes();
        assert_eq!(&s[..8], &[0x67, 0x44, 0x66, 0x98, 0, 0, 0, 22]);

        let o = OptionReplyRepr::with_data(OptionCode::GO, ReplyType::ACK, &[]);
        assert_eq!(o.len(), 20);
        assert_eq!(&o[..8], &0x0003_e889_0455_65a9u64.to_be_bytes());
        assert_eq!(OptionReplyRepr::parse(&o).unwrap().reply, ReplyType::ACK);
    }

    #[test]
    fn info_request_must_be_exact() {
        let r = InfoRequestRepr {
            name: b"lun0".to_vec(),
            requests: vec![InfoType::BLOCK_SIZE, InfoType::NAME],
        };
        let b = r.to_bytes();
        assert_eq!(b.len(), 4 + 4 + 2 + 4);
        assert_eq!(InfoRequestRepr::parse(&b), Ok(r));
        // A trailing byte, a count that runs past the end, a name longer than the data.
        let mut extra = b.clone();
        extra.push(0);
        assert!(InfoRequestRepr::parse(&extra).is_err());
        assert!(InfoRequestRepr::parse(&b[..b.len() - 1]).is_err());
        assert!(InfoRequestRepr::parse(&[0xff, 0xff, 0xff, 0xff, 0, 0]).is_err());
    }

    #[test]
    fn info_replies() {
        for i in [
            InfoRepr::Export {
                size: 64 << 20,
                flags: tflag::HAS_FLAGS | tflag::SEND_FLUSH,
            },
            InfoRepr::BlockSize {
                min: 512,
                preferred: 4096,
                max: 32 << 20,
            },
            InfoRepr::Text {
                ty: InfoType::NAME,
                text: b"x".to_vec(),
            },
        ] {
            assert_eq!(InfoRepr::parse(&i.to_bytes()), Ok(i.clone()));
            let _ = i.to_tree().to_text(0);
        }
        assert!(InfoRepr::parse(&[0, 0, 1]).is_err());
    }
}
