import { parseArgs } from "node:util";

/** One daemon flag: its name, the environment variable that stands in for it, and its help. */
export interface DaemonFlag {
  /** The long name without dashes, e.g. `max-processes`. */
  name: string;
  /** The environment variable read when the flag is absent, e.g. `SANDBOXD_MAX_PROCESSES`. */
  env: string;
  /** `string` takes a value, `boolean` is a switch (its variable takes 1/true/yes or 0/false/no). */
  type: "string" | "boolean";
  /** Repeatable on the command line; its variable holds several values split by `separator`. */
  separator?: string;
  /** What the value is, for the help: `<n>`, `<dir>`... */
  value?: string;
  /** One short option letter, if any. */
  short?: string;
  /** The help text; the variable and the default are added from the other fields. */
  help: string;
  /** The default as a reader should see it, when there is one. */
  defaultText?: string;
}

/**
 * Every flag of the daemon, in the order of its help: the one table the parser, the help and the
 * documentation come from. Each has a `SANDBOXD_*` variable.
 */
export const daemonFlags: readonly DaemonFlag[] = [
  {
    name: "host",
    env: "SANDBOXD_HOST",
    type: "string",
    value: "<address>",
    help: "address to listen on",
    defaultText: "127.0.0.1",
  },
  {
    name: "port",
    env: "SANDBOXD_PORT",
    type: "string",
    value: "<port>",
    help: "port to listen on, 0 for any",
    defaultText: "7007",
  },
  {
    name: "workspace",
    env: "SANDBOXD_WORKSPACE",
    type: "string",
    separator: ":",
    value: "<dir>",
    help: "workspace root, repeatable; the first is the default cwd",
    defaultText: "the current directory",
  },
  {
    name: "max-output-bytes",
    env: "SANDBOXD_MAX_OUTPUT_BYTES",
    type: "string",
    value: "<n>",
    help: "output retained per process: the first bytes of each stream (the head) and the last (the tail), the most a request may ask for",
    defaultText: "8 MiB",
  },
  {
    name: "output-head-bytes",
    env: "SANDBOXD_OUTPUT_HEAD_BYTES",
    type: "string",
    value: "<n>",
    help: "first bytes of each stream a process retains when its request names none (at most a quarter of --max-output-bytes); the tail is the rest",
    defaultText: "64 KiB",
  },
  {
    name: "max-retained-bytes",
    env: "SANDBOXD_MAX_RETAINED_BYTES",
    type: "string",
    value: "<n>",
    help: "memory budget for all output (live and exited) and stdin input held for commands; past it exited output goes first, then the largest live buffers are trimmed, and input waits",
    defaultText: "a twentieth of the machine's (or cgroup's) memory, 128 MiB to 4 GiB",
  },
  {
    name: "max-processes",
    env: "SANDBOXD_MAX_PROCESSES",
    type: "string",
    value: "<n>",
    help: "live processes allowed",
    defaultText: "1024",
  },
  {
    name: "linger-ms",
    env: "SANDBOXD_LINGER_MS",
    type: "string",
    value: "<n>",
    help: "how long exited records stay readable",
    defaultText: "60000",
  },
  {
    name: "token",
    env: "SANDBOXD_TOKEN",
    type: "string",
    value: "<token>",
    help: "bearer token required on every call but health (visible in ps: prefer --token-file)",
  },
  {
    name: "token-file",
    env: "SANDBOXD_TOKEN_FILE",
    type: "string",
    value: "<file>",
    help: "read the token from a file of mode 0600 or stricter",
  },
  { name: "insecure", env: "SANDBOXD_INSECURE", type: "boolean", help: "allow a non-loopback --host without a token" },
  {
    name: "user",
    env: "SANDBOXD_USER",
    type: "string",
    value: "<name|uid>",
    help: "run commands as this user, with its groups, HOME, USER, LOGNAME; needs a token",
  },
  {
    name: "allow-sudo",
    env: "SANDBOXD_ALLOW_SUDO",
    type: "boolean",
    help: "let requests with sudo run as root (the daemon must be root); needs a token",
  },
  {
    name: "max-tasks",
    env: "SANDBOXD_MAX_TASKS",
    type: "string",
    value: "<n>",
    help: "tasks (processes, threads) one command may have, 0 for no cap",
    defaultText: "1024",
  },
  {
    name: "no-trace-tasks",
    env: "SANDBOXD_NO_TRACE_TASKS",
    type: "boolean",
    help: "without a writable pids cgroup, cap commands' tasks by RLIMIT_NPROC alone (one count for all commands of a uid) instead of tracing each command's forks, which keeps strace and gdb from working inside commands",
  },
  {
    name: "max-tasks-total",
    env: "SANDBOXD_MAX_TASKS_TOTAL",
    type: "string",
    value: "<n>",
    help: "tasks of all commands together, 0 for no cap",
    defaultText: "a quarter of the kernel's pid_max, at most 16384",
  },
  {
    name: "commands-memory-bytes",
    env: "SANDBOXD_COMMANDS_MEMORY_BYTES",
    type: "string",
    value: "<n>",
    help: "memory of all commands together, 0 for no limit",
    defaultText: "the machine's less a tenth, at least 256 MiB, kept for the daemon",
  },
  {
    name: "command-memory-bytes",
    env: "SANDBOXD_COMMAND_MEMORY_BYTES",
    type: "string",
    value: "<n>",
    help: "memory limit of each command that asks for none (in a memory cgroup of its own), 0 for none of its own",
    defaultText: "0: only the commands' total applies",
  },
  {
    name: "max-command-memory-bytes",
    env: "SANDBOXD_MAX_COMMAND_MEMORY_BYTES",
    type: "string",
    value: "<n>",
    help: "most memory one command may ask for (its limits.memory_bytes); above it a request is refused naming this flag",
    defaultText: "the commands' total (--commands-memory-bytes)",
  },
  {
    name: "max-command-cpus",
    env: "SANDBOXD_MAX_COMMAND_CPUS",
    type: "string",
    value: "<n>",
    help: "most CPUs one command may ask for as a quota (its limits.cpu_millis / 1000), e.g. 0.5; above it a request is refused naming this flag",
    defaultText: "every CPU of the machine",
  },
  {
    name: "commands-cpu-weight",
    env: "SANDBOXD_COMMANDS_CPU_WEIGHT",
    type: "string",
    value: "<w>",
    help: "CPU weight of all commands together against the daemon's (cgroup v1 cpu.shares), 0 for none",
    defaultText: "0.5",
  },
  {
    name: "max-message-bytes",
    env: "SANDBOXD_MAX_MESSAGE_BYTES",
    type: "string",
    value: "<n>",
    help: "largest request message",
    defaultText: "4 MiB",
  },
  {
    name: "max-calls",
    env: "SANDBOXD_MAX_CALLS",
    type: "string",
    value: "<n>",
    help: "calls in progress on the daemon",
    defaultText: "4096",
  },
  {
    name: "max-calls-per-connection",
    env: "SANDBOXD_MAX_CALLS_PER_CONNECTION",
    type: "string",
    value: "<n>",
    help: "calls in progress on one connection",
    defaultText: "256",
  },
  {
    name: "max-connections",
    env: "SANDBOXD_MAX_CONNECTIONS",
    type: "string",
    value: "<n>",
    help: "connections open at once, every protocol",
    defaultText: "1024",
  },
  {
    name: "max-connections-per-peer",
    env: "SANDBOXD_MAX_CONNECTIONS_PER_PEER",
    type: "string",
    value: "<n>",
    help: "connections one peer address (IPv6: its /64) may hold before its first authenticated call, 0 for no cap",
    defaultText: "a quarter of --max-connections",
  },
  {
    name: "max-transfers",
    env: "SANDBOXD_MAX_TRANSFERS",
    type: "string",
    value: "<n>",
    help: "file reads and writes in progress on the daemon",
    defaultText: "64",
  },
  {
    name: "max-transfers-per-connection",
    env: "SANDBOXD_MAX_TRANSFERS_PER_CONNECTION",
    type: "string",
    value: "<n>",
    help: "file reads and writes in progress on one connection",
    defaultText: "16",
  },
  {
    name: "max-watches-per-connection",
    env: "SANDBOXD_MAX_WATCHES_PER_CONNECTION",
    type: "string",
    value: "<n>",
    help: "file watches open on one connection",
    defaultText: "16",
  },
  {
    name: "max-unsized-read-bytes",
    env: "SANDBOXD_MAX_UNSIZED_READ_BYTES",
    type: "string",
    value: "<n>",
    help: "most bytes one file read sends of a file without a size (a device, a /proc file); regular files are read up to their size when opened",
    defaultText: "64 MiB",
  },
  {
    name: "keepalive-ms",
    env: "SANDBOXD_KEEPALIVE_MS",
    type: "string",
    value: "<n>",
    help: "ping interval that finds dead peers",
    defaultText: "30000",
  },
  {
    name: "state-dir",
    env: "SANDBOXD_STATE_DIR",
    type: "string",
    value: "<dir>",
    help: "record process groups here; leftovers of a killed daemon are killed at the next start, which keeps their records (cause `unknown`)",
  },
  {
    name: "cors-origin",
    env: "SANDBOXD_CORS_ORIGINS",
    type: "string",
    separator: ",",
    value: "<origin>",
    help: "let browser pages of this origin call the daemon (Connect, gRPC-Web); repeatable, * for any (needs a token)",
  },
  {
    name: "tls-cert",
    env: "SANDBOXD_TLS_CERT",
    type: "string",
    value: "<file>",
    help: "serve TLS with this PEM certificate chain; needs --tls-key",
  },
  {
    name: "tls-key",
    env: "SANDBOXD_TLS_KEY",
    type: "string",
    value: "<file>",
    help: "the PEM private key of --tls-cert",
  },
  {
    name: "tls-client-ca",
    env: "SANDBOXD_TLS_CLIENT_CA",
    type: "string",
    value: "<file>",
    help: "require client certificates signed by these PEM CAs (mutual TLS)",
  },
  {
    name: "log-level",
    env: "SANDBOXD_LOG_LEVEL",
    type: "string",
    value: "<level>",
    help: "trace, debug, info, warn, error, fatal or silent",
    defaultText: "info",
  },
  {
    name: "log-format",
    env: "SANDBOXD_LOG_FORMAT",
    type: "string",
    value: "<format>",
    help: "json or pretty",
    defaultText: "pretty on a terminal, else json",
  },
  {
    name: "no-favordynmods",
    env: "SANDBOXD_NO_FAVORDYNMODS",
    type: "boolean",
    help: "leave the kernel's cgroup favordynmods option as it is (as root the daemon turns it on, kernel-wide, so a command joins its cgroups without a 6-20 ms wait after a pause)",
  },
  {
    name: "log-commands",
    env: "SANDBOXD_LOG_COMMANDS",
    type: "boolean",
    help: "put command lines in the process audit (they may carry secrets)",
  },
  {
    name: "metrics-public",
    env: "SANDBOXD_METRICS_PUBLIC",
    type: "boolean",
    help: "serve GET /metrics without the token",
  },
  {
    name: "agent-sandbox",
    env: "SANDBOXD_AGENT_SANDBOX",
    type: "boolean",
    help: "serve KEP-539.2's layout for kubernetes-sigs/agent-sandbox's SDKs: process.v1 over gRPC on 9090, its REST surface on 8080 (the next two flags move either)",
  },
  {
    name: "agent-sandbox-grpc-port",
    env: "SANDBOXD_AGENT_SANDBOX_GRPC_PORT",
    type: "string",
    value: "<port>",
    help: "also serve gRPC, process.v1 (KEP-539.2) included, on this port, 0 for any; same host, token, TLS and limits",
  },
  {
    name: "agent-sandbox-rest-port",
    env: "SANDBOXD_AGENT_SANDBOX_REST_PORT",
    type: "string",
    value: "<port>",
    help: "serve KEP-539.2's REST surface (/v1/files, /v1/health, /v1/metadata) on this port, 0 for any; same host, token, TLS and limits",
  },
  {
    name: "agent-sandbox-metadata-prefix",
    env: "SANDBOXD_AGENT_SANDBOX_METADATA_PREFIX",
    type: "string",
    value: "<prefix>",
    help: "GET /v1/metadata serves the daemon's variables with this prefix, never SANDBOXD_* ones, names that look like credentials, or the token",
    defaultText: "SANDBOX_",
  },
  {
    name: "agent-sandbox-trusted-peer",
    env: "SANDBOXD_AGENT_SANDBOX_TRUSTED_PEERS",
    type: "string",
    separator: ",",
    value: "<cidr>",
    help: "peers in this network (!<cidr> leaves one out) call process.v1 and the REST surface without the token, as agent-sandbox's SDKs do; never one on this machine or a browser's request; repeatable, needs a token",
  },
];

/** The flags that only print something: they take no variable. */
const infoFlags = {
  help: { type: "boolean", short: "h" },
  version: { type: "boolean", short: "v" },
} as const;

/** What {@link readDaemonFlags} found: each flag's text (or texts, or switch) by name, flag over variable. */
export interface DaemonFlagValues {
  /** `--help` was given. */
  help: boolean;
  /** `--version` was given. */
  version: boolean;
  /** A string flag's value, from the command line, else from its variable. */
  text(name: string): string | undefined;
  /** A string flag's value from the command line only. */
  given(name: string): string | undefined;
  /** A repeatable flag's values (the variable split by its separator), or undefined when neither is set. */
  list(name: string): string[] | undefined;
  /** A switch: the flag, else its variable (1/true/yes or 0/false/no; anything else throws). */
  enabled(name: string): boolean;
}

/**
 * Reads the daemon's arguments, each flag falling back to its `SANDBOXD_*` variable. Throws an Error
 * whose message names the flag (or variable) and what is wrong, for one line on stderr.
 */
export function readDaemonFlags(argv: readonly string[], env: NodeJS.ProcessEnv): DaemonFlagValues {
  const options: Record<string, { type: "string" | "boolean"; multiple?: boolean; short?: string }> = { ...infoFlags };
  for (const flag of daemonFlags) {
    options[flag.name] = {
      type: flag.type,
      ...(flag.separator === undefined ? {} : { multiple: true }),
      ...(flag.short === undefined ? {} : { short: flag.short }),
    };
  }
  let values: Record<string, string | boolean | (string | boolean)[] | undefined>;
  try {
    ({ values } = parseArgs({ args: [...argv], options, strict: true, allowPositionals: false }));
  } catch (error) {
    // parseArgs says "Unknown option '--x'. To specify a positional argument starting with a '-'...": keep the first sentence.
    throw new Error(((error as Error).message.split(". ")[0] ?? "").replace(/\.$/, ""));
  }
  const flagNamed = (name: string) => {
    const flag = daemonFlags.find((candidate) => candidate.name === name);
    if (flag === undefined) throw new Error(`no daemon flag --${name}`);
    return flag;
  };
  const fromEnv = (flag: DaemonFlag) => {
    const text = env[flag.env];
    return text === undefined || text === "" ? undefined : text;
  };
  return {
    help: values.help === true,
    version: values.version === true,
    text(name) {
      const flag = flagNamed(name);
      const value = values[name];
      return typeof value === "string" ? value : fromEnv(flag);
    },
    given(name) {
      flagNamed(name);
      const value = values[name];
      return typeof value === "string" ? value : undefined;
    },
    list(name) {
      const flag = flagNamed(name);
      const value = values[name];
      if (Array.isArray(value)) return value.map(String);
      return fromEnv(flag)
        ?.split(flag.separator ?? ",")
        .map((item) => item.trim())
        .filter(Boolean);
    },
    enabled(name) {
      const flag = flagNamed(name);
      if (values[name] === true) return true;
      const text = fromEnv(flag)?.toLowerCase();
      if (text === undefined || ["0", "false", "no"].includes(text)) return false;
      if (["1", "true", "yes"].includes(text)) return true;
      throw new Error(`${flag.env} must be 1, true, yes, 0, false or no, got ${JSON.stringify(env[flag.env])}`);
    },
  };
}

/** The daemon's help, made from {@link daemonFlags}. */
export function daemonUsage(): string {
  const lines = [
    "sandboxd: run commands in this machine for clients far away (gRPC, Connect, gRPC-Web)",
    "",
    "usage: sandboxd [options]",
    "",
  ];
  for (const flag of daemonFlags) {
    const head = `  --${flag.name}${flag.value === undefined ? "" : ` ${flag.value}`}`;
    const tail = `(${flag.env}${flag.separator === undefined ? "" : `, ${flag.separator === ":" ? "colon" : "comma"}-separated`}${flag.defaultText === undefined ? "" : `; default ${flag.defaultText}`})`;
    const help = `${flag.help} ${tail}`;
    if (head.length < 28) lines.push(`${head.padEnd(28)}${help}`);
    else lines.push(head, `${"".padEnd(28)}${help}`);
  }
  lines.push(
    `  -v, --version             print the version and exit`,
    `  -h, --help                show this help`,
    "",
  );
  return lines.join("\n");
}

/** The flags as a Markdown table (flag, variable, default, meaning): the README's "Daemon flags" holds it. */
export function daemonFlagsTable(): string {
  const rows = daemonFlags.map((flag) => {
    const name = `\`--${flag.name}${flag.value === undefined ? "" : ` ${flag.value}`}\``.replaceAll("|", "\\|");
    const variable = `\`${flag.env}\`${flag.separator === undefined ? "" : ` (${flag.separator === ":" ? "colon" : "comma"}-separated)`}`;
    return `| ${name} | ${variable} | ${flag.defaultText ?? ""} | ${flag.help.replaceAll("|", "\\|")} |`;
  });
  return ["| flag | variable | default | what it does |", "| --- | --- | --- | --- |", ...rows].join("\n");
}
