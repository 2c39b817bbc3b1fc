//! One integration test binary. Modules:
//! - `age`: encryption against the real `age` tool;
//! - `gitflow`: install, diff, log, merge and the hook inside real Git;
//! - `golden`: the independent implementation's vectors, byte for byte;
//! - `cli`: the real binary's exit codes, messages and JSON;
//! - `containers`: FOLD, AERO and MLDF against reference files and independent readers;
//! - `convert`: conversions, checked against the reference writers' files;
//! - `corruption`: every kind of damage, on every line, is rejected with its line;
//! - `daemon`: the snapshot daemon under load, with failing remotes, kill -9 and the Python example;
//! - `delta`: DELTA v2 round trips and failures;
//! - `roundtrip`: property tests of write -> verify -> read;
//! - `outputs`: devices written through, temp files removed on SIGTERM, reserved names, escaped messages;
//! - `recover`: partial recovery keeps everything intact;
//! - `hooks`: hooks/pre-commit in a real Git repository;
//! - `hostile`: small files that expand to gigabytes, read in bounded heap or refused;
//! - `inputs`: real NumPy output and hostile input archives;
//! - `log`: the Merkle chain through a real Git history;
//! - `mutation`: seeded random damage through every reader, never a panic;
//! - `trust`: nothing signs, HMACs or chains a forged input.

mod age;
mod cli;
mod containers;
mod convert;
mod corruption;
mod daemon;
mod delta;
mod gitflow;
mod golden;
mod hooks;
mod hostile;
mod inputs;
mod log;
mod mutation;
mod outputs;
mod recover;
mod roundtrip;
mod trust;
mod util;
