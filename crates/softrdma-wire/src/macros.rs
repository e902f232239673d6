//! `code_point!`: open newtypes for protocol code points.

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
