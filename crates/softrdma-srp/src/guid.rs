//! GUIDs as people write them: 16 hex digits (with or without `0x`), or the colon form
//! ib_srpt names its target ports with (`5054:00ff:fe77:000a`, `srpt_format_guid`).

/// Parses a GUID; `None` if it is neither form.
pub fn parse_guid(s: &str) -> Option<u64> {
    let s = s.trim();
    if s.contains(':') {
        let parts: Vec<&str> = s.split(':').collect();
        if parts.len() != 4 {
            return None;
        }
        let mut g = 0u64;
        for p in parts {
            if p.is_empty() || p.len() > 4 || !p.bytes().all(|c| c.is_ascii_hexdigit()) {
                return None;
            }
            g = g << 16 | u64::from(u16::from_str_radix(p, 16).ok()?);
        }
        return Some(g);
    }
    let h = s
        .strip_prefix("0x")
        .or_else(|| s.strip_prefix("0X"))
        .unwrap_or(s);
    if h.len() != 16 || !h.bytes().all(|c| c.is_ascii_hexdigit()) {
        return None;
    }
    u64::from_str_radix(h, 16).ok()
}

/// The colon form (`srpt_format_guid`).
pub fn colon_guid(g: u64) -> String {
    format!(
        "{:04x}:{:04x}:{:04x}:{:04x}",
        g >> 48,
        (g >> 32) & 0xffff,
        (g >> 16) & 0xffff,
        g & 0xffff
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forms() {
        let g = 0x5054_00ff_fe77_000a;
        assert_eq!(parse_guid("505400fffe77000a"), Some(g));
        assert_eq!(parse_guid("0x505400fffe77000a"), Some(g));
        assert_eq!(parse_guid("5054:00ff:fe77:000a"), Some(g));
        assert_eq!(parse_guid("5054:ff:fe77:a"), Some(0x5054_00ff_fe77_000a));
        assert_eq!(colon_guid(g), "5054:00ff:fe77:000a");
        for bad in [
            "",
            "0x12",
            "505400fffe77000a0",
            "5054:00ff:fe77",
            "zz5400fffe77000a",
        ] {
            assert_eq!(parse_guid(bad), None, "{bad}");
        }
    }
}
