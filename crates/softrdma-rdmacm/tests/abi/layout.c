/* Prints sizeof/offsetof of every structure field softrdma-rdmacm relies on, from the system
 * headers (Debian 12: librdmacm-dev 44.0-2). The unit test abi::tests::layout_matches_the_debian_header
 * compares the output with src/abi.rs's LAYOUT. */
#include <stddef.h>
#include <stdio.h>
#include <rdma/rdma_cma.h>

#define S(rs, c) printf("%s %zu\n", rs, sizeof(c))
#define O(rs, c, f) printf("%s %zu\n", rs, offsetof(c, f))

int main(void)
{
	S("ibv_gid", union ibv_gid);
	S("rdma_ib_addr", struct rdma_ib_addr);
	O("rdma_ib_addr.sgid", struct rdma_ib_addr, sgid);
	O("rdma_ib_addr.dgid", struct rdma_ib_addr, dgid);
	O("rdma_ib_addr.pkey", struct rdma_ib_addr, pkey);
	S("rdma_addr", struct rdma_addr);
	O("rdma_addr.src_storage", struct rdma_addr, src_storage);
	O("rdma_addr.dst_storage", struct rdma_addr, dst_storage);
	O("rdma_addr.ibaddr", struct rdma_addr, addr.ibaddr);
	S("rdma_route", struct rdma_route);
	O("rdma_route.addr", struct rdma_route, addr);
	O("rdma_route.path_rec", struct rdma_route, path_rec);
	O("rdma_route.num_paths", struct rdma_route, num_paths);
	S("rdma_event_channel", struct rdma_event_channel);
	O("rdma_event_channel.fd", struct rdma_event_channel, fd);
	S("rdma_cm_id", struct rdma_cm_id);
	O("rdma_cm_id.verbs", struct rdma_cm_id, verbs);
	O("rdma_cm_id.channel", struct rdma_cm_id, channel);
	O("rdma_cm_id.context", struct rdma_cm_id, context);
	O("rdma_cm_id.qp", struct rdma_cm_id, qp);
	O("rdma_cm_id.route", struct rdma_cm_id, route);
	O("rdma_cm_id.ps", struct rdma_cm_id, ps);
	O("rdma_cm_id.port_num", struct rdma_cm_id, port_num);
	O("rdma_cm_id.event", struct rdma_cm_id, event);
	O("rdma_cm_id.send_cq_channel", struct rdma_cm_id, send_cq_channel);
	O("rdma_cm_id.send_cq", struct rdma_cm_id, send_cq);
	O("rdma_cm_id.recv_cq_channel", struct rdma_cm_id, recv_cq_channel);
	O("rdma_cm_id.recv_cq", struct rdma_cm_id, recv_cq);
	O("rdma_cm_id.srq", struct rdma_cm_id, srq);
	O("rdma_cm_id.pd", struct rdma_cm_id, pd);
	O("rdma_cm_id.qp_type", struct rdma_cm_id, qp_type);
	S("rdma_conn_param", struct rdma_conn_param);
	O("rdma_conn_param.private_data", struct rdma_conn_param, private_data);
	O("rdma_conn_param.private_data_len", struct rdma_conn_param, private_data_len);
	O("rdma_conn_param.responder_resources", struct rdma_conn_param, responder_resources);
	O("rdma_conn_param.initiator_depth", struct rdma_conn_param, initiator_depth);
	O("rdma_conn_param.flow_control", struct rdma_conn_param, flow_control);
	O("rdma_conn_param.retry_count", struct rdma_conn_param, retry_count);
	O("rdma_conn_param.rnr_retry_count", struct rdma_conn_param, rnr_retry_count);
	O("rdma_conn_param.srq", struct rdma_conn_param, srq);
	O("rdma_conn_param.qp_num", struct rdma_conn_param, qp_num);
	S("ibv_global_route", struct ibv_global_route);
	O("ibv_global_route.dgid", struct ibv_global_route, dgid);
	O("ibv_global_route.flow_label", struct ibv_global_route, flow_label);
	O("ibv_global_route.sgid_index", struct ibv_global_route, sgid_index);
	O("ibv_global_route.hop_limit", struct ibv_global_route, hop_limit);
	O("ibv_global_route.traffic_class", struct ibv_global_route, traffic_class);
	S("ibv_ah_attr", struct ibv_ah_attr);
	O("ibv_ah_attr.grh", struct ibv_ah_attr, grh);
	O("ibv_ah_attr.dlid", struct ibv_ah_attr, dlid);
	O("ibv_ah_attr.sl", struct ibv_ah_attr, sl);
	O("ibv_ah_attr.src_path_bits", struct ibv_ah_attr, src_path_bits);
	O("ibv_ah_attr.static_rate", struct ibv_ah_attr, static_rate);
	O("ibv_ah_attr.is_global", struct ibv_ah_attr, is_global);
	O("ibv_ah_attr.port_num", struct ibv_ah_attr, port_num);
	S("ibv_qp_cap", struct ibv_qp_cap);
	O("ibv_qp_cap.max_send_wr", struct ibv_qp_cap, max_send_wr);
	O("ibv_qp_cap.max_recv_wr", struct ibv_qp_cap, max_recv_wr);
	O("ibv_qp_cap.max_send_sge", struct ibv_qp_cap, max_send_sge);
	O("ibv_qp_cap.max_recv_sge", struct ibv_qp_cap, max_recv_sge);
	O("ibv_qp_cap.max_inline_data", struct ibv_qp_cap, max_inline_data);
	S("ibv_qp_init_attr", struct ibv_qp_init_attr);
	O("ibv_qp_init_attr.qp_context", struct ibv_qp_init_attr, qp_context);
	O("ibv_qp_init_attr.send_cq", struct ibv_qp_init_attr, send_cq);
	O("ibv_qp_init_attr.recv_cq", struct ibv_qp_init_attr, recv_cq);
	O("ibv_qp_init_attr.srq", struct ibv_qp_init_attr, srq);
	O("ibv_qp_init_attr.cap", struct ibv_qp_init_attr, cap);
	O("ibv_qp_init_attr.qp_type", struct ibv_qp_init_attr, qp_type);
	O("ibv_qp_init_attr.sq_sig_all", struct ibv_qp_init_attr, sq_sig_all);
	S("rdma_ud_param", struct rdma_ud_param);
	O("rdma_ud_param.private_data", struct rdma_ud_param, private_data);
	O("rdma_ud_param.private_data_len", struct rdma_ud_param, private_data_len);
	O("rdma_ud_param.ah_attr", struct rdma_ud_param, ah_attr);
	O("rdma_ud_param.qp_num", struct rdma_ud_param, qp_num);
	O("rdma_ud_param.qkey", struct rdma_ud_param, qkey);
	S("rdma_cm_event", struct rdma_cm_event);
	O("rdma_cm_event.id", struct rdma_cm_event, id);
	O("rdma_cm_event.listen_id", struct rdma_cm_event, listen_id);
	O("rdma_cm_event.event", struct rdma_cm_event, event);
	O("rdma_cm_event.status", struct rdma_cm_event, status);
	O("rdma_cm_event.param", struct rdma_cm_event, param);
	S("rdma_addrinfo", struct rdma_addrinfo);
	O("rdma_addrinfo.ai_flags", struct rdma_addrinfo, ai_flags);
	O("rdma_addrinfo.ai_family", struct rdma_addrinfo, ai_family);
	O("rdma_addrinfo.ai_qp_type", struct rdma_addrinfo, ai_qp_type);
	O("rdma_addrinfo.ai_port_space", struct rdma_addrinfo, ai_port_space);
	O("rdma_addrinfo.ai_src_len", struct rdma_addrinfo, ai_src_len);
	O("rdma_addrinfo.ai_dst_len", struct rdma_addrinfo, ai_dst_len);
	O("rdma_addrinfo.ai_src_addr", struct rdma_addrinfo, ai_src_addr);
	O("rdma_addrinfo.ai_dst_addr", struct rdma_addrinfo, ai_dst_addr);
	O("rdma_addrinfo.ai_src_canonname", struct rdma_addrinfo, ai_src_canonname);
	O("rdma_addrinfo.ai_dst_canonname", struct rdma_addrinfo, ai_dst_canonname);
	O("rdma_addrinfo.ai_route_len", struct rdma_addrinfo, ai_route_len);
	O("rdma_addrinfo.ai_route", struct rdma_addrinfo, ai_route);
	O("rdma_addrinfo.ai_connect_len", struct rdma_addrinfo, ai_connect_len);
	O("rdma_addrinfo.ai_connect", struct rdma_addrinfo, ai_connect);
	O("rdma_addrinfo.ai_next", struct rdma_addrinfo, ai_next);
	S("ibv_ece", struct ibv_ece);
	O("ibv_ece.vendor_id", struct ibv_ece, vendor_id);
	O("ibv_ece.options", struct ibv_ece, options);
	O("ibv_ece.comp_mask", struct ibv_ece, comp_mask);
	S("rdma_cm_join_mc_attr_ex", struct rdma_cm_join_mc_attr_ex);
	O("rdma_cm_join_mc_attr_ex.comp_mask", struct rdma_cm_join_mc_attr_ex, comp_mask);
	O("rdma_cm_join_mc_attr_ex.join_flags", struct rdma_cm_join_mc_attr_ex, join_flags);
	O("rdma_cm_join_mc_attr_ex.addr", struct rdma_cm_join_mc_attr_ex, addr);
	S("sockaddr_storage", struct sockaddr_storage);
	return 0;
}
