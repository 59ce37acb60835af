#pragma once
// Following the admin API's event stream (GET /v1/events?session=ID, Server-Sent Events)
// for the kills that concern one session. The parser and the decision are pure; the
// follower (Asio, in the .cpp) reconnects with Last-Event-ID and fails closed when the
// admin API stays unreachable longer than a grace period.

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace boost::asio {
class io_context;
}

namespace cordon::shim {

struct sse_event {
    std::string id;
    std::string type;
    std::string data;
};

/// Incremental text/event-stream parser: feed it bytes as they come (lines may be split
/// anywhere, CRLF or LF); complete events are appended to `out`, id-only blocks included
/// (empty type and data: they move the resume point). Comment lines (":") are ignored. A
/// line above 64 KiB is cut (bounded memory).
class sse_parser {
public:
    void feed(std::string_view bytes, std::vector<sse_event>& out);

private:
    void line(std::string_view l, std::vector<sse_event>& out);
    std::string partial_;
    sse_event current_;
};

/// Why `e` must stop the agent of `session`, or nullopt: a kill of this session, its end,
/// or a network kill. The text is for the operator ("session killed by ops: runaway").
std::optional<std::string> kill_reason(const sse_event& e, std::string_view session);

/// Why a `resume.lost` event must stop the agent of `session`, or nullopt. cordon sends it
/// first when it cannot resume the stream from our Last-Event-ID (its store was reset, the
/// id is beyond its last or too old): what happened in the gap is unknown, so the event
/// carries the state now and the agent is stopped when the network kill is engaged, the
/// session is not active (or unknown to cordon), the kill state changed within `down_for`
/// (how long the stream was down, plus a second: a kill and revive in the gap), or the
/// event cannot be read (fail closed).
std::optional<std::string> resume_lost_reason(const sse_event& e, std::string_view session,
                                              std::chrono::milliseconds down_for);

struct follow_options {
    std::string host;  ///< admin API address (numeric or /etc/hosts name)
    std::string port;
    std::string token;  ///< the admin token
    std::string session;
    std::chrono::milliseconds grace{10'000};  ///< unreachable this long: fail closed
};

/// Follows the stream on `ioc`. `on_kill(reason)` is called once, from the io thread, on a
/// kill event or when the admin API has been unreachable for `grace`. `on_connected` is
/// called after every (re)connection once the stream is open.
void start_follow(boost::asio::io_context& ioc, const follow_options& o,
                  std::function<void(std::string)> on_kill,
                  std::function<void()> on_connected = {});

}  // namespace cordon::shim
