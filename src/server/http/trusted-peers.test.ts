import net from "node:net";
import os from "node:os";
import { describe, expect, it } from "vitest";
import { createTrustedPeers, isLocalAddress, serviceDomainsOf, trustedRequestProblem } from "./trusted-peers.js";

/** A connection as the check sees it: an HTTP/2 session's socket, with only its peer's address. */
const peer = (remoteAddress: string | undefined) => ({ socket: { remoteAddress } });

describe("createTrustedPeers", () => {
  const local = new Set(["10.1.2.3", "fd00::5"]);
  const isLocal = (address: string) => local.has(address);

  it("admits a peer of a network named, IPv4, IPv6 and IPv4 seen through a dual-stack socket", () => {
    const trusted = createTrustedPeers(["10.0.0.0/8", "fd00::/8", "192.0.2.7"], { isLocal });
    expect(trusted.admits(peer("10.200.0.9"))).toBe(true);
    expect(trusted.admits(peer("::ffff:10.200.0.9"))).toBe(true);
    expect(trusted.admits(peer("fd00::1234"))).toBe(true);
    expect(trusted.admits(peer("FD00::1235"))).toBe(true);
    expect(trusted.admits(peer("192.0.2.7"))).toBe(true);
    expect(trusted.admits(peer("192.0.2.8"))).toBe(false);
    expect(trusted.admits(peer("11.0.0.1"))).toBe(false);
    expect(trusted.admits(peer("fe00::1"))).toBe(false);
  });

  it("leaves out the networks written with a leading !", () => {
    const trusted = createTrustedPeers(["10.0.0.0/8", "!10.244.0.1", "!10.9.0.0/16"], { isLocal });
    expect(trusted.admits(peer("10.244.0.2"))).toBe(true);
    expect(trusted.admits(peer("10.244.0.1"))).toBe(false);
    expect(trusted.admits(peer("10.9.3.4"))).toBe(false);
  });

  it("never admits this machine: loopback, or an address it holds, even inside a network named", () => {
    const trusted = createTrustedPeers(["0.0.0.0/0", "::/0"], { isLocal });
    expect(trusted.admits(peer("127.0.0.1"))).toBe(false);
    expect(trusted.admits(peer("127.9.9.9"))).toBe(false);
    expect(trusted.admits(peer("::1"))).toBe(false);
    expect(trusted.admits(peer("10.1.2.3"))).toBe(false);
    expect(trusted.admits(peer("::ffff:10.1.2.3"))).toBe(false);
    expect(trusted.admits(peer("FD00::5"))).toBe(false);
    expect(trusted.admits(peer("10.1.2.4"))).toBe(true);
    expect(trusted.admits(peer(undefined))).toBe(false);
    expect(trusted.admits({})).toBe(false);
  });

  it("decides a connection once, and asks whether an address is this machine's only of a network named", () => {
    const asked: string[] = [];
    const trusted = createTrustedPeers(["10.0.0.0/8"], {
      isLocal: (address) => {
        asked.push(address);
        return false;
      },
    });
    const connection = peer("10.0.0.1");
    expect([trusted.admits(connection), trusted.admits(connection), trusted.admits(connection)]).toEqual([
      true,
      true,
      true,
    ]);
    expect(trusted.admits(peer("11.0.0.1"))).toBe(false);
    expect(asked).toEqual(["10.0.0.1"]);
  });

  it("reads an HTTP/1.1 socket's peer as well as an HTTP/2 session's", () => {
    const socket = new net.Socket();
    Object.defineProperty(socket, "remoteAddress", { value: "10.0.0.7" });
    expect(createTrustedPeers(["10.0.0.0/8"], { isLocal }).admits(socket)).toBe(true);
    socket.destroy();
  });

  it("refuses what is not a network in CIDR notation, naming it", () => {
    for (const bad of ["10.0.0.0/33", "fd00::/129", "10.0.0/8", "10.0.0.0/8/1", "10.0.0.0/x", "example.com", "", "!"]) {
      expect(() => createTrustedPeers([bad]), bad).toThrow(`not a network in CIDR notation: ${JSON.stringify(bad)}`);
    }
  });
});

describe("isLocalAddress", () => {
  it("knows loopback's whole range and this machine's interfaces", () => {
    expect(isLocalAddress("127.0.0.1", "ipv4")).toBe(true);
    expect(isLocalAddress("127.3.2.1", "ipv4")).toBe(true);
    for (const entries of Object.values(os.networkInterfaces()))
      for (const entry of entries ?? [])
        if (!entry.address.includes("%"))
          expect(
            isLocalAddress(entry.address.toLowerCase(), entry.family === "IPv6" ? "ipv6" : "ipv4"),
            entry.address,
          ).toBe(true);
    expect(isLocalAddress("192.0.2.254", "ipv4")).toBe(false);
  });
});

describe("trustedRequestProblem", () => {
  it("lets through what the SDKs send: an address or a cluster service name as the host, no browser headers", () => {
    for (const host of [
      "10.1.2.3:9090",
      "10.1.2.3",
      "[fd00::1]:8080",
      "sandbox-1:8080",
      "sb.default.svc:9090",
      "sb.default.svc.cluster.local",
    ])
      expect(trustedRequestProblem({ host }), host).toBeUndefined();
    expect(trustedRequestProblem({ ":authority": "10.1.2.3:9090" } as never)).toBeUndefined();
  });

  it("knows a cluster's own domain from the pod's DNS search list", () => {
    const domains = serviceDomainsOf(
      "nameserver 10.96.0.10\nsearch team-a.svc.corp.internal svc.corp.internal corp.internal\noptions ndots:5\n",
    );
    expect(domains).toEqual(["svc", "svc.cluster.local", "svc.corp.internal"]);
    expect(trustedRequestProblem({ host: "sb-1.team-a.svc.corp.internal:8080" }, domains)).toBeUndefined();
    expect(trustedRequestProblem({ host: "sb-1.team-a.svc.corp.internal:8080" }, serviceDomainsOf(""))).toMatch(
      /not an address or a cluster service name/,
    );
    expect(trustedRequestProblem({ host: "corp.internal.evil.example" }, domains)).toMatch(/not an address/);
  });

  it("refuses a browser's request and a host a page's author could name", () => {
    expect(trustedRequestProblem({ host: "10.1.2.3", origin: "http://10.1.2.3" })).toMatch(/browser/);
    expect(trustedRequestProblem({ host: "10.1.2.3", "sec-fetch-site": "same-origin" })).toMatch(/browser/);
    for (const host of ["evil.example", "a.svc.evil.example:8080", "svc.cluster.local.evil.example"])
      expect(trustedRequestProblem({ host }), host).toMatch(/not an address or a cluster service name/);
    expect(trustedRequestProblem({})).toBe("no Host");
  });
});
