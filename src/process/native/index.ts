/**
 * The native parts' door: the Node-API addon, the files `npm install` builds, and the
 * `sandboxd-exec` helper every command starts through.
 *
 * @module
 */
export {
  encodeHelperEnvironment,
  findExecHelper,
  type HelperFailure,
  parseHelperStatus,
  startStageOfHelperStep,
} from "./exec-helper.js";
export { executablePath, loadNativeAddon, type NativeAddon, type NativeSpawned } from "./native.js";
