/* ibv_wr_complete posts a batch all or nothing, as rxe's and mlx5's wr_complete do (they roll
 * the send queue back to where ibv_wr_start found it): when a later WR of the batch is one the
 * QP refuses — more WRs than the send queue holds, an atomic on a misaligned address — the
 * call returns the errno and the earlier, valid WRs of the batch are not posted either: no
 * completion, no byte written at the peer. A good batch afterwards posts all of its WRs.
 * Linked against Debian's libibverbs, run over softrdma's (tests/c_programs.rs). One process,
 * device softrdma_lo, two RC QPs connected to each other. Prints "ok" and exits 0, or names
 * the first check that failed and exits 1. */
#include "common.h"

static struct ibv_context *ctx;

/* Nothing arrives on `cq` for 200 ms. */
static void quiet(struct ibv_cq *cq)
{
	double until = now() + 0.2;
	struct ibv_wc wc;

	while (now() < until) {
		int n = ibv_poll_cq(cq, 1, &wc);

		CHECK(n == 0, "a completion arrived (wr_id %llu, %s)", (unsigned long long)wc.wr_id,
		      ibv_wc_status_str(wc.status));
	}
}

/* Polls `n` completions (5 s at most). */
static void poll_n(struct ibv_cq *cq, struct ibv_wc *wc, int n)
{
	int got = 0;
	double until = now() + 5;

	while (got < n) {
		int r = ibv_poll_cq(cq, n - got, wc + got);

		CHECK(r >= 0, "poll_cq %d", r);
		got += r;
		CHECK(got >= n || now() < until, "%d of %d completions", got, n);
	}
}

int main(void)
{
	enum { SZ = 4096, DEPTH = 4 };
	const int acc = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
			IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
	union ibv_gid gid;
	struct ibv_wc wc[16];

	ctx = open_lo();
	CHECK(!ibv_query_gid(ctx, 1, 1, &gid), "query_gid");
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	struct ibv_cq *cq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	CHECK(pd && cq, "alloc_pd, create_cq");
	uint8_t *abuf = calloc(1, SZ), *bbuf = calloc(1, SZ);
	struct ibv_mr *amr = ibv_reg_mr(pd, abuf, SZ, acc), *bmr = ibv_reg_mr(pd, bbuf, SZ, acc);
	CHECK(amr && bmr, "reg_mr");
	for (int i = 0; i < SZ; i++)
		abuf[i] = (uint8_t)(i * 7 + 1);

	struct ibv_qp_init_attr_ex qa = {
		.send_cq = cq, .recv_cq = cq,
		.cap = { .max_send_wr = DEPTH, .max_recv_wr = 4, .max_send_sge = 1,
			 .max_recv_sge = 1 },
		.qp_type = IBV_QPT_RC,
		.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
		.pd = pd,
		.send_ops_flags = IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD,
	};
	struct ibv_qp *a = ibv_create_qp_ex(ctx, &qa), *b = ibv_create_qp_ex(ctx, &qa);
	CHECK(a && b, "create_qp_ex");
	connect_rc(a, b->qp_num, gid);
	connect_rc(b, a->qp_num, gid);
	struct ibv_qp_ex *ax = ibv_qp_to_qp_ex(a);
	CHECK(ax, "qp_to_qp_ex");
	struct ibv_qp_attr at;
	struct ibv_qp_init_attr ia;
	CHECK(!ibv_query_qp(a, &at, IBV_QP_CAP, &ia), "query_qp");
	uint32_t depth = ia.cap.max_send_wr;
	CHECK(depth >= DEPTH && depth < 16, "max_send_wr %u", depth);

	/* A batch one WR longer than the send queue: each WR valid alone (a 16-byte RDMA WRITE
	 * to its own place at b), the last one has no room. ENOSPC, as rxe's builders report a
	 * full queue (check_qp_queue_full; mlx5's say ENOMEM); none of the batch is posted. */
	ibv_wr_start(ax);
	ax->wr_flags = IBV_SEND_SIGNALED;
	for (uint32_t i = 0; i <= depth; i++) {
		ax->wr_id = 100 + i;
		ibv_wr_rdma_write(ax, bmr->rkey, (uintptr_t)bbuf + 16 * i);
		ibv_wr_set_sge(ax, amr->lkey, (uintptr_t)abuf + 16 * i, 16);
	}
	int r = ibv_wr_complete(ax);
	CHECK(r == ENOSPC, "a batch past max_send_wr (%u): wr_complete %d", depth, r);
	quiet(cq);
	for (int i = 0; i < SZ; i++)
		CHECK(bbuf[i] == 0, "byte %d of b written by a refused batch", i);

	/* A batch whose second WR the QP refuses (an atomic on an address not 8-byte aligned):
	 * EINVAL, and the first WR (a valid WRITE) is not posted either. */
	ibv_wr_start(ax);
	ax->wr_id = 200;
	ibv_wr_rdma_write(ax, bmr->rkey, (uintptr_t)bbuf + 1024);
	ibv_wr_set_sge(ax, amr->lkey, (uintptr_t)abuf + 1024, 64);
	ax->wr_id = 201;
	ibv_wr_atomic_fetch_add(ax, bmr->rkey, (uintptr_t)bbuf + 2049, 1);
	ibv_wr_set_sge(ax, amr->lkey, (uintptr_t)abuf + 2048, 8);
	r = ibv_wr_complete(ax);
	CHECK(r == EINVAL, "a misaligned atomic after a valid WRITE: wr_complete %d", r);
	quiet(cq);
	for (int i = 0; i < SZ; i++)
		CHECK(bbuf[i] == 0, "byte %d of b written by a refused batch", i);

	/* The QP is still usable and its queue empty: a full batch (depth WRs) posts all. */
	ibv_wr_start(ax);
	for (uint32_t i = 0; i < depth; i++) {
		ax->wr_id = 300 + i;
		ibv_wr_rdma_write(ax, bmr->rkey, (uintptr_t)bbuf + 16 * i);
		ibv_wr_set_sge(ax, amr->lkey, (uintptr_t)abuf + 16 * i, 16);
	}
	r = ibv_wr_complete(ax);
	CHECK(r == 0, "a batch of max_send_wr (%u): wr_complete %d", depth, r);
	poll_n(cq, wc, (int)depth);
	for (uint32_t i = 0; i < depth; i++)
		CHECK(wc[i].wr_id == 300 + i && wc[i].status == IBV_WC_SUCCESS,
		      "completion %u: wr_id %llu, %s", i, (unsigned long long)wc[i].wr_id,
		      ibv_wc_status_str(wc[i].status));
	quiet(cq);
	CHECK(!memcmp(bbuf, abuf, 16 * depth), "the batch's bytes at b");
	for (int i = 16 * (int)depth; i < SZ; i++)
		CHECK(bbuf[i] == 0, "byte %d of b written, beyond the good batch", i);

	ibv_destroy_qp(a);
	ibv_destroy_qp(b);
	ibv_dereg_mr(amr);
	ibv_dereg_mr(bmr);
	ibv_destroy_cq(cq);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	printf("ok\n");
	return 0;
}
