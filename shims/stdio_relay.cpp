#include "shims/stdio_relay.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace cordon::shim {
namespace {

std::string errno_text(const std::string& what) { return what + ": " + std::strerror(errno); }

// A descriptor >= 3 and close-on-exec (a pipe made while the shim's stdin is closed would
// be 0, and the sandbox's init dup2()s onto 0..2).
int high_fd(int fd) {
    if (fd < 0 || fd >= 3) {
        return fd;
    }
    const int h = ::fcntl(fd, F_DUPFD_CLOEXEC, 3);
    ::close(fd);
    return h;
}

void close_fd(int& fd) {
    if (fd >= 0) {
        ::close(fd);
        fd = -1;
    }
}

// Writes everything, or gives up on a dead reader (the bytes are then dropped so the
// sandbox never blocks on an operator who went away).
bool write_all(int fd, const char* p, std::size_t n) {
    while (n > 0) {
        const ssize_t w = ::write(fd, p, n);
        if (w < 0) {
            if (errno == EINTR) {
                continue;
            }
            if (errno == EAGAIN) {
                pollfd pf{fd, POLLOUT, 0};
                (void)::poll(&pf, 1, 100);
                continue;
            }
            return false;
        }
        p += w;
        n -= static_cast<std::size_t>(w);
    }
    return true;
}

// Asks the terminal on `fd` for its primary device attributes (ESC [ c) and reads, without
// echo, until the reply (ESC [ ? ... c) or `wait` has passed, discarding what it reads.
void drain_terminal_answers(int fd, std::chrono::milliseconds wait) {
    termios saved{};
    if (::tcgetattr(fd, &saved) != 0) {
        return;
    }
    termios quiet = saved;
    quiet.c_lflag &= ~static_cast<tcflag_t>(ICANON | ECHO);
    quiet.c_cc[VMIN] = 0;
    quiet.c_cc[VTIME] = 0;
    if (::tcsetattr(fd, TCSANOW, &quiet) != 0) {
        return;
    }
    static constexpr char query[] = "\x1b[c";
    if (::write(fd, query, sizeof query - 1) == static_cast<ssize_t>(sizeof query - 1)) {
        const auto deadline = std::chrono::steady_clock::now() + wait;
        std::string got;
        for (;;) {
            const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                deadline - std::chrono::steady_clock::now());
            if (left.count() <= 0) {
                break;
            }
            pollfd pf{fd, POLLIN, 0};
            if (::poll(&pf, 1, static_cast<int>(left.count())) <= 0) {
                break;
            }
            std::array<char, 256> buf{};
            const ssize_t n = ::read(fd, buf.data(), buf.size());
            if (n <= 0) {
                if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
                    continue;
                }
                break;
            }
            got.append(buf.data(), static_cast<std::size_t>(n));
            // The reply: ESC [ ? digits and semicolons, then 'c'.
            const auto at = got.rfind("\x1b[?");
            if (at != std::string::npos) {
                const auto end = got.find_first_not_of("0123456789;", at + 3);
                if (end != std::string::npos && got[end] == 'c') {
                    break;
                }
            }
            if (got.size() > 64 * 1024) {
                got.erase(0, got.size() - 64);  // bounded; keep a possible reply's start
            }
        }
    }
    (void)::tcsetattr(fd, TCSANOW, &saved);
}

}  // namespace

struct stdio_relay::state {
    bool tty = false;
    std::array<int, 3> sandbox{-1, -1, -1};  // what the sandbox gets as 0, 1, 2
    int in_w = -1;                           // -> the sandbox's stdin (the pty master with tty)
    int out_r = -1;                          // <- its stdout (the master with tty)
    int err_r = -1;                          // <- its stderr (none with tty)
    int wake_r = -1, wake_w = -1;            // finish() wakes the stdin thread
    std::optional<termios> saved;            // the operator's terminal, restored at finish()
    std::thread in_thread;
    std::vector<std::thread> out_threads;
    std::mutex m;
    std::condition_variable cv;
    int outputs_open = 0;
    bool finished = false;

    // shim stdin -> sandbox, until EOF on stdin, the sandbox closes its end, or finish().
    void pump_in() {
        std::array<char, 16 * 1024> buf{};
        for (;;) {
            pollfd pf[2] = {{0, POLLIN, 0}, {wake_r, POLLIN, 0}};
            const int r = ::poll(pf, 2, -1);
            if (r < 0 && errno == EINTR) {
                continue;
            }
            if (r < 0 || pf[1].revents != 0 || (pf[0].revents & POLLNVAL) != 0) {
                break;
            }
            const ssize_t n = ::read(0, buf.data(), buf.size());
            if (n < 0 && (errno == EINTR || errno == EAGAIN)) {
                continue;
            }
            if (n <= 0 || !write_all(in_w, buf.data(), static_cast<std::size_t>(n))) {
                break;  // EOF, EIO (a background job of a terminal), or the sandbox is gone
            }
        }
        if (!tty) {
            close_fd(in_w);  // the sandbox's stdin sees EOF
        }
    }

    // sandbox output -> the shim's fd `to`, until EOF (every writer in the sandbox gone;
    // EIO on a pty master).
    void pump_out(int from, int to) {
        std::array<char, 64 * 1024> buf{};
        bool writable = true;
        for (;;) {
            const ssize_t n = ::read(from, buf.data(), buf.size());
            if (n < 0 && errno == EINTR) {
                continue;
            }
            if (n <= 0) {
                break;
            }
            if (writable) {
                writable = write_all(to, buf.data(), static_cast<std::size_t>(n));
            }
        }
        std::lock_guard<std::mutex> l(m);
        --outputs_open;
        cv.notify_all();
    }

    void restore_terminal() {
        if (saved) {
            (void)::tcsetattr(0, TCSADRAIN, &*saved);
            saved.reset();
        }
    }

    ~state() {
        restore_terminal();
        for (int* fd :
             {&in_w, &out_r, &err_r, &wake_r, &wake_w, &sandbox[0], &sandbox[1], &sandbox[2]}) {
            close_fd(*fd);
        }
    }
};

std::unique_ptr<stdio_relay> stdio_relay::create(bool tty, std::string& error) {
    auto s = std::make_shared<state>();
    s->tty = tty;
    int wake[2];
    if (::pipe2(wake, O_CLOEXEC) < 0) {
        error = errno_text("pipe");
        return nullptr;
    }
    s->wake_r = high_fd(wake[0]);
    s->wake_w = high_fd(wake[1]);
    if (tty) {
        termios t{};
        if (::isatty(0) == 0 || ::tcgetattr(0, &t) < 0) {
            error = "--tty needs a terminal on stdin";
            return nullptr;
        }
        const int master = high_fd(::posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC));
        std::array<char, 128> name{};
        if (master < 0 || ::grantpt(master) < 0 || ::unlockpt(master) < 0 ||
            ::ptsname_r(master, name.data(), name.size()) != 0) {
            error = errno_text("creating a pty");
            if (master >= 0) {
                ::close(master);
            }
            return nullptr;
        }
        const int slave = high_fd(::open(name.data(), O_RDWR | O_NOCTTY | O_CLOEXEC));
        if (slave < 0) {
            error = errno_text(std::string("opening ") + name.data());
            ::close(master);
            return nullptr;
        }
        (void)::tcsetattr(slave, TCSANOW, &t);  // the sandbox starts with the operator's modes
        s->in_w = master;
        s->out_r = ::fcntl(master, F_DUPFD_CLOEXEC, 3);
        s->sandbox = {slave, ::fcntl(slave, F_DUPFD_CLOEXEC, 3),
                      ::fcntl(slave, F_DUPFD_CLOEXEC, 3)};
        s->saved = t;
        termios raw = t;
        ::cfmakeraw(&raw);
        (void)::tcsetattr(0, TCSADRAIN, &raw);  // keys go to the sandbox's terminal as typed
        auto r = std::unique_ptr<stdio_relay>(new stdio_relay(std::move(s)));
        r->resize();
        return r;
    }
    std::array<int[2], 3> p{};
    for (auto& fds : p) {
        if (::pipe2(fds, O_CLOEXEC) < 0) {
            error = errno_text("pipe");
            return nullptr;  // the state closes what was made
        }
        fds[0] = high_fd(fds[0]);
        fds[1] = high_fd(fds[1]);
    }
    s->sandbox = {p[0][0], p[1][1], p[2][1]};
    s->in_w = p[0][1];
    s->out_r = p[1][0];
    s->err_r = p[2][0];
    return std::unique_ptr<stdio_relay>(new stdio_relay(std::move(s)));
}

stdio_relay::stdio_relay(std::shared_ptr<state> s) : s_(std::move(s)) {}

stdio_relay::~stdio_relay() { finish(0); }

std::array<int, 3> stdio_relay::sandbox_ends() const { return s_->sandbox; }

bool stdio_relay::tty() const { return s_->tty; }

void stdio_relay::close_sandbox_ends() {
    for (int& fd : s_->sandbox) {
        close_fd(fd);
    }
}

void stdio_relay::start() {
    auto s = s_;
    s->outputs_open = s->tty ? 1 : 2;
    s->in_thread = std::thread([s] { s->pump_in(); });
    s->out_threads.emplace_back([s] { s->pump_out(s->out_r, 1); });
    if (!s->tty) {
        s->out_threads.emplace_back([s] { s->pump_out(s->err_r, 2); });
    }
}

void stdio_relay::resize() {
    winsize ws{};
    if (s_->tty && ::ioctl(0, TIOCGWINSZ, &ws) == 0) {
        (void)::ioctl(s_->in_w, TIOCSWINSZ, &ws);
    }
}

void stdio_relay::finish(int drain_ms) {
    auto& s = *s_;
    if (s.finished) {
        return;
    }
    s.finished = true;
    if (!s.out_threads.empty()) {
        std::unique_lock<std::mutex> l(s.m);
        const bool drained = s.cv.wait_for(l, std::chrono::milliseconds(drain_ms),
                                           [&] { return s.outputs_open == 0; });
        l.unlock();
        for (auto& t : s.out_threads) {
            // A thread still blocked writing to an operator who does not read is left to
            // the process's exit; it holds its own reference to the state.
            drained ? t.join() : t.detach();
        }
    }
    if (s.in_thread.joinable()) {
        const char c = 'x';
        (void)::write(s.wake_w, &c, 1);
        s.in_thread.join();
    }
    s.restore_terminal();
    // What the sandbox's last output made a terminal answer (a title or status report
    // queried by an escape sequence) would otherwise be read by the operator's shell as typed
    // input once the shim exits. The shim asks the terminal for its device attributes and
    // discards everything it answers up to that reply: a terminal answers in order, so the
    // sandbox's answers come first, however slow the terminal or the link to it (ssh).
    // Then every terminal of fds 0-2 and /dev/tty has its unread input discarded.
    std::vector<int> ttys;
    for (int fd = 0; fd < 3; ++fd) {
        if (::isatty(fd) != 0) {
            ttys.push_back(fd);
        }
    }
    const int ctty = ::open("/dev/tty", O_RDWR | O_NOCTTY | O_NONBLOCK | O_CLOEXEC);
    if (ctty >= 0) {
        ttys.push_back(ctty);
    }
    if (!ttys.empty()) {
        drain_terminal_answers(ctty >= 0 ? ctty : ttys.front(), std::chrono::milliseconds(1500));
        for (const int fd : ttys) {
            (void)::tcflush(fd, TCIFLUSH);
        }
    }
    if (ctty >= 0) {
        ::close(ctty);
    }
}

}  // namespace cordon::shim
