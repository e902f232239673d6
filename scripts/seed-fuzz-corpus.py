#!/usr/bin/env python3
"""Seeds fuzz/corpus/<target>/ from the kernel captures in fixtures/captures/.

Each target gets the bytes its parser starts at (frames, IP packets, RoCEv2 payloads, MADs,
CM private data, SRP IUs, SCSI CDBs), deduplicated, a few dozen per target at most, so the
committed corpus stays small. Re-run after adding captures; `cargo test` replays the corpus.
"""
import hashlib, os, struct, sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
CAPS = os.path.join(ROOT, "fixtures", "captures")
OUT = os.path.join(ROOT, "fuzz", "corpus")
LIMIT = 40

def read_pcap(path):
    b = open(path, "rb").read()
    magic = struct.unpack("<I", b[:4])[0]
    if magic not in (0xA1B2C3D4, 0xA1B23C4D):
        return None, []
    lt = struct.unpack("<I", b[20:24])[0] & 0xFFFF
    off, out = 24, []
    while off + 16 <= len(b):
        _, _, cap, _ = struct.unpack("<IIII", b[off:off + 16])
        out.append(b[off + 16:off + 16 + cap])
        off += 16 + cap
    return lt, out

def ext_len(op):
    """Extended headers after the BTH, by opcode (IBTA 9.2, Table 38)."""
    svc, o = op >> 5, op & 0x1F
    n = 0
    if svc == 3:  # UD
        return 8 + (4 if o == 5 else 0)
    if o in (6, 10, 11, 12):
        n += 16  # RETH
    if o in (3, 5, 9, 11):
        n += 4  # ImmDt
    if o in (13, 15, 16, 17, 18):
        n += 4  # AETH
    if o == 18:
        n += 8  # AtomicAckETH
    if o in (19, 20):
        n += 28  # AtomicETH
    if o in (22, 23):
        n += 4  # IETH
    return n

seeds = {}

def add(target, data, key=None):
    s = seeds.setdefault(target, {})
    k = key if key is not None else data
    if k in s or len(s) >= LIMIT:
        return
    s[k] = data

for name in sorted(os.listdir(CAPS)):
    if not name.endswith(".pcap"):
        continue
    lt, frames = read_pcap(os.path.join(CAPS, name))
    if os.path.getsize(os.path.join(CAPS, name)) < 4096:
        add("pcap", open(os.path.join(CAPS, name), "rb").read(), key=name)
    sel = {1: 0, 113: 1, 101: 3}.get(lt)
    for f in frames:
        hl = {1: 14, 113: 16, 101: 0}.get(lt)
        if hl is None or len(f) < hl + 20:
            continue
        ip = f[hl:]
        if ip[0] >> 4 != 4 or ip[9] != 17:
            add("frame", bytes([sel]) + f, key=(lt, "other", len(f) // 64))
            continue
        ihl = (ip[0] & 15) * 4
        tot = struct.unpack(">H", ip[2:4])[0]
        ip = ip[:tot]
        udp = ip[ihl:]
        if struct.unpack(">H", udp[2:4])[0] != 4791:
            continue
        pl = udp[8:]
        op = pl[0]
        add("frame", bytes([sel]) + f, key=(lt, op, len(f) > 400))
        add("link", f, key=(lt, "l2"))
        add("link", ip, key=("ip", op))
        add("link", udp, key=("udp", op))
        add("roce", pl, key=(op, len(pl) > 300))
        add("icrc", ip, key=(op, lt))
        e = 12 + ext_len(op)
        payload = pl[e:len(pl) - 4 - ((pl[1] >> 4) & 3)]
        if op == 0x64 and struct.unpack(">I", pl[4:8])[0] & 0xFFFFFF == 1:
            mad = payload
            attr = struct.unpack(">H", mad[16:18])[0]
            add("mad", mad, key=attr)
            add("cm", mad, key=(attr, name))
            data = mad[24:]
            if attr == 0x10:  # REQ
                add("rdma_cm", data[100:192], key=("req", name))
                add("srp", data[100 + 36:192], key=("login_req_rdma", name))
            if attr == 0x13:  # REP
                add("srp", data[36:232], key=("rep", name))
            if attr == 0x12:  # REJ
                add("srp", data[92:240], key=("rej", name))
            if attr == 0x17:  # SIDR_REQ
                add("rdma_cm", data[16:52], key=("sidr", name))
            add("dm", mad, key=("mad", attr))
        elif op in (0x00, 0x01, 0x02, 0x04) and payload:
            add("srp", payload, key=(payload[0], len(payload) // 32))
            if payload[0] == 0x02 and len(payload) >= 48:
                add("scsi", payload[32:48], key=payload[32])

os.makedirs(OUT, exist_ok=True)
total = 0
for target, s in sorted(seeds.items()):
    d = os.path.join(OUT, target)
    os.makedirs(d, exist_ok=True)
    for data in s.values():
        h = hashlib.sha1(data).hexdigest()[:16]
        open(os.path.join(d, h), "wb").write(data)
        total += 1
    print(f"{target}: {len(s)} seeds")
print(f"total {total}")
