/*
 * The file calls of sandboxd's Node-API addon (linked into build/sandboxd.node with addon.c): the
 * system calls src/files needs that Node does not offer (the *at family on directory fds, openat2,
 * renameat2, inotify), each run with the identity of the daemon's `--user`.
 *
 *   fileCall(op, identity, fd, path, flags, mode, fd2, path2) runs one call on a thread of libuv's
 *       pool and resolves with its result (see the FILE_* ops below). `identity` is null (the
 *       daemon's own) or an Int32Array [uid, gid, ...supplementary groups]: the thread then takes
 *       that file-system identity for the call alone (setfsuid, setfsgid and setgroups are
 *       per-thread system calls; glibc's setgroups would change every thread, so it is called raw)
 *       and gives it back before the thread runs anything else. A thread whose identity cannot be
 *       given back aborts the process: it must never run another call as the wrong user. With a
 *       file-system uid other than 0 the kernel drops the file capabilities (CAP_DAC_OVERRIDE,
 *       CAP_FOWNER...) of the thread, so a root daemon is refused exactly what the user is refused,
 *       and what it creates belongs to the user.
 *   userGroups(name, gid) lists the supplementary groups of a user (getgrouplist), gid first.
 *   watchStart(callback) creates an inotify instance and a thread that reads it; the thread hands
 *       each read's bytes (struct inotify_event records) to `callback` as a Buffer, at most 16
 *       reads queued: a caller that falls behind leaves events in the kernel's queue, which then
 *       reports its own overflow (IN_Q_OVERFLOW). Returns { fd, handle }: add watches with
 *       fileCall(FILE_WATCH_ADD, identity, fd, ...). watchStop(handle) ends the thread, which closes
 *       the instance; the fd must not be used after it.
 *
 * Errors reject with an Error carrying `code` (the errno name) and `syscall`, as Node's own do.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <node_api.h>
#include <poll.h>
#include <pthread.h>
#include <pwd.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "files.h"

/* The ops of fileCall; src/files/native-calls.ts has the same numbers. */
enum {
  FILE_OPEN_AT = 1,      /* openat(fd, path, flags, mode) -> fd */
  FILE_OPEN_BENEATH = 2, /* openat2(fd, path, { flags, mode, resolve: fd2 }) -> fd */
  FILE_REOPEN = 3,       /* open("/proc/self/fd/<fd>", flags): an O_PATH fd opened for real -> fd */
  FILE_STAT = 4,         /* fstatat(fd, path, AT_SYMLINK_NOFOLLOW, or AT_EMPTY_PATH for "") -> stat */
  FILE_READLINK = 5,     /* readlinkat(fd, path) -> string */
  FILE_MKDIR = 6,        /* mkdirat(fd, path, mode) */
  FILE_UNLINK = 7,       /* unlinkat(fd, path, flags) */
  FILE_RENAME = 8,       /* renameat2(fd, path, fd2, path2, flags) */
  FILE_CHMOD = 9,        /* fchmodat2(fd, "", mode, AT_EMPTY_PATH), or chmod of /proc/self/fd/<fd> */
  FILE_READDIR = 10,     /* the entries of directory fd -> { names: NUL-separated, types: Uint8Array } */
  FILE_STAT_ENTRIES = 11, /* fstatat of each name of path2 (NUL-separated) in fd -> { stats: Float64Array, links } */
  FILE_FALLOCATE = 12,   /* fallocate(fd, 0, 0, mode as the length) */
  FILE_WATCH_ADD = 13,   /* inotify_add_watch(fd, "/proc/self/fd/<fd2>", flags) -> watch descriptor */
};

#ifndef SYS_openat2
#define SYS_openat2 437
#endif
#ifndef SYS_fchmodat2
#define SYS_fchmodat2 452
#endif

/* struct open_how of <linux/openat2.h>, which older C libraries lack. */
struct open_how_v0 {
  uint64_t flags;
  uint64_t mode;
  uint64_t resolve;
};

/* Numbers per entry in FILE_STAT_ENTRIES' packed answer: mode, size, uid, gid, dev, ino, mtime s, mtime ns. */
#define STAT_FIELDS 8

struct file_stat {
  int ok;
  struct stat st;
  char *link; /* a symlink's target, with FILE_STAT_ENTRIES */
};

struct file_job {
  napi_async_work work;
  napi_deferred deferred;
  int op;
  int identity_count; /* 0: the daemon's own; else uid, gid, groups... */
  int32_t *identity;
  int fd, fd2, flags;
  double mode;
  char *path, *path2;
  size_t path2_length;
  /* Results. */
  int error;
  const char *failed;
  int result;
  char *text;
  struct file_stat stat;
  char **names;
  unsigned char *types;
  size_t count;
  struct file_stat *stats;
};

struct saved_identity {
  int fsuid, fsgid, ngroups;
  gid_t groups[NGROUPS_MAX];
};

/* Takes the job's identity for this thread; 0 or the errno of what failed. */
static int become(const struct file_job *job, struct saved_identity *saved) {
  saved->fsuid = (int)syscall(SYS_setfsuid, -1);
  saved->fsgid = (int)syscall(SYS_setfsgid, -1);
  saved->ngroups = (int)syscall(SYS_getgroups, NGROUPS_MAX, saved->groups);
  if (saved->ngroups < 0) return errno;
  uid_t uid = (uid_t)job->identity[0];
  gid_t gid = (gid_t)job->identity[1];
  int ngroups = job->identity_count - 2;
  gid_t groups[NGROUPS_MAX];
  if (ngroups > NGROUPS_MAX) ngroups = NGROUPS_MAX;
  for (int i = 0; i < ngroups; i++) groups[i] = (gid_t)job->identity[2 + i];
  if (syscall(SYS_setgroups, ngroups, groups) != 0) return errno;
  syscall(SYS_setfsgid, gid);
  if ((gid_t)syscall(SYS_setfsgid, -1) != gid) return EPERM;
  syscall(SYS_setfsuid, uid);
  if ((uid_t)syscall(SYS_setfsuid, -1) != uid) return EPERM;
  return 0;
}

/* Gives the thread its identity back, or ends the process: see the top of this file. */
static void restore(const struct saved_identity *saved) {
  syscall(SYS_setfsuid, saved->fsuid);
  syscall(SYS_setfsgid, saved->fsgid);
  if (saved->ngroups >= 0 && syscall(SYS_setgroups, saved->ngroups, saved->groups) != 0) abort();
  if ((int)syscall(SYS_setfsuid, -1) != saved->fsuid || (int)syscall(SYS_setfsgid, -1) != saved->fsgid) abort();
}

static int fail(struct file_job *job, const char *syscall_name) {
  job->error = errno;
  job->failed = syscall_name;
  return -1;
}

static void stat_entries(struct file_job *job) {
  size_t count = 0;
  for (size_t at = 0; at < job->path2_length; at += strlen(job->path2 + at) + 1) count++;
  job->stats = calloc(count == 0 ? 1 : count, sizeof(struct file_stat));
  if (job->stats == NULL) {
    job->error = ENOMEM;
    job->failed = "calloc";
    return;
  }
  job->count = count;
  size_t index = 0;
  for (size_t at = 0; at < job->path2_length; at += strlen(job->path2 + at) + 1, index++) {
    const char *name = job->path2 + at;
    struct file_stat *entry = &job->stats[index];
    if (fstatat(job->fd, name, &entry->st, AT_SYMLINK_NOFOLLOW) != 0) continue; /* gone meanwhile */
    entry->ok = 1;
    if (S_ISLNK(entry->st.st_mode)) {
      size_t size = (size_t)entry->st.st_size + 1;
      if (size < 2 || size > PATH_MAX + 1) size = PATH_MAX + 1;
      entry->link = malloc(size);
      ssize_t length = entry->link == NULL ? -1 : readlinkat(job->fd, name, entry->link, size - 1);
      if (length < 0) {
        free(entry->link);
        entry->link = NULL;
      } else {
        entry->link[length] = '\0';
      }
    }
  }
}

static void read_directory(struct file_job *job) {
  int copy = openat(job->fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (copy < 0) {
    fail(job, "openat");
    return;
  }
  DIR *directory = fdopendir(copy);
  if (directory == NULL) {
    fail(job, "fdopendir");
    close(copy);
    return;
  }
  size_t capacity = 64;
  job->names = malloc(capacity * sizeof(char *));
  job->types = malloc(capacity);
  if (job->names == NULL || job->types == NULL) {
    job->error = ENOMEM;
    job->failed = "malloc";
    closedir(directory);
    return;
  }
  struct dirent *entry;
  errno = 0;
  while ((entry = readdir(directory)) != NULL) {
    if (strcmp(entry->d_name, ".") == 0 || strcmp(entry->d_name, "..") == 0) continue;
    if (job->count == capacity) {
      capacity *= 2;
      char **names = realloc(job->names, capacity * sizeof(char *));
      if (names != NULL) job->names = names;
      unsigned char *types = realloc(job->types, capacity);
      if (types != NULL) job->types = types;
      if (names == NULL || types == NULL) {
        job->error = ENOMEM;
        job->failed = "realloc";
        break;
      }
    }
    job->names[job->count] = strdup(entry->d_name);
    job->types[job->count] = entry->d_type;
    if (job->names[job->count] == NULL) {
      job->error = ENOMEM;
      job->failed = "strdup";
      break;
    }
    job->count++;
    errno = 0;
  }
  if (entry == NULL && errno != 0 && job->error == 0) fail(job, "readdir");
  closedir(directory);
}

static void run_job(struct file_job *job) {
  switch (job->op) {
    case FILE_OPEN_AT:
      job->result = openat(job->fd, job->path, job->flags | O_CLOEXEC, (mode_t)job->mode);
      if (job->result < 0) fail(job, "openat");
      break;
    case FILE_OPEN_BENEATH: {
      struct open_how_v0 how = {(uint64_t)(job->flags | O_CLOEXEC), (uint64_t)job->mode, (uint64_t)job->fd2};
      job->result = (int)syscall(SYS_openat2, job->fd, job->path, &how, sizeof how);
      if (job->result < 0) fail(job, "openat2");
      break;
    }
    case FILE_REOPEN: {
      char path[64];
      snprintf(path, sizeof path, "/proc/self/fd/%d", job->fd);
      job->result = open(path, job->flags | O_CLOEXEC, (mode_t)job->mode);
      if (job->result < 0) fail(job, "open");
      break;
    }
    case FILE_STAT:
      if (fstatat(job->fd, job->path, &job->stat.st, job->path[0] == '\0' ? AT_EMPTY_PATH : AT_SYMLINK_NOFOLLOW) != 0) fail(job, "fstatat");
      break;
    case FILE_READLINK: {
      job->text = malloc(PATH_MAX + 1);
      if (job->text == NULL) {
        job->error = ENOMEM;
        job->failed = "malloc";
        break;
      }
      ssize_t length = readlinkat(job->fd, job->path, job->text, PATH_MAX);
      if (length < 0) fail(job, "readlinkat");
      else job->text[length] = '\0';
      break;
    }
    case FILE_MKDIR:
      if (mkdirat(job->fd, job->path, (mode_t)job->mode) != 0) fail(job, "mkdirat");
      break;
    case FILE_UNLINK:
      if (unlinkat(job->fd, job->path, job->flags) != 0) fail(job, "unlinkat");
      break;
    case FILE_RENAME:
      if (renameat2(job->fd, job->path, job->fd2, job->path2, (unsigned)job->flags) != 0) fail(job, "renameat2");
      break;
    case FILE_CHMOD:
      if (syscall(SYS_fchmodat2, job->fd, "", (mode_t)job->mode, AT_EMPTY_PATH) != 0) {
        if (errno != ENOSYS && errno != EINVAL) {
          fail(job, "fchmodat2");
          break;
        }
        char path[64];
        snprintf(path, sizeof path, "/proc/self/fd/%d", job->fd);
        if (chmod(path, (mode_t)job->mode) != 0) fail(job, "chmod");
      }
      break;
    case FILE_READDIR:
      read_directory(job);
      break;
    case FILE_STAT_ENTRIES:
      stat_entries(job);
      break;
    case FILE_FALLOCATE:
      if (job->mode > 0 && fallocate(job->fd, 0, 0, (off_t)job->mode) != 0) fail(job, "fallocate");
      break;
    case FILE_WATCH_ADD: {
      char path[64];
      snprintf(path, sizeof path, "/proc/self/fd/%d", job->fd2);
      job->result = inotify_add_watch(job->fd, path, (uint32_t)job->flags);
      if (job->result < 0) fail(job, "inotify_add_watch");
      break;
    }
    default:
      job->error = EINVAL;
      job->failed = "fileCall";
  }
}

static void execute(napi_env env, void *data) {
  (void)env;
  struct file_job *job = data;
  if (job->identity_count == 0) {
    run_job(job);
    return;
  }
  struct saved_identity saved;
  int error = become(job, &saved);
  if (error == 0) {
    run_job(job);
  } else {
    job->error = error;
    job->failed = "setfsuid";
  }
  restore(&saved);
}

static void set_number(napi_env env, napi_value object, const char *name, double number) {
  napi_value value;
  napi_create_double(env, number, &value);
  napi_set_named_property(env, object, name, value);
}

static napi_value stat_object(napi_env env, const struct file_stat *entry) {
  napi_value object;
  napi_create_object(env, &object);
  const struct stat *st = &entry->st;
  set_number(env, object, "mode", st->st_mode);
  set_number(env, object, "size", (double)st->st_size);
  set_number(env, object, "uid", st->st_uid);
  set_number(env, object, "gid", st->st_gid);
  set_number(env, object, "dev", (double)st->st_dev);
  set_number(env, object, "ino", (double)st->st_ino);
  set_number(env, object, "nlink", (double)st->st_nlink);
  set_number(env, object, "mtimeSeconds", (double)st->st_mtim.tv_sec);
  set_number(env, object, "mtimeNanos", (double)st->st_mtim.tv_nsec);
  if (entry->link != NULL) {
    napi_value link;
    napi_create_string_utf8(env, entry->link, NAPI_AUTO_LENGTH, &link);
    napi_set_named_property(env, object, "link", link);
  }
  return object;
}

static napi_value job_result(napi_env env, struct file_job *job) {
  napi_value result;
  switch (job->op) {
    case FILE_OPEN_AT:
    case FILE_OPEN_BENEATH:
    case FILE_REOPEN:
    case FILE_WATCH_ADD:
      napi_create_int32(env, job->result, &result);
      return result;
    case FILE_STAT:
      return stat_object(env, &job->stat);
    case FILE_READLINK:
      napi_create_string_utf8(env, job->text, NAPI_AUTO_LENGTH, &result);
      return result;
    case FILE_READDIR: {
      /* One string of NUL-separated names and one byte array of types: two values for the whole
       * directory, not one per entry (10,000 entries cost 10,000 crossings otherwise). */
      napi_value names, types, buffer;
      void *bytes;
      size_t total = 0;
      for (size_t i = 0; i < job->count; i++) total += strlen(job->names[i]) + 1;
      char *joined = malloc(total + 1);
      if (joined == NULL) {
        napi_get_undefined(env, &result);
        return result;
      }
      size_t at = 0;
      for (size_t i = 0; i < job->count; i++) {
        size_t length = strlen(job->names[i]);
        memcpy(joined + at, job->names[i], length);
        at += length;
        joined[at++] = '\0';
      }
      napi_create_object(env, &result);
      napi_create_string_utf8(env, joined, at > 0 ? at - 1 : 0, &names);
      free(joined);
      napi_create_arraybuffer(env, job->count, &bytes, &buffer);
      if (job->count > 0) memcpy(bytes, job->types, job->count);
      napi_create_typedarray(env, napi_uint8_array, job->count, buffer, 0, &types);
      napi_set_named_property(env, result, "names", names);
      napi_set_named_property(env, result, "types", types);
      return result;
    }
    case FILE_STAT_ENTRIES: {
      /* The stats packed in one Float64Array, STAT_FIELDS numbers an entry (mode -1: gone), and the
       * symlinks' targets in an array holding strings only where an entry is a symlink. */
      napi_value numbers, buffer, links;
      double *packed;
      napi_create_arraybuffer(env, job->count * STAT_FIELDS * sizeof(double), (void **)&packed, &buffer);
      napi_create_typedarray(env, napi_float64_array, job->count * STAT_FIELDS, buffer, 0, &numbers);
      napi_create_array(env, &links);
      for (size_t i = 0; i < job->count; i++) {
        const struct file_stat *entry = &job->stats[i];
        double *row = packed + i * STAT_FIELDS;
        if (!entry->ok) {
          row[0] = -1;
          continue;
        }
        const struct stat *st = &entry->st;
        row[0] = st->st_mode;
        row[1] = (double)st->st_size;
        row[2] = st->st_uid;
        row[3] = st->st_gid;
        row[4] = (double)st->st_dev;
        row[5] = (double)st->st_ino;
        row[6] = (double)st->st_mtim.tv_sec;
        row[7] = (double)st->st_mtim.tv_nsec;
        if (entry->link != NULL) {
          napi_value link;
          napi_create_string_utf8(env, entry->link, NAPI_AUTO_LENGTH, &link);
          napi_set_element(env, links, (uint32_t)i, link);
        }
      }
      napi_create_object(env, &result);
      napi_set_named_property(env, result, "stats", numbers);
      napi_set_named_property(env, result, "links", links);
      return result;
    }
    default:
      napi_get_undefined(env, &result);
      return result;
  }
}

static void free_job(struct file_job *job) {
  free(job->identity);
  free(job->path);
  free(job->path2);
  free(job->text);
  for (size_t i = 0; job->names != NULL && i < job->count; i++) free(job->names[i]);
  free(job->names);
  free(job->types);
  for (size_t i = 0; job->stats != NULL && i < job->count; i++) free(job->stats[i].link);
  free(job->stats);
  free(job);
}

static void complete(napi_env env, napi_status status, void *data) {
  struct file_job *job = data;
  (void)status;
  if (job->error != 0) {
    sandboxd_throw_errno(env, job->error, job->failed);
    napi_value exception;
    napi_get_and_clear_last_exception(env, &exception);
    napi_reject_deferred(env, job->deferred, exception);
  } else {
    napi_resolve_deferred(env, job->deferred, job_result(env, job));
  }
  napi_delete_async_work(env, job->work);
  free_job(job);
}

/* Copies a JS string into a new C string, with its length (bytes, without the final NUL). */
static char *utf8_from(napi_env env, napi_value value, size_t *length) {
  size_t size = 0;
  if (napi_get_value_string_utf8(env, value, NULL, 0, &size) != napi_ok) return NULL;
  char *text = malloc(size + 1);
  if (text == NULL) return NULL;
  napi_get_value_string_utf8(env, value, text, size + 1, &size);
  if (length != NULL) *length = size;
  return text;
}

static napi_value file_call(napi_env env, napi_callback_info info) {
  size_t argc = 8;
  napi_value args[8];
  if (napi_get_cb_info(env, info, &argc, args, NULL, NULL) != napi_ok || argc < 8) {
    napi_throw_type_error(env, NULL, "usage: fileCall(op, identity, fd, path, flags, mode, fd2, path2)");
    return NULL;
  }
  struct file_job *job = calloc(1, sizeof *job);
  if (job == NULL) {
    napi_throw_error(env, NULL, "sandboxd addon: out of memory");
    return NULL;
  }
  int ok = napi_get_value_int32(env, args[0], &job->op) == napi_ok;
  napi_valuetype type;
  napi_typeof(env, args[1], &type);
  if (ok && type == napi_object) {
    napi_typedarray_type array_type;
    size_t length;
    void *values;
    ok = napi_get_typedarray_info(env, args[1], &array_type, &length, &values, NULL, NULL) == napi_ok && array_type == napi_int32_array &&
         length >= 2 && length <= NGROUPS_MAX + 2;
    if (ok) {
      job->identity = malloc(length * sizeof(int32_t));
      ok = job->identity != NULL;
      if (ok) memcpy(job->identity, values, length * sizeof(int32_t));
      job->identity_count = (int)length;
    }
  }
  ok = ok && napi_get_value_int32(env, args[2], &job->fd) == napi_ok;
  ok = ok && (job->path = utf8_from(env, args[3], NULL)) != NULL;
  ok = ok && napi_get_value_int32(env, args[4], &job->flags) == napi_ok;
  ok = ok && napi_get_value_double(env, args[5], &job->mode) == napi_ok;
  ok = ok && napi_get_value_int32(env, args[6], &job->fd2) == napi_ok;
  ok = ok && (job->path2 = utf8_from(env, args[7], &job->path2_length)) != NULL;
  if (!ok) {
    free_job(job);
    napi_throw_type_error(env, NULL, "usage: fileCall(op: number, identity: Int32Array | null, fd: number, path: string, flags: number, mode: number, fd2: number, path2: string)");
    return NULL;
  }
  napi_value promise, name;
  napi_create_promise(env, &job->deferred, &promise);
  napi_create_string_utf8(env, "sandboxd:file", NAPI_AUTO_LENGTH, &name);
  if (napi_create_async_work(env, NULL, name, execute, complete, job, &job->work) == napi_ok) {
    if (napi_queue_async_work(env, job->work) == napi_ok) return promise;
    napi_delete_async_work(env, job->work);
  }
  napi_value message, error;
  napi_create_string_utf8(env, "sandboxd addon: could not queue the file call", NAPI_AUTO_LENGTH, &message);
  napi_create_error(env, NULL, message, &error);
  napi_reject_deferred(env, job->deferred, error);
  free_job(job);
  return promise;
}

static napi_value user_groups(napi_env env, napi_callback_info info) {
  size_t argc = 2;
  napi_value args[2];
  int32_t gid;
  char *name = NULL;
  if (napi_get_cb_info(env, info, &argc, args, NULL, NULL) != napi_ok || argc < 2 || (name = utf8_from(env, args[0], NULL)) == NULL ||
      napi_get_value_int32(env, args[1], &gid) != napi_ok) {
    free(name);
    napi_throw_type_error(env, NULL, "usage: userGroups(name: string, gid: number)");
    return NULL;
  }
  int count = 64;
  gid_t *groups = NULL;
  for (;;) {
    gid_t *more = realloc(groups, (size_t)count * sizeof(gid_t));
    if (more == NULL) break;
    groups = more;
    int wanted = count;
    if (getgrouplist(name, (gid_t)gid, groups, &wanted) >= 0) {
      count = wanted;
      break;
    }
    if (wanted <= count || wanted > NGROUPS_MAX) {
      count = count < NGROUPS_MAX ? count : NGROUPS_MAX;
      break;
    }
    count = wanted;
  }
  free(name);
  napi_value result;
  napi_create_array(env, &result);
  for (int i = 0; groups != NULL && i < count; i++) {
    napi_value value;
    napi_create_uint32(env, groups[i], &value);
    napi_set_element(env, result, (uint32_t)i, value);
  }
  free(groups);
  return result;
}

/* An inotify instance read by a thread of its own. Two owners, the thread and the JS handle (until
 * watchStop); the last to let go closes the wake-up eventfd and frees it. */
struct watcher {
  int fd;
  int wake;
  int owners;
  pthread_t thread;
  napi_threadsafe_function deliver;
};

static void let_go(struct watcher *watcher) {
  if (__atomic_sub_fetch(&watcher->owners, 1, __ATOMIC_ACQ_REL) != 0) return;
  close(watcher->wake);
  free(watcher);
}

struct watch_bytes {
  size_t length;
  char bytes[];
};

static void watch_thread_deliver(napi_env env, napi_value callback, void *context, void *data) {
  (void)context;
  struct watch_bytes *read_bytes = data;
  if (env != NULL && read_bytes != NULL) {
    napi_value buffer, undefined;
    void *copy;
    napi_create_buffer_copy(env, read_bytes->length, read_bytes->bytes, &copy, &buffer);
    napi_get_undefined(env, &undefined);
    napi_call_function(env, undefined, callback, 1, &buffer, NULL);
  }
  free(read_bytes);
}

static void *watch_thread(void *data) {
  struct watcher *watcher = data;
  char buffer[64 * 1024] __attribute__((aligned(__alignof__(struct inotify_event))));
  for (;;) {
    struct pollfd fds[2] = {{watcher->fd, POLLIN, 0}, {watcher->wake, POLLIN, 0}};
    if (poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    if (fds[1].revents != 0) break;
    ssize_t length = read(watcher->fd, buffer, sizeof buffer);
    if (length < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      break;
    }
    struct watch_bytes *copy = malloc(sizeof *copy + (size_t)length);
    if (copy == NULL) continue;
    copy->length = (size_t)length;
    memcpy(copy->bytes, buffer, (size_t)length);
    if (napi_call_threadsafe_function(watcher->deliver, copy, napi_tsfn_blocking) != napi_ok) {
      free(copy);
      break;
    }
  }
  close(watcher->fd);
  napi_release_threadsafe_function(watcher->deliver, napi_tsfn_release);
  let_go(watcher);
  return NULL;
}

static napi_value watch_start(napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value args[1];
  if (napi_get_cb_info(env, info, &argc, args, NULL, NULL) != napi_ok || argc < 1) {
    napi_throw_type_error(env, NULL, "usage: watchStart(callback)");
    return NULL;
  }
  struct watcher *watcher = calloc(1, sizeof *watcher);
  if (watcher == NULL) return sandboxd_throw_errno(env, ENOMEM, "calloc");
  watcher->fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
  if (watcher->fd < 0) {
    int error = errno;
    free(watcher);
    return sandboxd_throw_errno(env, error, "inotify_init1");
  }
  watcher->wake = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  napi_value name;
  napi_create_string_utf8(env, "sandboxd:watch", NAPI_AUTO_LENGTH, &name);
  if (watcher->wake < 0 ||
      napi_create_threadsafe_function(env, args[0], NULL, name, 16, 1, NULL, NULL, NULL, watch_thread_deliver, &watcher->deliver) != napi_ok) {
    int error = watcher->wake < 0 ? errno : ENOMEM;
    close(watcher->fd);
    if (watcher->wake >= 0) close(watcher->wake);
    free(watcher);
    return sandboxd_throw_errno(env, error, "watchStart");
  }
  int fd = watcher->fd;
  void *handle = watcher;
  watcher->owners = 2;
  int error = pthread_create(&watcher->thread, NULL, watch_thread, watcher);
  if (error != 0) {
    close(watcher->fd);
    close(watcher->wake);
    napi_release_threadsafe_function(watcher->deliver, napi_tsfn_abort);
    free(watcher);
    return sandboxd_throw_errno(env, error, "pthread_create");
  }
  pthread_detach(watcher->thread);
  napi_value result, fd_value, handle_value;
  napi_create_object(env, &result);
  napi_create_int32(env, fd, &fd_value);
  napi_set_named_property(env, result, "fd", fd_value);
  napi_create_external(env, handle, NULL, NULL, &handle_value);
  napi_set_named_property(env, result, "handle", handle_value);
  /* The thread's deliveries keep the loop alive only while something waits on them in JS. */
  napi_unref_threadsafe_function(env, watcher->deliver);
  return result;
}

static napi_value watch_stop(napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value args[1];
  void *handle = NULL;
  if (napi_get_cb_info(env, info, &argc, args, NULL, NULL) != napi_ok || argc < 1 || napi_get_value_external(env, args[0], &handle) != napi_ok ||
      handle == NULL) {
    napi_throw_type_error(env, NULL, "usage: watchStop(handle)");
    return NULL;
  }
  struct watcher *watcher = handle;
  /* Wakes the thread's poll; a thread waiting to hand over bytes goes on once the loop took them (this
   * thread runs the loop), then sees the wake-up. */
  uint64_t one = 1;
  if (write(watcher->wake, &one, sizeof one) < 0) {
    /* An eventfd counter cannot overflow with one write: nothing to do. */
  }
  let_go(watcher);
  return NULL;
}

int sandboxd_register_file_functions(napi_env env, napi_value exports) {
  static const struct {
    const char *name;
    napi_callback callback;
  } functions[] = {{"fileCall", file_call}, {"userGroups", user_groups}, {"watchStart", watch_start}, {"watchStop", watch_stop}};
  for (size_t i = 0; i < sizeof functions / sizeof functions[0]; i++) {
    napi_value function;
    if (napi_create_function(env, functions[i].name, NAPI_AUTO_LENGTH, functions[i].callback, NULL, &function) != napi_ok) return 0;
    if (napi_set_named_property(env, exports, functions[i].name, function) != napi_ok) return 0;
  }
  return 1;
}
