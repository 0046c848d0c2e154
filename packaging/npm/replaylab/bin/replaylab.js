#!/usr/bin/env node
// The replaylab launcher: runs the `replaylab` binary of this machine's platform package
// (`@replaylab/<os>-<cpu>`, an optional dependency npm installs only where its `os` and `cpu`
// match), with this process's arguments, standard streams and environment, and ends as it
// ends: its exit code, or the signal that stopped it. REPLAYLAB_BINARY names another binary.
"use strict";

const { spawn } = require("node:child_process");

const PLATFORMS = {
  "linux x64": "@replaylab/linux-x64",
  "linux arm64": "@replaylab/linux-arm64",
  "darwin x64": "@replaylab/darwin-x64",
  "darwin arm64": "@replaylab/darwin-arm64",
};

// replaylab's exit code for bad usage or input.
const BAD_INPUT = 2;

function fail(message) {
  process.stderr.write(`replaylab (npm launcher): ${message}\n`);
  process.exit(BAD_INPUT);
}

function binary() {
  if (process.env.REPLAYLAB_BINARY) {
    return process.env.REPLAYLAB_BINARY;
  }
  const platform = `${process.platform} ${process.arch}`;
  const name = PLATFORMS[platform];
  if (!name) {
    fail(
      `no prebuilt replaylab for ${platform} (there are: ${Object.keys(PLATFORMS).join(", ")}). ` +
        "Install it with Rust instead (cargo install --locked --path harness, from a checkout of " +
        "the repository) and set REPLAYLAB_BINARY to it.",
    );
  }
  try {
    return require.resolve(`${name}/bin/replaylab`);
  } catch {
    fail(
      `the package ${name}, which holds the replaylab binary for ${platform}, is not installed. ` +
        "npm installs it as an optional dependency of replaylab: install again without " +
        "--omit=optional (or --no-optional), or install it by name at replaylab's version.",
    );
  }
}

const program = binary();
const child = spawn(program, process.argv.slice(2), { stdio: "inherit" });
// A signal sent to the launcher alone (a CI runner's SIGTERM, say) reaches replaylab too.
const forwarded = ["SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT"];
for (const signal of forwarded) {
  process.on(signal, () => child.kill(signal));
}
child.on("error", (error) => fail(`could not run ${program}: ${error.message}`));
child.on("exit", (code, signal) => {
  if (signal) {
    // Die of the same signal, so that whoever waits on the launcher sees what replaylab saw.
    for (const name of forwarded) {
      process.removeAllListeners(name);
    }
    process.kill(process.pid, signal);
    return;
  }
  process.exit(code ?? 1);
});
