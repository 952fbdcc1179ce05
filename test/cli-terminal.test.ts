import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { installCliShim, runCli } from "./support/cli.js";
import { isAlive, waitFor } from "./support/processes.js";
import { startTestServer, type TestServer } from "./support/server.js";
import { startTcpProxy } from "./support/tcp-proxy.js";
import { TerminalShell } from "./support/terminal.js";

// The CLI runs in a real pseudo-terminal (node-pty) under /bin/sh, typed into as a person would. The shell
// prints the terminal's settings (`stty -g`) before and after each CLI run, so a test sees that the CLI
// put the terminal back exactly. Typed lines split marker words with '' so that the terminal's echo
// of what was typed never matches what a test waits for.

let t: TestServer;
let bin: string;
const shells: TerminalShell[] = [];

beforeAll(async () => {
  t = await startTestServer();
  bin = mkdtempSync(path.join(tmpdir(), "sandbox-cli-bin-"));
  installCliShim(bin);
});
afterEach(() => {
  for (const shell of shells.splice(0)) shell.close();
});
afterAll(async () => {
  await t.close();
  rmSync(bin, { recursive: true, force: true });
});

/** A terminal of `cols`×`rows` whose shell finds `sandbox` on its PATH, talking to `url`. */
function terminal(url = t.server.url, cols = 100, rows = 30): TerminalShell {
  const shell = TerminalShell.start({ cols, rows, env: { PATH: `${bin}:${process.env.PATH}`, SANDBOXD_URL: url } });
  shells.push(shell);
  return shell;
}

/**
 * Types `commandLine` between two prints of the terminal's settings and one of its exit code, and
 * returns what to await for them.
 */
function runFramed(shell: TerminalShell, commandLine: string) {
  shell.type(
    `printf 'BEF%s=%s\\n' ORE "$(stty -g)"; ${commandLine}; printf 'EX%s=%s\\n' IT $?; printf 'AFT%s=%s\\n' ER "$(stty -g)"\r`,
  );
  return {
    before: async () => (await shell.waitFor(/BEFORE=(\S+)/)).match[1],
    /** The CLI's exit code, and the settings after it, once it ended. */
    after: async () => {
      const exit = await shell.waitFor(/EXIT=(\d+)/);
      const after = await shell.waitFor(/AFTER=(\S+)/, { from: exit.end });
      return { code: Number(exit.match[1]), settings: after.match[1] };
    },
  };
}

/** Types `line` and Enter in a terminal, again every 500 ms, until `pattern` shows after `from`: for effects that arrive asynchronously. */
async function typeUntil(
  shell: TerminalShell,
  line: string,
  pattern: RegExp,
  from: number,
): Promise<{ match: RegExpExecArray; end: number }> {
  let last: Error | undefined;
  for (let attempt = 0; attempt < 20; attempt++) {
    shell.type(`${line}\r`);
    try {
      return await shell.waitFor(pattern, { from, timeoutMs: 500 });
    } catch (error) {
      last = error as Error;
    }
  }
  throw last;
}

describe("sandbox exec -it in a real terminal", () => {
  it("types into the remote shell, follows resizes, passes Ctrl-C as ^C, returns the exit code and restores the terminal", async () => {
    const shell = terminal();
    const run = runFramed(shell, "sandbox exec -it -e 'PS1=R''> ' -- sh");
    const before = await run.before();
    let at = (await shell.waitFor(/R> /)).end;

    // Typing reaches the remote shell, and its answer comes back exactly as the remote terminal wrote it
    // (\r\n once: a local terminal still translating output would show \r\r\n).
    shell.type("echo $((6*7))\r");
    at = (await shell.waitFor(/\r\n42\r\n/, { from: at })).end;

    // The remote terminal has this terminal's size, and follows it when the window is resized.
    shell.type("stty size\r");
    at = (await shell.waitFor(/30 100/, { from: at })).end;
    shell.resize(120, 40);
    at = (await typeUntil(shell, "stty size", /40 120/, at)).end;

    // Ctrl-C interrupts the remote foreground command, not the CLI: the remote shell goes on. (The command
    // is one process from the start, so ^C ends it with SIGINT whenever it arrives.)
    shell.type(`sh -c 'echo sle""eping; exec sleep 30'\r`);
    at = (await shell.waitFor(/sleeping/, { from: at })).end;
    shell.type("\x03");
    shell.type("echo sta''tus=$?\r");
    at = (await shell.waitFor(/status=130/, { from: at })).end;

    shell.type("exit 7\r");
    const { code, settings } = await run.after();
    expect(code).toBe(7);
    expect(settings).toBe(before);

    // The local terminal echoes what is typed again.
    shell.type("echo back''home\r");
    await shell.waitFor(/echo back''home\r\nbackhome/, { from: at });
  });

  it("exits 128 + n when a signal ended the remote command, terminal restored", async () => {
    const shell = terminal();
    const run = runFramed(shell, "sandbox exec -it -- sh -c 'kill -KILL $$'");
    const before = await run.before();
    const { code, settings } = await run.after();
    expect(code).toBe(137);
    expect(settings).toBe(before);
  });

  it("restores the terminal when the CLI is sent SIGTERM, and the daemon kills the remote shell", async () => {
    const shell = terminal();
    const run = runFramed(shell, "sh -c 'echo CLI''PID=$$; exec sandbox exec -it -e \"PS1=R\"\"> \" -- sh'");
    const before = await run.before();
    const cliPid = Number((await shell.waitFor(/CLIPID=(\d+)/)).match[1]);
    let at = (await shell.waitFor(/R> /)).end;
    shell.type("echo RE''MOTE=$$\r");
    const remote = await shell.waitFor(/REMOTE=(\d+)/, { from: at });
    at = remote.end;
    const remotePid = Number(remote.match[1]);
    expect(isAlive(remotePid)).toBe(true);

    process.kill(cliPid, "SIGTERM");
    const { code, settings } = await run.after();
    expect(code).toBe(143);
    expect(settings).toBe(before);
    await waitFor(() => !isAlive(remotePid), { what: "the remote shell to be killed" });
  });

  it("restores the terminal before saying in one line that the connection was lost, exit 125", async () => {
    const proxy = await startTcpProxy({ host: "127.0.0.1", port: Number(new URL(t.server.url).port) });
    try {
      const shell = terminal(proxy.url);
      const run = runFramed(shell, "sandbox exec -it -e 'PS1=R''> ' -- sh");
      const before = await run.before();
      const at = (await shell.waitFor(/R> /)).end;
      expect(proxy.cut()).toBeGreaterThan(0);
      const { code, settings } = await run.after();
      expect(code).toBe(125);
      expect(settings).toBe(before);
      // The line ends in \r\n on the screen: the terminal translated its \n, so it was no longer raw when the CLI printed it.
      const printed = shell.screen.slice(at, shell.screen.indexOf("EXIT="));
      expect(printed).toMatch(/^\r?\n?sandbox: lost the connection to the daemon: [^\r\n]+\r\n$/);
    } finally {
      await proxy.close();
    }
  });

  it("with -t alone gives the command a terminal of this size and leaves this terminal as it is", async () => {
    const shell = terminal(undefined, 90, 20);
    const run = runFramed(shell, "sandbox exec -t -- sh -c 'test -t 0 && test -t 1 && echo in''side; stty size'");
    const before = await run.before();
    // This terminal is not raw here, so it adds a \r of its own to each line the remote terminal ends with \r\n.
    await shell.waitFor(/inside\r+\n20 90/);
    const { code, settings } = await run.after();
    expect(code).toBe(0);
    expect(settings).toBe(before);
  });
});

describe("sandbox attach -i in a real terminal", () => {
  it("types into a background shell started with -t, follows resizes, and detaches on Ctrl-P Ctrl-Q leaving it running", async () => {
    const started = await runCli(["start", "-t", "-e", "PS1=B> ", "--", "sh"], { url: t.server.url });
    expect(started.code).toBe(0);
    const id = started.stdout.toString().trim();
    try {
      const shell = terminal(undefined, 100, 30);
      const run = runFramed(shell, `sandbox attach -i ${id}`);
      const before = await run.before();
      // Attach shows output from now on: the answer proves the keys reached the shell.
      let at = (await typeUntil(shell, "echo $((2+3))x", /\r\n5x\r\n/, 0)).end;
      shell.resize(110, 35);
      at = (await typeUntil(shell, "stty size", /35 110/, at)).end;
      shell.type(`sh -c 'echo sle""eping; exec sleep 30'\r`);
      at = (await shell.waitFor(/sleeping/, { from: at })).end;
      shell.type("\x03");
      at = (await typeUntil(shell, "echo sta''tus=$?", /status=130/, at)).end;

      shell.type("\x10\x11");
      // Said on the terminal, as the terminal is left: the process runs on, and how to come back or stop it.
      await shell.waitFor(
        new RegExp(
          `detached from ${id}; it is still running \\(sandbox attach ${id} to come back, sandbox kill ${id} to stop it\\)`,
        ),
        { from: at },
      );
      const { code, settings } = await run.after();
      expect(code).toBe(0);
      expect(settings).toBe(before);

      const listed = await runCli(["ps", "-o", "json"], { url: t.server.url });
      const rows = JSON.parse(listed.stdout.toString()) as { id: string; status: string }[];
      expect(rows.find((row) => row.id === id)?.status).toBe("running");
    } finally {
      await runCli(["kill", "-s", "KILL", id], { url: t.server.url });
    }
  });
});
