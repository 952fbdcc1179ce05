import { expectReason } from "./support/errors.js";
import { execFileSync, spawn, spawnSync } from "node:child_process";
import {
  chmodSync,
  chownSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { GroupLedger, resolveUser } from "../src/process/index.js";
import { isAlive, waitFor } from "./support/processes.js";
import { Code, rpcError, sleepMarker, sleepers } from "./support/rpc.js";
import { startTestServer, type TestServer } from "./support/server.js";

const isRoot = process.getuid?.() === 0;
const root = path.resolve(import.meta.dirname, "..");

/** Whether `unshare --pid --fork --mount-proc` works here (root, and a kernel that allows it). */
const canUnsharePid = isRoot && spawnSync("unshare", ["--pid", "--fork", "--mount-proc", "true"]).status === 0;

/**
 * Runs inside a private pid namespace: starts a group and records it as a dead daemon would have,
 * kills it, makes the kernel hand the same pid to a new, unrelated process (ns_last_pid), and
 * reaps. Prints what happened as JSON.
 */
const reuseScript = `
import { spawn } from "node:child_process";
import { mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { GroupLedger } from ${JSON.stringify(path.join(root, "src/process/index.ts"))};

const directory = mkdtempSync(path.join(tmpdir(), "ledger-reuse-"));
const ledger = new GroupLedger(directory);
const started = (child) => new Promise((resolve) => child.once("spawn", resolve));
const first = spawn("sleep", ["100"], { detached: true, stdio: "ignore" });
await started(first);
ledger.record(first.pid, "first");
const file = path.join(directory, first.pid + ".json");
const record = JSON.parse(readFileSync(file, "utf8"));
record.daemonPid = 999999; // a daemon that died
writeFileSync(file, JSON.stringify(record));
first.kill("SIGKILL");
await new Promise((resolve) => first.once("exit", resolve));
let second;
for (let attempt = 0; attempt < 20; attempt++) {
  writeFileSync("/proc/sys/kernel/ns_last_pid", String(first.pid - 1));
  second = spawn("sleep", ["100"], { detached: true, stdio: "ignore" });
  await started(second);
  if (second.pid === first.pid) break;
  second.kill("SIGKILL");
}
const report = ledger.reapLeftovers();
// A wrong kill shows within moments: the process must stay alive, watched for 300 ms.
const living = () =>
  readFileSync("/proc/" + second.pid + "/stat", "utf8").split(") ")[1][0] !== "Z" && second.exitCode === null && second.signalCode === null;
let alive = living();
for (const until = Date.now() + 300; alive && Date.now() < until; ) {
  await new Promise((resolve) => setImmediate(resolve));
  alive = living();
}
console.log(JSON.stringify({ reused: second.pid === first.pid, report, alive }));
second.kill("SIGKILL");
`;

describe("the ledger never kills what it did not start", () => {
  const cleanups: Array<() => void> = [];
  afterEach(() => {
    for (const cleanup of cleanups.splice(0)) cleanup();
  });
  const stateDirectory = () => {
    const directory = mkdtempSync(path.join(tmpdir(), "sandboxd-ledger-"));
    cleanups.push(() => rmSync(directory, { recursive: true, force: true }));
    return directory;
  };

  it.skipIf(!canUnsharePid)("a real pid reuse (a new process given a recorded leader's pid) is left alone", () => {
    const directory = stateDirectory();
    const script = path.join(directory, "reuse.mts");
    writeFileSync(script, reuseScript);
    const output = execFileSync(
      "unshare",
      ["--pid", "--fork", "--mount-proc", process.execPath, "--import", "tsx", script],
      {
        cwd: root,
        encoding: "utf8",
        timeout: 30_000,
      },
    );
    const result = JSON.parse(output.trim().split("\n").at(-1)!) as {
      reused: boolean;
      report: { killedGroups: number[]; staleRecords: number };
      alive: boolean;
    };
    expect(result.reused).toBe(true);
    expect(result.report.killedGroups).toEqual([]);
    expect(result.report.staleRecords).toBe(1);
    expect(result.alive).toBe(true);
  });

  it("a record from another boot is ignored, even when its leader's pid and start time match", async () => {
    const directory = stateDirectory();
    const ledger = new GroupLedger(directory);
    const live = spawn("sleep", [sleepMarker()], { detached: true, stdio: "ignore" });
    cleanups.push(() => live.kill("SIGKILL"));
    await new Promise((resolve) => live.once("spawn", resolve));
    ledger.record(live.pid!, "other-boot");
    const file = path.join(directory, `${live.pid}.json`);
    const record = JSON.parse(readFileSync(file, "utf8"));
    writeFileSync(
      file,
      JSON.stringify({ ...record, bootId: "00000000-0000-0000-0000-000000000000", daemonPid: 999_999_999 }),
    );
    // Nothing killed; the record is reported as a process lost with that boot, details and all.
    expect(new GroupLedger(directory).reapLeftovers()).toEqual({
      killedGroups: [],
      staleRecords: 1,
      invalidRecords: 0,
      lost: [
        {
          processId: "other-boot",
          pgid: live.pid,
          killed: false,
          command: "",
          args: [],
          sessionId: "",
          cwd: "",
          startedAtMs: 0,
          pty: false,
          acceptsInput: false,
        },
      ],
    });
    expect(isAlive(live.pid!)).toBe(true);
  });

  it("planted records (init, the daemon itself, symlinks, garbage) kill nothing and are removed", () => {
    const directory = stateDirectory();
    const ledger = new GroupLedger(directory);
    const planted = { startTime: 1, bootId: "x", processId: "p", daemonPid: 999_999_999, daemonStartTime: 1 };
    writeFileSync(path.join(directory, "1.json"), JSON.stringify({ ...planted, pgid: 1 }));
    writeFileSync(path.join(directory, `${process.pid}.json`), JSON.stringify({ ...planted, pgid: process.pid }));
    writeFileSync(path.join(directory, "-1.json"), JSON.stringify({ ...planted, pgid: -1 }));
    writeFileSync(path.join(directory, "77.json"), JSON.stringify({ ...planted, pgid: 78 }));
    writeFileSync(path.join(directory, "garbage.json"), "{");
    symlinkSync("/etc/hostname", path.join(directory, "4242.json"));
    const hostname = readFileSync("/etc/hostname", "utf8");
    expect(ledger.reapLeftovers()).toEqual({ killedGroups: [], staleRecords: 0, invalidRecords: 6, lost: [] });
    expect(readdirSync(directory)).toEqual([]);
    expect(readFileSync("/etc/hostname", "utf8")).toBe(hostname);
  });

  it("keeps what a later daemon tells of a lost process, cut to size, and believes no details of the wrong shape", async () => {
    const directory = stateDirectory();
    const ledger = new GroupLedger(directory);
    const live = spawn("sleep", [sleepMarker()], { detached: true, stdio: "ignore" });
    cleanups.push(() => live.kill("SIGKILL"));
    await new Promise((resolve) => live.once("spawn", resolve));
    ledger.record(live.pid!, "told", {
      command: "c".repeat(300),
      args: ["a".repeat(200), "b".repeat(100)],
      sessionId: "s-1",
      cwd: "/workspace/x",
      startedAtMs: 1_700_000_000_123,
      pty: true,
      acceptsInput: true,
    });
    const file = path.join(directory, `${live.pid}.json`);
    const record = JSON.parse(readFileSync(file, "utf8"));
    writeFileSync(file, JSON.stringify({ ...record, daemonPid: 999_999_999 }));
    expect(new GroupLedger(directory).reapLeftovers().lost).toEqual([
      {
        processId: "told",
        pgid: live.pid,
        killed: true,
        command: "c".repeat(256),
        args: ["a".repeat(200)],
        sessionId: "s-1",
        cwd: "/workspace/x",
        startedAtMs: 1_700_000_000_123,
        pty: true,
        acceptsInput: true,
      },
    ]);
    await waitFor(() => live.exitCode !== null || live.signalCode !== null, {
      what: "the recorded group to be killed",
    });
    // A record whose details are not what a daemon writes still names its group; the details are dropped:
    // wrong types, a start in the future or past what a Date holds, a session with a control character.
    const good = { command: "c", args: [], sessionId: "", cwd: "/w", startedAtMs: 1, pty: false, acceptsInput: false };
    for (const details of [
      { command: 7, args: "x", sessionId: [] },
      { ...good, startedAtMs: Date.now() + 3_600_000 },
      { ...good, startedAtMs: 9e15 },
      { ...good, sessionId: "s\u001b[2J" },
      { ...good, pty: "yes" },
    ]) {
      const gone = spawn("sleep", [sleepMarker()], { detached: true, stdio: "ignore" });
      cleanups.push(() => gone.kill("SIGKILL"));
      await new Promise((resolve) => gone.once("spawn", resolve));
      ledger.record(gone.pid!, "planted");
      const plantedFile = path.join(directory, `${gone.pid}.json`);
      const planted = JSON.parse(readFileSync(plantedFile, "utf8"));
      writeFileSync(plantedFile, JSON.stringify({ ...planted, daemonPid: 999_999_999, details }));
      expect(new GroupLedger(directory).reapLeftovers().lost, JSON.stringify(details)).toEqual([
        {
          processId: "planted",
          pgid: gone.pid,
          killed: true,
          command: "",
          args: [],
          sessionId: "",
          cwd: "",
          startedAtMs: 0,
          pty: false,
          acceptsInput: false,
        },
      ]);
    }
    // A process id a request could not have given (a slash, a control character) is not reported at all.
    const slashed = spawn("sleep", [sleepMarker()], { detached: true, stdio: "ignore" });
    cleanups.push(() => slashed.kill("SIGKILL"));
    await new Promise((resolve) => slashed.once("spawn", resolve));
    ledger.record(slashed.pid!, "a/b");
    const slashedFile = path.join(directory, `${slashed.pid}.json`);
    writeFileSync(
      slashedFile,
      JSON.stringify({ ...JSON.parse(readFileSync(slashedFile, "utf8")), daemonPid: 999_999_999 }),
    );
    const report = new GroupLedger(directory).reapLeftovers();
    expect(report.killedGroups).toEqual([slashed.pid]);
    expect(report.lost).toEqual([]);
  });

  it("reads no record that is not a small regular file: a FIFO or a symlink to one is passed over, not waited on", () => {
    const directory = stateDirectory();
    const ledger = new GroupLedger(directory);
    // Reservations of a daemon that is gone (pid 999999999), and records: a FIFO, a symlink to one, a 64 KiB file.
    execFileSync("mkfifo", [path.join(directory, "target.fifo")]);
    execFileSync("mkfifo", [path.join(directory, "pending.999999999.1.record")]);
    symlinkSync(path.join(directory, "target.fifo"), path.join(directory, "pending.999999999.2.record"));
    execFileSync("mkfifo", [path.join(directory, "4243.json")]);
    writeFileSync(path.join(directory, "4244.json"), " ".repeat(64 * 1024));
    expect(ledger.reapLeftovers()).toEqual({ killedGroups: [], staleRecords: 0, invalidRecords: 4, lost: [] });
    expect(readdirSync(directory)).toEqual(["target.fifo"]);
  });

  it("reservations: a live daemon's are left to it; a dead one's record written before its rename is honoured", async () => {
    const directory = stateDirectory();
    const ledger = new GroupLedger(directory);
    const live = spawn("sleep", [sleepMarker()], { detached: true, stdio: "ignore" });
    cleanups.push(() => live.kill("SIGKILL"));
    await new Promise((resolve) => live.once("spawn", resolve));
    ledger.record(live.pid!, "crashed-before-rename");
    const record = readFileSync(path.join(directory, `${live.pid}.json`), "utf8");
    rmSync(path.join(directory, `${live.pid}.json`));
    // Pid 1 runs: its reservation is its own business, even reserved (blank) as it is.
    writeFileSync(path.join(directory, "pending.1.0.record"), " ".repeat(1024));
    // A daemon that died between writing its record and renaming it.
    writeFileSync(
      path.join(directory, "pending.999999999.0.record"),
      JSON.parse(JSON.stringify(record.replace(/"daemonPid":\d+/, '"daemonPid":999999999'))),
    );
    const report = new GroupLedger(directory).reapLeftovers();
    expect(report.killedGroups).toEqual([live.pid]);
    expect(readdirSync(directory)).toEqual(["pending.1.0.record"]);
    await waitFor(() => live.exitCode !== null || live.signalCode !== null, {
      what: "the recorded group to be killed",
    });
  });

  it("a state directory writable by others, or someone else's, is refused", async () => {
    const open = stateDirectory();
    chmodSync(open, 0o777);
    expect(() => new GroupLedger(open)).toThrow(/has mode 0777: it must not be writable by group or others/);
    await expect(startTestServer({ stateDirectory: open })).rejects.toThrow(/must not be writable by group or others/);
    if (isRoot) {
      const foreign = stateDirectory();
      chmodSync(foreign, 0o700);
      const nobody = resolveUser("nobody");
      chownSync(foreign, nobody.uid, nobody.gid);
      expect(() => new GroupLedger(foreign)).toThrow(`belongs to uid ${nobody.uid}, not to the daemon's user`);
    }
  });
});

describe.skipIf(!isRoot)("a state directory that cannot record refuses starts", () => {
  let test: TestServer | undefined;
  let mountPoint: string | undefined;
  afterEach(async () => {
    await test?.close();
    test = undefined;
    if (mountPoint !== undefined) {
      spawnSync("umount", [mountPoint]);
      rmSync(mountPoint, { recursive: true, force: true });
    }
  });

  it("a full disk: RESOURCE_EXHAUSTED, a log line, and nothing left running unrecorded", async (context) => {
    mountPoint = mkdtempSync(path.join(tmpdir(), "sandboxd-full-"));
    if (spawnSync("mount", ["-t", "tmpfs", "-o", "size=64k,mode=0700", "tmpfs", mountPoint]).status !== 0)
      return context.skip();
    const state = path.join(mountPoint, "state");
    mkdirSync(state, { mode: 0o700 });
    // Fill it to the last block.
    spawnSync("dd", ["if=/dev/zero", `of=${path.join(mountPoint, "fill")}`, "bs=4k"], { stdio: "ignore" });
    const logged: string[] = [];
    test = await startTestServer({ stateDirectory: state, log: (message) => logged.push(message) });
    const marker = sleepMarker(30);
    const error = await rpcError(test.client.startProcess({ spec: { command: "sleep", args: [marker] } }));
    expectReason(error, {
      code: Code.ResourceExhausted,
      reason: "STATE_NOT_RECORDED",
      metadata: { errno: "ENOSPC" },
      message: "the state directory cannot record the process (ENOSPC): not started",
    });
    expect(logged.join("\n")).toContain("could not record a process group (ENOSPC); start refused");
    expect(sleepers(marker)).toEqual([]);
    expect(test.server.manager.list()).toHaveLength(0);
    // Room again: starts are recorded.
    rmSync(path.join(mountPoint, "fill"));
    const started = await test.client.startProcess({ spec: { command: "sleep", args: [marker] } });
    expect(existsSync(path.join(state, `${started.process!.pid}.json`))).toBe(true);
    await test.client.killProcess({ processId: started.process!.processId, signal: "SIGKILL" });
    await waitFor(() => sleepers(marker).length === 0, { what: "the sleep to be gone" });
  });
});
