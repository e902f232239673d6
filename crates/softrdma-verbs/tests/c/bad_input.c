/* Bad input through the exported entry points and the inline verbs of Debian 12's
 * <infiniband/verbs.h>, over softrdma's libibverbs (tests/c_programs.rs): each case gets
 * rdma-core's errno (EINVAL where rdma-core has none) or a completion error, never a crash.
 * Prints "ok" and exits 0, or names the first check that failed. */
#include <poll.h>

#include "common.h"

static struct ibv_qp *rc_qp(struct ibv_pd *pd, struct ibv_cq *cq, int depth)
{
	struct ibv_qp_init_attr a = {
		.send_cq = cq, .recv_cq = cq,
		.cap = { .max_send_wr = depth, .max_recv_wr = depth, .max_send_sge = 1,
			 .max_recv_sge = 1 },
		.qp_type = IBV_QPT_RC,
	};

	return ibv_create_qp(pd, &a);
}

static int send_one(struct ibv_qp *q, uint64_t id, uint64_t addr, uint32_t len, uint32_t lkey)
{
	struct ibv_sge s = { .addr = addr, .length = len, .lkey = lkey };
	struct ibv_send_wr w = { .wr_id = id, .sg_list = &s, .num_sge = 1,
				 .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED };
	struct ibv_send_wr *bad = NULL;
	int r = ibv_post_send(q, &w, &bad);

	CHECK(r == 0 || bad == &w, "bad_wr names the refused WR");
	return r;
}

/* The next completion of `cq` (5 s at most). */
static struct ibv_wc one(struct ibv_cq *cq)
{
	struct ibv_wc wc;
	double until = now() + 5;
	int n;

	while ((n = ibv_poll_cq(cq, 1, &wc)) == 0)
		CHECK(now() < until, "no completion");
	CHECK(n == 1, "poll_cq %d", n);
	return wc;
}

static enum ibv_qp_state state_of(struct ibv_qp *q)
{
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr i;

	CHECK(!ibv_query_qp(q, &a, IBV_QP_STATE, &i), "query_qp");
	return a.qp_state;
}

int main(void)
{
	struct ibv_context *ctx = open_lo();
	union ibv_gid gid;
	uint8_t *buf = calloc(1, 4096), *other = calloc(1, 64), *rbuf = calloc(1, 4096);

	CHECK(!ibv_query_gid(ctx, 1, 1, &gid), "query_gid");

	/* NULL where the API allows one: the count of ibv_get_device_list, a CQ's channel and
	 * context, ibv_query_device_ex's input, a QP's SRQ. */
	struct ibv_device **list = ibv_get_device_list(NULL);
	CHECK(list && list[0], "get_device_list(NULL)");
	ibv_free_device_list(list);
	struct ibv_cq *cq = ibv_create_cq(ctx, 4, NULL, NULL, 0);
	CHECK(cq, "create_cq without a channel");
	struct ibv_device_attr_ex dx;
	CHECK(!ibv_query_device_ex(ctx, NULL, &dx), "query_device_ex(NULL input)");

	/* NULL where it does not: EINVAL (or NULL with errno EINVAL), no crash. */
	errno = 0;
	CHECK(!ibv_alloc_pd(NULL) && errno == EINVAL, "alloc_pd(NULL)");
	CHECK(ibv_dealloc_pd(NULL) == EINVAL, "dealloc_pd(NULL)");
	errno = 0;
	CHECK(!ibv_reg_mr(NULL, buf, 64, IBV_ACCESS_LOCAL_WRITE) && errno == EINVAL,
	      "reg_mr(NULL pd)");
	CHECK(ibv_query_device(ctx, NULL) == EINVAL, "query_device(NULL attr)");
	CHECK(ibv_query_port(ctx, 1, NULL) == EINVAL, "query_port(NULL attr)");
	CHECK(ibv_destroy_cq(NULL) == EINVAL, "destroy_cq(NULL)");
	errno = 0;
	CHECK(!ibv_create_cq(NULL, 4, NULL, NULL, 0) && errno == EINVAL, "create_cq(NULL)");
	errno = 0;
	CHECK(ibv_get_cq_event(NULL, NULL, NULL) == -1 && errno == EINVAL, "get_cq_event(NULL)");
	CHECK(ibv_close_device(NULL) == EINVAL, "close_device(NULL)");

	struct ibv_pd *pd = ibv_alloc_pd(ctx), *pd2 = ibv_alloc_pd(ctx);
	CHECK(pd && pd2, "alloc_pd");
	errno = 0;
	CHECK(!ibv_create_qp(pd, NULL) && errno == EINVAL, "create_qp(NULL attr)");
	const int acc = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, 4096, acc), *omr = ibv_reg_mr(pd2, other, 64, acc);
	struct ibv_mr *rmr = ibv_reg_mr(pd, rbuf, 4096, acc);
	CHECK(mr && omr && rmr, "reg_mr");

	/* A QP modified out of order: EINVAL, and it stays in RESET. */
	struct ibv_qp *a = rc_qp(pd, cq, 4), *b = rc_qp(pd, cq, 4);
	CHECK(a && b, "create_qp");
	struct ibv_qp_attr to_rts = { .qp_state = IBV_QPS_RTS, .sq_psn = 1 };
	CHECK(ibv_modify_qp(a, &to_rts, IBV_QP_STATE | IBV_QP_SQ_PSN) == EINVAL,
	      "RESET -> RTS");
	CHECK(state_of(a) == IBV_QPS_RESET, "still RESET");
	CHECK(ibv_modify_qp(a, NULL, IBV_QP_STATE) == EINVAL, "modify_qp(NULL attr)");
	/* A send on a QP that is not ready: refused at post. */
	CHECK(send_one(a, 1, (uintptr_t)buf, 8, mr->lkey) != 0, "a send in RESET");

	connect_rc(a, b->qp_num, gid);
	connect_rc(b, a->qp_num, gid);
	CHECK(state_of(a) == IBV_QPS_RTS, "RTS");
	/* Back to RTR from RTS is not a transition either. */
	struct ibv_qp_attr to_rtr = { .qp_state = IBV_QPS_RTR };
	CHECK(ibv_modify_qp(a, &to_rtr, IBV_QP_STATE) == EINVAL, "RTS -> RTR");
	CHECK(state_of(a) == IBV_QPS_RTS, "still RTS");

	/* A wr with an lkey of another PD: a local protection error, the QP in ERR. */
	struct ibv_sge rs = { (uintptr_t)rbuf, 4096, rmr->lkey };
	struct ibv_recv_wr rw = { .wr_id = 100, .sg_list = &rs, .num_sge = 1 }, *rbad;
	CHECK(!ibv_post_recv(b, &rw, &rbad), "post_recv");
	CHECK(send_one(a, 2, (uintptr_t)other, 8, omr->lkey) == 0, "post (lkey of another PD)");
	struct ibv_wc wc = one(cq);
	CHECK(wc.wr_id == 2 && wc.status == IBV_WC_LOC_PROT_ERR, "lkey of another PD: %s",
	      ibv_wc_status_str(wc.status));
	CHECK(state_of(a) == IBV_QPS_ERR, "the QP went to ERR");
	CHECK(!ibv_destroy_qp(a) && !ibv_destroy_qp(b), "destroy_qp");
	while (ibv_poll_cq(cq, 1, &wc) == 1)
		; /* the flushed receive */

	/* An SGE past its MR: the same, and no byte read past the buffer. */
	a = rc_qp(pd, cq, 4);
	b = rc_qp(pd, cq, 4);
	CHECK(a && b, "create_qp");
	connect_rc(a, b->qp_num, gid);
	connect_rc(b, a->qp_num, gid);
	CHECK(!ibv_post_recv(b, &rw, &rbad), "post_recv");
	CHECK(send_one(a, 3, (uintptr_t)buf + 4000, 200, mr->lkey) == 0, "post (past the MR)");
	wc = one(cq);
	CHECK(wc.wr_id == 3 && wc.status == IBV_WC_LOC_PROT_ERR, "an SGE past its MR: %s",
	      ibv_wc_status_str(wc.status));
	CHECK(!ibv_destroy_qp(a) && !ibv_destroy_qp(b), "destroy_qp");
	CHECK(!ibv_destroy_cq(cq), "destroy_cq");

	/* ibv_resize_cq: refused out of range (EINVAL, as rxe), else the CQ holds more. */
	struct ibv_cq *rcq = ibv_create_cq(ctx, 1, NULL, NULL, 0);
	CHECK(rcq && rcq->cqe == 1, "create_cq(1)");
	CHECK(ibv_resize_cq(rcq, 0) == EINVAL && ibv_resize_cq(rcq, 1 << 30) == EINVAL &&
	      ibv_resize_cq(NULL, 4) == EINVAL && rcq->cqe == 1, "resize out of range");
	CHECK(!ibv_resize_cq(rcq, 6) && rcq->cqe >= 6, "resize to 6: cqe %d", rcq->cqe);
	a = rc_qp(pd, rcq, 8);
	b = rc_qp(pd, rcq, 8);
	CHECK(a && b, "create_qp");
	connect_rc(a, b->qp_num, gid);
	connect_rc(b, a->qp_num, gid);
	for (int i = 0; i < 6; i++) {
		struct ibv_send_wr w = { .wr_id = 60 + i, .opcode = IBV_WR_RDMA_WRITE,
					 .send_flags = IBV_SEND_SIGNALED, .num_sge = 0 };
		struct ibv_send_wr *bad;
		w.wr.rdma.remote_addr = (uintptr_t)rbuf;
		w.wr.rdma.rkey = rmr->rkey;
		CHECK(!ibv_post_send(a, &w, &bad), "post write %d", i);
	}
	{
		double until = now() + 5;
		int got = 0;
		while (got < 6) {
			CHECK(now() < until, "%d of 6 completions", got);
			int n = ibv_poll_cq(rcq, 1, &wc);
			CHECK(n >= 0, "poll_cq");
			if (n) {
				CHECK(wc.status == IBV_WC_SUCCESS && wc.wr_id == 60u + got,
				      "completion %d: %s", got, ibv_wc_status_str(wc.status));
				got++;
			}
		}
	}
	CHECK(!ibv_destroy_qp(a) && !ibv_destroy_qp(b) && !ibv_destroy_cq(rcq), "destroy");

	/* A CQ overrun: IBV_EVENT_CQ_ERR on the pollable async_fd. */
	struct ibv_cq *small = ibv_create_cq(ctx, 1, NULL, NULL, 0);
	CHECK(small, "create_cq(1)");
	int depth = small->cqe;
	a = rc_qp(pd, small, depth + 2);
	b = rc_qp(pd, small, depth + 2);
	CHECK(a && b, "create_qp");
	connect_rc(a, b->qp_num, gid);
	connect_rc(b, a->qp_num, gid);
	for (int i = 0; i <= depth; i++) {
		struct ibv_send_wr w = { .wr_id = 50 + i, .opcode = IBV_WR_RDMA_WRITE,
					 .send_flags = IBV_SEND_SIGNALED, .num_sge = 0 };
		struct ibv_send_wr *bad;
		w.wr.rdma.remote_addr = (uintptr_t)rbuf;
		w.wr.rdma.rkey = rmr->rkey;
		CHECK(!ibv_post_send(a, &w, &bad), "post write %d", i);
	}
	/* (The QPs that went to ERR above may have queued QP events first.) */
	struct pollfd pfd = { .fd = ctx->async_fd, .events = POLLIN };
	struct ibv_async_event ev = {};
	double until = now() + 5;
	do {
		CHECK(now() < until, "no CQ_ERR event within 5 s");
		CHECK(poll(&pfd, 1, 5000) == 1, "no async event within 5 s");
		CHECK(!ibv_get_async_event(ctx, &ev), "get_async_event");
		ibv_ack_async_event(&ev);
	} while (ev.event_type != IBV_EVENT_CQ_ERR);
	CHECK(ev.element.cq == small, "CQ_ERR names the CQ");

	CHECK(!ibv_destroy_qp(a) && !ibv_destroy_qp(b), "destroy_qp");
	CHECK(!ibv_destroy_cq(small), "destroy_cq");
	CHECK(!ibv_dereg_mr(mr) && !ibv_dereg_mr(omr) && !ibv_dereg_mr(rmr), "dereg_mr");
	CHECK(!ibv_dealloc_pd(pd) && !ibv_dealloc_pd(pd2), "dealloc_pd");
	CHECK(!ibv_close_device(ctx), "close_device");
	printf("ok\n");
	return 0;
}
