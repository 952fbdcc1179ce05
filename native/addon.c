/*
 * sandboxd's Node-API addon: what the daemon needs from the C library that Node does not offer.
 *
 *   spawn(file, argv, envp, options) starts a command with posix_spawn, which glibc runs as a
 *       vfork-style clone: its cost does not grow with the daemon's memory, unlike the full fork()
 *       of child_process.spawn and node-pty. The child leads a new session (its pid is its process
 *       group), gets socket pairs or a new pseudo-terminal as stdin/stdout/stderr, optionally a status
 *       pipe on fd 3 (for sandboxd-exec), every signal at its default and an empty signal mask.
 *       options: { cwd?: string, stdin: boolean, pty?: { cols, rows }, statusFd: boolean,
 *       cgroups?: string[] }. With `cgroups` (`cgroup.procs` files, pipes only) the child joins each of
 *       them before it execs, so the command's first instruction already runs in its cgroups: the
 *       same vfork-style clone, with the steps of posix_spawn done by our own child code (see
 *       run_joining_spawn); a join that fails is the error, with syscall "cgroup".
 *       returns { pid, stdin?, stdout, stderr?, status?, master?, slave?, ptyPath? } (parent-side
 *       fds, close-on-exec; the PTY's slave stays open in the parent, see src/process/spawn/pty-child.ts).
 *   spawnAsync(file, argv, envp, options) does the same on a thread of libuv's pool and resolves
 *       with the same object: the loop goes on while the child is created. `spawnJoinsCgroups` (true)
 *       says both take options.cgroups.
 *   reap(pid) collects a child that has exited without blocking: undefined while it runs, else
 *       { code, signal } (one of them null).
 *   exitedChild() names a child of this process that has exited and is not collected yet, without
 *       collecting it (waitid with WNOWAIT); 0 when none has.
 *   resize(fd, cols, rows) sets a terminal's size.
 *   trimMemory() gives the memory freed by the allocator back to the system (malloc_trim).
 *   lowMemory() tells V8 the process is low on memory (Node's exported node::LowMemoryNotification,
 *       found with dlsym: a plain void function of Node's embedder API, so no C++ headers are needed):
 *       full collections that also shrink the young generation. Returns false where Node does not
 *       export it.
 *   hideFromSameUser() makes this process not dumpable (PR_SET_DUMPABLE 0): processes of the same
 *       uid can then no longer read its /proc/<pid>/environ or memory, or ptrace it; exec gives the
 *       commands it starts their own, dumpable, state back.
 *   keepInheritedFdsFromCommands() marks every fd above 2 close-on-exec (close_range with
 *       CLOSE_RANGE_CLOEXEC, else fcntl on each open fd): an fd this process inherited stays open in it
 *       but reaches no program it starts. Node opens its own fds close-on-exec already.
 *   execProgram(file, argv) replaces this process with `file argv` (execv: same pid and environment,
 *       stdin/stdout/stderr kept, an empty signal mask); returns only by throwing the error.
 *   becomeSubreaper() makes this process a child subreaper (PR_SET_CHILD_SUBREAPER): a process
 *       orphaned below it is re-parented to it, not to init, so that it can reap what its commands
 *       leave (see src/process/native-exits.ts). Returns whether it already was one (or is PID 1).
 *   dieWithParent(signal) asks the kernel to send this process `signal` when its parent exits
 *       (PR_SET_PDEATHSIG) and returns the parent's pid as it is now, to catch a parent gone before.
 *   configureFilesystem(type, flags) creates a superblock of filesystem `type` with the given flag
 *       options and mounts nothing (fsopen, fsconfig FSCONFIG_SET_FLAG each, FSCONFIG_CMD_CREATE): for
 *       cgroup2, whose one hierarchy takes the options of each new superblock request, that sets its
 *       options kernel-wide. See src/process/cgroups/cgroup-moves.ts.
 *   fileCall, userGroups, watchStart, watchStop: the file calls of src/files, in native/files.c.
 *
 * Built at install by scripts/build-native.mjs against the headers of the node-api-headers package;
 * the daemon runs without it (see src/process/native/native.ts).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <pthread.h>
#include <node_api.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sched.h>
#include <sys/syscall.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "files.h"

#define CHECK(call)                                                                 \
  do {                                                                              \
    if ((call) != napi_ok) {                                                        \
      napi_throw_error(env, NULL, "sandboxd addon: " #call " failed");              \
      return NULL;                                                                  \
    }                                                                               \
  } while (0)

/* Throws an Error carrying `code` (the errno name) and `syscall`, as Node's own errors do. */
static napi_value throw_errno(napi_env env, int error, const char *syscall) {
  napi_value message, code, value, name;
  napi_create_string_utf8(env, strerror(error), NAPI_AUTO_LENGTH, &message);
  napi_create_error(env, NULL, message, &value);
#if defined(__GLIBC__) && __GLIBC_PREREQ(2, 32)
  const char *errno_name = strerrorname_np(error);
#else
  const char *errno_name = error == ENOENT ? "ENOENT" : error == EACCES ? "EACCES" : error == ENOEXEC ? "ENOEXEC" : NULL;
#endif
  napi_create_string_utf8(env, errno_name != NULL ? errno_name : "EUNKNOWN", NAPI_AUTO_LENGTH, &code);
  napi_set_named_property(env, value, "code", code);
  napi_create_string_utf8(env, syscall, NAPI_AUTO_LENGTH, &name);
  napi_set_named_property(env, value, "syscall", name);
  napi_throw(env, value);
  return NULL;
}

napi_value sandboxd_throw_errno(napi_env env, int error, const char *syscall) {
  return throw_errno(env, error, syscall);
}

/* Copies a JS string into a new C string (free it). */
static char *string_from(napi_env env, napi_value value) {
  size_t length = 0;
  if (napi_get_value_string_utf8(env, value, NULL, 0, &length) != napi_ok) return NULL;
  char *text = malloc(length + 1);
  if (text == NULL) return NULL;
  napi_get_value_string_utf8(env, value, text, length + 1, &length);
  return text;
}

/* Copies a JS array of strings into a NULL-terminated C array (free with free_strings); NULL when
 * any element is not a string or memory runs out: never a shortened array. */
static char **strings_from(napi_env env, napi_value array) {
  uint32_t count = 0;
  if (napi_get_array_length(env, array, &count) != napi_ok) return NULL;
  char **strings = calloc(count + 1, sizeof(char *));
  if (strings == NULL) return NULL;
  for (uint32_t i = 0; i < count; i++) {
    napi_value item;
    if (napi_get_element(env, array, i, &item) != napi_ok || (strings[i] = string_from(env, item)) == NULL) {
      for (uint32_t j = 0; j < i; j++) free(strings[j]);
      free(strings);
      return NULL;
    }
  }
  return strings;
}

static void free_strings(char **strings) {
  if (strings == NULL) return;
  for (char **item = strings; *item != NULL; item++) free(*item);
  free(strings);
}

static int has_property(napi_env env, napi_value object, const char *name, napi_value *value) {
  bool has = false;
  napi_valuetype type = napi_undefined;
  if (napi_has_named_property(env, object, name, &has) != napi_ok || !has) return 0;
  napi_get_named_property(env, object, name, value);
  napi_typeof(env, *value, &type);
  return type != napi_undefined && type != napi_null;
}

static int flag(napi_env env, napi_value object, const char *name) {
  napi_value value;
  bool result = false;
  if (has_property(env, object, name, &value)) napi_get_value_bool(env, value, &result);
  return result;
}

static void set_int(napi_env env, napi_value object, const char *name, int number) {
  napi_value value;
  napi_create_int32(env, number, &value);
  napi_set_named_property(env, object, name, value);
}

static void close_all(int *fds, int count) {
  for (int i = 0; i < count; i++) {
    if (fds[i] >= 0) close(fds[i]);
  }
}

/* A spawn to do: everything copied out of JS, so it can run on any thread. */
struct spawn_request {
  char *file, **argv, **envp, *cwd;
  /* cgroup.procs files the child joins before its exec (NULL for none; pipes only). */
  char **cgroups;
  /* `/bin/sh file args...`: what runs a file the kernel cannot exec (ENOEXEC: a script without #!), as
   * execvp and the shell run it. Built before the spawn (the child may not allocate); NULL if memory ran out. */
  char **shell_argv;
  int want_stdin, want_status, use_pty;
  struct winsize size;
  /* Results: parent-side fds (stdin, stdout, stderr, status), the PTY, the pid, or an error. */
  int parent[4], master, slave;
  char pty_path[128];
  pid_t pid;
  int error;
  const char *failed;
  /* For spawnAsync. */
  napi_async_work work;
  napi_deferred deferred;
};

static void free_request(struct spawn_request *request) {
  free(request->file);
  free(request->cwd);
  free_strings(request->argv);
  free_strings(request->envp);
  free_strings(request->cgroups);
  free(request->shell_argv); /* its strings belong to file and argv */
  free(request);
}

/* Reads spawn's arguments; NULL (with an exception pending) when they are wrong. */
static struct spawn_request *read_request(napi_env env, napi_callback_info info) {
  size_t argc = 4;
  napi_value args[4];
  if (napi_get_cb_info(env, info, &argc, args, NULL, NULL) != napi_ok || argc < 4) {
    napi_throw_type_error(env, NULL, "usage: spawn(file, argv, envp, options)");
    return NULL;
  }
  struct spawn_request *request = calloc(1, sizeof *request);
  if (request == NULL) {
    napi_throw_error(env, NULL, "out of memory");
    return NULL;
  }
  request->file = string_from(env, args[0]);
  request->argv = strings_from(env, args[1]);
  request->envp = strings_from(env, args[2]);
  napi_value options = args[3], value;
  request->cwd = has_property(env, options, "cwd", &value) ? string_from(env, value) : NULL;
  request->want_stdin = flag(env, options, "stdin");
  request->want_status = flag(env, options, "statusFd");
  request->use_pty = has_property(env, options, "pty", &value);
  napi_value cgroups;
  if (has_property(env, options, "cgroups", &cgroups)) {
    request->cgroups = strings_from(env, cgroups);
    if (request->cgroups == NULL) {
      free_request(request);
      napi_throw_type_error(env, NULL, "options.cgroups must be an array of strings");
      return NULL;
    }
    if (request->use_pty) {
      free_request(request);
      napi_throw_type_error(env, NULL, "options.cgroups is for commands on pipes only");
      return NULL;
    }
  }
  request->size = (struct winsize){24, 80, 0, 0};
  if (request->use_pty) {
    napi_value dimension;
    int32_t number;
    if (has_property(env, value, "cols", &dimension) && napi_get_value_int32(env, dimension, &number) == napi_ok) request->size.ws_col = (unsigned short)number;
    if (has_property(env, value, "rows", &dimension) && napi_get_value_int32(env, dimension, &number) == napi_ok) request->size.ws_row = (unsigned short)number;
  }
  for (int i = 0; i < 4; i++) request->parent[i] = -1;
  request->master = request->slave = -1;
  if (request->file != NULL && request->argv != NULL) {
    size_t count = 0;
    while (request->argv[count] != NULL) count++;
    request->shell_argv = calloc(count + 2, sizeof(char *));
    if (request->shell_argv != NULL) {
      request->shell_argv[0] = (char *)"/bin/sh";
      /* As execvp passes it: the name as given when it has a slash (the shell's $0 is then `./script`,
       * resolved in the cwd the child enters first), else the path found in PATH. */
      request->shell_argv[1] = request->argv[0] != NULL && strchr(request->argv[0], '/') != NULL ? request->argv[0] : request->file;
      for (size_t i = 1; i < count; i++) request->shell_argv[i + 1] = request->argv[i];
    }
  }
  request->pid = -1;
  if (request->file == NULL || request->argv == NULL || request->envp == NULL) {
    free_request(request);
    napi_throw_error(env, NULL, "out of memory");
    return NULL;
  }
  return request;
}

/* What the child of a joining spawn works from: prepared before the clone, and its failure reported
 * back through this memory, which it shares with the parent until it execs or exits. */
struct joining_child {
  const struct spawn_request *request;
  const int *child;
  int error;
  const char *failed;
};

/* Records the failed step and ends the child; the parent reads both once the clone returns. */
static int joining_child_fails(struct joining_child *job, const char *step) {
  job->error = errno != 0 ? errno : EIO;
  job->failed = step;
  _exit(127);
}

/* Moves fd `from` to `to` without close-on-exec (dup2 of an fd onto itself would keep the flag). */
static int move_fd(int from, int to) {
  if (from != to) return dup2(from, to) < 0 ? -1 : 0;
  int flags = fcntl(from, F_GETFD);
  return flags < 0 ? -1 : fcntl(from, F_SETFD, flags & ~FD_CLOEXEC);
}

/*
 * The child of a joining spawn, on its own stack in the daemon's memory until execve: it does what
 * posix_spawn's child does for run_spawn (every signal at its default, a new session, an empty mask,
 * the stdio, the cwd) and joins the cgroups in between, with system calls only (nothing that
 * allocates or takes a lock).
 */
static int joining_child_main(void *data) {
  struct joining_child *job = data;
  const struct spawn_request *request = job->request;
  const int *child = job->child;
  /* No handler of Node's may run in a process that shares its memory: every signal at its default
   * first (signals stay blocked, as the parent blocked them, until the mask is emptied below). */
  struct sigaction fallback;
  memset(&fallback, 0, sizeof fallback);
  fallback.sa_handler = SIG_DFL;
  for (int sig = 1; sig < NSIG; sig++) {
    if (sig != SIGKILL && sig != SIGSTOP) sigaction(sig, &fallback, NULL);
  }
  errno = 0;
  if (setsid() < 0) return joining_child_fails(job, "setsid");
  for (char **procs = request->cgroups; *procs != NULL; procs++) {
    /* "0" is the writer itself, in v1 and v2 alike. */
    int fd = open(*procs, O_WRONLY | O_CLOEXEC);
    if (fd < 0 || write(fd, "0", 1) != 1) return joining_child_fails(job, "cgroup");
    close(fd);
  }
  if (child[0] >= 0) {
    if (move_fd(child[0], 0) != 0) return joining_child_fails(job, "dup2");
  } else {
    int null = open("/dev/null", O_RDONLY);
    if (null < 0 || move_fd(null, 0) != 0) return joining_child_fails(job, "open");
    if (null != 0) close(null);
  }
  if (move_fd(child[1], 1) != 0 || move_fd(child[2], 2) != 0) return joining_child_fails(job, "dup2");
  if (child[3] >= 0 && move_fd(child[3], 3) != 0) return joining_child_fails(job, "dup2");
  if (request->cwd != NULL && request->cwd[0] != '\0' && chdir(request->cwd) != 0) return joining_child_fails(job, "chdir");
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, NULL);
  execve(request->file, request->argv, request->envp);
  if (errno == ENOEXEC && request->shell_argv != NULL) execve("/bin/sh", request->shell_argv, request->envp);
  return joining_child_fails(job, "exec");
}

/* The stack of a joining spawn's child: it runs a few system calls and execve. */
#define JOINING_STACK_BYTES (64 * 1024)

/*
 * Starts the child of `request` with a vfork-style clone (CLONE_VM | CLONE_VFORK: this thread waits
 * until the child has exec'd or exited, the daemon's memory is never copied) and joining_child_main
 * as its code. Returns 0 with request->pid set, or an errno with *failed naming the step; a child
 * that failed has been reaped.
 */
static int run_joining_spawn(struct spawn_request *request, const int *child, const char **failed) {
  void *stack = mmap(NULL, JOINING_STACK_BYTES, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
  if (stack == MAP_FAILED) {
    *failed = "mmap";
    return errno;
  }
  struct joining_child job = {request, child, 0, NULL};
  /* Blocked in this thread while the child shares it: a signal delivered to the child before it reset
   * its handlers would run one of Node's in the daemon's memory. */
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, &old);
  pid_t pid = clone(joining_child_main, (char *)stack + JOINING_STACK_BYTES, CLONE_VM | CLONE_VFORK | SIGCHLD, &job);
  int error = pid < 0 ? errno : 0;
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  munmap(stack, JOINING_STACK_BYTES);
  if (pid < 0) {
    *failed = "clone";
    return error;
  }
  if (job.failed != NULL) {
    /* It exited at the step that failed; ECHILD if the daemon's reaper of orphans took it first. */
    while (waitpid(pid, NULL, 0) < 0 && errno == EINTR) {
    }
    *failed = job.failed;
    return job.error;
  }
  request->pid = pid;
  return 0;
}

/* Creates the stdio and spawns: plain C, safe on a worker thread. Sets error and failed on failure. */
static void run_spawn(struct spawn_request *request) {
  int child[4] = {-1, -1, -1, -1};
  int error = 0;
  const char *failed = "socketpair";
  if (request->use_pty) {
    /* Close-on-exec from the start: a spawn on another pool thread must not inherit this terminal. */
    failed = "posix_openpt";
    request->master = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC | O_NONBLOCK);
    if (request->master < 0) error = errno;
    if (!error && (grantpt(request->master) != 0 || unlockpt(request->master) != 0 ||
                   ptsname_r(request->master, request->pty_path, sizeof request->pty_path) != 0)) {
      error = errno != 0 ? errno : EIO;
      failed = "unlockpt";
    }
    if (!error) {
      request->slave = open(request->pty_path, O_RDWR | O_NOCTTY | O_CLOEXEC);
      if (request->slave < 0) {
        error = errno;
        failed = "open";
      } else if (ioctl(request->slave, TIOCSWINSZ, &request->size) != 0) {
        error = errno;
        failed = "ioctl";
      }
    }
  } else {
    for (int stream = 0; stream < 3 && !error; stream++) {
      if (stream == 0 && !request->want_stdin) continue;
      /* Socket pairs, as libuv uses for child_process: a half-close (end of input) is a shutdown. */
      int ends[2];
      if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, ends) != 0) {
        error = errno;
        break;
      }
      /* stdin: the child reads; stdout, stderr: the child writes. */
      request->parent[stream] = stream == 0 ? ends[1] : ends[0];
      child[stream] = stream == 0 ? ends[0] : ends[1];
    }
  }
  if (!error && request->want_status) {
    int ends[2];
    if (pipe2(ends, O_CLOEXEC) != 0) error = errno;
    else {
      request->parent[3] = ends[0];
      child[3] = ends[1];
    }
  }
  if (!error && request->cgroups != NULL) {
    error = run_joining_spawn(request, child, &failed);
  } else if (!error) {
    posix_spawn_file_actions_t actions;
    posix_spawnattr_t attributes;
    posix_spawn_file_actions_init(&actions);
    posix_spawnattr_init(&attributes);
    sigset_t all, none;
    sigfillset(&all);
    sigemptyset(&none);
    /* A new session and process group; Node's handlers and ignored signals (SIGPIPE) do not carry over. */
    posix_spawnattr_setflags(&attributes, POSIX_SPAWN_SETSID | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
    posix_spawnattr_setsigmask(&attributes, &none);
    posix_spawnattr_setsigdefault(&attributes, &all);
    if (request->use_pty) {
      for (int fd = 0; fd < 3; fd++) posix_spawn_file_actions_adddup2(&actions, request->slave, fd);
      /* Opened by path after setsid, the terminal becomes the session's controlling terminal. */
      posix_spawn_file_actions_addopen(&actions, 3, request->pty_path, O_RDWR, 0);
      posix_spawn_file_actions_addclose(&actions, 3);
    } else {
      if (child[0] >= 0) posix_spawn_file_actions_adddup2(&actions, child[0], 0);
      else posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
      posix_spawn_file_actions_adddup2(&actions, child[1], 1);
      posix_spawn_file_actions_adddup2(&actions, child[2], 2);
    }
    if (child[3] >= 0) posix_spawn_file_actions_adddup2(&actions, child[3], 3);
    if (request->cwd != NULL && request->cwd[0] != '\0') posix_spawn_file_actions_addchdir_np(&actions, request->cwd);
    failed = "posix_spawn";
    error = posix_spawn(&request->pid, request->file, &actions, &attributes, request->argv, request->envp);
    if (error == ENOEXEC && request->shell_argv != NULL) {
      error = posix_spawn(&request->pid, "/bin/sh", &actions, &attributes, request->shell_argv, request->envp);
    }
    posix_spawn_file_actions_destroy(&actions);
    posix_spawnattr_destroy(&attributes);
  }
  close_all(child, 4);
  if (!error && request->use_pty) {
    /* The parent writes its end-of-output marker into the slave from the loop thread, so its own
     * slave fd is non-blocking: a description of its own, since the flag would be shared with the
     * child's stdio through dup2. */
    int held = open(request->pty_path, O_RDWR | O_NOCTTY | O_NONBLOCK | O_CLOEXEC);
    close(request->slave);
    request->slave = held;
  }
  if (error) {
    close_all(request->parent, 4);
    if (request->master >= 0) close(request->master);
    if (request->slave >= 0) close(request->slave);
    request->master = request->slave = -1;
  }
  request->error = error;
  request->failed = failed;
}

/* The result object of a spawn that succeeded. */
static napi_value spawn_result(napi_env env, struct spawn_request *request) {
  napi_value result;
  if (napi_create_object(env, &result) != napi_ok) return NULL;
  set_int(env, result, "pid", request->pid);
  if (request->use_pty) {
    set_int(env, result, "master", request->master);
    if (request->slave >= 0) set_int(env, result, "slave", request->slave);
    napi_value path;
    napi_create_string_utf8(env, request->pty_path, NAPI_AUTO_LENGTH, &path);
    napi_set_named_property(env, result, "ptyPath", path);
  }
  static const char *names[4] = {"stdin", "stdout", "stderr", "status"};
  for (int i = 0; i < 4; i++) {
    if (request->parent[i] >= 0) set_int(env, result, names[i], request->parent[i]);
  }
  return result;
}

static napi_value spawn_command(napi_env env, napi_callback_info info) {
  struct spawn_request *request = read_request(env, info);
  if (request == NULL) return NULL;
  run_spawn(request);
  napi_value result = request->error ? throw_errno(env, request->error, request->failed) : spawn_result(env, request);
  free_request(request);
  return result;
}

static void spawn_execute(napi_env env, void *data) {
  (void)env;
  run_spawn(data);
}

static void spawn_complete(napi_env env, napi_status status, void *data) {
  struct spawn_request *request = data;
  (void)status;
  if (request->error) {
    throw_errno(env, request->error, request->failed);
    napi_value exception;
    napi_get_and_clear_last_exception(env, &exception);
    napi_reject_deferred(env, request->deferred, exception);
  } else {
    napi_resolve_deferred(env, request->deferred, spawn_result(env, request));
  }
  napi_delete_async_work(env, request->work);
  free_request(request);
}

/* spawn on a thread of libuv's pool: the loop is not held while the child is created. */
static napi_value spawn_async(napi_env env, napi_callback_info info) {
  struct spawn_request *request = read_request(env, info);
  if (request == NULL) return NULL;
  napi_value promise, name;
  napi_create_promise(env, &request->deferred, &promise);
  napi_create_string_utf8(env, "sandboxd:spawn", NAPI_AUTO_LENGTH, &name);
  if (napi_create_async_work(env, NULL, name, spawn_execute, spawn_complete, request, &request->work) != napi_ok) {
    request->work = NULL;
  } else if (napi_queue_async_work(env, request->work) == napi_ok) {
    return promise;
  }
  /* Not queued: the promise is rejected here, and nothing is left behind. */
  napi_value message, error;
  napi_create_string_utf8(env, "sandboxd addon: could not queue the spawn", NAPI_AUTO_LENGTH, &message);
  napi_create_error(env, NULL, message, &error);
  napi_reject_deferred(env, request->deferred, error);
  if (request->work != NULL) napi_delete_async_work(env, request->work);
  free_request(request);
  return promise;
}

static napi_value reap(napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value args[1];
  int32_t pid;
  CHECK(napi_get_cb_info(env, info, &argc, args, NULL, NULL));
  if (argc < 1 || napi_get_value_int32(env, args[0], &pid) != napi_ok || pid <= 0) {
    napi_throw_type_error(env, NULL, "usage: reap(pid)");
    return NULL;
  }
  int status = 0;
  pid_t reaped;
  do {
    reaped = waitpid(pid, &status, WNOHANG);
  } while (reaped < 0 && errno == EINTR);
  napi_value result;
  if (reaped == 0) {
    napi_get_undefined(env, &result);
    return result;
  }
  if (reaped < 0) return throw_errno(env, errno, "waitpid");
  napi_value null_value;
  napi_get_null(env, &null_value);
  CHECK(napi_create_object(env, &result));
  if (WIFSIGNALED(status)) {
    napi_set_named_property(env, result, "code", null_value);
    set_int(env, result, "signal", WTERMSIG(status));
  } else {
    set_int(env, result, "code", WEXITSTATUS(status));
    napi_set_named_property(env, result, "signal", null_value);
  }
  return result;
}

static napi_value exited_child(napi_env env, napi_callback_info info) {
  (void)info;
  siginfo_t child;
  memset(&child, 0, sizeof child);
  int pid = 0;
  if (waitid(P_ALL, 0, &child, WEXITED | WNOHANG | WNOWAIT) == 0) {
    pid = child.si_pid; /* 0 when no child has exited */
  } else if (errno != ECHILD) {
    return throw_errno(env, errno, "waitid");
  }
  napi_value result;
  CHECK(napi_create_int32(env, pid, &result));
  return result;
}

static napi_value resize(napi_env env, napi_callback_info info) {
  size_t argc = 3;
  napi_value args[3];
  int32_t fd, cols, rows;
  CHECK(napi_get_cb_info(env, info, &argc, args, NULL, NULL));
  if (argc < 3 || napi_get_value_int32(env, args[0], &fd) != napi_ok || napi_get_value_int32(env, args[1], &cols) != napi_ok ||
      napi_get_value_int32(env, args[2], &rows) != napi_ok) {
    napi_throw_type_error(env, NULL, "usage: resize(fd, cols, rows)");
    return NULL;
  }
  struct winsize size = {(unsigned short)rows, (unsigned short)cols, 0, 0};
  if (ioctl(fd, TIOCSWINSZ, &size) != 0) return throw_errno(env, errno, "ioctl");
  return NULL;
}

static napi_value trim_memory(napi_env env, napi_callback_info info) {
  (void)info;
  napi_value result;
#ifdef __GLIBC__
  int released = malloc_trim(0);
#else
  int released = 0;
#endif
  napi_get_boolean(env, released != 0, &result);
  return result;
}

static napi_value low_memory(napi_env env, napi_callback_info info) {
  (void)info;
  static void (*notify)(void) = NULL;
  static int looked_up = 0;
  if (!looked_up) {
    looked_up = 1;
    /* node.h: NODE_EXTERN void LowMemoryNotification(); (namespace node) */
    notify = (void (*)(void))dlsym(RTLD_DEFAULT, "_ZN4node21LowMemoryNotificationEv");
  }
  if (notify != NULL) notify();
  napi_value result;
  napi_get_boolean(env, notify != NULL, &result);
  return result;
}

static napi_value die_with_parent(napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value args[1], result;
  int32_t signal_number;
  CHECK(napi_get_cb_info(env, info, &argc, args, NULL, NULL));
  if (argc < 1 || napi_get_value_int32(env, args[0], &signal_number) != napi_ok) {
    napi_throw_type_error(env, NULL, "usage: dieWithParent(signal)");
    return NULL;
  }
  if (prctl(PR_SET_PDEATHSIG, (unsigned long)signal_number) != 0) return throw_errno(env, errno, "prctl");
  CHECK(napi_create_int32(env, (int32_t)getppid(), &result));
  return result;
}

static napi_value become_subreaper(napi_env env, napi_callback_info info) {
  (void)info;
  int before = 0;
  if (prctl(PR_GET_CHILD_SUBREAPER, (unsigned long)&before, 0UL, 0UL, 0UL) != 0) before = 0;
  if (prctl(PR_SET_CHILD_SUBREAPER, 1UL, 0UL, 0UL, 0UL) != 0) return throw_errno(env, errno, "prctl");
  napi_value result;
  napi_get_boolean(env, before != 0 || getpid() == 1, &result);
  return result;
}

static napi_value hide_from_same_user(napi_env env, napi_callback_info info) {
  (void)info;
  if (prctl(PR_SET_DUMPABLE, 0UL, 0UL, 0UL, 0UL) != 0) return throw_errno(env, errno, "prctl");
  return NULL;
}

#ifndef CLOSE_RANGE_CLOEXEC
#define CLOSE_RANGE_CLOEXEC (1U << 2)
#endif

static napi_value keep_inherited_fds_from_commands(napi_env env, napi_callback_info info) {
  (void)info;
#ifdef SYS_close_range
  if (syscall(SYS_close_range, 3U, ~0U, CLOSE_RANGE_CLOEXEC) == 0) return NULL;
#endif
  /* An older kernel: each fd that is open. */
  long most = sysconf(_SC_OPEN_MAX);
  if (most < 0 || most > 65536) most = 65536;
  for (int fd = 3; fd < most; fd++) {
    int flags = fcntl(fd, F_GETFD);
    if (flags >= 0 && !(flags & FD_CLOEXEC) && fcntl(fd, F_SETFD, flags | FD_CLOEXEC) != 0) return throw_errno(env, errno, "fcntl");
  }
  return NULL;
}

/* Reads the (string, string[]) arguments of a call; both NULL, or either, when they are missing or wrong. */
static void read_string_and_strings(napi_env env, napi_callback_info info, char **text, char ***strings) {
  size_t argc = 2;
  napi_value args[2];
  *text = NULL;
  *strings = NULL;
  if (napi_get_cb_info(env, info, &argc, args, NULL, NULL) != napi_ok || argc < 2) return;
  *text = string_from(env, args[0]);
  *strings = strings_from(env, args[1]);
}

static napi_value exec_program(napi_env env, napi_callback_info info) {
  char *file, **argv;
  read_string_and_strings(env, info, &file, &argv);
  if (file == NULL || argv == NULL || argv[0] == NULL) {
    free(file);
    free_strings(argv);
    napi_throw_type_error(env, NULL, "usage: execProgram(file: string, argv: string[]) with argv not empty");
    return NULL;
  }
  /* With --cpu-prof, V8's sampler thread sends SIGPROF to this thread: one pending at the exec would
   * kill the new image (default action) before its Node sets the signal up. Ignoring it discards a
   * pending one. All of this is put back if the exec fails. */
  struct sigaction ignore = {0}, profiling;
  ignore.sa_handler = SIG_IGN;
  sigemptyset(&ignore.sa_mask);
  sigaction(SIGPROF, &ignore, &profiling);
  sigset_t none, mask;
  sigemptyset(&none);
  pthread_sigmask(SIG_SETMASK, &none, &mask);
  /* Node marks the fds it inherited close-on-exec at start (libuv's uv_disable_stdio_inheritance):
   * stdin, stdout and stderr are kept; anything else inherited is left to close. */
  int fd_flags[3];
  for (int fd = 0; fd <= 2; fd++) {
    fd_flags[fd] = fcntl(fd, F_GETFD);
    if (fd_flags[fd] >= 0) fcntl(fd, F_SETFD, fd_flags[fd] & ~FD_CLOEXEC);
  }
  execv(file, argv);
  int error = errno;
  for (int fd = 0; fd <= 2; fd++) {
    if (fd_flags[fd] >= 0) fcntl(fd, F_SETFD, fd_flags[fd]);
  }
  pthread_sigmask(SIG_SETMASK, &mask, NULL);
  sigaction(SIGPROF, &profiling, NULL);
  free(file);
  free_strings(argv);
  return throw_errno(env, error, "execv");
}

/* fsconfig(2) commands, as <linux/mount.h> numbers them (older C libraries lack the names). */
#define FSCONFIG_FLAG 0
#define FSCONFIG_CREATE 6

static napi_value configure_filesystem(napi_env env, napi_callback_info info) {
  char *type, **flags;
  read_string_and_strings(env, info, &type, &flags);
  if (type == NULL || flags == NULL) {
    free(type);
    free_strings(flags);
    napi_throw_type_error(env, NULL, "usage: configureFilesystem(type: string, flags: string[])");
    return NULL;
  }
  int error = 0;
  const char *failed = "fsopen";
#ifdef SYS_fsopen
  /* FSOPEN_CLOEXEC is 1. */
  int fd = (int)syscall(SYS_fsopen, type, 1U);
  if (fd < 0) error = errno;
  for (char **flag = flags; error == 0 && *flag != NULL; flag++) {
    failed = "fsconfig";
    if (syscall(SYS_fsconfig, fd, FSCONFIG_FLAG, *flag, NULL, 0) != 0) error = errno;
  }
  if (error == 0 && syscall(SYS_fsconfig, fd, FSCONFIG_CREATE, NULL, NULL, 0) != 0) error = errno;
  if (fd >= 0) close(fd);
#else
  error = ENOSYS;
#endif
  free(type);
  free_strings(flags);
  return error == 0 ? NULL : throw_errno(env, error, failed);
}

static int export_function(napi_env env, napi_value exports, const char *name, napi_callback callback) {
  napi_value function;
  if (napi_create_function(env, name, NAPI_AUTO_LENGTH, callback, NULL, &function) != napi_ok) return 0;
  return napi_set_named_property(env, exports, name, function) == napi_ok;
}

NAPI_MODULE_INIT() {
  if (!export_function(env, exports, "spawn", spawn_command) || !export_function(env, exports, "spawnAsync", spawn_async) ||
      !export_function(env, exports, "reap", reap) || !export_function(env, exports, "exitedChild", exited_child) ||
      !export_function(env, exports, "resize", resize) || !export_function(env, exports, "trimMemory", trim_memory) ||
      !export_function(env, exports, "lowMemory", low_memory) ||
      !export_function(env, exports, "dieWithParent", die_with_parent) ||
      !export_function(env, exports, "becomeSubreaper", become_subreaper) ||
      !export_function(env, exports, "hideFromSameUser", hide_from_same_user) ||
      !export_function(env, exports, "keepInheritedFdsFromCommands", keep_inherited_fds_from_commands) ||
      !export_function(env, exports, "execProgram", exec_program) ||
      !export_function(env, exports, "configureFilesystem", configure_filesystem) ||
      !sandboxd_register_file_functions(env, exports)) {
    return NULL;
  }
  /* What an addon built from older sources lacks: it would ignore options.cgroups, not refuse it. */
  napi_value joins;
  if (napi_get_boolean(env, true, &joins) != napi_ok || napi_set_named_property(env, exports, "spawnJoinsCgroups", joins) != napi_ok) {
    return NULL;
  }
  return exports;
}
