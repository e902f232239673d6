# udaddy_host_server: the guest kernel's udaddy client (-c 2 -C 10 -S 100) against `softrdma
# udaddy` on the host: both exit 0 and print exactly what v44's udaddy.c prints; per
# connection SIDR REQ (service ID 0x1111c06) / SIDR REP (ours: status 0, our QPN, Q_Key
# 0x01234567) and nothing else on the CM; 10 SENDs with immediate of 100 bytes each way, the
# guest's first, to the QPNs our SIDR REPs named and back to the guest's QPs (our reply AH
# from the GRH, the QPN from the immediate); every ICRC right; `softrdma decode` reads it all.
. "$LABDIR/scenarios/checklib.sh"
udaddy_host_server_check "softrdma udaddy"
finish
