/**
 * Makes text safe to print on a terminal as data: every control character (C0, DEL, C1) becomes a
 * visible escape (`\n`, `\t`, `\r`, `\e`, `\xNN`, `\u{NNNN}`), as do the Unicode controls that
 * reorder text (bidirectional marks, overrides and isolates). A command line, a process id or a daemon's message could otherwise write to the
 * clipboard (OSC 52), erase lines, or retitle the window of whoever runs `sandbox ps`. Backslashes
 * stay as they are (a shell-quoted `'\''` reads as written), so a literal `\e` in a command line
 * looks like an escaped ESC: it can mislead a reader, never drive the terminal. Used on every
 * line the CLI prints for humans (not on a command's own output, which `exec`, `logs` and `attach` pass on byte for byte, nor inside JSON,
 * whose encoder escapes controls itself).
 */
export function escapeControls(text: string): string {
  return text.replace(/[\u0000-\u001f\u007f-\u009f\u200e\u200f\u202a-\u202e\u2066-\u2069]/gu, (character) => {
    switch (character) {
      case "\n":
        return "\\n";
      case "\t":
        return "\\t";
      case "\r":
        return "\\r";
      case "\u001b":
        return "\\e";
    }
    const code = character.codePointAt(0)!;
    return code <= 0xff ? `\\x${code.toString(16).padStart(2, "0")}` : `\\u{${code.toString(16)}}`;
  });
}

/**
 * `value` as indented JSON for the CLI's `-o json`, with the controls JSON leaves raw (DEL, C1, the
 * bidirectional ones) escaped as `\uNNNN` too, so printing it to a terminal is as safe as a table.
 */
export function jsonForTerminal(value: unknown): string {
  return `${JSON.stringify(value, null, 2).replace(
    /[\u007f-\u009f\u200e\u200f\u202a-\u202e\u2066-\u2069]/gu,
    (character) => `\\u${character.codePointAt(0)!.toString(16).padStart(4, "0")}`,
  )}\n`;
}
