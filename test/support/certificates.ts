import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";

/** PEM files of a throwaway CA, a server certificate for 127.0.0.1 and localhost, and a client certificate. */
export interface TestCertificates {
  /** The directory holding the files; removed by `remove`. */
  directory: string;
  /** Paths of the PEM files. */
  files: { ca: string; serverCert: string; serverKey: string; clientCert: string; clientKey: string };
  /** Contents of the same files. */
  ca: Buffer;
  serverCert: Buffer;
  serverKey: Buffer;
  clientCert: Buffer;
  clientKey: Buffer;
  /** Removes the directory. */
  remove(): void;
}

/** Makes {@link TestCertificates} with openssl (P-256 keys, valid for a day). */
export function createTestCertificates(): TestCertificates {
  const directory = mkdtempSync(path.join(tmpdir(), "sandboxd-tls-"));
  const script = `
    set -e
    key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1" 2>/dev/null; }
    key ca.key && openssl req -x509 -new -key ca.key -subj /CN=sandboxd-test-ca -days 1 -out ca.pem
    key server.key && openssl req -new -key server.key -subj /CN=127.0.0.1 -out server.csr
    printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\\nextendedKeyUsage=serverAuth\\n' > server.ext
    openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 1 -extfile server.ext -out server.pem 2>/dev/null
    key client.key && openssl req -new -key client.key -subj /CN=sandboxd-test-client -out client.csr
    printf 'extendedKeyUsage=clientAuth\\n' > client.ext
    openssl x509 -req -in client.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 1 -extfile client.ext -out client.pem 2>/dev/null
  `;
  execFileSync("bash", ["-c", script], { cwd: directory, stdio: ["ignore", "ignore", "pipe"] });
  const files = {
    ca: path.join(directory, "ca.pem"),
    serverCert: path.join(directory, "server.pem"),
    serverKey: path.join(directory, "server.key"),
    clientCert: path.join(directory, "client.pem"),
    clientKey: path.join(directory, "client.key"),
  };
  return {
    directory,
    files,
    ca: readFileSync(files.ca),
    serverCert: readFileSync(files.serverCert),
    serverKey: readFileSync(files.serverKey),
    clientCert: readFileSync(files.clientCert),
    clientKey: readFileSync(files.clientKey),
    remove: () => rmSync(directory, { recursive: true, force: true }),
  };
}
