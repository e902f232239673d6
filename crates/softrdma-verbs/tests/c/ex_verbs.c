/* The extended verbs as an application compiled against Debian 12's <infiniband/verbs.h>
 * reaches them: ibv_query_device_ex, ibv_create_cq_ex and ibv_create_qp_ex are inline
 * functions calling through verbs_context's slots, ibv_wr_* and ibv_start_poll/ibv_wc_read_*
 * call through the ibv_qp_ex/ibv_cq_ex function pointers. Linked against Debian's
 * libibverbs, run over softrdma's (tests/c_programs.rs). One process, device softrdma_lo,
 * two RC QPs connected to each other and two UD QPs. Prints "ok" and exits 0, or names the
 * first check that failed and exits 1. */
#include <endian.h>

#include "common.h"

static struct ibv_context *ctx;
static union ibv_gid gid;

struct comp {
	uint64_t wr_id;
	enum ibv_wc_status status;
	enum ibv_wc_opcode opcode;
	uint32_t byte_len, qp_num, src_qp, wc_flags;
	__be32 imm;
};

/* Polls `n` completions through start_poll/next_poll/end_poll (5 s at most). */
static void poll_ex(struct ibv_cq_ex *cq, struct comp *out, int n)
{
	int got = 0;
	double until = now() + 5;

	while (got < n) {
		struct ibv_poll_cq_attr attr = {};
		int r = ibv_start_poll(cq, &attr);

		if (r == ENOENT) {
			CHECK(now() < until, "%d of %d completions", got, n);
			continue;
		}
		CHECK(r == 0, "start_poll %d", r);
		do {
			CHECK(got < n, "more completions than WRs");
			out[got].wr_id = cq->wr_id;
			out[got].status = cq->status;
			out[got].opcode = ibv_wc_read_opcode(cq);
			out[got].byte_len = ibv_wc_read_byte_len(cq);
			out[got].qp_num = ibv_wc_read_qp_num(cq);
			out[got].src_qp = ibv_wc_read_src_qp(cq);
			out[got].wc_flags = ibv_wc_read_wc_flags(cq);
			out[got].imm = ibv_wc_read_imm_data(cq);
			got++;
			r = ibv_next_poll(cq);
		} while (r == 0);
		CHECK(r == ENOENT, "next_poll %d", r);
		ibv_end_poll(cq);
	}
}

/* Nothing arrives on `cq` for 100 ms. */
static void quiet(struct ibv_cq_ex *cq)
{
	double until = now() + 0.1;

	while (now() < until) {
		struct ibv_poll_cq_attr attr = {};
		int r = ibv_start_poll(cq, &attr);

		CHECK(r == ENOENT, "a completion arrived (wr_id %llu)",
		      (unsigned long long)cq->wr_id);
	}
}

static struct ibv_qp *qp_ex(struct ibv_pd *pd, struct ibv_cq_ex *scq, struct ibv_cq_ex *rcq,
			    enum ibv_qp_type type, uint64_t ops)
{
	struct ibv_qp_init_attr_ex a = {
		.send_cq = ibv_cq_ex_to_cq(scq),
		.recv_cq = ibv_cq_ex_to_cq(rcq),
		.cap = { .max_send_wr = 16, .max_recv_wr = 16, .max_send_sge = 2,
			 .max_recv_sge = 1, .max_inline_data = 64 },
		.qp_type = type,
		.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
		.pd = pd,
		.send_ops_flags = ops,
	};

	return ibv_create_qp_ex(ctx, &a);
}

int main(void)
{
	enum { SZ = 8192 };
	const int acc = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
			IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
	struct comp c[8];

	ctx = open_lo();
	CHECK(!ibv_query_gid(ctx, 1, 1, &gid), "query_gid");

	/* ibv_query_device_ex: the legacy attributes and the extended ones we have. */
	struct ibv_device_attr_ex dx;
	struct ibv_device_attr d;
	memset(&dx, 0xa5, sizeof(dx));
	CHECK(!ibv_query_device_ex(ctx, NULL, &dx), "query_device_ex");
	CHECK(!ibv_query_device(ctx, &d), "query_device");
	CHECK(dx.orig_attr.max_qp == d.max_qp && dx.orig_attr.max_qp > 0 &&
	      dx.orig_attr.node_guid == d.node_guid, "orig_attr differs from ibv_query_device");
	CHECK(dx.phys_port_cnt_ex == 1, "phys_port_cnt_ex %u", dx.phys_port_cnt_ex);
	CHECK(dx.completion_timestamp_mask == 0 && dx.odp_caps.general_caps == 0 &&
	      dx.max_dm_size == 0, "capabilities softrdma does not have");
	struct ibv_query_device_ex_input in = { .comp_mask = 1 };
	CHECK(ibv_query_device_ex(ctx, &in, &dx) == EINVAL, "an unknown input mask");

	/* ibv_create_cq_ex: the standard fields; a timestamp is EOPNOTSUPP (as on rxe). */
	struct ibv_cq_init_attr_ex ca = { .cqe = 32, .wc_flags = IBV_WC_STANDARD_FLAGS };
	struct ibv_cq_ex *scq = ibv_create_cq_ex(ctx, &ca);
	struct ibv_cq_ex *rcq = ibv_create_cq_ex(ctx, &ca);
	CHECK(scq && rcq, "create_cq_ex");
	CHECK(ibv_cq_ex_to_cq(scq)->cqe >= 32, "cqe %d", ibv_cq_ex_to_cq(scq)->cqe);
	ca.wc_flags |= IBV_WC_EX_WITH_COMPLETION_TIMESTAMP;
	errno = 0;
	CHECK(!ibv_create_cq_ex(ctx, &ca) && errno == EOPNOTSUPP, "timestamps");
	ca.wc_flags = 0;
	ca.comp_mask = IBV_CQ_INIT_ATTR_MASK_FLAGS;
	ca.flags = IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN;
	errno = 0;
	CHECK(!ibv_create_cq_ex(ctx, &ca) && errno == EOPNOTSUPP, "ignore overrun");

	struct ibv_pd *pd = ibv_alloc_pd(ctx), *pd2 = ibv_alloc_pd(ctx);
	CHECK(pd && pd2, "alloc_pd");
	uint8_t *abuf = calloc(1, SZ), *bbuf = calloc(1, SZ), *obuf = calloc(1, 64);
	struct ibv_mr *amr = ibv_reg_mr(pd, abuf, SZ, acc), *bmr = ibv_reg_mr(pd, bbuf, SZ, acc);
	struct ibv_mr *omr = ibv_reg_mr(pd2, obuf, 64, acc);
	CHECK(amr && bmr && omr, "reg_mr");

	/* ibv_create_qp_ex: send ops softrdma has; memory windows are EOPNOTSUPP. */
	const uint64_t rc_ops = IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM |
				IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM |
				IBV_QP_EX_WITH_RDMA_READ | IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP |
				IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD;
	errno = 0;
	CHECK(!qp_ex(pd, scq, rcq, IBV_QPT_RC, IBV_QP_EX_WITH_BIND_MW) && errno == EOPNOTSUPP,
	      "bind_mw");
	errno = 0;
	CHECK(!qp_ex(pd, scq, rcq, IBV_QPT_UD, IBV_QP_EX_WITH_RDMA_WRITE) && errno == EOPNOTSUPP,
	      "an RDMA WRITE on UD");
	struct ibv_qp *a = qp_ex(pd, scq, scq, IBV_QPT_RC, rc_ops);
	struct ibv_qp *b = qp_ex(pd, rcq, rcq, IBV_QPT_RC, rc_ops);
	CHECK(a && b, "create_qp_ex");
	struct ibv_qp_ex *ax = ibv_qp_to_qp_ex(a);
	CHECK(ax && (void *)ax == (void *)a, "qp_to_qp_ex");
	CHECK(ax->wr_send && ax->wr_rdma_read && ax->wr_atomic_fetch_add && !ax->wr_bind_mw,
	      "the builders asked for, and only those");
	{
		struct ibv_qp_init_attr li = {
			.send_cq = ibv_cq_ex_to_cq(scq), .recv_cq = ibv_cq_ex_to_cq(scq),
			.cap = { .max_send_wr = 1, .max_recv_wr = 1, .max_send_sge = 1,
				 .max_recv_sge = 1 },
			.qp_type = IBV_QPT_RC,
		};
		struct ibv_qp *legacy = ibv_create_qp(pd, &li);
		CHECK(legacy && !ibv_qp_to_qp_ex(legacy), "a legacy QP has no ibv_qp_ex");
		CHECK(!ibv_destroy_qp(legacy), "destroy legacy");
	}
	connect_rc(a, b->qp_num, gid);
	connect_rc(b, a->qp_num, gid);

	for (int i = 0; i < SZ; i++)
		abuf[i] = (uint8_t)(i * 7 + 1), bbuf[i] = (uint8_t)(i * 13 + 5);
	uint64_t *bat = (uint64_t *)(bbuf + 4096), *aat = (uint64_t *)(abuf + 4096);
	bat[0] = 100;
	bat[1] = 0x1111;
	post_recv(b, 101, bbuf + 6000, 256, bmr->lkey);
	post_recv(b, 102, bbuf + 6500, 256, bmr->lkey);
	post_recv(b, 103, bbuf + 7000, 256, bmr->lkey);

	/* One batch of every builder, posted by wr_complete. */
	char hello[] = "inline ", world[] = "data";
	struct ibv_data_buf bufs[2] = { { hello, 7 }, { world, 4 } };
	struct ibv_sge two[2] = { { (uintptr_t)abuf + 300, 10, amr->lkey },
				  { (uintptr_t)abuf + 400, 6, amr->lkey } };
	ibv_wr_start(ax);
	ax->wr_flags = IBV_SEND_SIGNALED;
	ax->wr_id = 1;
	ibv_wr_rdma_write(ax, bmr->rkey, (uintptr_t)bbuf);
	ibv_wr_set_sge(ax, amr->lkey, (uintptr_t)abuf, 64);
	ax->wr_id = 2;
	ibv_wr_send_imm(ax, htobe32(0x12345678));
	ibv_wr_set_sge(ax, amr->lkey, (uintptr_t)abuf + 64, 32);
	ax->wr_id = 3;
	ibv_wr_rdma_read(ax, bmr->rkey, (uintptr_t)bbuf + 1024);
	ibv_wr_set_sge(ax, amr->lkey, (uintptr_t)abuf + 1024, 128);
	ax->wr_id = 4;
	ibv_wr_atomic_fetch_add(ax, bmr->rkey, (uintptr_t)&bat[0], 5);
	ibv_wr_set_sge(ax, amr->lkey, (uintptr_t)&aat[0], 8);
	ax->wr_id = 5;
	ibv_wr_atomic_cmp_swp(ax, bmr->rkey, (uintptr_t)&bat[1], 0x1111, 0x2222);
	ibv_wr_set_sge(ax, amr->lkey, (uintptr_t)&aat[1], 8);
	ax->wr_id = 6;
	ibv_wr_send(ax);
	ibv_wr_set_inline_data_list(ax, 2, bufs);
	ax->wr_id = 7;
	ibv_wr_rdma_write_imm(ax, bmr->rkey, (uintptr_t)bbuf + 2048, htobe32(77));
	ibv_wr_set_sge_list(ax, 2, two);
	CHECK(ibv_wr_complete(ax) == 0, "wr_complete");
	hello[0] = 'X'; /* inline data was copied by wr_set_inline_data_list */

	poll_ex(scq, c, 7);
	static const enum ibv_wc_opcode ops[] = { IBV_WC_RDMA_WRITE, IBV_WC_SEND,
		IBV_WC_RDMA_READ, IBV_WC_FETCH_ADD, IBV_WC_COMP_SWAP, IBV_WC_SEND,
		IBV_WC_RDMA_WRITE };
	for (int i = 0; i < 7; i++) {
		CHECK(c[i].status == IBV_WC_SUCCESS, "wr %llu: %s", (unsigned long long)c[i].wr_id,
		      ibv_wc_status_str(c[i].status));
		CHECK(c[i].wr_id == (uint64_t)i + 1, "wr_id %llu in place %d",
		      (unsigned long long)c[i].wr_id, i);
		CHECK(c[i].opcode == ops[i], "wr %d: opcode %d", i + 1, c[i].opcode);
		CHECK(c[i].qp_num == a->qp_num, "wr %d: qp_num", i + 1);
	}
	CHECK(c[2].byte_len == 128, "READ byte_len %u", c[2].byte_len);
	CHECK(!memcmp(bbuf, abuf, 64), "RDMA WRITE data");
	CHECK(!memcmp(abuf + 1024, bbuf + 1024, 128), "RDMA READ data");
	CHECK(aat[0] == 100 && bat[0] == 105, "fetch-add: %llu %llu",
	      (unsigned long long)aat[0], (unsigned long long)bat[0]);
	CHECK(aat[1] == 0x1111 && bat[1] == 0x2222, "cmp-swap");
	CHECK(!memcmp(bbuf + 2048, abuf + 300, 10) && !memcmp(bbuf + 2058, abuf + 400, 6),
	      "WRITE with an SGE list");

	poll_ex(rcq, c, 3);
	CHECK(c[0].wr_id == 101 && c[0].status == IBV_WC_SUCCESS && c[0].opcode == IBV_WC_RECV,
	      "receive 1");
	CHECK(c[0].byte_len == 32 && (c[0].wc_flags & IBV_WC_WITH_IMM) &&
	      be32toh(c[0].imm) == 0x12345678 && c[0].qp_num == b->qp_num, "send with imm");
	CHECK(!memcmp(bbuf + 6000, abuf + 64, 32), "send data");
	CHECK(c[1].wr_id == 102 && c[1].byte_len == 11 && !(c[1].wc_flags & IBV_WC_WITH_IMM) &&
	      !memcmp(bbuf + 6500, "inline data", 11), "inline send");
	CHECK(c[2].wr_id == 103 && c[2].opcode == IBV_WC_RECV_RDMA_WITH_IMM &&
	      be32toh(c[2].imm) == 77, "write with imm: opcode %d", c[2].opcode);

	/* Errors a builder or setter meets come back from wr_complete, nothing posted. */
	ibv_wr_start(ax);
	ibv_wr_set_sge(ax, amr->lkey, (uintptr_t)abuf, 8);
	CHECK(ibv_wr_complete(ax) == EINVAL, "a setter with no WR built");
	ibv_wr_start(ax);
	ax->wr_id = 20;
	ibv_wr_send(ax);
	ibv_wr_set_inline_data(ax, abuf, 65);
	CHECK(ibv_wr_complete(ax) == ENOSPC, "inline data past max_inline_data");
	{
		struct ibv_qp_attr qa;
		struct ibv_qp_init_attr qi;
		CHECK(!ibv_query_qp(a, &qa, IBV_QP_CAP, &qi), "query_qp");
		size_t n = qi.cap.max_send_sge + 1;
		struct ibv_sge *many = calloc(n, sizeof(*many));
		ibv_wr_start(ax);
		ax->wr_id = 21;
		ibv_wr_send(ax);
		ibv_wr_set_sge_list(ax, n, many);
		CHECK(ibv_wr_complete(ax) == ENOSPC, "more SGEs than max_send_sge (%zu)", n);
		free(many);
	}
	ibv_wr_start(ax);
	ax->wr_id = 22;
	ibv_wr_rdma_write(ax, bmr->rkey, (uintptr_t)bbuf);
	ibv_wr_set_sge(ax, amr->lkey, (uintptr_t)abuf, 8);
	ibv_wr_abort(ax);
	quiet(scq);

	/* UD: wr_set_ud_addr with an address handle of the QP's PD. */
	struct ibv_qp *u = qp_ex(pd, scq, scq, IBV_QPT_UD, IBV_QP_EX_WITH_SEND);
	struct ibv_qp *v = qp_ex(pd, rcq, rcq, IBV_QPT_UD, IBV_QP_EX_WITH_SEND);
	CHECK(u && v, "UD create_qp_ex");
	ready_ud(u);
	ready_ud(v);
	struct ibv_ah_attr aa = { .is_global = 1, .port_num = 1,
				  .grh = { .dgid = gid, .sgid_index = 1, .hop_limit = 1 } };
	struct ibv_ah *ah = ibv_create_ah(pd, &aa), *ah2 = ibv_create_ah(pd2, &aa);
	CHECK(ah && ah2, "create_ah");
	struct ibv_qp_ex *ux = ibv_qp_to_qp_ex(u);
	post_recv(v, 201, bbuf, 40 + 100, bmr->lkey);
	ibv_wr_start(ux);
	ux->wr_id = 30;
	ux->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_send(ux);
	ibv_wr_set_ud_addr(ux, ah2, v->qp_num, 0x11111111);
	ibv_wr_set_sge(ux, amr->lkey, (uintptr_t)abuf + 500, 100);
	CHECK(ibv_wr_complete(ux) == EINVAL, "an address handle of another PD");
	ibv_wr_start(ux);
	ux->wr_id = 31;
	ibv_wr_send(ux);
	ibv_wr_set_sge(ux, amr->lkey, (uintptr_t)abuf + 500, 100);
	CHECK(ibv_wr_complete(ux) == EINVAL, "a UD send without wr_set_ud_addr");
	ibv_wr_start(ux);
	ux->wr_id = 32;
	ibv_wr_send(ux);
	ibv_wr_set_ud_addr(ux, ah, v->qp_num, 0x11111111);
	ibv_wr_set_sge(ux, amr->lkey, (uintptr_t)abuf + 500, 100);
	CHECK(ibv_wr_complete(ux) == 0, "UD wr_complete");
	poll_ex(scq, c, 1);
	CHECK(c[0].wr_id == 32 && c[0].status == IBV_WC_SUCCESS && c[0].opcode == IBV_WC_SEND,
	      "UD send completion");
	poll_ex(rcq, c, 1);
	CHECK(c[0].wr_id == 201 && c[0].status == IBV_WC_SUCCESS && c[0].byte_len == 140 &&
	      c[0].src_qp == u->qp_num && (c[0].wc_flags & IBV_WC_GRH) &&
	      !memcmp(bbuf + 40, abuf + 500, 100), "UD receive");

	/* ibv_rereg_mr: bad input is IBV_REREG_MR_ERR_INPUT; a new range (and PD) takes
	 * effect, with the keys the struct now shows. */
	errno = 0;
	CHECK(ibv_rereg_mr(amr, 1 << 3, NULL, NULL, 0, 0) == IBV_REREG_MR_ERR_INPUT &&
	      errno == EINVAL, "an unknown rereg flag");
	CHECK(ibv_rereg_mr(amr, IBV_REREG_MR_CHANGE_TRANSLATION, NULL, NULL, 0, 0) ==
	      IBV_REREG_MR_ERR_INPUT, "a new range without an address");
	CHECK(ibv_rereg_mr(amr, IBV_REREG_MR_CHANGE_PD, pd2, NULL, 0, acc) ==
	      IBV_REREG_MR_ERR_INPUT, "access without IBV_REREG_MR_CHANGE_ACCESS");
	uint8_t *nbuf = calloc(1, 4096);
	for (int i = 0; i < 4096; i++)
		nbuf[i] = (uint8_t)(i * 3 + 11);
	CHECK(!ibv_rereg_mr(amr, IBV_REREG_MR_CHANGE_TRANSLATION | IBV_REREG_MR_CHANGE_PD, pd2,
			    nbuf, 4096, 0), "rereg to a new range and PD");
	CHECK(amr->addr == nbuf && amr->length == 4096 && amr->pd == pd2, "the struct follows");
	CHECK(!ibv_rereg_mr(amr, IBV_REREG_MR_CHANGE_PD | IBV_REREG_MR_CHANGE_ACCESS, pd, NULL, 0,
			    acc), "back to the QP's PD");
	ibv_wr_start(ax);
	ax->wr_id = 35;
	ibv_wr_rdma_write(ax, bmr->rkey, (uintptr_t)bbuf + 3000);
	ibv_wr_set_sge(ax, amr->lkey, (uintptr_t)nbuf + 100, 200);
	CHECK(ibv_wr_complete(ax) == 0, "wr_complete (reregistered MR)");
	poll_ex(scq, c, 1);
	CHECK(c[0].wr_id == 35 && c[0].status == IBV_WC_SUCCESS, "write from the new range: %s",
	      ibv_wc_status_str(c[0].status));
	CHECK(!memcmp(bbuf + 3000, nbuf + 100, 200), "the new range's bytes arrived");

	/* Bad memory through the builder: a completion error, never a crash. */
	ibv_wr_start(ax);
	ax->wr_id = 40;
	ax->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_rdma_write(ax, bmr->rkey, (uintptr_t)bbuf);
	ibv_wr_set_sge(ax, amr->lkey, (uintptr_t)nbuf + 4096 - 8, 64);
	CHECK(ibv_wr_complete(ax) == 0, "wr_complete (an SGE past its MR)");
	poll_ex(scq, c, 1);
	CHECK(c[0].wr_id == 40 && c[0].status == IBV_WC_LOC_PROT_ERR, "an SGE past its MR: %s",
	      ibv_wc_status_str(c[0].status));

	CHECK(!ibv_destroy_qp(a) && !ibv_destroy_qp(b) && !ibv_destroy_qp(u) &&
	      !ibv_destroy_qp(v), "destroy_qp");
	CHECK(!ibv_destroy_ah(ah) && !ibv_destroy_ah(ah2), "destroy_ah");
	CHECK(!ibv_destroy_cq(ibv_cq_ex_to_cq(scq)) && !ibv_destroy_cq(ibv_cq_ex_to_cq(rcq)),
	      "destroy_cq");
	CHECK(!ibv_dereg_mr(amr) && !ibv_dereg_mr(bmr) && !ibv_dereg_mr(omr), "dereg_mr");
	CHECK(!ibv_dealloc_pd(pd) && !ibv_dealloc_pd(pd2), "dealloc_pd");
	CHECK(!ibv_close_device(ctx), "close_device");
	printf("ok\n");
	return 0;
}
