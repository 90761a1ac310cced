"""Bad input on the wire, checked the same way against Lakestream and Apache Kafka, so that the
expected outcomes are Kafka's: raw frames over a socket, and whether the server answers (with
which error code) or closes the connection.

    python bad_input_test.py BOOTSTRAP

Frames: ApiVersions of an unserved version (answered, UNSUPPORTED_VERSION 35, connection kept),
unserved versions of Fetch and Produce, an unknown API key, a negative size, a 200 MB size, a
Produce body cut short, a frame too short for a header (all: closed, nothing answered).
"""

import socket
import struct
import sys


def frame(key, version, body=b""):
    header = struct.pack(">hhih", key, version, 7, -1)
    return struct.pack(">i", len(header) + len(body)) + header + body


def outcome(address, data):
    """'closed', or ('answered', correlation id, error code of an ApiVersions v0 body)."""
    s = socket.create_connection(address, timeout=10)
    try:
        s.sendall(data)
        head = s.recv(4)
        if not head:
            return "closed"
        size = struct.unpack(">i", head)[0]
        body = b""
        while len(body) < size:
            chunk = s.recv(size - len(body))
            if not chunk:
                return "closed"
            body += chunk
        correlation, error = struct.unpack(">ih", body[:6])
        # The connection stays open: an ApiVersions v0 request is answered next.
        s.sendall(frame(18, 0))
        again = s.recv(4)
        return ("answered", correlation, error, "kept" if again else "closed after")
    except ConnectionResetError:
        return "closed"
    finally:
        s.close()


CASES = [
    ("ApiVersions v99", frame(18, 99, b"\x00"), ("answered", 7, 35, "kept")),
    ("Fetch v3", frame(1, 3), "closed"),
    ("Produce v2", frame(0, 2), "closed"),
    ("unknown API key 999", frame(999, 0), "closed"),
    ("negative size", struct.pack(">i", -5), "closed"),
    ("size of 200 MB", struct.pack(">i", 200 * 1024 * 1024), "closed"),
    ("Produce v3 body cut short", frame(0, 3, b"\xff\xff\x00\x01\x00\x00"), "closed"),
    ("frame shorter than a header", struct.pack(">i", 3) + b"\x00\x12\x00", "closed"),
]


def main():
    host, port = sys.argv[1].rsplit(":", 1)
    address = (host, int(port))
    failed = 0
    for name, data, want in CASES:
        got = outcome(address, data)
        ok = got == want
        failed += not ok
        print(f"{'ok  ' if ok else 'FAIL'} {name}: {got}" + ("" if ok else f", expected {want}"))
    print(f"{len(CASES) - failed} passed, {failed} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
