import { randomBytes } from "node:crypto";

/** The names of the temporary files writes make beside their targets: `.sandboxd-<16 hex digits>.part`. */
export const temporaryNamePattern = /^\.sandboxd-[0-9a-f]{16}\.part$/;

/** Default commits a {@link TemporaryCommits} remembers. */
const defaultRememberedCommits = 4096;

/** A new temporary file name (short enough beside any target: a target's own name may take the 255 bytes a name may have). */
export function newTemporaryName(): string {
  return `.sandboxd-${randomBytes(8).toString("hex")}.part`;
}

/** Whether `name` (one path component) is one of the temporary files writes make. */
export function isTemporaryName(name: string): boolean {
  return name.length === 31 && temporaryNamePattern.test(name);
}

/**
 * TemporaryCommits remembers, for the last few thousand writes put in place, whether each one's
 * temporary replaced a file or made a new one. Watches read it to report a write's rename onto its
 * target as what a user sees (a file created, or a file's content written), never as our
 * temporary's own events. Bounded: the oldest is forgotten first (a watch asks within moments).
 */
export class TemporaryCommits {
  private readonly replaced = new Map<string, boolean>();

  constructor(private readonly capacity = defaultRememberedCommits) {}

  /** Records that the temporary `name` is about to be renamed onto a target that existed (`replaced`) or not. */
  record(name: string, replaced: boolean): void {
    this.replaced.set(name, replaced);
    if (this.replaced.size > this.capacity) this.replaced.delete(this.replaced.keys().next().value as string);
  }

  /** Whether the temporary `name` replaced a file; undefined when it is not (or no longer) known. */
  replacedFile(name: string): boolean | undefined {
    return this.replaced.get(name);
  }
}
