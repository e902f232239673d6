# The host side of the lab, as `softrdma` will use it: a program inside the netns bound to
# 10.77.0.1:4791 receives what a guest kernel sends (here: rdma_cm's CM REQ on QP1).
. ./lib.sh
exec python3 -u - "$HOST_IP" 25 <<'PY'
import socket, struct, sys, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind((sys.argv[1], 4791))
s.settimeout(0.5)
open("host.listening", "w").close()
end, n = time.time() + float(sys.argv[2]), 0
with open("host-rx.txt", "w") as out:
    while time.time() < end and not (n and time.time() > first + 2):
        try:
            d, (src, sport) = s.recvfrom(65535)
        except socket.timeout:
            continue
        if n == 0:
            first = time.time()
            open("host.got", "w").close()
        n += 1
        opcode, dqp = d[0], int.from_bytes(d[5:8], "big")
        attr = struct.unpack("!H", d[20 + 16:20 + 18])[0] if opcode == 0x64 and len(d) >= 40 else None
        line = "datagram %d from %s:%d len %d opcode 0x%02x dest_qp %d mad_attr %s" % (
            n, src, sport, len(d), opcode, dqp, "0x%04x" % attr if attr is not None else "-")
        print(line); out.write(line + "\n"); out.flush()
print("received %d datagrams" % n)
PY
