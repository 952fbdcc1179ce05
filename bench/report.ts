import { writeFileSync } from "node:fs";

/** How a figure compares with its baseline. */
export type Verdict = "pass" | "fail" | "info" | "skipped";

/**
 * One row of the bench table: a figure measured on sandboxd beside a baseline measured in the same
 * run on the bare machine, their ratio, and whether the goal was met.
 */
export interface Row {
  /** Stable key, such as `exec-latency-p50`. */
  id: string;
  /** What was measured, for people. */
  figure: string;
  /** Unit of `value` and `baseline` ("ms", "execs/s", "MB/s", "MB", "KB"). */
  unit: string;
  /** The figure on sandboxd; null when skipped. */
  value: number | null;
  /** The same-run baseline; null when the figure has none. */
  baseline: number | null;
  /** `value / baseline`, or for "beyond" goals `value - baseline`; null without a baseline. */
  ratio: number | null;
  /** The goal, as written in the issue it comes from ("<= 1.3x", ">= 1x", "< 300 ms beyond"). */
  goal: string;
  verdict: Verdict;
  /** Anything that qualifies the numbers: counts, the probe used, why a row was skipped. */
  note?: string;
}

/** The whole run, as written to results.json. */
export interface BenchResults {
  /** ISO time the run started. */
  startedAt: string;
  /** Mode: "full" or "quick". */
  mode: string;
  /** Seconds the run took. */
  elapsedSeconds: number;
  machine: { cpus: number; node: string; platform: string; loadAverage: number[] };
  rows: Row[];
}

/** Builds a row whose goal is `value / baseline` at most (`"max"`) or at least (`"min"`) `limit`. */
export function ratioRow(
  fields: Omit<Row, "ratio" | "verdict" | "goal">,
  bound: "max" | "min",
  limit: number,
  extraCondition = true,
): Row {
  const ratio = fields.value !== null && fields.baseline ? fields.value / fields.baseline : null;
  const met = ratio !== null && (bound === "max" ? ratio <= limit : ratio >= limit) && extraCondition;
  return { ...fields, ratio, goal: `${bound === "max" ? "<=" : ">="} ${limit}x`, verdict: met ? "pass" : "fail" };
}

/** Formats results as a fixed-width table. */
export function formatTable(rows: readonly Row[]): string {
  const header = ["figure", "sandboxd", "baseline", "ratio", "goal", "result"];
  const lines = rows.map((row) => [
    row.figure,
    formatValue(row.value, row.unit),
    formatValue(row.baseline, row.unit),
    formatRatio(row),
    row.goal,
    row.verdict === "pass" ? "PASS" : row.verdict === "fail" ? "FAIL" : row.verdict,
  ]);
  const widths = header.map((title, column) => Math.max(title.length, ...lines.map((line) => line[column].length)));
  const render = (cells: string[]) =>
    cells
      .map((cell, column) => cell.padEnd(widths[column]))
      .join("  ")
      .trimEnd();
  const notes = rows.filter((row) => row.note).map((row) => `  ${row.id}: ${row.note}`);
  return [
    render(header),
    render(widths.map((width) => "-".repeat(width))),
    ...lines.map(render),
    "",
    "notes:",
    ...notes,
  ].join("\n");
}

/** Formats results as a Markdown table, for docs/PERFORMANCE.md. */
export function formatMarkdown(rows: readonly Row[]): string {
  const lines = ["| figure | sandboxd | baseline | ratio | goal | result |", "| --- | --- | --- | --- | --- | --- |"];
  for (const row of rows) {
    lines.push(
      `| ${row.figure} | ${formatValue(row.value, row.unit)} | ${formatValue(row.baseline, row.unit)} | ${formatRatio(row)} | ${row.goal} | ${row.verdict} |`,
    );
  }
  return lines.join("\n");
}

/** Writes results as pretty JSON. */
export function writeResults(file: string, results: BenchResults): void {
  writeFileSync(file, `${JSON.stringify(results, null, 2)}\n`);
}

/** The ratio column: `1.23x`, or for "beyond" goals the signed difference in the row's unit (`+0.42 ms`). */
function formatRatio(row: Row): string {
  if (row.ratio === null) return "-";
  if (!row.goal.includes("beyond")) return `${row.ratio.toFixed(2)}x`;
  const digits = Math.abs(row.ratio) >= 100 ? 0 : Math.abs(row.ratio) >= 10 ? 1 : 2;
  return `${row.ratio < 0 ? "-" : "+"}${Math.abs(row.ratio).toFixed(digits)} ${row.unit}`;
}

function formatValue(value: number | null, unit: string): string {
  if (value === null) return "-";
  const digits = Math.abs(value) >= 100 ? 0 : Math.abs(value) >= 10 ? 1 : 2;
  return `${value.toFixed(digits)} ${unit}`;
}
