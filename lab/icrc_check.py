#!/usr/bin/env python3
"""Recompute the RoCEv2 ICRC of every RoCEv2 packet (UDP dst 4791) in classic pcap files,
over IPv4 and IPv6, and compare it with the 4 bytes at the end of the packet.

The ICRC (IBTA Annex A17, RoCEv2) is CRC-32 (the zlib/IEEE polynomial, reflected) over:
  8 bytes of 0xff (stand-in for the LRH that RoCEv2 does not carry)
  + the IP header with its variant fields set to all ones:
      IPv4: TOS (DSCP+ECN), TTL, header checksum
      IPv6: traffic class and flow label (bits 4..31 of the first word), hop limit
  + the UDP header with its checksum set to all ones
  + the BTH with byte 4 (resv8a) set to all ones
  + everything after the BTH up to (not including) the ICRC.
Linux rxe stores it little-endian, so the last 4 bytes read as "<I" equal zlib.crc32 of the above.

usage: icrc_check.py [-q] file.pcap ...      exit status 0 iff >= 1 RoCEv2 packet and none is bad
Link types: Ethernet (1), raw IP (101), Linux cooked SLL (113) / SLL2 (276)."""
import struct
import sys
import zlib

ROCE_PORT = 4791


def icrc_input(ip_pkt):
    """Return (bytes the ICRC covers, ICRC on the wire) for an IP packet, or None if it is not RoCEv2."""
    version = ip_pkt[0] >> 4
    if version == 4:
        ihl = (ip_pkt[0] & 0x0F) * 4
        if len(ip_pkt) < ihl + 8 or ip_pkt[9] != 17:
            return None
        ip = bytearray(ip_pkt[:ihl])
        ip[1] = 0xFF                      # TOS
        ip[8] = 0xFF                      # TTL
        ip[10:12] = b"\xff\xff"           # header checksum
        l4 = ihl
    elif version == 6:
        # no extension headers in what rxe sends: next header must be UDP
        if len(ip_pkt) < 48 or ip_pkt[6] != 17:
            return None
        ip = bytearray(ip_pkt[:40])
        ip[0] |= 0x0F                     # low nibble of the traffic class
        ip[1:4] = b"\xff\xff\xff"         # rest of the traffic class + flow label
        ip[7] = 0xFF                      # hop limit
        l4 = 40
    else:
        return None
    udp = bytearray(ip_pkt[l4:l4 + 8])
    if len(udp) < 8 or struct.unpack("!H", udp[2:4])[0] != ROCE_PORT:
        return None
    ulen = struct.unpack("!H", udp[4:6])[0]
    ib = ip_pkt[l4 + 8:l4 + ulen]
    if len(ib) < 16 or ulen > len(ip_pkt) - l4:
        return None
    udp[6:8] = b"\xff\xff"                # UDP checksum
    bth = bytearray(ib[:12])
    bth[4] = 0xFF                         # resv8a
    data = b"\xff" * 8 + bytes(ip) + bytes(udp) + bytes(bth) + bytes(ib[12:-4])
    return data, struct.unpack("<I", ib[-4:])[0]


def ip_of_frame(linktype, frame):
    if linktype == 1:                     # Ethernet (skip one 802.1Q tag if present)
        off, et = 14, frame[12:14]
        if et == b"\x81\x00":
            off, et = 18, frame[16:18]
        return frame[off:] if et in (b"\x08\x00", b"\x86\xdd") else None
    if linktype == 101:
        return frame
    if linktype == 113:
        return frame[16:] if frame[14:16] in (b"\x08\x00", b"\x86\xdd") else None
    if linktype == 276:
        return frame[20:] if frame[0:2] in (b"\x08\x00", b"\x86\xdd") else None
    return None


def check(path, quiet=False):
    with open(path, "rb") as f:
        d = f.read()
    magic = d[:4]
    if magic in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1"):
        end = "<"
    elif magic in (b"\xa1\xb2\xc3\xd4", b"\xa1\xb2\x3c\x4d"):
        end = ">"
    else:
        sys.exit("%s: not a classic pcap file" % path)
    linktype = struct.unpack(end + "I", d[20:24])[0] & 0x0FFFFFFF
    off, frame_no = 24, 0
    counts = {4: [0, 0], 6: [0, 0]}        # version -> [ok, bad]
    while off + 16 <= len(d):
        incl = struct.unpack(end + "I", d[off + 8:off + 12])[0]
        frame = d[off + 16:off + 16 + incl]
        off += 16 + incl
        frame_no += 1
        ip = ip_of_frame(linktype, frame)
        if not ip:
            continue
        r = icrc_input(ip)
        if r is None:
            continue
        data, wire = r
        calc = zlib.crc32(data) & 0xFFFFFFFF
        c = counts[ip[0] >> 4]
        if calc == wire:
            c[0] += 1
        else:
            c[1] += 1
            print("  frame %d (IPv%d): ICRC mismatch, computed %08x, on the wire %08x" % (frame_no, ip[0] >> 4, calc, wire))
    total_ok = counts[4][0] + counts[6][0]
    total_bad = counts[4][1] + counts[6][1]
    if not quiet or total_bad:
        print("%s: %d RoCEv2 packets (IPv4 %d ok / %d bad, IPv6 %d ok / %d bad)"
              % (path, total_ok + total_bad, counts[4][0], counts[4][1], counts[6][0], counts[6][1]))
    return total_ok > 0 and total_bad == 0


if __name__ == "__main__":
    args = sys.argv[1:]
    quiet = "-q" in args
    files = [a for a in args if a != "-q"]
    if not files:
        sys.exit(__doc__)
    good = all([check(f, quiet) for f in files])
    sys.exit(0 if good else 1)
