# syntax=docker/dockerfile:1
# sandboxd's container image: the daemon under tini, listening on 0.0.0.0:7007, its commands as `sandbox`.
#
#   docker build -t sandboxd .
#   docker run -d -p 7007:7007 -e SANDBOXD_TOKEN="$(openssl rand -hex 32)" sandboxd
#
# tini and the daemon run as root; commands run as the unprivileged user `sandbox` (uid 10001, SANDBOXD_USER),
# in /workspace. So a command cannot read the token, which the container's environment hands to tini and the
# daemon (their /proc/<pid>/environ and memory belong to root), nor signal either of them.
# docs/OPERATIONS.md has the flags, probes and the Kubernetes and systemd set-ups. The bases are build
# arguments; CI builds this file with buildah from stand-ins it assembles (test/side/image.sh).
ARG NODE_IMAGE=node:24-bookworm-slim
ARG BUILD_IMAGE=node:24-bookworm

# The build: the native helper and addon (C compiler of the build image) and the TypeScript to dist/.
FROM ${BUILD_IMAGE} AS build
WORKDIR /src
COPY package.json package-lock.json ./
# No dependency's install script is needed to compile (node-pty, a dev dependency, is for the tests).
RUN --mount=type=cache,target=/root/.npm npm ci --ignore-scripts --no-audit --no-fund --no-update-notifier
COPY native ./native
COPY scripts/build-native.mjs scripts/build.mjs ./scripts/
RUN node scripts/build-native.mjs && test -x build/sandboxd-exec && test -f build/sandboxd.node
COPY tsconfig.json tsconfig.build.json ./
COPY gen ./gen
COPY src ./src
RUN npm run build --no-update-notifier

# The runtime: production dependencies (plain JavaScript), the build's output, tini as PID 1.
FROM ${NODE_IMAGE}
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends tini \
 && apt-get clean \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --gid 10001 sandbox \
 && useradd --uid 10001 --gid sandbox --create-home --shell /bin/bash sandbox \
 && install -d -o sandbox -g sandbox -m 0750 /workspace
WORKDIR /opt/sandboxd
COPY package.json package-lock.json ./
RUN --mount=type=cache,target=/root/.npm npm ci --omit=dev --ignore-scripts --no-audit --no-fund --no-update-notifier
COPY --from=build /src/build/sandboxd-exec /src/build/sandboxd.node ./build/
COPY --from=build /src/dist/src ./dist/src
COPY --from=build /src/dist/gen ./dist/gen
# The daemon's files belong to root: commands running as `sandbox` cannot change them. SANDBOXD_USER names
# `sandbox` by its uid (the daemon finds its name, groups and HOME in /etc/passwd), as USER would.
ENV NODE_ENV=production \
    SANDBOXD_HOST=0.0.0.0 \
    SANDBOXD_PORT=7007 \
    SANDBOXD_WORKSPACE=/workspace \
    SANDBOXD_USER=10001
EXPOSE 7007
WORKDIR /workspace
# Root, so that commands run as another user than the daemon's and its init's (--user needs a token: the
# daemon refuses to start without one, as it does on 0.0.0.0 anyway).
USER 0:0
# Plain HTTP on the daemon's own port; not for a daemon serving TLS (probe grpc.health.v1 instead).
HEALTHCHECK --interval=15s --timeout=3s --start-period=10s --retries=3 \
  CMD ["node", "-e", "require('http').get({host:'127.0.0.1',port:process.env.SANDBOXD_PORT,path:'/healthz',timeout:2000},r=>process.exit(r.statusCode===200?0:1)).on('error',()=>process.exit(1))"]
# tini reaps orphaned processes (PID 1's job) and passes SIGTERM to the daemon, which drains and exits.
# node gets the daemon's Node flags (src/cli/sandboxd/node-flags.ts) here, so it need not restart itself
# with them: a container start saves a whole Node start.
ENTRYPOINT ["/usr/bin/tini", "--", "node", "--initial-old-space-size=64", "--max-semi-space-size=4", "/opt/sandboxd/dist/src/cli/sandboxd.js"]
