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
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <unistd.h>

#ifndef CLOSE_RANGE_CLOEXEC
#define CLOSE_RANGE_CLOEXEC (1U << 2)
#endif

extern char **environ;

static int status_fd = -1;

/* Reports a failed stage and exits. The daemon reads "<stage> <errno>" from the status fd; without
 * one (a PTY), the message goes to the terminal as a shell would print it. */
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
  environ = command_env;
  execvp(command[0], command);
  fail("exec", errno, errno == ENOENT ? 127 : 126, command[0]);
  return 126;
}
