//! The crate's macros, shared by every format module (`#[macro_use]` in `lib.rs`):
//!
//! - `code_point!`: open newtypes for protocol code points;
//! - `fixed_view!` / `bit_accessors!`: the `Packet<T>` view of a fixed-size structure and its
//!   getters/setters from a table of [`crate::field::Bits`];
//! - `min_view!` / `be_fields!`: a view of a buffer with a minimum length and its getters/setters
//!   from a table of big-endian byte offsets;
//! - `fixed_repr!` / `to_bytes!`: the `Repr` methods that are the same for every format
//!   (`parse` via a checked view and `from_packet`, `buffer_len`, `to_bytes`), so a message
//!   file states only its field table, its `Repr`, `from_packet`, `emit` and `Dissect`.

/// Declares an open newtype over an integer for a protocol code point (opcode, attribute ID,
/// reject reason, status, ...): named constants, the spec's text for each, and room for every
/// value the wire may carry. An unknown value is a value, never a parse error.
///
/// ```ignore
/// code_point! {
///     /// Why a REJ was sent.
///     pub struct RejectReason(u16) {
///         NO_QP = 1 => "No QP available",
///     }
/// }
/// ```
macro_rules! code_point {
    (
        $(#[$meta:meta])*
        $vis:vis struct $name:ident($ty:ty) {
            $( $(#[$cmeta:meta])* $konst:ident = $value:expr => $text:expr, )*
        }
    ) => {
        $(#[$meta])*
        #[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
        $vis struct $name(pub $ty);

        #[allow(dead_code)]
        impl $name {
            $( $(#[$cmeta])* pub const $konst: $name = $name($value); )*

            /// Every named value, in declaration order.
            pub const ALL: &'static [$name] = &[$($name($value)),*];

            /// The constant's name (`NO_QP`), if the value is a known one.
            pub fn name(&self) -> Option<&'static str> {
                match self.0 {
                    $( x if x == $value => Some(stringify!($konst)), )*
                    _ => None,
                }
            }

            /// The spec's text for the value, if it is a known one.
            pub fn description(&self) -> Option<&'static str> {
                match self.0 {
                    $( x if x == $value => Some($text), )*
                    _ => None,
                }
            }

            /// Whether the value is one the spec names.
            pub fn is_known(&self) -> bool {
                self.name().is_some()
            }
        }

        impl core::fmt::Debug for $name {
            fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
                match self.name() {
                    Some(n) => f.write_str(n),
                    None => write!(f, "{}({:#x})", stringify!($name), self.0),
                }
            }
        }

        impl core::fmt::Display for $name {
            fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
                match self.description() {
                    Some(d) => f.write_str(d),
                    None => write!(f, "Unknown ({:#x})", self.0),
                }
            }
        }

        impl From<$ty> for $name {
            fn from(v: $ty) -> $name {
                $name(v)
            }
        }

        impl From<$name> for $ty {
            fn from(v: $name) -> $ty {
                v.0
            }
        }
    };
}

/// Declares the `Packet<T>` view type (or another name) of a fixed-size structure, or of a
/// fixed-size header followed by a payload: `new_unchecked`,
/// `new_checked` (length check), `into_inner`, `as_bytes`.
macro_rules! fixed_view {
    ($(#[$meta:meta])* struct $name:ident($len:expr, $what:expr);) => {
        $(#[$meta])*
        #[derive(Debug, Clone, PartialEq, Eq)]
        pub struct $name<T: AsRef<[u8]>> {
            buffer: T,
        }

        impl<T: AsRef<[u8]>> $name<T> {
            /// Wraps a buffer without checking its length (for emitting into a buffer sized
            /// with `Repr::buffer_len`). Accessors panic if the buffer is too short.
            pub const fn new_unchecked(buffer: T) -> $name<T> {
                $name { buffer }
            }

            /// Wraps a buffer after checking it is long enough for every field; no accessor
            /// panics afterwards.
            pub fn new_checked(buffer: T) -> $crate::Result<$name<T>> {
                let p = $name { buffer };
                p.check_len()?;
                Ok(p)
            }

            /// Checks that the buffer holds the whole structure.
            pub fn check_len(&self) -> $crate::Result<()> {
                $crate::Error::check_len($what, $len, self.buffer.as_ref().len())
            }

            /// The wrapped buffer.
            pub fn into_inner(self) -> T {
                self.buffer
            }

            /// The structure's bytes (the first `LEN` bytes of the buffer).
            pub fn as_bytes(&self) -> &[u8] {
                let b = self.buffer.as_ref();
                &b[..b.len().min($len)]
            }
        }
    };
}

/// Declares getters and setters for integer and flag fields given as
/// [`crate::field::Bits`] constants.
macro_rules! bit_accessors {
    ($( $(#[$m:meta])* $get:ident / $set:ident : $ty:ty = $bits:expr; )*) => {
        impl<T: AsRef<[u8]>> Packet<T> {
            $(
                $(#[$m])*
                #[inline]
                pub fn $get(&self) -> $ty {
                    <$ty as $crate::field::BitValue>::from_bits(($bits).get(self.buffer.as_ref()))
                }
            )*
        }

        impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
            $(
                $(#[$m])*
                #[inline]
                pub fn $set(&mut self, value: $ty) {
                    ($bits).set(self.buffer.as_mut(), $crate::field::BitValue::to_bits(value))
                }
            )*
        }
    };
}

/// Inside an `impl Repr` block: `parse` (a checked `$packet` view, then `from_packet`),
/// `buffer_len` (always `$len`) and `to_bytes`, for a `Repr` of a fixed-size structure.
///
/// ```ignore
/// impl Repr {
///     pub fn from_packet<T: AsRef<[u8]>>(p: &Packet<T>) -> Repr { ... }
///     fixed_repr!(Packet, CM_DATA_LEN);
///     pub fn emit(&self, buf: &mut [u8]) { ... }
/// }
/// ```
///
/// A third argument names the view-to-`Repr` constructor when it is not `from_packet` (the
/// RoCE headers call it `parse_packet`).
macro_rules! fixed_repr {
    ($packet:ident, $len:expr) => {
        fixed_repr!($packet, $len, from_packet);
    };
    ($packet:ident, $len:expr, $from:ident) => {
        /// Parses a buffer at least `buffer_len()` long (the length is checked first).
        pub fn parse(buf: &[u8]) -> $crate::Result<Self> {
            Ok(Self::$from(&$packet::new_checked(buf)?))
        }

        /// The structure's fixed size.
        pub const fn buffer_len(&self) -> usize {
            $len
        }

        to_bytes!();
    };
}

/// Inside an `impl` block of a type with `buffer_len()` and `emit()`: `to_bytes()`, a vector
/// of `buffer_len()` bytes that `emit` wrote.
macro_rules! to_bytes {
    () => {
        /// The structure as bytes (`buffer_len()` of them, as `emit` writes them).
        pub fn to_bytes(&self) -> Vec<u8> {
            let mut v = vec![0u8; self.buffer_len()];
            self.emit(&mut v);
            v
        }
    };
}

/// Declares a zero-copy view type over a buffer at least `$min` bytes long (a variable-length
/// structure: an SRP IU, a CDB); unlike `fixed_view!`, `as_bytes` is the whole buffer.
macro_rules! min_view {
    ($(#[$m:meta])* $name:ident, $min:expr, $what:expr) => {
        $(#[$m])*
        #[derive(Debug, Clone, PartialEq, Eq)]
        pub struct $name<T: AsRef<[u8]>> {
            buffer: T,
        }

        impl<T: AsRef<[u8]>> $name<T> {
            /// Wraps a buffer without checking its length (for emitting into a buffer sized
            /// with `Repr::buffer_len`).
            pub fn new_unchecked(buffer: T) -> Self {
                $name { buffer }
            }

            /// Wraps a buffer, checking that the fixed part is there.
            pub fn new_checked(buffer: T) -> $crate::Result<Self> {
                $crate::Error::check_len($what, $min, buffer.as_ref().len())?;
                Ok($name { buffer })
            }

            /// The buffer back.
            pub fn into_inner(self) -> T {
                self.buffer
            }

            /// The whole buffer.
            pub fn as_bytes(&self) -> &[u8] {
                self.buffer.as_ref()
            }
        }
    };
}

/// Getters and setters for big-endian fields at fixed byte offsets of a view. `u24` stands
/// for a 3-byte field read into a `u32` (QPNs, PSNs, EE contexts).
macro_rules! be_fields {
    ($pkt:ident { $( $(#[$m:meta])* $get:ident, $set:ident : $ty:tt @ $off:expr; )* }) => {
        impl<T: AsRef<[u8]>> $pkt<T> {
            $(
                $(#[$m])*
                #[inline]
                pub fn $get(&self) -> be_fields!(@ty $ty) {
                    be_fields!(@get $ty, self.buffer.as_ref(), $off)
                }
            )*
        }
        impl<T: AsRef<[u8]> + AsMut<[u8]>> $pkt<T> {
            $(
                #[inline]
                pub fn $set(&mut self, v: be_fields!(@ty $ty)) {
                    be_fields!(@set $ty, self.buffer.as_mut(), $off, v)
                }
            )*
        }
    };
    (@ty u24) => { u32 };
    (@ty $t:ty) => { $t };
    (@get u8, $b:expr, $o:expr) => { $b[$o] };
    (@get u24, $b:expr, $o:expr) => { $crate::field::read_u24($b, $o) };
    (@get u16, $b:expr, $o:expr) => { $crate::field::read_u16($b, $o) };
    (@get u32, $b:expr, $o:expr) => { $crate::field::read_u32($b, $o) };
    (@get u64, $b:expr, $o:expr) => { $crate::field::read_u64($b, $o) };
    (@get [u8; $n:literal], $b:expr, $o:expr) => { $crate::field::read_array::<$n>($b, $o) };
    (@set u8, $b:expr, $o:expr, $v:expr) => { $b[$o] = $v };
    (@set u24, $b:expr, $o:expr, $v:expr) => { $crate::field::write_u24($b, $o, $v) };
    (@set u16, $b:expr, $o:expr, $v:expr) => { $crate::field::write_u16($b, $o, $v) };
    (@set u32, $b:expr, $o:expr, $v:expr) => { $crate::field::write_u32($b, $o, $v) };
    (@set u64, $b:expr, $o:expr, $v:expr) => { $crate::field::write_u64($b, $o, $v) };
    (@set [u8; $n:literal], $b:expr, $o:expr, $v:expr) => { $b[$o..$o + $n].copy_from_slice(&$v) };
}
