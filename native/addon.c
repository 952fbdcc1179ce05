/*
 * sandboxd's Node-API addon: what the daemon needs from the C library that Node does not offer.
 *
 *   trimMemory(): gives the memory freed by the allocator back to the system (malloc_trim), so
 *                 output dropped or cleaned up shrinks the daemon's RSS instead of staying in
 *                 glibc's arenas. Returns whether anything was released.
 *
 * Built at install by scripts/build-native.mjs against the headers of the node-api-headers package;
 * the daemon runs without it (see src/process/native.ts).
 */
#include <malloc.h>
#include <node_api.h>

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

NAPI_MODULE_INIT() {
  napi_value function;
  if (napi_create_function(env, "trimMemory", NAPI_AUTO_LENGTH, trim_memory, NULL, &function) != napi_ok) return NULL;
  if (napi_set_named_property(env, exports, "trimMemory", function) != napi_ok) return NULL;
  return exports;
}
