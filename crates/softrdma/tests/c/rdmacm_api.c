/* The RDMA CM calls that were ENOSYS until issue 23's last session, over softrdma's libraries
 * (tests/rdmacm_api_c.rs runs it through `softrdma run`): rdma_create_srq(_ex) and an RC
 * connection whose passive QP receives through the id's SRQ; rdma_notify; the IB path
 * option; rdma_getaddrinfo with a service name; rdma_create_qp_ex's extended fields. Each
 * line it prints is compared with what rdma-core over the kernel's CM answers. */
#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <infiniband/sa.h>
#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>

static struct rdma_event_channel *ch;

/* The next event of `want` type on the channel (others are reported and fail the run). */
static struct rdma_cm_event *wait_ev(enum rdma_cm_event_type want)
{
	struct rdma_cm_event *ev;
	if (rdma_get_cm_event(ch, &ev)) { perror("get_cm_event"); exit(1); }
	if (ev->event != want) {
		printf("unexpected %s (%d) waiting for %s\n", rdma_event_str(ev->event), ev->status,
		       rdma_event_str(want));
		exit(1);
	}
	return ev;
}

static void sa_in(struct sockaddr_in *s, const char *ip, int port)
{
	memset(s, 0, sizeof *s);
	s->sin_family = AF_INET;
	s->sin_port = htons(port);
	inet_pton(AF_INET, ip, &s->sin_addr);
}

#define SERVER "127.0.23.71"
#define PORT 7823

int main(void)
{
	struct rdma_cm_event *ev;
	struct sockaddr_in a;
	int r;
	ch = rdma_create_event_channel();
	if (!ch) { perror("channel"); return 1; }

	/* rdma_getaddrinfo: a service name, as getaddrinfo(3) knows it. */
	struct rdma_addrinfo hints, *res;
	memset(&hints, 0, sizeof hints);
	hints.ai_port_space = RDMA_PS_TCP;
	r = rdma_getaddrinfo(SERVER, "echo", &hints, &res);
	printf("getaddrinfo echo %d port %d\n", r,
	       r ? -1 : ntohs(((struct sockaddr_in *)res->ai_dst_addr)->sin_port));
	if (!r) rdma_freeaddrinfo(res);
	r = rdma_getaddrinfo(SERVER, "no-such-service-23", &hints, &res);
	printf("getaddrinfo unknown %d eai_service %d\n", r, r == EAI_SERVICE);

	/* The server: a listener; the client connects. */
	struct rdma_cm_id *l, *cl, *sv;
	if (rdma_create_id(ch, &l, NULL, RDMA_PS_TCP)) { perror("create_id"); return 1; }
	sa_in(&a, SERVER, PORT);
	if (rdma_bind_addr(l, (struct sockaddr *)&a) || rdma_listen(l, 4)) { perror("listen"); return 1; }
	if (rdma_create_id(ch, &cl, NULL, RDMA_PS_TCP)) { perror("create_id"); return 1; }
	r = rdma_notify(cl, IBV_EVENT_COMM_EST);
	printf("notify unconnected %d %s\n", r, r ? strerror(errno) : "-");
	/* The IB path option needs a resolved address. */
	struct ibv_path_data pd;
	memset(&pd, 0, sizeof pd);
	pd.flags = IBV_PATH_FLAG_GMP | IBV_PATH_FLAG_PRIMARY | IBV_PATH_FLAG_BIDIRECTIONAL;
	pd.path.tclass = 0x20;
	r = rdma_set_option(cl, RDMA_OPTION_IB, RDMA_OPTION_IB_PATH, &pd, sizeof pd);
	printf("ib_path unresolved %d %s\n", r, r ? strerror(errno) : "-");
	if (rdma_resolve_addr(cl, NULL, (struct sockaddr *)&a, 2000)) { perror("resolve"); return 1; }
	rdma_ack_cm_event(wait_ev(RDMA_CM_EVENT_ADDR_RESOLVED));
	r = rdma_set_option(cl, RDMA_OPTION_IB, RDMA_OPTION_IB_PATH, &pd, sizeof pd - 1);
	printf("ib_path short %d %s\n", r, r ? strerror(errno) : "-");
	pd.flags = IBV_PATH_FLAG_GMP | IBV_PATH_FLAG_PRIMARY;
	r = rdma_set_option(cl, RDMA_OPTION_IB, RDMA_OPTION_IB_PATH, &pd, sizeof pd);
	printf("ib_path not bidirectional %d %s\n", r, r ? strerror(errno) : "-");
	pd.flags = IBV_PATH_FLAG_GMP | IBV_PATH_FLAG_PRIMARY | IBV_PATH_FLAG_BIDIRECTIONAL;
	r = rdma_set_option(cl, RDMA_OPTION_IB, RDMA_OPTION_IB_PATH, &pd, sizeof pd);
	printf("ib_path %d\n", r);
	ev = wait_ev(RDMA_CM_EVENT_ROUTE_RESOLVED);
	printf("route resolved %d\n", ev->status);
	rdma_ack_cm_event(ev);

	/* The client's QP with extended attributes: send ops flags give it an ibv_qp_ex. */
	struct ibv_qp_init_attr_ex ax;
	memset(&ax, 0, sizeof ax);
	ax.qp_type = IBV_QPT_RC;
	ax.cap.max_send_wr = ax.cap.max_recv_wr = 4;
	ax.cap.max_send_sge = ax.cap.max_recv_sge = 1;
	ax.comp_mask = IBV_QP_INIT_ATTR_CREATE_FLAGS;
	ax.create_flags = IBV_QP_CREATE_BLOCK_SELF_MCAST_LB;
	r = rdma_create_qp_ex(cl, &ax);
	printf("qp_ex create flags %d %s\n", r, r ? strerror(errno) : "-");
	memset(&ax, 0, sizeof ax);
	ax.qp_type = IBV_QPT_RC;
	ax.cap.max_send_wr = ax.cap.max_recv_wr = 4;
	ax.cap.max_send_sge = ax.cap.max_recv_sge = 1;
	ax.comp_mask = IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
	ax.send_ops_flags = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_RDMA_WRITE;
	r = rdma_create_qp_ex(cl, &ax);
	printf("qp_ex send ops %d qp_ex %d pd %d cqs %d\n", r, cl->qp && ibv_qp_to_qp_ex(cl->qp) != NULL,
	       ax.pd != NULL && cl->pd == ax.pd, cl->send_cq != NULL && cl->recv_cq != NULL);
	struct ibv_mr *cmr = ibv_reg_mr(cl->pd, malloc(64), 64, IBV_ACCESS_LOCAL_WRITE);
	if (!cmr) { perror("reg_mr"); return 1; }
	struct rdma_conn_param cp;
	memset(&cp, 0, sizeof cp);
	cp.retry_count = 7;
	cp.rnr_retry_count = 7;
	if (rdma_connect(cl, &cp)) { perror("connect"); return 1; }

	/* The passive side: an SRQ on the new id, then its QP, which takes the SRQ. */
	ev = wait_ev(RDMA_CM_EVENT_CONNECT_REQUEST);
	sv = ev->id;
	rdma_ack_cm_event(ev);
	struct ibv_srq_init_attr_ex sx;
	memset(&sx, 0, sizeof sx);
	sx.attr.max_wr = 8;
	sx.attr.max_sge = 1;
	r = rdma_create_srq_ex(sv, &sx);
	printf("srq_ex without type %d %s\n", r, r ? strerror(errno) : "-");
	struct ibv_srq_init_attr si;
	memset(&si, 0, sizeof si);
	si.attr.max_wr = 8;
	si.attr.max_sge = 1;
	r = rdma_create_srq(sv, NULL, &si);
	printf("srq %d srq %d recv_cq %d pd %d max_wr %d\n", r, sv->srq != NULL, sv->recv_cq != NULL,
	       sv->pd != NULL, si.attr.max_wr >= 8);
	r = rdma_create_srq(sv, NULL, &si);
	printf("srq again %d %s\n", r, r ? strerror(errno) : "-");
	struct ibv_qp_init_attr qa;
	memset(&qa, 0, sizeof qa);
	qa.qp_type = IBV_QPT_RC;
	qa.cap.max_send_wr = 4;
	qa.cap.max_send_sge = 1;
	r = rdma_create_qp(sv, NULL, &qa);
	printf("qp on srq %d srq %d recv_cq %d\n", r, qa.srq == sv->srq && sv->qp->srq == sv->srq,
	       qa.recv_cq == sv->recv_cq);
	char *sbuf = calloc(1, 64);
	struct ibv_mr *smr = ibv_reg_mr(sv->pd, sbuf, 64, IBV_ACCESS_LOCAL_WRITE);
	struct ibv_sge sg = { .addr = (uintptr_t)sbuf, .length = 64, .lkey = smr->lkey };
	struct ibv_recv_wr rw = { .wr_id = 23, .sg_list = &sg, .num_sge = 1 }, *bad;
	if (ibv_post_srq_recv(sv->srq, &rw, &bad)) { perror("post_srq_recv"); return 1; }
	if (rdma_accept(sv, NULL)) { perror("accept"); return 1; }
	/* Both ESTABLISHED, in either order. */
	int est = 0;
	while (est < 2) {
		if (rdma_get_cm_event(ch, &ev)) { perror("get"); return 1; }
		if (ev->event != RDMA_CM_EVENT_ESTABLISHED) {
			printf("unexpected %s\n", rdma_event_str(ev->event));
			return 1;
		}
		est++;
		rdma_ack_cm_event(ev);
	}
	printf("established\n");
	r = rdma_notify(sv, IBV_EVENT_COMM_EST);
	printf("notify comm_est %d %s\n", r, r ? strerror(errno) : "-");
	r = rdma_notify(sv, IBV_EVENT_PATH_MIG);
	printf("notify path_mig %d\n", r);
	r = rdma_notify(sv, IBV_EVENT_QP_FATAL);
	printf("notify qp_fatal %d %s\n", r, r ? strerror(errno) : "-");

	/* A SEND from the client lands in the SRQ's buffer, completed on the id's CQ. */
	char *cbuf = cmr->addr;
	strcpy(cbuf, "through the srq");
	struct ibv_sge cs = { .addr = (uintptr_t)cbuf, .length = 16, .lkey = cmr->lkey };
	struct ibv_send_wr sw = { .wr_id = 1, .sg_list = &cs, .num_sge = 1, .opcode = IBV_WR_SEND,
				  .send_flags = IBV_SEND_SIGNALED }, *sbad;
	if (ibv_post_send(cl->qp, &sw, &sbad)) { perror("post_send"); return 1; }
	struct ibv_wc wc;
	int n = 0;
	for (int i = 0; i < 5000000 && n == 0; i++)
		n = ibv_poll_cq(sv->recv_cq, 1, &wc);
	printf("recv %d status %d wr_id %d len %d data %s\n", n, n ? wc.status : -1,
	       n ? (int)wc.wr_id : -1, n ? (int)wc.byte_len : -1, n ? sbuf : "-");

	rdma_disconnect(cl);
	rdma_destroy_qp(sv);
	rdma_destroy_srq(sv);
	printf("srq destroyed %d recv_cq %d\n", sv->srq == NULL, sv->recv_cq == NULL);
	return 0;
}
