// The npm `cloudevents` SDK (10.0.0) as an external client of Lakestream's CloudEvents
// endpoints: it sends binary, structured and batched events over HTTP to a running
// `lakestream dev` and reads them back (HTTP.toEvent parses our batches too).
//
// Usage: node cloudevents_sdk_test.js http://127.0.0.1:PORT
// (with NODE_PATH naming the node_modules that `npm ci` filled from this directory's lock).
//
// Exits non-zero, loudly, when the server cannot be reached or anything disagrees. The SDK
// does not percent-encode binary headers (a non-encoding sender), so a lone `%` it sends is
// refused with a 400 naming the attribute, and it re-renders `time` with toISOString().
"use strict";

const assert = require("node:assert/strict");
const crypto = require("node:crypto");
const { CloudEvent, HTTP } = require("cloudevents");

async function request(base, method, path, headers = {}, body = undefined) {
  const response = await fetch(base + path, { method, headers, body });
  const bytes = Buffer.from(await response.arrayBuffer());
  const lower = {};
  response.headers.forEach((value, name) => {
    lower[name.toLowerCase()] = value;
  });
  return { status: response.status, headers: lower, body: bytes };
}

function statuses(answer) {
  assert.equal(answer.status, 200, answer.body.toString());
  return JSON.parse(answer.body.toString()).events.map((e) => [e.status, e.partition, e.offset]);
}

// `contentType`: what binary mode sent as Content-Type (the SDK always sends one, so the
// stored event has that datacontenttype even when the SDK's event had none).
function compare(sent, got, contentType = sent.datacontenttype) {
  for (const name of ["id", "source", "type", "subject", "specversion", "ext1"]) {
    assert.equal(got[name], sent[name], `${name} of ${sent.id}`);
  }
  assert.equal(got.datacontenttype, contentType, `datacontenttype of ${sent.id}`);
  assert.equal(new Date(got.time).getTime(), new Date(sent.time).getTime(), `time of ${sent.id}`);
  assert.deepEqual(got.data, sent.data, `data of ${sent.id}`);
}

async function main() {
  const base = (process.argv[2] || "").replace(/\/$/, "");
  if (!base) {
    throw new Error("usage: node cloudevents_sdk_test.js BASE_URL");
  }
  try {
    await request(base, "GET", "/healthz");
  } catch (error) {
    console.error(`FAIL: the Lakestream server at ${base} is not reachable: ${error.cause || error}`);
    process.exit(1);
  }
  const stream = `node-${crypto.randomBytes(6).toString("hex")}`;
  const created = await request(
    base,
    "POST",
    "/v1/namespaces/default/streams",
    { "content-type": "application/json" },
    JSON.stringify({ name: stream, partitions: 1 }),
  );
  assert.equal(created.status, 201, created.body.toString());
  const eventsPath = `/v1/namespaces/default/streams/${stream}/events`;
  const common = { source: "/node/sdk", type: "dev.lakestream.node", time: "2024-05-06T07:08:09.123Z" };

  const binary = new CloudEvent({ ...common, id: "js-bin-1", subject: "orders/42", ext1: "a-b", data: { message: "hello" } });
  let message = HTTP.binary(binary);
  const binaryType = message.headers["content-type"];
  assert.deepEqual(statuses(await request(base, "POST", eventsPath, message.headers, message.body)), [["appended", 0, 0]]);

  const structured = new CloudEvent({ ...common, id: "js-str-1", datacontenttype: "text/plain", data: "plain text" });
  message = HTTP.structured(structured);
  assert.deepEqual(statuses(await request(base, "POST", eventsPath, message.headers, message.body)), [["appended", 0, 1]]);

  const batch = [0, 1].map((i) => new CloudEvent({ ...common, id: `js-batch-${i}`, data: { i } }));
  const batchBody = JSON.stringify(batch.map((e) => e.toJSON()));
  const batchHeaders = { "content-type": "application/cloudevents-batch+json" };
  assert.deepEqual(statuses(await request(base, "POST", eventsPath, batchHeaders, batchBody)), [
    ["appended", 0, 2],
    ["appended", 0, 3],
  ]);

  // Retries answer the original offsets.
  message = HTTP.binary(binary);
  assert.deepEqual(statuses(await request(base, "POST", eventsPath, message.headers, message.body)), [["duplicate", 0, 0]]);
  assert.deepEqual(statuses(await request(base, "POST", eventsPath, batchHeaders, batchBody)), [
    ["duplicate", 0, 2],
    ["duplicate", 0, 3],
  ]);

  // The SDK sends a lone `%` unencoded: refused, naming the attribute, nothing appended.
  message = HTTP.binary(new CloudEvent({ ...common, id: "js-pct", subject: "100%" }));
  const refused = await request(base, "POST", eventsPath, message.headers, message.body);
  assert.equal(refused.status, 400, refused.body.toString());
  assert.equal(JSON.parse(refused.body.toString()).error.attribute, "subject");

  // Structured consume: one batch, parsed by HTTP.toEvent.
  const consume = `/v1/namespaces/default/streams/${stream}/partitions/0/events`;
  const read = await request(base, "GET", consume);
  assert.equal(read.status, 200);
  assert.equal(read.headers["lakestream-next-offset"], "4");
  const events = HTTP.toEvent({ headers: read.headers, body: read.body.toString() });
  assert.equal(events.length, 4);
  compare(binary, events[0], binaryType);
  [structured, ...batch].forEach((sent, i) => compare(sent, events[i + 1]));

  // Binary consume, one event per message.
  const servedJsonType = (sent) => sent.datacontenttype || "application/json";
  for (const [offset, sent, type] of [[0, binary, binaryType], [1, structured, "text/plain"], [3, batch[1], servedJsonType(batch[1])]]) {
    const one = await request(base, "GET", `${consume}?offset=${offset}&mode=binary`);
    assert.equal(one.status, 200);
    assert.equal(one.headers["lakestream-next-offset"], String(offset + 1));
    compare(sent, HTTP.toEvent({ headers: one.headers, body: one.body.toString() }), type);
  }
  console.log(`node cloudevents SDK: OK (stream ${stream})`);
}

main().catch((error) => {
  console.error("FAIL:", error);
  process.exit(1);
});
