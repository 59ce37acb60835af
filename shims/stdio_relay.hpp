#pragma once
// The sandbox's stdin, stdout and stderr: pipes (default) or a pty of the sandbox's own
// (`cordon run --tty`), relayed to the shim's own by threads. The sandbox never holds the
// operator's terminal (TIOCSTI on it types into the operator's shell once the shim exits) or
// the operator's files (reopening /proc/self/fd/1 would truncate the operator's log through
// the host's writable mount).

#include <array>
#include <memory>
#include <optional>
#include <string>

namespace cordon::shim {

/// Owns the relay's descriptors and threads. Create it before start_sandbox (it makes the
/// pipes or the pty), hand sandbox_ends() to the sandbox, call close_sandbox_ends() once
/// the sandbox has them, then start(); finish() after the sandbox has exited.
class stdio_relay {
public:
    /// Pipes, or with `tty` a pty whose slave becomes the sandbox's terminal (the shim's
    /// stdin must then be a terminal: it is put in raw mode until finish() or destruction,
    /// and its window size is copied). nullptr and `error` on failure.
    static std::unique_ptr<stdio_relay> create(bool tty, std::string& error);

    ~stdio_relay();
    stdio_relay(const stdio_relay&) = delete;
    stdio_relay& operator=(const stdio_relay&) = delete;

    /// The descriptors the sandbox gets as 0, 1 and 2 (all >= 3 here).
    std::array<int, 3> sandbox_ends() const;
    bool tty() const;
    void close_sandbox_ends();

    /// Starts the threads: shim stdin -> sandbox, sandbox stdout/stderr -> shim's. Call
    /// while no fork of the shim is in progress (after start_sandbox).
    void start();

    /// The operator's window size to the sandbox's pty (on SIGWINCH); nothing without --tty.
    void resize();

    /// After the sandbox is gone: waits up to `drain_ms` for its output to be written out,
    /// stops the stdin relay, restores the terminal. Idempotent.
    void finish(int drain_ms = 5000);

    struct state;

private:
    explicit stdio_relay(std::shared_ptr<state> s);
    std::shared_ptr<state> s_;
};

}  // namespace cordon::shim
