import type { WriteStream } from "node:tty";
import { escapeControls } from "./escape.js";

/** How long a transfer runs before its progress line appears, in milliseconds: quick copies print nothing. */
const showAfterMs = 500;
/** How often the line is redrawn, in milliseconds. */
const redrawEveryMs = 200;

/**
 * TransferProgress is the one progress line `sandbox cp` keeps on a terminal's stderr: bytes and
 * files copied so far and the rate, redrawn in place, shown only once the transfer has run for
 * half a second (so small copies print nothing) and only when stderr is a terminal; it is erased at
 * the end. Elsewhere (a pipe, a file, `--quiet`) it does nothing.
 */
export class TransferProgress {
  private bytes = 0;
  /** Bytes of the files before the current one. */
  private before = 0;
  private files = 0;
  private readonly started = Date.now();
  private lastDraw = 0;
  private drawn = false;
  private current = "";

  /** A progress line on `terminal`, or none when it is undefined. */
  constructor(private readonly terminal: WriteStream | undefined) {}

  /** The progress of this process: its stderr when it is a terminal and `quiet` is not set. */
  static forStderr(quiet: boolean | undefined): TransferProgress {
    const stderr = process.stderr as WriteStream;
    return new TransferProgress(quiet !== true && stderr.isTTY === true ? stderr : undefined);
  }

  /** A file began; `name` is shown on the line, its control characters escaped. */
  startFile(name: string): void {
    this.current = escapeControls(name);
    this.before = this.bytes;
  }

  /** `bytes` of the current file were copied so far. */
  fileProgress(bytes: number): void {
    this.bytes = this.before + bytes;
    this.draw(false);
  }

  /** A file was copied. */
  fileDone(): void {
    this.files++;
    this.draw(false);
  }

  /** Erases the line, if it was drawn. */
  finish(): void {
    if (this.drawn) this.terminal?.write("\r\x1b[K");
    this.drawn = false;
  }

  private draw(force: boolean): void {
    if (this.terminal === undefined) return;
    const now = Date.now();
    if (!force && (now - this.started < showAfterMs || now - this.lastDraw < redrawEveryMs)) return;
    this.lastDraw = now;
    this.drawn = true;
    const seconds = Math.max(0.001, (now - this.started) / 1000);
    const line = `${formatBytes(this.bytes)} copied, ${this.files} file${this.files === 1 ? "" : "s"}, ${formatBytes(this.bytes / seconds)}/s  ${this.current}`;
    const width = this.terminal.columns ?? 80;
    this.terminal.write(`\r\x1b[K${line.length >= width ? `${line.slice(0, width - 2)}…` : line}`);
  }
}

/** A byte count as people read it: `512 B`, `1.5 KiB`, `256.0 MiB`. */
export function formatBytes(bytes: number): string {
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let value = bytes;
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit++;
  }
  return unit === 0 ? `${Math.round(value)} B` : `${value.toFixed(1)} ${units[unit]}`;
}
