#pragma once
// Audits writes in the sandbox's scratch dir: inotify on the scratch tmpfs (reached from
// the host through /proc/INIT/root), every subdirectory watched as it appears; each file
// closed after writing, or moved in, is reported with its size.

#include <cstdint>
#include <functional>
#include <string>

namespace boost::asio {
class io_context;
}

namespace cordon::shim {

/// Starts watching `host_path` (e.g. /proc/1234/root/scratch), reporting paths as the
/// sandbox sees them (`sandbox_path` + the relative name). At most 8192 directories are
/// watched (bounded kernel memory); beyond that a warning is printed once. Returns false
/// (and prints why) when inotify is unavailable. `on_write` runs on the io thread.
bool start_scratch_watch(boost::asio::io_context& ioc, const std::string& host_path,
                         const std::string& sandbox_path,
                         std::function<void(std::string path, std::uint64_t size)> on_write);

}  // namespace cordon::shim
