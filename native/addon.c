/*
 * sandboxd's Node-API addon: what the daemon needs from the C library that Node does not offer.
 *
 *   spawn(file, argv, envp, options) starts a command with posix_spawn, which glibc runs as a
 *       vfork-style clone: its cost does not grow with the daemon's memory, unlike the full fork()
 *       of child_process.spawn and node-pty. The child leads a new session (its pid is its process
 *       group), gets socket pairs or a new pseudo-terminal as stdin/stdout/stderr, optionally a status
 *       pipe on fd 3 (for sandboxd-exec), every signal at its default and an empty signal mask.
 *       options: { cwd?: string, stdin: boolean, pty?: { cols, rows }, statusFd: boolean }
 *       returns { pid, stdin?, stdout, stderr?, status?, master?, slave?, ptyPath? } (parent-side
 *       fds, close-on-exec; the PTY's slave stays open in the parent, see src/process/pty-child.ts).
 *   reap(pid) collects a child that has exited without blocking: undefined while it runs, else
 *       { code, signal } (one of them null).
 *   resize(fd, cols, rows) sets a terminal's size.
 *   trimMemory() gives the memory freed by the allocator back to the system (malloc_trim).
 *
 * Built at install by scripts/build-native.mjs against the headers of the node-api-headers package;
 * the daemon runs without it (see src/process/native.ts).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <node_api.h>
#include <pty.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

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
  const char *errno_name = strerrorname_np(error);
  napi_create_string_utf8(env, errno_name != NULL ? errno_name : "EUNKNOWN", NAPI_AUTO_LENGTH, &code);
  napi_set_named_property(env, value, "code", code);
  napi_create_string_utf8(env, syscall, NAPI_AUTO_LENGTH, &name);
  napi_set_named_property(env, value, "syscall", name);
  napi_throw(env, value);
  return NULL;
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

/* Copies a JS array of strings into a NULL-terminated C array (free with free_strings). */
static char **strings_from(napi_env env, napi_value array) {
  uint32_t count = 0;
  if (napi_get_array_length(env, array, &count) != napi_ok) return NULL;
  char **strings = calloc(count + 1, sizeof(char *));
  if (strings == NULL) return NULL;
  for (uint32_t i = 0; i < count; i++) {
    napi_value item;
    napi_get_element(env, array, i, &item);
    strings[i] = string_from(env, item);
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

static napi_value spawn_command(napi_env env, napi_callback_info info) {
  size_t argc = 4;
  napi_value args[4];
  CHECK(napi_get_cb_info(env, info, &argc, args, NULL, NULL));
  if (argc < 4) {
    napi_throw_type_error(env, NULL, "usage: spawn(file, argv, envp, options)");
    return NULL;
  }
  char *file = string_from(env, args[0]);
  char **argv = strings_from(env, args[1]);
  char **envp = strings_from(env, args[2]);
  napi_value options = args[3], value;
  char *cwd = has_property(env, options, "cwd", &value) ? string_from(env, value) : NULL;
  int want_stdin = flag(env, options, "stdin");
  int want_status = flag(env, options, "statusFd");
  int use_pty = has_property(env, options, "pty", &value);
  struct winsize size = {24, 80, 0, 0};
  if (use_pty) {
    napi_value dimension;
    int32_t number;
    if (has_property(env, value, "cols", &dimension) && napi_get_value_int32(env, dimension, &number) == napi_ok) size.ws_col = (unsigned short)number;
    if (has_property(env, value, "rows", &dimension) && napi_get_value_int32(env, dimension, &number) == napi_ok) size.ws_row = (unsigned short)number;
  }

  /* Parent ends, child ends: stdin, stdout, stderr, status; the PTY's master and slave. */
  int parent[4] = {-1, -1, -1, -1}, child[4] = {-1, -1, -1, -1}, master = -1, slave = -1;
  char pty_path[128] = "";
  int error = 0;
  const char *failed = "socketpair";
  if (use_pty) {
    failed = "openpty";
    if (openpty(&master, &slave, pty_path, NULL, &size) != 0) error = errno;
    if (!error) {
      fcntl(master, F_SETFD, FD_CLOEXEC);
      fcntl(slave, F_SETFD, FD_CLOEXEC);
      fcntl(master, F_SETFL, fcntl(master, F_GETFL) | O_NONBLOCK);
    }
  } else {
    for (int stream = 0; stream < 3 && !error; stream++) {
      if (stream == 0 && !want_stdin) continue;
      /* Socket pairs, as libuv uses for child_process: a half-close (end of input) is a shutdown. */
      int ends[2];
      if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, ends) != 0) {
        error = errno;
        break;
      }
      /* stdin: the child reads; stdout, stderr: the child writes. */
      parent[stream] = stream == 0 ? ends[1] : ends[0];
      child[stream] = stream == 0 ? ends[0] : ends[1];
    }
  }
  if (!error && want_status) {
    int ends[2];
    if (pipe2(ends, O_CLOEXEC) != 0) error = errno;
    else {
      parent[3] = ends[0];
      child[3] = ends[1];
    }
  }

  pid_t pid = -1;
  if (!error) {
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
    if (use_pty) {
      for (int fd = 0; fd < 3; fd++) posix_spawn_file_actions_adddup2(&actions, slave, fd);
      /* Opened by path after setsid, the terminal becomes the session's controlling terminal. */
      posix_spawn_file_actions_addopen(&actions, 3, pty_path, O_RDWR, 0);
      posix_spawn_file_actions_addclose(&actions, 3);
    } else {
      if (child[0] >= 0) posix_spawn_file_actions_adddup2(&actions, child[0], 0);
      else posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
      posix_spawn_file_actions_adddup2(&actions, child[1], 1);
      posix_spawn_file_actions_adddup2(&actions, child[2], 2);
    }
    if (child[3] >= 0) posix_spawn_file_actions_adddup2(&actions, child[3], 3);
    if (cwd != NULL && cwd[0] != '\0') posix_spawn_file_actions_addchdir_np(&actions, cwd);
    failed = "posix_spawn";
    error = posix_spawnp(&pid, file, &actions, &attributes, argv, envp);
    posix_spawn_file_actions_destroy(&actions);
    posix_spawnattr_destroy(&attributes);
  }
  close_all(child, 4);
  free(file);
  free(cwd);
  free_strings(argv);
  free_strings(envp);
  if (error) {
    close_all(parent, 4);
    if (master >= 0) close(master);
    if (slave >= 0) close(slave);
    return throw_errno(env, error, failed);
  }

  if (use_pty) {
    /* The parent writes its end-of-output marker into the slave from the loop thread, so its own
     * slave fd is non-blocking: a description of its own, since the flag would be shared with the
     * child's stdio through dup2. */
    int held = open(pty_path, O_RDWR | O_NOCTTY | O_NONBLOCK | O_CLOEXEC);
    close(slave);
    slave = held;
  }
  napi_value result;
  CHECK(napi_create_object(env, &result));
  set_int(env, result, "pid", pid);
  if (use_pty) {
    set_int(env, result, "master", master);
    if (slave >= 0) set_int(env, result, "slave", slave);
    napi_value path;
    napi_create_string_utf8(env, pty_path, NAPI_AUTO_LENGTH, &path);
    napi_set_named_property(env, result, "ptyPath", path);
  }
  static const char *names[4] = {"stdin", "stdout", "stderr", "status"};
  for (int i = 0; i < 4; i++) {
    if (parent[i] >= 0) set_int(env, result, names[i], parent[i]);
  }
  return result;
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

static int export_function(napi_env env, napi_value exports, const char *name, napi_callback callback) {
  napi_value function;
  if (napi_create_function(env, name, NAPI_AUTO_LENGTH, callback, NULL, &function) != napi_ok) return 0;
  return napi_set_named_property(env, exports, name, function) == napi_ok;
}

NAPI_MODULE_INIT() {
  if (!export_function(env, exports, "spawn", spawn_command) || !export_function(env, exports, "reap", reap) ||
      !export_function(env, exports, "resize", resize) || !export_function(env, exports, "trimMemory", trim_memory)) {
    return NULL;
  }
  return exports;
}
