// Fuzzes what etcd's JSON gateway hands cordon: the watch stream (fed whole, and cut in two at a
// point the input picks: both must give the same messages), every answer parser, and the copy
// of the fleet's state folding the events the stream yields. Nothing may crash, a message over
// the bound is refused, and base64 decoding round-trips.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

#include "proxy/control/etcd_codec.hpp"
#include "proxy/control/fleet_state.hpp"

namespace {

namespace etcd = cordon::proxy::control::etcd;

void check(bool ok, const char* what) {
    if (!ok) {
        std::fprintf(stderr, "invariant violated: %s\n", what);
        __builtin_trap();
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::string_view in(reinterpret_cast<const char*>(data), size);
    std::string error;
    etcd::header h;
    std::vector<etcd::key_value> kvs;
    bool more = false;
    bool ok = false;
    std::int64_t id = 0;
    std::int64_t ttl = 0;
    etcd::parse_put(in, h, error);
    etcd::parse_range(in, h, kvs, more, error);
    etcd::parse_txn(in, h, ok, error);
    etcd::parse_lease_grant(in, id, ttl, error);
    etcd::parse_keepalive(in, id, ttl, error);
    for (const auto& kv : kvs) {
        check(kv.key.size() <= etcd::max_key && kv.value.size() <= etcd::max_value, "kv bound");
    }
    if (auto d = etcd::base64_decode(in, 1 << 20)) {
        check(etcd::base64_encode(*d) == in, "base64 round trip");
    }

    const std::size_t cut = size == 0 ? 0 : data[0] % (size + 1);
    etcd::watch_stream whole(4096);
    etcd::watch_stream halves(4096);
    std::vector<etcd::watch_message> a;
    std::vector<etcd::watch_message> b;
    const auto sa = whole.feed(in, a, error);
    auto sb = halves.feed(in.substr(0, cut), b, error);
    if (sb != etcd::watch_stream::status::bad) {
        sb = halves.feed(in.substr(cut), b, error);
    }
    check((sa == etcd::watch_stream::status::bad) == (sb == etcd::watch_stream::status::bad),
          "a cut changes whether the stream is bad");
    if (sa != etcd::watch_stream::status::bad) {
        check(a.size() == b.size(), "a cut changes the messages");
    }
    cordon::proxy::control::fleet_state f;
    for (const auto& m : a) {
        for (const auto& e : m.events) {
            f.apply(e, "/cordon/");
        }
    }
    for (const auto& s : f.sessions()) {
        check(!s.id.empty(), "a session without an id");
    }
    return 0;
}
