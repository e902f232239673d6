/* Addresses added to and removed from an interface while a context of its device is open
 * show up in and leave the device's GID table, as rxe follows its netdev. Run inside a
 * network namespace of the test's own (tests/c_programs.rs): argv[1] is the device
 * (softrdma_<interface>), argv[2] an IPv4 address the test adds to the interface after this
 * program printed "ready", then removes after it printed "added <index>". Prints "ok" and
 * exits 0, or names the first check that failed and exits 1. */
#include <arpa/inet.h>
#include <unistd.h>

#include "common.h"

/* The index of the RoCEv2 GID of `want` in the table, or -1. */
static int find_gid(struct ibv_context *ctx, const union ibv_gid *want)
{
	struct ibv_port_attr pa;

	CHECK(!ibv_query_port(ctx, 1, &pa), "query_port");
	for (int i = 0; i < pa.gid_tbl_len && i < 64; i++) {
		struct ibv_gid_entry e;

		if (ibv_query_gid_ex(ctx, 1, i, &e, 0))
			continue; /* an empty entry: ENODATA */
		if (!memcmp(&e.gid, want, sizeof(*want)) && e.gid_type == IBV_GID_TYPE_ROCE_V2)
			return i;
	}
	return -1;
}

int main(int argc, char **argv)
{
	struct ibv_device **list;
	struct ibv_context *ctx = NULL;
	union ibv_gid want = { .raw = { [10] = 0xff, [11] = 0xff } };
	int n, idx;

	CHECK(argc == 3, "usage: addr_change DEVICE IPV4");
	CHECK(inet_pton(AF_INET, argv[2], &want.raw[12]) == 1, "address %s", argv[2]);
	list = ibv_get_device_list(&n);
	CHECK(list, "get_device_list");
	for (int i = 0; i < n; i++)
		if (!strcmp(ibv_get_device_name(list[i]), argv[1]))
			ctx = ibv_open_device(list[i]);
	CHECK(ctx, "no device %s", argv[1]);
	CHECK(find_gid(ctx, &want) < 0, "%s in the table before it was added", argv[2]);
	printf("ready\n");
	fflush(stdout);

	double until = now() + 10;
	while ((idx = find_gid(ctx, &want)) < 0) {
		CHECK(now() < until, "%s not in the GID table 10 s after ready", argv[2]);
		usleep(20000);
	}
	printf("added %d\n", idx);
	fflush(stdout);

	until = now() + 10;
	while (find_gid(ctx, &want) >= 0) {
		CHECK(now() < until, "%s still in the GID table 10 s after added", argv[2]);
		usleep(20000);
	}
	CHECK(!ibv_close_device(ctx), "close_device");
	ibv_free_device_list(list);
	printf("ok\n");
	return 0;
}
