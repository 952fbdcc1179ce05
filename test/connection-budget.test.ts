import { describe, expect, it } from "vitest";
import {
  createConnectionBudget,
  defaultMaxConnectionsPerPeer,
  peerOfAddress,
  type BudgetedConnection,
} from "../src/server/http/connection-budget.js";

/** A connection of `peer` that records whether the budget closed it. */
function connection(peer: string, proven = false): BudgetedConnection & { closed: boolean; proved: boolean } {
  const made = { peer, closed: false, proved: proven, proven: () => made.proved, close: () => (made.closed = true) };
  return made;
}

describe("connection budget", () => {
  it("refuses a newcomer only when every connection is proven", () => {
    const budget = createConnectionBudget({ maxConnections: 2, maxConnectionsPerPeer: 0 });
    const [a, b] = [connection("a", true), connection("b", true)];
    expect([budget.admit(a), budget.admit(b)]).toEqual([true, true]);
    expect(budget.admit(connection("c"))).toBe(false);
    expect(budget.size).toBe(2);
    budget.release(a);
    budget.release(a);
    expect(budget.size).toBe(1);
    expect(budget.admit(connection("c"))).toBe(true);
  });

  it("a full budget closes the oldest unproven connection of the peer holding the most unproven ones", () => {
    const budget = createConnectionBudget({ maxConnections: 5, maxConnectionsPerPeer: 0 });
    const held = [connection("x", true), connection("x", true), connection("x"), connection("y"), connection("y")];
    for (const made of held) expect(budget.admit(made)).toBe(true);
    // x holds three, but only one unproven: y's oldest goes.
    expect(budget.admit(connection("z"))).toBe(true);
    expect(held.map((made) => made.closed)).toEqual([false, false, false, true, false]);
    expect(budget.size).toBe(5);
  });

  it("a peer at its cap of unproven connections loses its own oldest; proven ones do not count", () => {
    const budget = createConnectionBudget({ maxConnections: 100, maxConnectionsPerPeer: 2 });
    const proven = connection("p", true);
    const [first, second] = [connection("p"), connection("p")];
    for (const made of [proven, first, second]) budget.admit(made);
    expect(budget.admit(connection("p"))).toBe(true);
    expect([proven.closed, first.closed, second.closed]).toEqual([false, true, false]);
    // A connection proven later stops counting against the cap.
    second.proved = true;
    const next = connection("p");
    expect(budget.admit(next)).toBe(true);
    expect(second.closed).toBe(false);
    expect(budget.size).toBe(4);
  });

  it("the default share is a quarter of the budget", () => {
    expect(defaultMaxConnectionsPerPeer(1024)).toBe(256);
    expect(defaultMaxConnectionsPerPeer(2)).toBe(1);
  });

  it("peers: IPv4 addresses as they are (mapped ones too), IPv6 by /64", () => {
    expect(peerOfAddress("10.0.0.7")).toBe("10.0.0.7");
    expect(peerOfAddress("::ffff:10.0.0.7")).toBe("10.0.0.7");
    expect(peerOfAddress("2001:db8:1:2:aaaa::1")).toBe("2001:db8:1:2::/64");
    expect(peerOfAddress("2001:db8:1:2:bbbb:cccc:dddd:eeee")).toBe("2001:db8:1:2::/64");
    expect(peerOfAddress("2001:db8::1")).toBe("2001:db8:0:0::/64");
    expect(peerOfAddress("::1")).toBe("0:0:0:0::/64");
    expect(peerOfAddress(undefined)).toBe("?");
  });
});
