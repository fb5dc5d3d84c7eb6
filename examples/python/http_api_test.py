#!/usr/bin/env python3
"""Tests of http_api.py against a stand-in HTTP API on a random loopback
port: the replies that leave an admit's outcome unknown end in a void of its
request id, and a settle's are followed by the same settle until it lands
(standard library only)."""
import json
import os
import sys
import threading
import unittest
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

os.environ.setdefault("SPENDGATE_KEY", "sgk_test")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import http_api  # noqa: E402


class Stub(BaseHTTPRequestHandler):
    """Answers each endpoint with the replies queued for it, and records the requests."""

    replies = {}
    seen = []

    def do_POST(self):
        endpoint = self.path.removeprefix("/spendgate/")
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        Stub.seen.append((endpoint, body))
        status, reply = Stub.replies[endpoint].pop(0)
        data = json.dumps(reply).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


class AdmitTest(unittest.TestCase):
    def setUp(self):
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Stub)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        http_api.BASE = f"http://127.0.0.1:{self.server.server_port}"
        Stub.seen = []

    def tearDown(self):
        self.server.shutdown()
        self.server.server_close()

    def test_internal_error_is_voided(self):
        Stub.replies = {
            "admit": [(500, {"error": {"code": "internal", "message": "boom"}})],
            "void": [(200, {"request_id": "r-1", "status": "voided"})],
        }
        status, reply = http_api.admit(["org:x"], "0.01", "r-1")
        self.assertEqual((status, reply["admitted"]), (503, False))
        self.assertEqual([e for e, _ in Stub.seen], ["admit", "void"])
        self.assertEqual(Stub.seen[1][1], {"request_id": "r-1", "scopes": ["org:x"]})

    def test_unavailable_is_retried_then_voided(self):
        unavailable = (503, {"error": {"code": "ledger_unavailable", "message": "unknown"}})
        Stub.replies = {
            "admit": [unavailable, unavailable, unavailable],
            "void": [(200, {"request_id": "r-2", "status": "voided"})],
        }
        status, _ = http_api.admit(["org:x"], "0.01", "r-2")
        self.assertEqual(status, 503)
        self.assertEqual([(e, b.get("retry", False)) for e, b in Stub.seen],
                         [("admit", False), ("admit", True), ("admit", True), ("void", False)])

    def test_settle_is_sent_again_until_it_lands(self):
        unavailable = (503, {"error": {"code": "ledger_unavailable", "message": "unknown"}})
        settled = {"reservation_id": "rsv_1", "status": "settled", "actual": "0.5"}
        Stub.replies = {"settle": [unavailable, (500, {"error": {"code": "internal", "message": "boom"}}), (200, settled)]}
        status, reply = http_api.close("settle", {"reservation_id": "rsv_1", "actual": "0.50"}, backoff=0.01)
        self.assertEqual((status, reply), (200, settled))
        self.assertEqual([b for _, b in Stub.seen], [{"reservation_id": "rsv_1", "actual": "0.50"}] * 3)

    def test_settle_refused_is_not_sent_again(self):
        refused = (409, {"error": {"code": "already_released", "message": "released", "status": "released"}})
        Stub.replies = {"settle": [refused]}
        status, reply = http_api.close("settle", {"reservation_id": "rsv_1", "actual": "0.50"}, backoff=0.01)
        self.assertEqual((status, reply["error"]["code"]), (409, "already_released"))
        self.assertEqual(len(Stub.seen), 1)


if __name__ == "__main__":
    unittest.main()
