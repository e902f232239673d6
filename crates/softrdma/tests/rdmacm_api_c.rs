//! `tests/c/rdmacm_api.c` over softrdma's `librdmacm.so.1` and `libibverbs.so.1` (through
//! `softrdma run`): the calls that answered ENOSYS before — `rdma_create_srq(_ex)` /
//! `rdma_destroy_srq` with an RC connection receiving through the id's SRQ, `rdma_notify`,
//! `RDMA_OPTION_IB_PATH`, `rdma_getaddrinfo` with a service name, `rdma_create_qp_ex`'s
//! extended fields — each line held to what rdma-core over the kernel's CM answers.
//! Needs Debian's `librdmacm-dev` and `libibverbs-dev` headers (skipped with a message
//! without them) and the libraries built (`cargo build -p softrdma-verbs -p softrdma-rdmacm`).

#![allow(clippy::unwrap_used)] // tests: a failed unwrap is a failed test

mod common;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::{finish, Proc, BIN};

#[test]
fn srq_notify_ib_path_service_names_and_qp_ex_over_softrdma() {
    if !Path::new("/usr/include/rdma/rdma_cma.h").exists()
        || !Path::new("/usr/include/infiniband/sa.h").exists()
    {
        eprintln!(
            "SKIPPED: <rdma/rdma_cma.h> missing (apt-get install librdmacm-dev libibverbs-dev)"
        );
        return;
    }
    common::libs_built(&["libsoftrdma_verbs.so", "libsoftrdma_rdmacm.so"]);
    let tmp = std::env::temp_dir().join(format!("softrdma-rdmacm-api-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c/rdmacm_api.c");
    let exe = tmp.join("rdmacm_api");
    let st = Command::new("cc")
        .args(["-std=gnu11", "-Wall", "-Werror", "-o"])
        .arg(&exe)
        .arg(&src)
        .args(["-lrdmacm", "-libverbs"])
        .status()
        .unwrap();
    assert!(st.success(), "cc failed");
    let c = Proc::spawn(Command::new(BIN).arg("run").arg("--").arg(&exe));
    let (code, out, err) = finish(c, Duration::from_secs(60));
    let _ = std::fs::remove_dir_all(&tmp);
    assert_eq!(code, Some(0), "{out}{err}");
    let want = [
        "getaddrinfo echo 0 port 7",
        "getaddrinfo unknown -8 eai_service 1",
        "notify unconnected -1 Invalid argument",
        "ib_path unresolved -1 Invalid argument",
        "ib_path short -1 Invalid argument",
        "ib_path not bidirectional -1 Invalid argument",
        "ib_path 0",
        "route resolved 0",
        "qp_ex create flags -1 Operation not supported",
        "qp_ex send ops 0 qp_ex 1 pd 1 cqs 1",
        "srq_ex without type -1 Invalid argument",
        "srq 0 srq 1 recv_cq 1 pd 1 max_wr 1",
        "srq again -1 Invalid argument",
        "qp on srq 0 srq 1 recv_cq 1",
        "established",
        "notify comm_est -1 Transport endpoint is already connected",
        "notify path_mig 0",
        "notify qp_fatal -1 Invalid argument",
        "recv 1 status 0 wr_id 23 len 16 data through the srq",
        "srq destroyed 1 recv_cq 1",
    ];
    assert_eq!(out.lines().collect::<Vec<_>>(), want, "{err}");
}
