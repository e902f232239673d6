//! The plain-data structures of rdma-core 44's `<infiniband/verbs.h>` that both libraries lay
//! out: libibverbs for its own calls, librdmacm because `<rdma/rdma_cma.h>` embeds them
//! (`ibv_ah_attr` in `rdma_ud_param`, `ibv_qp_cap` in the QP attributes it passes through).
//! One definition, so the two cannot drift; each library's `abi` re-exports them and its
//! layout test checks them against Debian's headers. Structures holding pointers to verbs
//! objects stay in each library (libibverbs types them, librdmacm keeps them opaque).

#![allow(non_camel_case_types)]

/// `union ibv_gid`: 16 bytes, 8-aligned (its `global` member is two `__be64`).
#[repr(C, align(8))]
#[derive(Clone, Copy, Default, PartialEq, Eq, Debug)]
pub struct ibv_gid {
    /// `raw[16]`.
    pub raw: [u8; 16],
}

/// `struct ibv_global_route`.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct ibv_global_route {
    pub dgid: ibv_gid,
    pub flow_label: u32,
    pub sgid_index: u8,
    pub hop_limit: u8,
    pub traffic_class: u8,
}

/// `struct ibv_ah_attr`.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct ibv_ah_attr {
    pub grh: ibv_global_route,
    pub dlid: u16,
    pub sl: u8,
    pub src_path_bits: u8,
    pub static_rate: u8,
    pub is_global: u8,
    pub port_num: u8,
}

/// `struct ibv_qp_cap`.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct ibv_qp_cap {
    pub max_send_wr: u32,
    pub max_recv_wr: u32,
    pub max_send_sge: u32,
    pub max_recv_sge: u32,
    pub max_inline_data: u32,
}

/// Gives a library's `ibv_qp_init_attr_ex` (`$ex`) a `legacy()` method: its leading members,
/// which are a `struct ibv_qp_init_attr` (`$legacy`), what the legacy create call reads. A
/// macro because each library types the pointers of these structures its own way.
#[macro_export]
macro_rules! qp_init_attr_legacy {
    ($ex:ident => $legacy:ident) => {
        impl $ex {
            /// Its leading members, which are a `struct ibv_qp_init_attr`: what the legacy
            /// create call reads.
            pub fn legacy(&self) -> $legacy {
                $legacy {
                    qp_context: self.qp_context,
                    send_cq: self.send_cq,
                    recv_cq: self.recv_cq,
                    srq: self.srq,
                    cap: self.cap,
                    qp_type: self.qp_type,
                    sq_sig_all: self.sq_sig_all,
                }
            }
        }
    };
}

/// Declares `pub const LAYOUT: &[(&str, usize)]`: `(name, value)` for every `sizeof(struct T)`
/// (`T`) and `offsetof(struct T, f)` (`T.f`) a library relies on, from its `#[repr(C)]` types
/// (`layout_table! { T { f, g } U { } }`); its `tests/abi/layout.c` prints the same names from
/// the C header and [`check_layout`](crate::audit::check_layout) compares the two.
#[macro_export]
macro_rules! layout_table {
    ($( $ty:ident { $($field:ident),* } )*) => {
        /// `(name, value)` for every `sizeof(struct T)` (`T`) and `offsetof(struct T, f)`
        /// (`T.f`) the library relies on; `tests/abi/layout.c` prints the same names from the
        /// C header.
        pub const LAYOUT: &[(&str, usize)] = &[
            $(
                (stringify!($ty), ::core::mem::size_of::<$ty>()),
                $( (
                    concat!(stringify!($ty), ".", stringify!($field)),
                    ::core::mem::offset_of!($ty, $field),
                ), )*
            )*
        ];
    };
}
