// The executor's decisions, one line each on stderr (over stdio, stdout is the MCP channel).
// LOG_LEVEL (DEBUG, INFO, WARNING, ERROR; default INFO) sets how much is written. Writes to a
// pipe or a file are synchronous in Node.js on Linux: a line logged before a SIGKILL is kept.

const LEVELS = ["DEBUG", "INFO", "WARNING", "ERROR"] as const;
type Level = (typeof LEVELS)[number];

const wanted = (process.env.LOG_LEVEL ?? "INFO").toUpperCase();
const threshold = Math.max(0, LEVELS.indexOf((wanted === "WARN" ? "WARNING" : wanted) as Level));
const worker = process.env.REPLAYLAB_WORKER || "?";

function write(level: Level, message: string): void {
  if (LEVELS.indexOf(level) < threshold) return;
  process.stderr.write(`${new Date().toISOString()} ${worker} ${level} ${message}\n`);
}

export const log = {
  debug: (message: string) => write("DEBUG", message),
  info: (message: string) => write("INFO", message),
  warning: (message: string) => write("WARNING", message),
  error: (message: string) => write("ERROR", message),
};
