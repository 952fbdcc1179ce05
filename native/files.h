/* What native/files.c and native/addon.c share: they are linked into one addon, build/sandboxd.node. */
#ifndef SANDBOXD_FILES_H
#define SANDBOXD_FILES_H

#include <node_api.h>

/* Throws an Error carrying `code` (the errno name) and `syscall`, as Node's own errors do; returns NULL. */
napi_value sandboxd_throw_errno(napi_env env, int error, const char *syscall);

/* Adds fileCall, userGroups, watchStart and watchStop to the addon's exports; 0 when that failed. */
int sandboxd_register_file_functions(napi_env env, napi_value exports);

#endif
