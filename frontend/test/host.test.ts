import { test } from "node:test";
import assert from "node:assert/strict";
import { HostChannel } from "../src/host";

test("host messages: listens, replies, and resolves its own requests", async () => {
  const ch = new MessageChannel();
  const guest = new HostChannel(ch.port1);
  let reloaded = 0;
  guest.listen("experimental.DataReloaded", () => {
    reloaded++;
  });
  const received: Record<string, unknown>[] = [];
  const done = new Promise<void>((resolve) => {
    ch.port2.onmessage = (e: MessageEvent) => {
      const m = JSON.parse(String(e.data));
      received.push(m);
      if (m.type === "experimental.GetRuns" && !m.isReply) {
        ch.port2.postMessage(JSON.stringify({ type: m.type, id: m.id, payload: ["r1"], error: null, isReply: true }));
      }
      if (received.length === 2) resolve();
    };
  });
  ch.port2.postMessage(JSON.stringify({ type: "experimental.DataReloaded", id: 7, payload: null, error: null, isReply: false }));
  const runs = await guest.send("experimental.GetRuns");
  await done;
  assert.deepEqual(runs, ["r1"]);
  assert.equal(reloaded, 1);
  const reply = received.find((m) => m.isReply);
  assert.deepEqual(reply, { type: "experimental.DataReloaded", id: 7, payload: null, error: null, isReply: true });
  ch.port1.close();
  ch.port2.close();
});
