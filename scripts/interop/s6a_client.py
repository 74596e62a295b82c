#!/usr/bin/env python3
"""An MME's S6a side built from pycrate_diameter (PyPI pycrate, independent of mobicore), used by
scripts/interop.sh against mobicore's HSS: CER (RFC 6733 5.3), AIR (TS 29.272 5.2.3.1), ULR with
Terminal-Information (TS 29.272 5.2.1.1), AIR for an unknown IMSI, DPR. Checks every answer and prints
one line per check; exit status 0 when all passed.

usage: s6a_client.py HOST:PORT IMSI [UNKNOWN_IMSI]
"""
import socket
import sys

from pycrate_diameter.Diameter3GPP import Diameter3GPP

TGPP = 10415
S6A = 16777251
ORIGIN_HOST = b"mme.pycrate.interop.local"
ORIGIN_REALM = b"interop.local"
DEST_REALM = b"mobicore.local"
PLMN_00101 = bytes([0x00, 0xF1, 0x10])  # TS 24.008 10.5.1.13 coding of MCC 001 MNC 01


def avp(code, data, vendor=None):
    hdr = {"Code": code, "M": 1}
    if vendor is not None:
        hdr.update({"V": 1, "VendorID": vendor})
    return {"AVPHdr": hdr, "AVPData": data}


def message(cmd, app, hhid, avps, proxiable=True):
    m = Diameter3GPP()
    m.set_val({"DiameterHdr": {"R": 1, "P": 1 if proxiable else 0, "Cmd": cmd, "AppID": app,
                               "HHID": hhid, "EEID": hhid},
               "AVPs": avps})
    return m.to_bytes()


def tree(avps):
    """[(code, value)] from pycrate values; grouped AVPs give a nested list."""
    out = []
    for hdr, data, _pad in avps:
        if isinstance(data, list) and data and isinstance(data[0], list) and isinstance(data[0][0], list):
            data = tree(data)
        out.append((hdr[0], data))
    return out


def find(avps, *path):
    for code, value in avps:
        if code == path[0]:
            return value if len(path) == 1 else find(value, *path[1:])
    return None


class Peer:
    def __init__(self, addr):
        host, port = addr.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=5)
        self.local_ip = self.sock.getsockname()[0]
        self.hhid = 0x1000

    def read(self):
        def exact(n):
            b = b""
            while len(b) < n:
                chunk = self.sock.recv(n - len(b))
                if not chunk:
                    raise ConnectionError("HSS closed the connection")
                b += chunk
            return b
        head = exact(4)
        body = exact(int.from_bytes(head[1:4], "big") - 4)
        d = Diameter3GPP()
        d.from_bytes(head + body)
        return d

    def request(self, cmd, app, avps):
        self.hhid += 1
        self.sock.sendall(message(cmd, app, self.hhid, avps, proxiable=cmd not in (257, 282)))
        while True:
            d = self.read()
            hdr = d[0]
            if hdr["R"].get_val() == 0 and hdr["HHID"].get_val() == self.hhid:
                if hdr["Cmd"].get_val() != cmd:
                    raise ValueError(f"answer has command code {hdr['Cmd'].get_val()}, not {cmd}")
                return tree(d[1].get_val()), hdr["E"].get_val()


def result(avps):
    rc = find(avps, 268)
    if rc is not None:
        return rc
    return find(avps, 297, 298)


def main():
    addr, imsi = sys.argv[1], sys.argv[2]
    unknown = sys.argv[3] if len(sys.argv) > 3 else "001019999999999"
    failures = []

    def check(ok, what):
        print(("ok   " if ok else "FAIL ") + what)
        if not ok:
            failures.append(what)

    p = Peer(addr)
    ip = bytes(int(x) for x in p.local_ip.split("."))
    cea, _ = p.request(257, 0, [
        avp(264, ORIGIN_HOST), avp(296, ORIGIN_REALM),
        avp(257, {"AddressType": 1, "Value": ip}),
        avp(266, 0), avp(269, b"pycrate-s6a-client"),
        avp(265, TGPP),
        avp(260, [avp(266, TGPP), avp(258, S6A)]),
    ])
    check(result(cea) == 2001, f"CEA Result-Code {result(cea)} (2001 DIAMETER_SUCCESS)")
    check(find(cea, 264) is not None and find(cea, 296) is not None, "CEA names Origin-Host and Origin-Realm")

    def session(n):
        return avp(263, ORIGIN_HOST + b";1;%d" % n)

    common = [avp(277, 1), avp(264, ORIGIN_HOST), avp(296, ORIGIN_REALM), avp(283, DEST_REALM)]
    aia, _ = p.request(318, S6A, [session(1)] + common + [
        avp(260, [avp(266, TGPP), avp(258, S6A)]),
        avp(1, imsi.encode()),
        avp(1408, [avp(1410, 1, TGPP), avp(1412, 0, TGPP)], TGPP),
        avp(1407, PLMN_00101, TGPP),
    ])
    check(result(aia) == 2001, f"AIA Result-Code {result(aia)} (2001)")
    vec = find(aia, 1413, 1414)
    if vec is None:
        check(False, "AIA carries Authentication-Info / E-UTRAN-Vector")
    else:
        rand, xres, autn, kasme = (find(vec, c) for c in (1447, 1448, 1449, 1450))
        check(rand is not None and len(rand) == 16, "E-UTRAN-Vector RAND: 16 octets")
        check(xres is not None and 4 <= len(xres) <= 16, "E-UTRAN-Vector XRES: 4..16 octets")
        check(autn is not None and len(autn) == 16, "E-UTRAN-Vector AUTN: 16 octets")
        # TS 33.401 6.1.1: the AMF separation bit is set in an E-UTRAN vector's AUTN.
        check(autn is not None and autn[6] & 0x80 != 0, "AUTN's AMF has the separation bit (TS 33.401 6.1.1)")
        check(kasme is not None and len(kasme) == 32, "E-UTRAN-Vector KASME: 32 octets")

    ula, _ = p.request(316, S6A, [session(2)] + common + [
        avp(260, [avp(266, TGPP), avp(258, S6A)]),
        avp(1, imsi.encode()),
        avp(1401, [avp(1402, b"35609204079301", TGPP), avp(1403, b"01", TGPP)], TGPP),
        avp(1032, 1004, TGPP),  # RAT-Type EUTRAN
        avp(1405, 0x22, TGPP),  # ULR-Flags: S6a/S6d-Indicator, Initial-Attach-Indicator
        avp(1407, PLMN_00101, TGPP),
    ])
    check(result(ula) == 2001, f"ULA Result-Code {result(ula)} (2001)")
    sub = find(ula, 1400)
    check(sub is not None, "ULA carries Subscription-Data")
    apn = find(sub or [], 1429, 1430, 493)
    check(apn is not None, f"Subscription-Data has an APN-Configuration (Service-Selection {apn!r})")

    unk, _ = p.request(318, S6A, [session(3)] + common + [
        avp(260, [avp(266, TGPP), avp(258, S6A)]),
        avp(1, unknown.encode()),
        avp(1408, [avp(1410, 1, TGPP), avp(1412, 0, TGPP)], TGPP),
        avp(1407, PLMN_00101, TGPP),
    ])
    check(result(unk) == 5001, f"AIA for an unknown IMSI: {result(unk)} (5001 DIAMETER_ERROR_USER_UNKNOWN)")

    dpa, _ = p.request(282, 0, [avp(264, ORIGIN_HOST), avp(296, ORIGIN_REALM), avp(273, 0)])
    check(result(dpa) == 2001, f"DPA Result-Code {result(dpa)} (2001)")

    print(f"s6a_client: {'all checks passed' if not failures else str(len(failures)) + ' check(s) failed'}")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    try:
        main()
    except Exception as e:  # a row fails with the reason, never a traceback alone
        print(f"FAIL s6a_client: {type(e).__name__}: {e}")
        sys.exit(1)
