/* Helpers of the C test programs (tests/c_programs.rs): the checks, the loopback device,
 * connecting two RC QPs of one device to each other, readying a UD QP. */
#ifndef SOFTRDMA_TEST_COMMON_H
#define SOFTRDMA_TEST_COMMON_H
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <infiniband/verbs.h>

#define CHECK(cond, ...)                                                       \
	do {                                                                   \
		if (!(cond)) {                                                 \
			printf("line %d: %s: ", __LINE__, #cond);              \
			printf(__VA_ARGS__);                                   \
			printf(" (errno %d)\n", errno);                        \
			exit(1);                                               \
		}                                                              \
	} while (0)

static inline struct ibv_context *open_lo(void)
{
	int n = 0;
	struct ibv_device **list = ibv_get_device_list(&n);
	struct ibv_context *c = NULL;

	CHECK(list && n > 0, "no devices");
	for (int i = 0; i < n; i++)
		if (!strcmp(ibv_get_device_name(list[i]), "softrdma_lo"))
			c = ibv_open_device(list[i]);
	ibv_free_device_list(list);
	CHECK(c, "softrdma_lo did not open");
	return c;
}

static inline double now(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

static inline void connect_rc(struct ibv_qp *q, uint32_t peer, union ibv_gid gid)
{
	struct ibv_qp_attr a = {
		.qp_state = IBV_QPS_INIT, .port_num = 1,
		.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
				   IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC,
	};
	CHECK(!ibv_modify_qp(q, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
					    IBV_QP_ACCESS_FLAGS), "INIT");
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_1024;
	a.dest_qp_num = peer;
	a.rq_psn = 1;
	a.max_dest_rd_atomic = 4;
	a.min_rnr_timer = 12;
	a.ah_attr.is_global = 1;
	a.ah_attr.grh.dgid = gid;
	a.ah_attr.grh.sgid_index = 1;
	a.ah_attr.grh.hop_limit = 1;
	a.ah_attr.port_num = 1;
	CHECK(!ibv_modify_qp(q, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
					    IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
					    IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER), "RTR");
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.sq_psn = 1;
	a.max_rd_atomic = 4;
	CHECK(!ibv_modify_qp(q, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
					    IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
					    IBV_QP_MAX_QP_RD_ATOMIC), "RTS");
}

static inline void ready_ud(struct ibv_qp *q)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1, .qkey = 0x11111111 };

	CHECK(!ibv_modify_qp(q, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
					    IBV_QP_QKEY), "UD INIT");
	a.qp_state = IBV_QPS_RTR;
	CHECK(!ibv_modify_qp(q, &a, IBV_QP_STATE), "UD RTR");
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = 1;
	CHECK(!ibv_modify_qp(q, &a, IBV_QP_STATE | IBV_QP_SQ_PSN), "UD RTS");
}

static inline void post_recv(struct ibv_qp *q, uint64_t id, void *buf, uint32_t len, uint32_t lkey)
{
	struct ibv_sge s = { .addr = (uintptr_t)buf, .length = len, .lkey = lkey };
	struct ibv_recv_wr w = { .wr_id = id, .sg_list = &s, .num_sge = 1 }, *bad;

	CHECK(!ibv_post_recv(q, &w, &bad), "post_recv");
}

#endif
