/* One node per process, one loop over all of its sockets: two contexts of this process
 * (softrdma_lo opened twice: the second takes a free 127.0.0.x, the first holds 127.0.0.1)
 * are run by one thread of the process's node ("softrdma-node"), not a loop thread each
 * ("softrdma-<ip>"); RC traffic between them flows; a context closed releases its address
 * and one opened again joins the same loop. Linked against Debian's libibverbs, run over
 * softrdma's (tests/c_programs.rs). Prints "ok" and exits 0, or names the first check that
 * failed and exits 1. */
#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common.h"

/* Threads of this process whose name starts with `prefix` (/proc/self/task/N/comm). */
static int threads(const char *prefix)
{
	int n = 0;
	DIR *d = opendir("/proc/self/task");
	struct dirent *e;

	CHECK(d, "opendir");
	while ((e = readdir(d))) {
		char path[300], comm[64] = "";
		FILE *f;

		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "/proc/self/task/%s/comm", e->d_name);
		f = fopen(path, "r");
		if (!f)
			continue;
		if (fgets(comm, sizeof(comm), f) && !strncmp(comm, prefix, strlen(prefix)))
			n++;
		fclose(f);
	}
	closedir(d);
	return n;
}

/* Waits up to 2 s for `n` threads named `prefix`*. */
static void expect_threads(const char *prefix, int n)
{
	double until = now() + 2;

	while (threads(prefix) != n)
		CHECK(now() < until, "%d threads named %s*, expected %d", threads(prefix), prefix, n);
}

struct end {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	struct ibv_mr *mr;
	uint8_t *buf;
	union ibv_gid gid;
};

static void end_open(struct end *e)
{
	e->ctx = open_lo();
	CHECK(!ibv_query_gid(e->ctx, 1, 1, &e->gid), "query_gid");
	e->pd = ibv_alloc_pd(e->ctx);
	e->cq = ibv_create_cq(e->ctx, 16, NULL, NULL, 0);
	e->buf = calloc(1, 4096);
	e->mr = ibv_reg_mr(e->pd, e->buf, 4096, IBV_ACCESS_LOCAL_WRITE);
	struct ibv_qp_init_attr a = {
		.send_cq = e->cq, .recv_cq = e->cq,
		.cap = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1 },
		.qp_type = IBV_QPT_RC, .sq_sig_all = 1,
	};
	e->qp = ibv_create_qp(e->pd, &a);
	CHECK(e->pd && e->cq && e->mr && e->qp, "objects");
}

static void end_close(struct end *e)
{
	CHECK(!ibv_destroy_qp(e->qp) && !ibv_dereg_mr(e->mr) && !ibv_destroy_cq(e->cq) &&
	      !ibv_dealloc_pd(e->pd), "destroy");
	CHECK(!ibv_close_device(e->ctx), "close_device");
	free(e->buf);
}

static void wait_wc(struct end *e, int n)
{
	struct ibv_wc wc[4];
	double until = now() + 5;

	while (n > 0) {
		int k = ibv_poll_cq(e->cq, n, wc);

		CHECK(k >= 0, "poll_cq");
		for (int i = 0; i < k; i++)
			CHECK(wc[i].status == IBV_WC_SUCCESS, "%s", ibv_wc_status_str(wc[i].status));
		n -= k;
		CHECK(n == 0 || now() < until, "%d completions missing", n);
	}
}

static void ping_pong(struct end *a, struct end *b, int rounds)
{
	for (int i = 0; i < rounds; i++) {
		post_recv(b->qp, 1, b->buf, 64, b->mr->lkey);
		post_recv(a->qp, 2, a->buf, 64, a->mr->lkey);
		struct ibv_sge s = { (uintptr_t)a->buf, 64, a->mr->lkey };
		struct ibv_send_wr w = { .wr_id = 3, .sg_list = &s, .num_sge = 1,
					 .opcode = IBV_WR_SEND }, *bad;
		CHECK(!ibv_post_send(a->qp, &w, &bad), "post_send a");
		wait_wc(b, 1);
		s = (struct ibv_sge){ (uintptr_t)b->buf, 64, b->mr->lkey };
		CHECK(!ibv_post_send(b->qp, &w, &bad), "post_send b");
		wait_wc(a, 2);
		wait_wc(b, 1);
	}
}

int main(void)
{
	struct end a, b;

	end_open(&a);
	end_open(&b);
	CHECK(memcmp(&a.gid, &b.gid, sizeof(a.gid)), "two contexts on one address");
	expect_threads("softrdma-node", 1);
	expect_threads("softrdma-127.0.", 0);
	connect_rc(a.qp, b.qp->qp_num, b.gid);
	connect_rc(b.qp, a.qp->qp_num, a.gid);
	ping_pong(&a, &b, 50);

	/* Closed, b's address is free again (a socket binds it); opened again, b is on the
	 * same loop, and talks to a new QP of a. */
	struct sockaddr_in sin = { .sin_family = AF_INET, .sin_port = htons(4791) };
	memcpy(&sin.sin_addr, &b.gid.raw[12], 4);
	end_close(&b);
	int fd = socket(AF_INET, SOCK_DGRAM, 0);
	CHECK(fd >= 0 && !bind(fd, (struct sockaddr *)&sin, sizeof(sin)),
	      "the closed context's address is still held");
	close(fd);
	end_open(&b);
	expect_threads("softrdma-node", 1);
	expect_threads("softrdma-127.0.", 0);
	CHECK(!ibv_destroy_qp(a.qp), "destroy a's QP");
	struct ibv_qp_init_attr qa = {
		.send_cq = a.cq, .recv_cq = a.cq,
		.cap = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1 },
		.qp_type = IBV_QPT_RC, .sq_sig_all = 1,
	};
	a.qp = ibv_create_qp(a.pd, &qa);
	CHECK(a.qp, "a's new QP");
	connect_rc(a.qp, b.qp->qp_num, b.gid);
	connect_rc(b.qp, a.qp->qp_num, a.gid);
	ping_pong(&a, &b, 20);
	end_close(&b);
	end_close(&a);
	printf("ok\n");
	return 0;
}
