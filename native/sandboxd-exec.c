/*
 * sandboxd-exec: the last step between the daemon and a command.
 *
 * The daemon spawns this program (on pipes or in a PTY) instead of the command itself. It runs with a
 * fixed environment the daemon chose, as the daemon's user (often root), does the privileged setup,
 * drops to the command's user and only then execs the command with the environment the client asked
 * for. Nothing the client chose (LD_PRELOAD, LD_LIBRARY_PATH, GCONV_PATH...) is ever seen by a
 * process running with more privilege than the command.
 *
 *   sandboxd-exec [options] -- FILE [ARGS...]
 *
 *   --cgroup PATH      join the cgroup whose cgroup.procs is PATH (before anything else); repeatable,
 *                      one per cgroup v1 hierarchy (pids, memory, cpu)
 *   --nproc N          set RLIMIT_NPROC to N
 *   --trace-tasks N    cap the command's tasks at N without cgroups: a supervisor process of the command's user
 *                      traces every fork and clone of the command and of what it starts (ptrace, auto-attached)
 *                      and kills a new task past N at once; for a daemon whose commands share one uid and no
 *                      pids cgroup can be made, where RLIMIT_NPROC would count all of them together
 *   --uid U --gid G    switch to this user and group (setgroups, setgid, setuid)
 *   --groups NAME      the user's supplementary groups from the group database (initgroups);
 *                      without it a user switch clears them
 *   --tty-owner        give the terminal on stdin to U:G, mode 0620 (PTY commands)
 *   --cwd DIR          chdir as the command's user, then require getcwd() == DIR, so a path
 *                      swapped for a symlink between the daemon's check and the chdir is refused
 *   --status-fd N      report a failure on fd N as "<stage> <errno>\n"; closed by the exec on success
 *
 * The command's environment is taken from the variables named SANDBOXD_ENV_<n> (n = 0, 1, ...),
 * whose values are "NAME=VALUE": names no loader or libc reads, so the helper itself is not
 * affected by them. Every other variable of the helper is dropped. Every fd above 2 is closed
 * at the exec.
 *
 * Exit status when the command could not be started: 127 when the program or the working directory
 * is missing, 126 when it could not be executed, 125 when the setup (cgroup, limits, user) failed.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <signal.h>
#include <unistd.h>

#ifndef CLOSE_RANGE_CLOEXEC
#define CLOSE_RANGE_CLOEXEC (1U << 2)
#endif

extern char **environ;

static int status_fd = -1;

/* Reports a failed stage and exits. The daemon reads "<stage> <errno>" from the status fd (pipes and
 * PTYs alike); without one, the message goes to stderr as a shell would print it. */
static void fail(const char *stage, int error, int exit_code, const char *subject) {
  if (status_fd >= 0) {
    char line[64];
    int length = snprintf(line, sizeof line, "%s %d\n", stage, error);
    if (length > 0) (void)!write(status_fd, line, (size_t)length);
  } else {
    dprintf(STDERR_FILENO, "sandboxd: %s: %s: %s\n", stage, subject ? subject : "", strerror(error));
  }
  _exit(exit_code);
}

static long parse_number(const char *text, const char *what) {
  char *end = NULL;
  errno = 0;
  long value = strtol(text, &end, 10);
  if (errno != 0 || end == text || *end != '\0' || value < 0) fail("usage", EINVAL, 125, what);
  return value;
}

/* Marks every fd above 2 close-on-exec: fds the daemon inherited must not reach the command. */
static void close_inherited_fds(void) {
#ifdef SYS_close_range
  if (syscall(SYS_close_range, 3U, ~0U, CLOSE_RANGE_CLOEXEC) == 0) return;
#endif
  DIR *dir = opendir("/proc/self/fd");
  if (dir == NULL) {
    for (int fd = 3; fd < 65536; fd++) fcntl(fd, F_SETFD, FD_CLOEXEC);
    return;
  }
  int own = dirfd(dir);
  struct dirent *entry;
  while ((entry = readdir(dir)) != NULL) {
    int fd = atoi(entry->d_name);
    if (fd > 2 && fd != own) fcntl(fd, F_SETFD, FD_CLOEXEC);
  }
  closedir(dir);
}

static void join_cgroup(const char *procs) {
  int fd = open(procs, O_WRONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) fail("cgroup", errno, 125, procs);
  char pid[32];
  int length = snprintf(pid, sizeof pid, "%d\n", (int)getpid());
  if (write(fd, pid, (size_t)length) != length) fail("cgroup", errno, 125, procs);
  close(fd);
}

/* The tasks a supervisor traces: a small set of pids (at most the cap plus the ones being killed). */
struct task_set {
  pid_t *pids;
  size_t count, capacity;
};

static int task_set_has(const struct task_set *set, pid_t pid) {
  for (size_t i = 0; i < set->count; i++) {
    if (set->pids[i] == pid) return 1;
  }
  return 0;
}

static void task_set_add(struct task_set *set, pid_t pid) {
  if (set->count == set->capacity) {
    size_t capacity = set->capacity == 0 ? 64 : set->capacity * 2;
    pid_t *pids = realloc(set->pids, capacity * sizeof *pids);
    if (pids == NULL) _exit(1); /* PTRACE_O_EXITKILL: the command goes with the supervisor */
    set->pids = pids;
    set->capacity = capacity;
  }
  set->pids[set->count++] = pid;
}

static void task_set_remove(struct task_set *set, pid_t pid) {
  for (size_t i = 0; i < set->count; i++) {
    if (set->pids[i] == pid) {
      set->pids[i] = set->pids[--set->count];
      return;
    }
  }
}

/*
 * A new task of the command: counted, and killed at once (before it runs) when it is one too many. A
 * task's first stop may come before or after its parent's fork event: whichever comes first counts it.
 */
static void admit(struct task_set *tasks, struct task_set *departed, pid_t pid, long max_tasks) {
  if (task_set_has(tasks, pid)) return;
  /* Killed (the command's group, say) before either was reported: its exit came first. */
  if (task_set_has(departed, pid)) {
    task_set_remove(departed, pid);
    return;
  }
  task_set_add(tasks, pid);
  /* SIGKILL to a thread ends its whole process: a thread past the cap costs its process, as it would cost
   * its creation under pids.max (there pthread_create fails instead). */
  if ((long)tasks->count > max_tasks) kill(pid, SIGKILL);
}

/* The supervisor's loop: returns when the command and everything it started have exited. */
static void supervise(pid_t command, long max_tasks) {
  struct task_set tasks = {0}, departed = {0};
  task_set_add(&tasks, command);
  while (tasks.count > 0) {
    int status;
    pid_t pid = waitpid(-1, &status, __WALL);
    if (pid < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if (WIFEXITED(status) || WIFSIGNALED(status)) {
      if (task_set_has(&tasks, pid)) task_set_remove(&tasks, pid);
      else task_set_add(&departed, pid);
      continue;
    }
    if (!WIFSTOPPED(status)) continue;
    int signal = WSTOPSIG(status);
    int event = status >> 16;
    if (!task_set_has(&tasks, pid)) {
      /* A new task's first stop, before its parent's fork event: let it run unless it is over the cap. */
      admit(&tasks, &departed, pid, max_tasks);
      ptrace(PTRACE_CONT, pid, 0, 0);
      continue;
    }
    if (event == PTRACE_EVENT_FORK || event == PTRACE_EVENT_VFORK || event == PTRACE_EVENT_CLONE) {
      unsigned long child = 0;
      if (ptrace(PTRACE_GETEVENTMSG, pid, 0, &child) == 0 && child > 0) admit(&tasks, &departed, (pid_t)child, max_tasks);
      ptrace(PTRACE_CONT, pid, 0, 0);
    } else if (event == PTRACE_EVENT_EXEC) {
      /* An exec from a thread other than the leader: that thread now has the leader's id, its old id
       * reports no exit, and neither does the leader. Forget the old id. */
      unsigned long former = 0;
      if (ptrace(PTRACE_GETEVENTMSG, pid, 0, &former) == 0 && (pid_t)former != pid) task_set_remove(&tasks, (pid_t)former);
      ptrace(PTRACE_CONT, pid, 0, 0);
    } else if (event == PTRACE_EVENT_STOP) {
      /* A group-stop (SIGSTOP, SIGTSTP...): stays stopped until SIGCONT, as it would untraced. Otherwise
       * the first stop of a task counted at its parent's fork event. */
      if (signal == SIGSTOP || signal == SIGTSTP || signal == SIGTTIN || signal == SIGTTOU) ptrace(PTRACE_LISTEN, pid, 0, 0);
      else ptrace(PTRACE_CONT, pid, 0, 0);
    } else {
      /* A signal on its way: delivered as it would be untraced. */
      ptrace(PTRACE_CONT, pid, 0, (void *)(long)signal);
    }
  }
}

/*
 * Starts the supervisor of --trace-tasks for this process (the command, once exec'd) and returns once it
 * traces it. The supervisor is a grandchild (its parent exits at once), so it is no child of the command's
 * to wait for; it runs as the command's user, holds none of its fds, and dies with its last task. Killing
 * it kills every task it traces (PTRACE_O_EXITKILL), so the command cannot shed the cap that way.
 */
static void start_task_supervisor(long max_tasks) {
  pid_t command = getpid();
  int to_supervisor[2], from_supervisor[2];
  if (pipe2(to_supervisor, O_CLOEXEC) != 0 || pipe2(from_supervisor, O_CLOEXEC) != 0) fail("trace", errno, 125, NULL);
  /* setuid cleared this process's dumpable flag: the supervisor, of the same user, may trace it only with it set. */
  if (prctl(PR_SET_DUMPABLE, 1UL, 0UL, 0UL, 0UL) != 0) fail("trace", errno, 125, NULL);
  pid_t middle = fork();
  if (middle < 0) fail("trace", errno, 125, NULL);
  if (middle == 0) {
    pid_t supervisor = fork();
    if (supervisor != 0) _exit(supervisor > 0 ? 0 : 1);
    pid_t self = getpid();
    char go;
    if (write(from_supervisor[1], &self, sizeof self) != (ssize_t)sizeof self || read(to_supervisor[0], &go, 1) != 1) _exit(1);
    int error = 0;
    if (ptrace(PTRACE_SEIZE, command, 0, (void *)(long)(PTRACE_O_TRACEFORK | PTRACE_O_TRACEVFORK | PTRACE_O_TRACECLONE | PTRACE_O_TRACEEXEC | PTRACE_O_EXITKILL)) != 0) error = errno;
    if (write(from_supervisor[1], &error, sizeof error) != (ssize_t)sizeof error || error != 0) _exit(1);
    int null = open("/dev/null", O_RDWR);
    for (int fd = 0; fd <= 2; fd++) dup2(null, fd);
#ifdef SYS_close_range
    syscall(SYS_close_range, 3U, ~0U, 0U);
#else
    for (int fd = 3; fd < 1024; fd++) close(fd);
#endif
    /* Only SIGKILL ends it: a signal to the command's process group (SIGTERM first, a terminal's SIGHUP or
     * SIGTSTP) is for the command, and its death would SIGKILL every task it traces. */
    for (int number = 1; number < 32; number++) {
      if (number != SIGKILL && number != SIGSTOP && number != SIGCHLD) signal(number, SIG_IGN);
    }
    supervise(command, max_tasks);
    _exit(0);
  }
  int status;
  while (waitpid(middle, &status, 0) < 0 && errno == EINTR) {
  }
  pid_t supervisor = 0;
  int error = EIO;
  if (read(from_supervisor[0], &supervisor, sizeof supervisor) != (ssize_t)sizeof supervisor) fail("trace", EIO, 125, NULL);
  /* Yama's ptrace_scope 1 lets a process trace only its descendants, unless the tracee names it. */
  (void)prctl(PR_SET_PTRACER, (unsigned long)supervisor, 0UL, 0UL, 0UL);
  if (write(to_supervisor[1], "g", 1) != 1 || read(from_supervisor[0], &error, sizeof error) != (ssize_t)sizeof error) fail("trace", EIO, 125, NULL);
  if (error != 0) fail("trace", error, 125, NULL);
  close(to_supervisor[0]);
  close(to_supervisor[1]);
  close(from_supervisor[0]);
  close(from_supervisor[1]);
}

/* Builds the command's environment from the SANDBOXD_ENV_<n> variables, in order of n. */
static char **command_environment(void) {
  static const char prefix[] = "SANDBOXD_ENV_";
  size_t count = 0;
  for (char **entry = environ; *entry != NULL; entry++) {
    if (strncmp(*entry, prefix, sizeof prefix - 1) == 0) count++;
  }
  char **result = calloc(count + 1, sizeof(char *));
  if (result == NULL) fail("environment", ENOMEM, 125, NULL);
  for (char **entry = environ; *entry != NULL; entry++) {
    if (strncmp(*entry, prefix, sizeof prefix - 1) != 0) continue;
    char *end = NULL;
    unsigned long index = strtoul(*entry + sizeof prefix - 1, &end, 10);
    if (end == NULL || *end != '=' || index >= count || result[index] != NULL) fail("environment", EINVAL, 125, *entry);
    result[index] = end + 1;
  }
  return result;
}

int main(int argc, char **argv) {
  const char *cgroups[8];
  int cgroup_count = 0;
  const char *groups = NULL;
  const char *cwd = NULL;
  long nproc = -1;
  long trace_tasks = -1;
  long uid = -1;
  long gid = -1;
  int tty_owner = 0;
  int index = 1;
  for (; index < argc; index++) {
    const char *option = argv[index];
    const char *value = index + 1 < argc ? argv[index + 1] : NULL;
    if (strcmp(option, "--") == 0) {
      index++;
      break;
    } else if (strcmp(option, "--tty-owner") == 0) {
      tty_owner = 1;
      continue;
    }
    if (value == NULL) fail("usage", EINVAL, 125, option);
    index++;
    if (strcmp(option, "--cgroup") == 0) {
      if (cgroup_count == (int)(sizeof cgroups / sizeof cgroups[0])) fail("usage", E2BIG, 125, option);
      cgroups[cgroup_count++] = value;
    }
    else if (strcmp(option, "--nproc") == 0) nproc = parse_number(value, option);
    else if (strcmp(option, "--trace-tasks") == 0) trace_tasks = parse_number(value, option);
    else if (strcmp(option, "--uid") == 0) uid = parse_number(value, option);
    else if (strcmp(option, "--gid") == 0) gid = parse_number(value, option);
    else if (strcmp(option, "--groups") == 0) groups = value;
    else if (strcmp(option, "--cwd") == 0) cwd = value;
    else if (strcmp(option, "--status-fd") == 0) status_fd = (int)parse_number(value, option);
    else fail("usage", EINVAL, 125, option);
  }
  if (index >= argc || (uid < 0) != (gid < 0)) fail("usage", EINVAL, 125, "no command");
  char **command = &argv[index];
  char **command_env = command_environment();

  close_inherited_fds();
  if (status_fd >= 0 && fcntl(status_fd, F_SETFD, FD_CLOEXEC) != 0) fail("status", errno, 125, NULL);
  for (int i = 0; i < cgroup_count; i++) join_cgroup(cgroups[i]);
  if (nproc >= 0) {
    struct rlimit limit = {(rlim_t)nproc, (rlim_t)nproc};
    if (setrlimit(RLIMIT_NPROC, &limit) != 0) fail("nproc", errno, 125, NULL);
  }
  if (uid >= 0) {
    if (tty_owner && isatty(STDIN_FILENO)) {
      if (fchown(STDIN_FILENO, (uid_t)uid, (gid_t)gid) != 0) fail("tty", errno, 125, NULL);
      if (fchmod(STDIN_FILENO, 0620) != 0) fail("tty", errno, 125, NULL);
    }
    if (groups != NULL ? initgroups(groups, (gid_t)gid) != 0 : setgroups(0, NULL) != 0) {
      // Without CAP_SETGID (a daemon that is not root) only its own single group can be kept.
      if (errno != EPERM || getgid() != (gid_t)gid) fail("groups", errno, 125, groups);
    }
    if (setgid((gid_t)gid) != 0) fail("setgid", errno, 125, NULL);
    if (setuid((uid_t)uid) != 0) fail("setuid", errno, 125, NULL);
  }
  if (cwd != NULL) {
    if (chdir(cwd) != 0) fail("cwd", errno, errno == ENOENT ? 127 : 126, cwd);
    char actual[PATH_MAX];
    if (getcwd(actual, sizeof actual) == NULL) fail("cwd", errno, 126, cwd);
    // The directory entered is not the one the daemon checked: a component was swapped meanwhile.
    if (strcmp(actual, cwd) != 0) fail("cwd", EXDEV, 126, cwd);
  }
  if (trace_tasks > 0) start_task_supervisor(trace_tasks);
  environ = command_env;
  execvp(command[0], command);
  fail("exec", errno, errno == ENOENT ? 127 : 126, command[0]);
  return 126;
}
