import type net from "node:net";
import { describe, expect, it } from "vitest";
import { createTrustedPeers } from "./trusted-peers.js";

/** A connection's socket as the check sees it: only its peer's address. */
const peer = (remoteAddress: string | undefined) => ({ remoteAddress }) as net.Socket;

describe("createTrustedPeers", () => {
  const local = () => ["127.0.0.1", "10.1.2.3", "fe80::1", "fd00::5"];

  it("admits a peer of a network named, IPv4, IPv6 and IPv4 seen through a dual-stack socket", () => {
    const trusted = createTrustedPeers(["10.0.0.0/8", "fd00::/8", "192.0.2.7"], { localAddresses: local });
    expect(trusted.admits(peer("10.200.0.9"))).toBe(true);
    expect(trusted.admits(peer("::ffff:10.200.0.9"))).toBe(true);
    expect(trusted.admits(peer("fd00::1234"))).toBe(true);
    expect(trusted.admits(peer("192.0.2.7"))).toBe(true);
    expect(trusted.admits(peer("192.0.2.8"))).toBe(false);
    expect(trusted.admits(peer("11.0.0.1"))).toBe(false);
    expect(trusted.admits(peer("fe00::1"))).toBe(false);
  });

  it("never admits this machine: loopback, or an address of one of its interfaces, even inside a network named", () => {
    const trusted = createTrustedPeers(["0.0.0.0/0", "::/0"], { localAddresses: local });
    expect(trusted.admits(peer("127.0.0.1"))).toBe(false);
    expect(trusted.admits(peer("127.9.9.9"))).toBe(false);
    expect(trusted.admits(peer("::1"))).toBe(false);
    expect(trusted.admits(peer("10.1.2.3"))).toBe(false);
    expect(trusted.admits(peer("::ffff:10.1.2.3"))).toBe(false);
    expect(trusted.admits(peer("FD00::5"))).toBe(false);
    expect(trusted.admits(peer("10.1.2.4"))).toBe(true);
    expect(trusted.admits(peer(undefined))).toBe(false);
    expect(trusted.admits(undefined)).toBe(false);
  });

  it("decides a connection once", () => {
    let asked = 0;
    const trusted = createTrustedPeers(["10.0.0.0/8"], {
      localAddresses: () => {
        asked++;
        return [];
      },
    });
    const socket = peer("10.0.0.1");
    expect([trusted.admits(socket), trusted.admits(socket), trusted.admits(socket)]).toEqual([true, true, true]);
    expect(asked).toBe(1);
  });

  it("refuses what is not a network in CIDR notation, naming it", () => {
    for (const bad of ["10.0.0.0/33", "fd00::/129", "10.0.0/8", "10.0.0.0/8/1", "10.0.0.0/x", "example.com", ""]) {
      expect(() => createTrustedPeers([bad]), bad).toThrow(`not a network in CIDR notation: ${JSON.stringify(bad)}`);
    }
  });
});
