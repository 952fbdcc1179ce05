import { spawnSync } from "node:child_process";
import { closeSync, mkdtempSync, openSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import pino from "pino";
import { afterAll, describe, expect, it } from "vitest";
import { createLogDestination } from "../src/server/log-destination.js";
import { waitFor } from "./support/processes.js";
import { repositoryRoot } from "./support/tools.js";

const directory = mkdtempSync(path.join(tmpdir(), "sandboxd-log-destination-"));
afterAll(() => rmSync(directory, { recursive: true, force: true }));

function logTo(name: string) {
  const file = path.join(directory, name);
  const fd = openSync(file, "w");
  const logger = pino({ base: null, timestamp: false }, createLogDestination({ fd }));
  const lines = () =>
    readFileSync(file, "utf8")
      .split("\n")
      .filter(Boolean)
      .map((line) => (JSON.parse(line) as { msg: string }).msg);
  return {
    logger,
    lines,
    close: () => {
      logger.flush();
      closeSync(fd);
    },
  };
}

describe("the daemon's JSON log destination", () => {
  it("holds routine lines and writes them together a moment later", async () => {
    const log = logTo("routine");
    log.logger.info("one");
    log.logger.info("two");
    // Nothing written yet: a write per line is what this saves.
    expect(log.lines()).toEqual([]);
    await waitFor(() => log.lines().length === 2, { timeoutMs: 10_000, what: "the held lines" });
    expect(log.lines()).toEqual(["one", "two"]);
    log.close();
  });

  it("writes as soon as 4 KiB are held", () => {
    const log = logTo("full");
    for (let index = 0; index < 40; index++) log.logger.info(`line ${index} ${"x".repeat(100)}`);
    expect(log.lines().length).toBeGreaterThanOrEqual(30);
    log.close();
  });

  it("writes a warning at once, after the lines held before it", () => {
    const log = logTo("warning");
    log.logger.info("before");
    log.logger.warn("the warning");
    expect(log.lines()).toEqual(["before", "the warning"]);
    log.close();
  });

  it("writes what it holds when the process exits, also on an uncaught exception", () => {
    for (const end of ["process.exit(3)", "setImmediate(() => { throw new Error('crash') })"]) {
      const script = `
        const { createLogger } = await import("./src/server/observe.ts");
        const logger = createLogger({ format: "json" });
        logger.info("held at exit");
        ${end};
      `;
      const child = spawnSync(process.execPath, ["--import", "tsx", "--input-type=module", "-e", script], {
        cwd: repositoryRoot,
        encoding: "utf8",
        timeout: 60_000,
      });
      expect(child.status, child.stderr).not.toBe(0);
      expect(child.stderr).toContain('"msg":"held at exit"');
    }
  }, 120_000);

  it("goes on when its writes fail for lack of room (ENOSPC), and flushes without throwing", () => {
    const fd = openSync("/dev/full", "w");
    try {
      const destination = createLogDestination({ fd });
      const logger = pino({ base: null, timestamp: false }, destination);
      // A warning is written at once: the write fails; so does each flush after it.
      for (let index = 0; index < 3000; index++) logger.warn(`line ${index} ${"x".repeat(500)}`);
      let flushed: Error | undefined | "not called" = "not called";
      destination.flush((error) => (flushed = error));
      expect(flushed).not.toBe("not called");
    } finally {
      closeSync(fd);
    }
  });
});
