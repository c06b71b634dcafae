// `await using` as users write it (TypeScript lowers it for Node 20): the scope's end releases,
// throws the LeaseLost of a hold lost inside it, and keeps the body's own error beside it.
import assert from "node:assert/strict";
import { mkdirSync, rmSync, writeFileSync } from "node:fs";
import path from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { after, before, test } from "node:test";
import ts from "typescript";

import { Server } from "./servers.mjs";

const here = path.dirname(fileURLToPath(import.meta.url));
let server;
before(async () => {
  server = await Server.start();
});
after(async () => {
  await server.stop();
});

const SOURCE = `
import Redis from "ioredis";
import { RwLock, LeaseLost } from "../dist/index.js";
export async function scopes(port: number): Promise<Record<string, unknown>> {
  const redis = new Redis({ port, host: "127.0.0.1" });
  const lock = new RwLock(redis, "u:scope", { ttl: 600 });
  const out: Record<string, unknown> = {};
  {
    await using g = await lock.write();
    out.heldInside = g.held;
  }
  out.releasedAtEnd = (await lock.info()).mode === null;
  try {
    await using g = await lock.write();
    await redis.del("u:scope");
    while (!g.signal.aborted) await new Promise((r) => setTimeout(r, 20));
  } catch (e) {
    out.lostAtEnd = e instanceof LeaseLost ? e.reason : String(e);
  }
  try {
    await using g = await lock.write();
    await redis.del("u:scope");
    while (!g.signal.aborted) await new Promise((r) => setTimeout(r, 20));
    throw new Error("the body's own error");
  } catch (e) {
    const s = e as { error?: unknown; suppressed?: unknown };
    out.both = [s.error instanceof LeaseLost, (s.suppressed as Error | undefined)?.message];
  }
  redis.disconnect();
  return out;
}
`;

test("await using: released at the scope's end; a loss inside throws LeaseLost there", async () => {
  const js = ts.transpileModule(SOURCE, { compilerOptions: { target: ts.ScriptTarget.ES2022, module: ts.ModuleKind.ESNext } }).outputText;
  const dir = path.join(here, "..", "tmp");
  mkdirSync(dir, { recursive: true });
  const file = path.join(dir, `using-${process.pid}.mjs`);
  writeFileSync(file, js);
  const { scopes } = await import(pathToFileURL(file).href).finally(() => rmSync(file));
  const out = await scopes(server.port);
  assert.equal(out.heldInside, true);
  assert.equal(out.releasedAtEnd, true);
  assert.equal(out.lostAtEnd, "revoked");
  assert.deepEqual(out.both, [true, "the body's own error"]);
});
