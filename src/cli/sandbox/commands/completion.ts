import { Command } from "commander";
import { exitCodes } from "../exit-codes.js";

/** Creates the `completion` command, which prints a shell completion script built from `program`'s own commands and flags. */
export function createCompletionCommand(finish: (code: number) => void, program: () => Command): Command {
  return new Command("completion")
    .summary("print a shell completion script (bash or zsh)")
    .description(
      "Print a script that completes sandbox's commands, their flags, and process ids (asked of the daemon at " +
        "--url or $SANDBOXD_URL) for logs, attach, kill and rm. Load it from your shell's start-up file:\n\n" +
        "  bash: source <(sandbox completion bash)      (in ~/.bashrc)\n" +
        "  zsh:  source <(sandbox completion zsh)       (in ~/.zshrc)",
    )
    .argument("[shell]", "bash or zsh", "bash")
    .action((shell: string) => {
      if (shell !== "bash" && shell !== "zsh") {
        process.stderr.write(`sandbox: no completion for ${JSON.stringify(shell).slice(1, -1)}: bash or zsh\n`);
        finish(exitCodes.usage);
        return;
      }
      process.stdout.write(completionScript(program(), shell));
      finish(exitCodes.ok);
    });
}

/** The words to complete after each command: its flags, and whether it takes process ids. */
function commandWords(program: Command): Map<string, { flags: string[]; ids: boolean }> {
  const words = new Map<string, { flags: string[]; ids: boolean }>();
  // A command with subcommands (`wait`) is completed by its subcommands' names; each of those by its own words.
  const add = (command: Command, name: string) => {
    if (command.commands.length > 0) {
      for (const sub of command.commands) add(sub, `${name} ${sub.name()}`);
      return;
    }
    const flags = command.options.flatMap((option) =>
      [option.short, option.long].filter((flag): flag is string => flag !== undefined),
    );
    const ids = command.registeredArguments.some((argument) => argument.name() === "id");
    words.set(name, { flags: [...flags, "--help"], ids });
  };
  for (const command of program.commands) add(command, command.name());
  return words;
}

/** The subcommands' names of each command that has some (`wait`: port, log, exit). */
function subcommandWords(program: Command): Map<string, string[]> {
  return new Map(
    program.commands
      .filter((command) => command.commands.length > 0)
      .map((command) => [command.name(), command.commands.map((sub) => sub.name())]),
  );
}

/**
 * A bash completion function for `sandbox` (zsh loads it through bashcompinit): command names
 * first (then a subcommand's name after `wait`), then the command's flags after a `-`, and for
 * commands taking ids the ids of `sandbox ps -aq`.
 */
export function completionScript(program: Command, shell: "bash" | "zsh"): string {
  const words = commandWords(program);
  const subcommands = subcommandWords(program);
  const topLevel = [...new Set([...words.keys()].map((name) => name.split(" ")[0]))];
  const cases = [...words]
    .map(
      ([name, { flags, ids }]) => `    ${shellWord(name)}) flags=${shellWord(flags.join(" "))}; ids=${ids ? 1 : 0} ;;`,
    )
    .join("\n");
  const subCases = [...subcommands]
    .map(([name, subs]) => `    ${name}) subs=${shellWord(subs.join(" "))} ;;`)
    .join("\n");
  const script = `# sandbox completion for ${shell}: source <(sandbox completion ${shell})
_sandbox() {
  local current=\${COMP_WORDS[COMP_CWORD]} command="" sub="" flags="" ids=0 subs="" word
  for word in "\${COMP_WORDS[@]:1:COMP_CWORD-1}"; do
    case "$word" in -*) ;; *) if [ -z "$command" ]; then command=$word; elif [ -z "$sub" ]; then sub=$word; fi ;; esac
  done
  if [ -z "$command" ]; then
    COMPREPLY=($(compgen -W ${shellWord([...topLevel, "--help", "--version"].join(" "))} -- "$current"))
    return
  fi
  case "$command" in
${subCases}
  esac
  if [ -n "$subs" ]; then
    if [ -z "$sub" ]; then
      COMPREPLY=($(compgen -W "$subs" -- "$current"))
      return
    fi
    command="$command $sub"
  fi
  case "$command" in
${cases}
  esac
  if [[ "$current" == -* ]]; then
    COMPREPLY=($(compgen -W "$flags" -- "$current"))
  elif [ "$ids" = 1 ]; then
    COMPREPLY=($(compgen -W "$(sandbox ps -aq 2>/dev/null)" -- "$current"))
  fi
}
`;
  const register =
    shell === "zsh"
      ? "autoload -U +X bashcompinit && bashcompinit\ncomplete -F _sandbox sandbox\n"
      : "complete -F _sandbox sandbox\n";
  return script + register;
}

/** `text` in single quotes for a shell. */
function shellWord(text: string): string {
  return `'${text.replaceAll("'", `'\\''`)}'`;
}
