#include "shims/hooks.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cerrno>

namespace cordon::shim {

hook_result run_hook(const std::string& command, const std::vector<std::string>& env,
                     const std::string& input, std::chrono::milliseconds timeout,
                     std::size_t max_output) {
    hook_result r;
    const auto start = std::chrono::steady_clock::now();
    int out[2];
    int in[2];
    if (::pipe2(out, O_CLOEXEC) < 0) {
        return r;
    }
    if (::pipe2(in, O_CLOEXEC) < 0) {
        ::close(out[0]);
        ::close(out[1]);
        return r;
    }
    std::vector<char*> envp;
    for (const auto& e : env) {
        envp.push_back(const_cast<char*>(e.c_str()));
    }
    envp.push_back(nullptr);
    const pid_t pid = ::fork();
    if (pid < 0) {
        for (const int fd : {out[0], out[1], in[0], in[1]}) {
            ::close(fd);
        }
        return r;
    }
    if (pid == 0) {
        ::setpgid(0, 0);
        ::dup2(in[0], 0);
        ::dup2(out[1], 1);
        const char* argv[] = {"/bin/sh", "-c", command.c_str(), nullptr};
        ::execve("/bin/sh", const_cast<char**>(argv), envp.data());
        ::_exit(127);
    }
    ::setpgid(pid, pid);
    ::close(in[0]);
    ::close(out[1]);
    // The input is small (a credential): write it whole, then EOF.
    std::size_t written = 0;
    const sighandler_t old = ::signal(SIGPIPE, SIG_IGN);
    while (written < input.size()) {
        const ssize_t n = ::write(in[1], input.data() + written, input.size() - written);
        if (n <= 0) {
            break;
        }
        written += static_cast<std::size_t>(n);
    }
    ::signal(SIGPIPE, old);
    ::close(in[1]);
    const auto deadline = start + timeout;
    std::array<char, 4096> buf{};
    for (;;) {
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
            deadline - std::chrono::steady_clock::now());
        if (left.count() <= 0) {
            r.timed_out = true;
            break;
        }
        pollfd pf{out[0], POLLIN, 0};
        const int p = ::poll(&pf, 1, static_cast<int>(left.count()));
        if (p < 0 && errno == EINTR) {
            continue;
        }
        if (p <= 0) {
            continue;  // the deadline check above ends it
        }
        const ssize_t n = ::read(out[0], buf.data(), buf.size());
        if (n <= 0) {
            break;
        }
        const std::size_t room = max_output - std::min(max_output, r.output.size());
        if (static_cast<std::size_t>(n) > room) {
            r.output_truncated = true;
        }
        r.output.append(buf.data(), std::min(room, static_cast<std::size_t>(n)));
    }
    ::close(out[0]);
    if (r.timed_out) {
        ::kill(-pid, SIGKILL);
    }
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    if (WIFEXITED(status)) {
        r.exit_code = WEXITSTATUS(status);
    } else if (WIFSIGNALED(status)) {
        r.exit_code = 128 + WTERMSIG(status);
    }
    r.duration = std::chrono::duration_cast<std::chrono::milliseconds>(
        std::chrono::steady_clock::now() - start);
    return r;
}

std::string trim_credential(std::string output) {
    while (!output.empty() && (output.back() == '\n' || output.back() == '\r' ||
                               output.back() == ' ' || output.back() == '\t')) {
        output.pop_back();
    }
    return output;
}

}  // namespace cordon::shim
