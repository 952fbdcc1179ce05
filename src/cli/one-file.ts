/**
 * The entry of the one-file daemon (scripts/build-one-file.mjs bundles it into a Node single
 * executable application): unpacks the native files it carries, then runs the daemon's command line.
 * Import order is evaluation order: the files are in place before the daemon looks for them.
 */
import "./sandboxd/one-file-natives.js";
import "./sandboxd.js";
