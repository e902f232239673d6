//! The one error type of the wire layer: what was wrong, and which field.

use core::fmt;

/// Why a buffer could not be read as the format asked for.
///
/// Errors name the field (or structure) at fault as a `&'static str`, so a decoder can say
/// "REQ.private_data: truncated" rather than "parse error".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Error {
    /// The buffer ends before `what` does: `need` bytes were required, `got` were there.
    Truncated {
        what: &'static str,
        need: usize,
        got: usize,
    },
    /// A length field (or the buffer length itself) is inconsistent with the format.
    BadLength { what: &'static str, len: usize },
    /// A field holds a value the format forbids (not merely an unknown code point, which
    /// is kept as a value).
    BadValue { field: &'static str, value: u64 },
    /// The format itself is one we do not speak (e.g. a MAD base version other than 1).
    Unsupported { what: &'static str, value: u64 },
}

/// Result of a wire operation.
pub type Result<T> = core::result::Result<T, Error>;

impl Error {
    /// Shorthand used by every `new_checked`: a buffer of `got` bytes is shorter than `need`.
    pub fn check_len(what: &'static str, need: usize, got: usize) -> Result<()> {
        if got < need {
            Err(Error::Truncated { what, need, got })
        } else {
            Ok(())
        }
    }

    /// The field (or structure) this error is about.
    pub fn field(&self) -> &'static str {
        match *self {
            Error::Truncated { what, .. } => what,
            Error::BadLength { what, .. } => what,
            Error::BadValue { field, .. } => field,
            Error::Unsupported { what, .. } => what,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Error::Truncated { what, need, got } => {
                write!(f, "{what}: truncated ({got} bytes, need {need})")
            }
            Error::BadLength { what, len } => write!(f, "{what}: bad length {len}"),
            Error::BadValue { field, value } => write!(f, "{field}: invalid value {value:#x}"),
            Error::Unsupported { what, value } => write!(f, "{what}: unsupported ({value:#x})"),
        }
    }
}

impl std::error::Error for Error {}
