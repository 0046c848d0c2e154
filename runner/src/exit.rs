//! The exit codes of every `replaylab` command (and of exploration, which returns one).

/// Everything asked for ran and passed.
pub const SUCCESS: u8 = 0;
/// A check, a row or a run failed.
pub const CHECK_FAILED: u8 = 1;
/// Bad usage or bad input (flags, files, seeds, executor names): nothing was run.
pub const BAD_INPUT: u8 = 2;
