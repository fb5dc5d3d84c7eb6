#!/usr/bin/env python3
"""spendgate's HTTP API from Python with the standard library only.

The HTTP API is the wire API over HTTP: POST /spendgate/<endpoint> with the
same JSON bodies and the same error codes as the NATS endpoints, served by
`spendgate gateway`. A key made with `spendgate keys create --access admin`
(or `--access service` for a service that only admits and settles) is the
bearer token.

    SPENDGATE_HTTP=http://127.0.0.1:8080 SPENDGATE_KEY=sgk_... python3 http_api.py

The four rules of every caller hold here too: make the request id once and
reuse it on every retry; fail closed (no answer means do not call the paid
upstream); void what you gave up on; send a settle (or release) whose outcome
is unknown again, same body, until it lands.
"""
import json
import os
import sys
import time
import uuid
import urllib.error
import urllib.request

BASE = os.environ.get("SPENDGATE_HTTP", "http://127.0.0.1:8080")
KEY = os.environ["SPENDGATE_KEY"]
TIMEOUT = 5  # seconds; no answer in time: fail closed


def call(endpoint, body):
    """POSTs body to an endpoint; returns (HTTP status, reply object)."""
    req = urllib.request.Request(
        f"{BASE}/spendgate/{endpoint}",
        data=json.dumps(body).encode(),
        headers={"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(req, timeout=TIMEOUT) as resp:
            return resp.status, json.load(resp)
    except urllib.error.HTTPError as err:  # 4xx and 5xx carry {"error": {...}}
        return err.code, json.load(err)


def admit(scopes, amount, request_id, attempts=3):
    """Reserves amount in every scope, or in none. Retries an unanswered
    admit with the same request id; if it never gets an answer, voids the
    request id and denies (fail closed). An internal error (500) leaves the
    outcome unknown too: it is voided at once, not retried."""
    body = {"request_id": request_id, "scopes": scopes, "amount": amount, "ttl": "1m"}
    for _ in range(attempts):
        try:
            status, reply = call("admit", body)
        except (urllib.error.URLError, TimeoutError):
            status = None  # no answer
        if status == 500:
            break
        if status is not None and status != 503:
            return status, reply
        # No answer, or ledger_unavailable: the attempt may still commit.
        # Retry with the same request id, marked as a retry, so that the
        # ledger never denies it while the first attempt may land.
        body["retry"] = True
    try:
        call("void", {"request_id": request_id, "scopes": scopes})
    except (urllib.error.URLError, TimeoutError):
        pass  # the reservation, if any, expires after its TTL
    return 503, {"admitted": False, "denial": {"reason": "ledger_unavailable"}}


def close(endpoint, body, give_up_after=48 * 3600, backoff=1.0):
    """Settles or releases (endpoint "settle" or "release"). An answer that
    leaves the outcome unknown (none, ledger_unavailable, ledger_busy,
    internal, a proxy's 5xx) is sent again, same body, with a back-off
    doubling to 30 s, until it is answered or give_up_after seconds pass:
    the same settle twice is answered as the first, and the ledger takes a
    settle up to 48 hours after the reservation expired. Dropped, the call's
    spend would never be recorded. This waits; an app would hand it to a
    background worker or a durable queue."""
    deadline = time.monotonic() + give_up_after
    while True:
        try:
            status, reply = call(endpoint, body)
        except (urllib.error.URLError, TimeoutError, ValueError):
            status, reply = None, None  # no answer, or not spendgate's
        if status is not None and status < 500:
            return status, reply
        if time.monotonic() + backoff > deadline:
            return status or 503, reply or {"error": {"code": "ledger_unavailable"}}
        time.sleep(backoff)
        backoff = min(2 * backoff, 30.0)


def expect(what, got, want):
    print(f"{what}: {got}")
    if got != want:
        sys.exit(f"FAIL: {what}: want {want}, got {got}")


def main():
    scope = f"org:py-{uuid.uuid4().hex[:8]}"
    status, b = call("budget.put", {"scope": scope, "period": "month", "limit": "1.00", "unit": "USD"})
    expect("budget.put", (status, b["limit"], b["available"]), (200, "1", "1"))

    rid = str(uuid.uuid4())  # made once, reused on every retry
    status, a = admit([scope], "0.60", rid)
    expect("admit 0.60", (status, a["admitted"], a["amount"]), (200, True, "0.6"))
    status, again = call("admit", {"request_id": rid, "scopes": [scope], "amount": "0.60", "ttl": "1m"})
    expect("the same admit again (a lost reply's retry)", (again["replayed"], again["reservation_id"] == a["reservation_id"]), (True, True))

    status, d = admit([scope], "0.60", str(uuid.uuid4()))
    expect("a second admit of 0.60 (denied: 200 and admitted false)", (status, d["admitted"], d["denial"]["reason"]), (200, False, "limit_reached"))

    status, s = close("settle", {"reservation_id": a["reservation_id"], "actual": "0.50"})
    expect("settle 0.50", (status, s["status"], s["actual"]), (200, "settled", "0.5"))
    status, e = call("settle", {"reservation_id": a["reservation_id"], "actual": "0.40"})
    expect("settle again with another actual", (status, e["error"]["code"]), (409, "already_settled"))

    status, e = call("admit", {"request_id": str(uuid.uuid4()), "scopes": [scope], "amount": "-1"})
    expect("a negative amount", (status, e["error"]["code"]), (400, "invalid_amount"))
    status, e = call("release", {"reservation_id": "rsv_00000000-0000-0000-0000-000000000000"})
    expect("release of an unknown reservation", (status, e["error"]["code"]), (404, "unknown_reservation"))

    status, v = call("void", {"request_id": str(uuid.uuid4()), "scopes": [scope]})
    expect("void of an admit that never landed", (status, v["status"]), (200, "voided"))

    status, b = call("budget.get", {"scope": scope, "period": "month"})
    expect("budget.get", (status, b["spent"], b["reserved"], b["available"]), (200, "0.5", "0", "0.5"))

    # A scope that is over (an agent run, a job) is retired: every later
    # admit naming it is denied, and its budget leaves the ledger's memory.
    status, r = call("budget.retire", {"scope": scope, "period": "month", "reason": "walkthrough over"})
    expect("budget.retire", (status, r["retired"], r["retired_reason"], r["spent"]), (200, True, "walkthrough over", "0.5"))
    status, d = call("admit", {"request_id": str(uuid.uuid4()), "scopes": [scope], "amount": "0.01"})
    expect("an admit after it", (status, d["admitted"], d["denial"]["reason"]), (200, False, "budget_retired"))
    print("OK")


if __name__ == "__main__":
    main()
