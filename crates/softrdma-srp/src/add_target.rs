//! The target description Linux's `ib_srp` takes in `/sys/class/infiniband_srp/srp-*/add_target`
//! (`srp_parse_options`): comma-separated `key=value` options, either the IB CM form
//!
//! ```text
//! id_ext=<SRP ID ext>,ioc_guid=<SRP IOC GUID>,dgid=<dest GID>,pkey=<P_Key>,service_id=<service ID>
//! ```
//!
//! or the RDMA CM form
//!
//! ```text
//! id_ext=<SRP ID ext>,ioc_guid=<SRP IOC GUID>,[src=<IP address>,]dest=<IP address>:<port>
//! ```
//!
//! plus the optional tuning options (`ch_count`, `queue_size`, `max_it_iu_size`, ...). The
//! values are read as ib_srp reads them: GUIDs, IDs and the P_Key in hex (`kstrtoull(p, 16)`,
//! an optional `0x`), `dgid` exactly 32 hex digits, numbers as `match_int` (decimal, `0x` hex or
//! leading-`0` octal), IPv6 addresses in brackets. An unknown option is refused with
//! ib_srp's message.

use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::str::FromStr;

use softrdma_wire::Gid;

/// How to reach the target.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dest {
    /// RDMA CM: `dest=IP:PORT`, optionally `src=IP`.
    Rdma {
        dest: SocketAddr,
        src: Option<IpAddr>,
    },
    /// IB CM: `dgid=…,pkey=…,service_id=…` (ib_srp takes `src=` here too and ignores it;
    /// we use it as our address, since a RoCE GID is one).
    Ib {
        dgid: Gid,
        pkey: u16,
        service_id: u64,
        src: Option<IpAddr>,
    },
}

/// A parsed `add_target` string.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AddTarget {
    pub id_ext: u64,
    pub ioc_guid: u64,
    pub dest: Dest,
    /// `initiator_ext`: the first half of our initiator port identifier (default 0).
    pub initiator_ext: u64,
    /// `ch_count`: RDMA channels (default: ib_srp's `min(max(4 × nodes, completion
    /// vectors), CPUs)`, decided by the caller).
    pub ch_count: Option<u32>,
    /// `queue_size`: commands per channel (`can_queue`); the rings hold 2 more (one response,
    /// one task management IU). Default 62 (a 64-entry ring).
    pub queue_size: Option<u32>,
    /// `max_it_iu_size`: a cap on the requested initiator-to-target IU length.
    pub max_it_iu_size: Option<u32>,
    /// `cmd_sg_entries`: descriptors an SRP_CMD carries (1..=255, default 12).
    pub cmd_sg_entries: Option<u8>,
    /// `tl_retry_count`: the RC retry count (2..=7, default 7).
    pub tl_retry_count: Option<u8>,
    /// `max_sect`: the largest transfer in 512-byte sectors.
    pub max_sect: Option<u32>,
    /// `max_cmd_per_lun`.
    pub max_cmd_per_lun: Option<u32>,
    /// Options taken and kept, without effect here (`io_class`, `allow_ext_sg`,
    /// `sg_tablesize`, `comp_vector`, `target_can_queue`), as `key=value`.
    pub other: Vec<(String, String)>,
}

/// Why an `add_target` string was refused (ib_srp's `pr_warn` texts).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseError(pub String);

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ParseError {}

fn err<T>(s: String) -> Result<T, ParseError> {
    Err(ParseError(s))
}

/// `kstrtoull(p, 16, ...)`: hex digits, optionally after `0x`.
fn hex_u64(s: &str) -> Option<u64> {
    let h = s
        .strip_prefix("0x")
        .or_else(|| s.strip_prefix("0X"))
        .unwrap_or(s);
    if h.is_empty() || h.len() > 16 || !h.bytes().all(|c| c.is_ascii_hexdigit()) {
        return None;
    }
    u64::from_str_radix(h, 16).ok()
}

/// `match_int`: `simple_strtol(.., 0)` over the whole value.
fn match_int(s: &str) -> Option<i64> {
    let (neg, s) = match s.strip_prefix('-') {
        Some(r) => (true, r),
        None => (false, s),
    };
    let v = if let Some(h) = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        i64::from_str_radix(h, 16).ok()?
    } else if s.len() > 1 && s.starts_with('0') {
        i64::from_str_radix(&s[1..], 8).ok()?
    } else {
        s.parse::<i64>().ok()?
    };
    Some(if neg { -v } else { v })
}

/// `srp_parse_in`: `a.b.c.d[:port]` or `[v6][:port]`. Returns the address and the port
/// (if one was given).
fn parse_in(s: &str) -> Option<(IpAddr, Option<u16>)> {
    if let Some(rest) = s.strip_prefix('[') {
        let (addr, after) = rest.split_once(']')?;
        let ip: IpAddr = addr.split('%').next()?.parse().ok()?;
        if !ip.is_ipv6() {
            return None;
        }
        return match after {
            "" => Some((ip, None)),
            p => Some((ip, Some(p.strip_prefix(':')?.parse().ok()?))),
        };
    }
    match s.rsplit_once(':') {
        Some((a, p)) => {
            let ip: std::net::Ipv4Addr = a.parse().ok()?;
            Some((IpAddr::V4(ip), Some(p.parse().ok()?)))
        }
        None => Some((IpAddr::V4(s.parse().ok()?), None)),
    }
}

/// 32 hex digits → a GID.
fn parse_dgid(s: &str) -> Option<Gid> {
    if s.len() != 32 || !s.bytes().all(|c| c.is_ascii_hexdigit()) {
        return None;
    }
    let mut g = [0u8; 16];
    for (i, b) in g.iter_mut().enumerate() {
        *b = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(Gid(g))
}

impl FromStr for AddTarget {
    type Err = ParseError;

    fn from_str(s: &str) -> Result<AddTarget, ParseError> {
        let mut id_ext = None;
        let mut ioc_guid = None;
        let mut dgid = None;
        let mut pkey = None;
        let mut service_id = None;
        let mut src = None;
        let mut dest = None;
        let mut t = AddTarget {
            id_ext: 0,
            ioc_guid: 0,
            dest: Dest::Rdma {
                dest: SocketAddr::from(([0, 0, 0, 0], 0)),
                src: None,
            },
            initiator_ext: 0,
            ch_count: None,
            queue_size: None,
            max_it_iu_size: None,
            cmd_sg_entries: None,
            tl_retry_count: None,
            max_sect: None,
            max_cmd_per_lun: None,
            other: Vec::new(),
        };
        let int = |v: &str, what: &str, lo: i64, hi: i64| -> Result<i64, ParseError> {
            match match_int(v) {
                Some(n) if (lo..=hi).contains(&n) => Ok(n),
                // ib_srp's words, then the range it takes.
                Some(_) => err(format!("bad {what} parameter '{v}' (give {lo} to {hi})")),
                None => err(format!("match_int() failed for {what} parameter '{v}'")),
            }
        };
        for p in s.split([',', '\n']) {
            let p = p.trim_matches(|c: char| c == ' ' || c == '\r');
            if p.is_empty() {
                continue;
            }
            let Some((k, v)) = p.split_once('=') else {
                return err(format!(
                    "unknown parameter or missing value '{p}' in target creation request"
                ));
            };
            match k {
                "id_ext" => {
                    id_ext = Some(
                        hex_u64(v)
                            .ok_or_else(|| ParseError(format!("invalid id_ext parameter '{v}'")))?,
                    )
                }
                "ioc_guid" => {
                    ioc_guid =
                        Some(hex_u64(v).ok_or_else(|| {
                            ParseError(format!("invalid ioc_guid parameter '{v}'"))
                        })?)
                }
                "dgid" => {
                    dgid = Some(
                        parse_dgid(v)
                            .ok_or_else(|| ParseError(format!("bad dest GID parameter '{v}'")))?,
                    )
                }
                "pkey" => {
                    let n = u32::from_str_radix(v.trim_start_matches("0x"), 16)
                        .ok()
                        .filter(|&n| n <= 0xffff)
                        .ok_or_else(|| ParseError(format!("bad P_Key parameter '{v}'")))?;
                    pkey = Some(n as u16);
                }
                "service_id" => {
                    service_id = Some(
                        hex_u64(v)
                            .ok_or_else(|| ParseError(format!("bad service_id parameter '{v}'")))?,
                    )
                }
                "src" => {
                    let (ip, _) = parse_in(v)
                        .ok_or_else(|| ParseError(format!("bad source parameter '{v}'")))?;
                    src = Some(ip);
                }
                "dest" => match parse_in(v) {
                    Some((ip, Some(port))) => dest = Some(SocketAddr::new(ip, port)),
                    _ => {
                        return err(format!(
                            "bad dest parameter '{v}' (dest is IP:PORT, such as 10.0.0.1:5555 \
                             or [fd00::1]:5555)"
                        ))
                    }
                },
                "initiator_ext" => {
                    t.initiator_ext = hex_u64(v)
                        .ok_or_else(|| ParseError(format!("bad initiator_ext value '{v}'")))?
                }
                "ch_count" => t.ch_count = Some(int(v, "channel count", 1, 1 << 16)? as u32),
                "queue_size" => t.queue_size = Some(int(v, "queue_size", 1, 1 << 16)? as u32),
                "max_it_iu_size" => {
                    t.max_it_iu_size =
                        Some(int(v, "max it_iu_size", 0, i64::from(u32::MAX))? as u32)
                }
                "cmd_sg_entries" => {
                    t.cmd_sg_entries = Some(int(v, "max cmd_sg_entries", 1, 255)? as u8)
                }
                "tl_retry_count" => t.tl_retry_count = Some(int(v, "tl_retry_count", 2, 7)? as u8),
                "max_sect" => t.max_sect = Some(int(v, "max sect", 1, i64::from(u32::MAX))? as u32),
                "max_cmd_per_lun" => {
                    t.max_cmd_per_lun =
                        Some(int(v, "max cmd_per_lun", 1, i64::from(u32::MAX))? as u32)
                }
                "io_class" | "allow_ext_sg" | "sg_tablesize" | "comp_vector"
                | "target_can_queue" => t.other.push((k.to_string(), v.to_string())),
                _ => {
                    return err(format!(
                        "unknown parameter or missing value '{p}' in target creation request"
                    ))
                }
            }
        }
        // ib_srp's words, then which ones.
        let missing = |which: &str| {
            ParseError(format!(
                "target creation request is missing one or more parameters (missing: {which})"
            ))
        };
        let mut absent: Vec<&str> = Vec::new();
        if id_ext.is_none() {
            absent.push("id_ext=");
        }
        if ioc_guid.is_none() {
            absent.push("ioc_guid=");
        }
        let have_ib = dgid.is_some() || pkey.is_some() || service_id.is_some();
        if dest.is_none() && !have_ib {
            absent.push("dest=IP:PORT (or dgid=, pkey= and service_id= for the IB CM)");
        } else if dest.is_none() {
            for (k, set) in [
                ("dgid=", dgid.is_some()),
                ("pkey=", pkey.is_some()),
                ("service_id=", service_id.is_some()),
            ] {
                if !set {
                    absent.push(k);
                }
            }
        }
        if !absent.is_empty() {
            return Err(missing(&absent.join(", ")));
        }
        t.id_ext = id_ext.unwrap_or_default();
        t.ioc_guid = ioc_guid.unwrap_or_default();
        t.dest = match (dest, dgid, pkey, service_id) {
            (Some(dest), _, _, _) => {
                if let Some(s) = src {
                    if s.is_ipv4() != dest.is_ipv4() {
                        return err(format!(
                            "src={s} and dest={dest} are not of the same address family"
                        ));
                    }
                }
                Dest::Rdma { dest, src }
            }
            (None, Some(dgid), Some(pkey), Some(service_id)) => Dest::Ib {
                dgid,
                pkey,
                service_id,
                src,
            },
            _ => return Err(missing("dest=IP:PORT")),
        };
        Ok(t)
    }
}

impl AddTarget {
    /// Whether logins go through the RDMA CM (`target->using_rdma_cm`).
    pub fn using_rdma_cm(&self) -> bool {
        matches!(self.dest, Dest::Rdma { .. })
    }

    /// The target port identifier of the login request: `id_ext` then `ioc_guid`, big-endian.
    pub fn target_port_id(&self) -> [u8; 16] {
        let mut t = [0u8; 16];
        t[..8].copy_from_slice(&self.id_ext.to_be_bytes());
        t[8..].copy_from_slice(&self.ioc_guid.to_be_bytes());
        t
    }

    /// Where the target is, as ib_srp prints it (`dest %pIS` or the dgid).
    pub fn dest_name(&self) -> String {
        match self.dest {
            Dest::Rdma { dest, .. } => dest.to_string(),
            Dest::Ib { dgid, .. } => std::net::Ipv6Addr::from(dgid.0).to_string(),
        }
    }
}

impl fmt::Display for AddTarget {
    /// The canonical string (what `softrdma srpt` prints; ib_srp takes it back).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "id_ext={:016x},ioc_guid={:016x}",
            self.id_ext, self.ioc_guid
        )?;
        match self.dest {
            Dest::Rdma { dest, src } => {
                if let Some(s) = src {
                    match s {
                        IpAddr::V4(a) => write!(f, ",src={a}")?,
                        IpAddr::V6(a) => write!(f, ",src=[{a}]")?,
                    }
                }
                match dest {
                    SocketAddr::V4(d) => write!(f, ",dest={d}")?,
                    SocketAddr::V6(d) => write!(f, ",dest=[{}]:{}", d.ip(), d.port())?,
                }
            }
            Dest::Ib {
                dgid,
                pkey,
                service_id,
                src,
            } => {
                if let Some(s) = src {
                    write!(f, ",src={s}")?;
                }
                f.write_str(",dgid=")?;
                for b in dgid.0 {
                    write!(f, "{b:02x}")?;
                }
                write!(f, ",pkey={pkey:04x},service_id={service_id:016x}")?;
            }
        }
        if self.initiator_ext != 0 {
            write!(f, ",initiator_ext={:016x}", self.initiator_ext)?;
        }
        for (k, v) in [
            ("ch_count", self.ch_count),
            ("queue_size", self.queue_size),
            ("max_it_iu_size", self.max_it_iu_size),
            ("cmd_sg_entries", self.cmd_sg_entries.map(u32::from)),
            ("tl_retry_count", self.tl_retry_count.map(u32::from)),
            ("max_sect", self.max_sect),
            ("max_cmd_per_lun", self.max_cmd_per_lun),
        ] {
            if let Some(v) = v {
                write!(f, ",{k}={v}")?;
            }
        }
        for (k, v) in &self.other {
            write!(f, ",{k}={v}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rdma_cm_form_as_srpt_prints_it() {
        let t: AddTarget = "id_ext=505400fffe770001,ioc_guid=505400fffe770001,dest=10.77.0.1:5555"
            .parse()
            .expect("parse");
        assert_eq!(t.id_ext, 0x5054_00ff_fe77_0001);
        assert_eq!(
            t.dest,
            Dest::Rdma {
                dest: "10.77.0.1:5555".parse().unwrap(),
                src: None
            }
        );
        assert_eq!(
            t.to_string(),
            "id_ext=505400fffe770001,ioc_guid=505400fffe770001,dest=10.77.0.1:5555"
        );
        let t: AddTarget = "id_ext=1,ioc_guid=2,src=10.0.0.2,dest=10.0.0.1:5555"
            .parse()
            .expect("src");
        assert_eq!(
            t.dest,
            Dest::Rdma {
                dest: "10.0.0.1:5555".parse().unwrap(),
                src: Some("10.0.0.2".parse().unwrap())
            }
        );
        assert!("id_ext=1,ioc_guid=2,src=10.0.0.2,dest=[fd77::1]:5555"
            .parse::<AddTarget>()
            .is_err());
        let t: AddTarget =
            "id_ext=0x1,ioc_guid=2,dest=[fd77::1]:5555,ch_count=2,queue_size=0x20,max_it_iu_size=1024\n"
                .parse()
                .expect("v6");
        assert_eq!(
            (t.ch_count, t.queue_size, t.max_it_iu_size),
            (Some(2), Some(32), Some(1024))
        );
        assert_eq!(t.dest_name(), "[fd77::1]:5555");
        assert_eq!(t.target_port_id()[7], 1);
        assert_eq!(t.target_port_id()[15], 2);
    }

    #[test]
    fn ib_cm_form_and_refusals() {
        let t: AddTarget = "id_ext=505400fffe770001,ioc_guid=505400fffe770001,dgid=00000000000000000000ffff0a4d0001,pkey=ffff,service_id=505400fffe770001"
            .parse()
            .expect("ib");
        let Dest::Ib {
            dgid,
            pkey,
            service_id,
            ..
        } = t.dest
        else {
            panic!()
        };
        assert_eq!(dgid.to_ip(), "10.77.0.1".parse::<IpAddr>().unwrap());
        assert_eq!((pkey, service_id), (0xffff, 0x5054_00ff_fe77_0001));
        assert!(t
            .to_string()
            .contains(",dgid=00000000000000000000ffff0a4d0001,pkey=ffff,"));
        let e = |s: &str| s.parse::<AddTarget>().unwrap_err().0;
        assert_eq!(
            e("id_ext=1,ioc_guid=1"),
            "target creation request is missing one or more parameters (missing: dest=IP:PORT \
             (or dgid=, pkey= and service_id= for the IB CM))"
        );
        assert_eq!(
            e("ioc_guid=1,dgid=12,pkey=ffff"),
            "bad dest GID parameter '12'"
        );
        assert_eq!(
            e("id_ext=1,dest=10.0.0.1:1"),
            "target creation request is missing one or more parameters (missing: ioc_guid=)"
        );
        assert_eq!(
            e("id_ext=1,ioc_guid=1,dest=10.0.0.1"),
            "bad dest parameter '10.0.0.1' (dest is IP:PORT, such as 10.0.0.1:5555 or \
             [fd00::1]:5555)"
        );
        assert_eq!(
            e("id_ext=1,ioc_guid=1,dest=10.0.0.1:1,queue_size=100000"),
            "bad queue_size parameter '100000' (give 1 to 65536)"
        );
        assert_eq!(
            e("id_ext=1,ioc_guid=1,dest=10.0.0.1:1,foo=1"),
            "unknown parameter or missing value 'foo=1' in target creation request"
        );
        assert_eq!(e("id_ext=xyz,ioc_guid=1"), "invalid id_ext parameter 'xyz'");
        assert_eq!(
            e("id_ext=1,ioc_guid=1,dgid=12,pkey=ffff,service_id=1"),
            "bad dest GID parameter '12'"
        );
        assert_eq!(
            e("id_ext=1,ioc_guid=1,dest=10.0.0.1:1,tl_retry_count=9"),
            "bad tl_retry_count parameter '9' (give 2 to 7)"
        );
    }
}
