import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { connect, createSandboxConnection, Sandbox, SandboxError } from "../src/client/index.js";
import { startTestServer, type TestServer } from "./support/server.js";

let guarded: TestServer;
const token = "a-token-for-the-address-tests";
const saved = { url: process.env.SANDBOXD_URL, token: process.env.SANDBOXD_TOKEN };

beforeAll(async () => {
  guarded = await startTestServer({ token }, { sendToken: false });
});
afterEach(() => {
  for (const [name, value] of [
    ["SANDBOXD_URL", saved.url],
    ["SANDBOXD_TOKEN", saved.token],
  ] as const) {
    if (value === undefined) delete process.env[name];
    else process.env[name] = value;
  }
});
afterAll(async () => {
  await guarded.close();
});

/** The SandboxError `make` throws. */
function refusal(make: () => unknown): SandboxError {
  try {
    make();
  } catch (error) {
    expect(error).toBeInstanceOf(SandboxError);
    return error as SandboxError;
  }
  throw new Error("nothing was thrown");
}

describe("where the client finds the daemon", () => {
  it("reads SANDBOXD_URL and SANDBOXD_TOKEN, the variables the CLI and the Python client read, when no option says", async () => {
    process.env.SANDBOXD_URL = guarded.server.url;
    process.env.SANDBOXD_TOKEN = token;
    await using sandbox = await connect();
    expect(sandbox.describe().baseUrl).toBe(guarded.server.url);
    expect((await sandbox.exec("echo found")).stdout).toBe("found\n");
  });

  it("options win over the variables; an empty token option sends none", async () => {
    process.env.SANDBOXD_URL = "http://127.0.0.1:1";
    process.env.SANDBOXD_TOKEN = "not-the-token";
    await using sandbox = await connect({ baseUrl: guarded.server.url, token });
    expect((await sandbox.exec("echo mine")).stdout).toBe("mine\n");
    const none = await connect({ baseUrl: guarded.server.url, token: "" }).catch((error: unknown) => error);
    expect(none).toMatchObject({ code: "UNAUTHENTICATED" });
  });

  it("a base URL without http:// or https:// is INVALID_ARGUMENT naming both forms, before any connection", () => {
    for (const baseUrl of ["127.0.0.1:7007", "localhost:7007", "ftp://127.0.0.1:7007", "not a url"]) {
      const error = refusal(() => new Sandbox({ baseUrl }));
      expect(error.code).toBe("INVALID_ARGUMENT");
      expect(error.message).toBe(
        `invalid daemon URL ${JSON.stringify(baseUrl)}: write it as http://host:port (the daemon speaks plain HTTP by default) or https://host:port (a daemon started with --tls-cert)`,
      );
    }
  });

  it("https:// against a daemon that speaks plain HTTP says so, not OpenSSL's 'wrong version number'", async () => {
    const baseUrl = guarded.server.url.replace("http:", "https:");
    const error = await connect({ baseUrl, token }).catch((failure: unknown) => failure);
    expect(error).toBeInstanceOf(SandboxError);
    expect(error).toMatchObject({ code: "UNAVAILABLE" });
    expect((error as SandboxError).message).toBe(
      `the daemon at ${baseUrl} speaks plain HTTP, not TLS: use ${guarded.server.url}, or start the daemon with --tls-cert and --tls-key`,
    );
  });
});

describe("a token over cleartext http://", () => {
  it("is refused to a host that is not loopback unless allowCleartextToken says so", () => {
    for (const baseUrl of ["http://192.0.2.1:7007", "http://sandbox.example:7007", "http://[2001:db8::1]:7007"]) {
      const error = refusal(() => new Sandbox({ baseUrl, token }));
      expect(error.code).toBe("INVALID_ARGUMENT");
      expect(error.message).toBe(
        `refusing to send the token in clear to ${baseUrl}: use https:// (a daemon started with --tls-cert and --tls-key), or allow it with allowCleartextToken: true on a network you trust`,
      );
      expect(new Sandbox({ baseUrl, token, allowCleartextToken: true }).describe().baseUrl).toBe(baseUrl);
    }
    // The token from the environment counts the same.
    process.env.SANDBOXD_TOKEN = token;
    expect(refusal(() => new Sandbox({ baseUrl: "http://192.0.2.1:7007" })).code).toBe("INVALID_ARGUMENT");
  });

  it("is refused by createSandboxConnection too, the transport users may build on themselves", () => {
    const baseUrl = "http://192.0.2.1:7007";
    const error = refusal(() => createSandboxConnection({ baseUrl, token }));
    expect(error.code).toBe("INVALID_ARGUMENT");
    expect(error.message).toContain(`refusing to send the token in clear to ${baseUrl}`);
    // A bearer header of the caller's own is a token too.
    expect(
      refusal(() => createSandboxConnection({ baseUrl, headers: { Authorization: `Bearer ${token}` } })).code,
    ).toBe("INVALID_ARGUMENT");
    for (const options of [
      { baseUrl, token, allowCleartextToken: true },
      { baseUrl },
      { baseUrl, token: "" },
      { baseUrl: "http://127.0.0.1:7007", token },
      { baseUrl: "https://sandbox.example:7007", token },
    ]) {
      // Nothing is dialled until a call is made, so these only have to be accepted.
      createSandboxConnection(options).close();
    }
  });

  it("goes to loopback, over https://, and nowhere without a token", () => {
    for (const baseUrl of [
      "http://127.0.0.1:7007",
      "http://127.8.9.10:7007",
      "http://localhost:7007",
      "http://[::1]:7007",
      "https://sandbox.example:7007",
    ]) {
      expect(new Sandbox({ baseUrl, token }).describe().baseUrl).toBe(baseUrl);
    }
    expect(new Sandbox({ baseUrl: "http://192.0.2.1:7007" }).describe().baseUrl).toBe("http://192.0.2.1:7007");
  });
});
