"""The Python `cloudevents` SDK (2.2.0, new `cloudevents.core` API) as an external client of
Lakestream's CloudEvents endpoints: it sends binary, structured and batched events over HTTP to a
running `lakestream dev` and reads them back in both consume modes.

Usage: python cloudevents_sdk_test.py http://127.0.0.1:PORT

Exits non-zero, loudly, when the server cannot be reached or anything disagrees. The SDK
percent-encodes every header character but letters, digits and `_.-~` (an over-encoding
sender) and normalizes `time` to a datetime, so times are compared as instants.
"""

import json
import sys
import urllib.error
import urllib.request
import uuid
from datetime import datetime, timezone

from cloudevents.core.bindings import http
from cloudevents.core.formats.json import JSONFormat
from cloudevents.core.v1.event import CloudEvent


def request(base, method, path, headers=None, body=b""):
    req = urllib.request.Request(base + path, data=body if method != "GET" else None, method=method)
    for name, value in (headers or {}).items():
        req.add_header(name, value)
    try:
        with urllib.request.urlopen(req, timeout=30) as response:
            return response.status, {k.lower(): v for k, v in response.headers.items()}, response.read()
    except urllib.error.HTTPError as error:
        return error.code, {k.lower(): v for k, v in error.headers.items()}, error.read()


def check(condition, message):
    if not condition:
        raise AssertionError(message)


def statuses(answer):
    status, _, body = answer
    check(status == 200, f"expected 200, got {status}: {body!r}")
    return [(e["status"], e["partition"], e["offset"]) for e in json.loads(body)["events"]]


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: cloudevents_sdk_test.py BASE_URL")
    base = sys.argv[1].rstrip("/")
    try:
        request(base, "GET", "/healthz")
    except OSError as error:
        sys.exit(f"FAIL: the Lakestream server at {base} is not reachable: {error}")

    stream = f"py-{uuid.uuid4().hex[:12]}"
    status, _, body = request(
        base, "POST", "/v1/namespaces/default/streams", {"content-type": "application/json"},
        json.dumps({"name": stream, "partitions": 1}).encode(),
    )
    check(status == 201, f"creating the stream: {status} {body!r}")
    events_path = f"/v1/namespaces/default/streams/{stream}/events"
    when = datetime(2024, 5, 6, 7, 8, 9, 123000, tzinfo=timezone.utc)

    binary = CloudEvent(
        {"type": "dev.lakestream.python", "source": "/python/sdk", "id": "py-bin-1", "time": when,
         "subject": "Euro € 😀 100%", "datacontenttype": "application/json", "ext1": "a b/c"},
        {"message": "hello"},
    )
    message = http.to_binary_event(binary)
    check("%" in message.headers["ce-subject"], "the SDK percent-encodes binary headers")
    check(statuses(request(base, "POST", events_path, message.headers, message.body)) == [("appended", 0, 0)],
          "binary ingest")

    structured = CloudEvent(
        {"type": "dev.lakestream.python", "source": "/python/sdk", "id": "py-str-1", "time": when},
        {"n": 1},
    )
    message = http.to_structured_event(structured)
    check(statuses(request(base, "POST", events_path, message.headers, message.body)) == [("appended", 0, 1)],
          "structured ingest")

    # The SDK's HTTP binding has no batch format: a JSON array of its JSON-format events is one.
    batch = [
        CloudEvent({"type": "dev.lakestream.python", "source": "/python/sdk", "id": f"py-batch-{i}", "time": when},
                   {"i": i})
        for i in range(2)
    ]
    body = b"[" + b",".join(JSONFormat().write(e) for e in batch) + b"]"
    answer = request(base, "POST", events_path, {"content-type": "application/cloudevents-batch+json"}, body)
    check(statuses(answer) == [("appended", 0, 2), ("appended", 0, 3)], "batched ingest")

    # Retries are answered with the original offsets and append nothing.
    message = http.to_binary_event(binary)
    check(statuses(request(base, "POST", events_path, message.headers, message.body)) == [("duplicate", 0, 0)],
          "binary retry")
    check(statuses(request(base, "POST", events_path, {"content-type": "application/cloudevents-batch+json"},
                           body)) == [("duplicate", 0, 2), ("duplicate", 0, 3)], "batch retry")

    consume = f"/v1/namespaces/default/streams/{stream}/partitions/0/events"
    # Binary consume, parsed by the SDK.
    for offset, sent in [(0, binary), (1, structured), (2, batch[0])]:
        status, headers, data = request(base, "GET", f"{consume}?offset={offset}&mode=binary")
        check(status == 200, f"binary consume at {offset}: {status} {data!r}")
        check(headers.get("lakestream-next-offset") == str(offset + 1), f"next offset after {offset}")
        got = http.from_binary_event(http.HTTPMessage(headers, data))
        compare(sent, got)

    # Structured consume: a JSON batch, each element parsed by the SDK's JSON format.
    status, headers, data = request(base, "GET", consume)
    check(status == 200, f"structured consume: {status}")
    check(headers.get("content-type", "").startswith("application/cloudevents-batch+json"), "batch content type")
    check(headers.get("lakestream-next-offset") == "4", "next offset after the batch")
    elements = json.loads(data)
    check(len(elements) == 4, f"4 events, got {len(elements)}")
    for sent, element in zip([binary, structured, *batch], elements):
        compare(sent, JSONFormat().read(CloudEvent, json.dumps(element).encode()))
    print(f"python cloudevents SDK: OK (stream {stream})")


def compare(sent, got):
    check(got.get_id() == sent.get_id(), f"id {got.get_id()!r} != {sent.get_id()!r}")
    check(got.get_source() == sent.get_source(), f"source of {sent.get_id()}")
    check(got.get_type() == sent.get_type(), f"type of {sent.get_id()}")
    check(got.get_subject() == sent.get_subject(), f"subject {got.get_subject()!r} != {sent.get_subject()!r}")
    check(got.get_time() == sent.get_time(), f"time {got.get_time()!r} != {sent.get_time()!r}")
    check(got.get_data() == sent.get_data(), f"data {got.get_data()!r} != {sent.get_data()!r}")
    for name, value in sent.get_attributes().items():
        if name not in ("time",):
            check(got.get_attributes().get(name) == value, f"attribute {name} of {sent.get_id()}")


if __name__ == "__main__":
    main()
