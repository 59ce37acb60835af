#include "proxy/mcp/sse.hpp"

#include <string>

namespace cordon::proxy::mcp {

bool sse_filter::feed(std::string_view chunk, std::string& out) {
    if (failed_) {
        return false;
    }
    pending_.append(chunk);
    if (!started_) {
        // A stream may begin with U+FEFF, which clients skip: so does the parse.
        static constexpr std::string_view bom = "\xEF\xBB\xBF";
        if (pending_.size() < bom.size() && bom.starts_with(pending_)) {
            return true;
        }
        started_ = true;
        if (pending_.starts_with(bom)) {
            scanned_ = line_ = skip_ = bom.size();
        }
    }
    while (scanned_ < pending_.size()) {
        const char c = pending_[scanned_];
        if (skip_lf_) {
            skip_lf_ = false;
            if (c == '\n') {
                if (scanned_ == 0) {
                    // The LF of the CRLF that ended the last event, read after it went: it
                    // belongs to that event, as it would have had it come in one read (a
                    // rewritten event ended with its own line break).
                    if (!last_rewritten_) {
                        out.push_back('\n');
                    }
                    pending_.erase(0, 1);
                    continue;
                }
                ++scanned_;
                line_ = scanned_;
                continue;
            }
        }
        if (c != '\r' && c != '\n') {
            ++scanned_;
            continue;
        }
        const std::size_t begin = line_;
        const std::size_t end = scanned_;
        ++scanned_;
        skip_lf_ = c == '\r';
        line_ = scanned_;
        if (begin == end) {
            // A blank line: the event ends. A CR whose LF is still to come stays pending
            // with the next event's bytes, which is where a client reads it too.
            if (!event_done(out)) {
                return false;
            }
            continue;
        }
        if (!line_done(begin, end)) {
            failed_ = true;
            return false;
        }
    }
    if (pending_.size() > max_event_) {
        failed_ = true;
        error_ = "an event of more than " + std::to_string(max_event_) + " bytes";
        return false;
    }
    return true;
}

bool sse_filter::line_done(std::size_t begin, std::size_t end) {
    const std::string_view line(pending_.data() + begin, end - begin);
    if (line.front() == ':') {
        return true;  // a comment
    }
    const std::size_t colon = line.find(':');
    const std::string_view field = line.substr(0, colon);
    if (field == "event" || field == "id" || field == "retry") {
        return true;
    }
    if (field != "data") {
        // A field the standard names nowhere: clients ignore it, or (some parsers strip
        // what they take for a byte order mark, "\xC3\xAF\xC2\xBB\xC2\xBF" among them) read
        // data in it that cordon did not. Nothing a server needs: refused.
        error_ = "an event field cordon does not know (only data, event, id, retry and "
                 "comments)";
        return false;
    }
    std::string_view value = colon == std::string_view::npos ? std::string_view()
                                                             : line.substr(colon + 1);
    if (value.starts_with(' ')) {
        value.remove_prefix(1);
    }
    if (has_data_) {
        data_.push_back('\n');
    }
    data_.append(value);
    has_data_ = true;
    return true;
}

bool sse_filter::event_done(std::string& out) {
    // The event's bytes: from the start of pending_ to the end of the blank line.
    std::size_t end = scanned_;
    if (skip_lf_ && end < pending_.size() && pending_[end] == '\n') {
        ++end;
        ++scanned_;
        skip_lf_ = false;
    }
    if (end > max_event_) {
        // The bound holds however the event arrived: in many reads or in one.
        failed_ = true;
        error_ = "an event of more than " + std::to_string(max_event_) + " bytes";
        return false;
    }
    const std::string_view raw(pending_.data(), end);
    verdict v = verdict::pass;
    std::string replacement;
    const std::size_t out_before = out.size();
    if (has_data_ && !data_.empty()) {  // an empty data buffer is never dispatched
        ++events_;
        v = on_event_(data_, replacement);
    }
    if (v == verdict::refuse) {
        failed_ = true;
        error_ = replacement.empty() ? "an event cordon cannot pass on" : replacement;
        return false;
    }
    if (v == verdict::pass) {
        out.append(raw);
    } else {
        // The other fields as they came, then the new data on one line (JSON text as
        // Boost.JSON writes it has no line breaks).
        std::size_t i = skip_;
        while (i < raw.size()) {
            std::size_t j = raw.find_first_of("\r\n", i);
            if (j == std::string_view::npos) {
                j = raw.size();
            }
            const std::string_view line = raw.substr(i, j - i);
            if (!line.empty() && line.substr(0, line.find(':')) != "data") {
                out.append(line);
                out.push_back('\n');
            }
            i = j + (j + 1 < raw.size() && raw[j] == '\r' && raw[j + 1] == '\n' ? 2 : 1);
        }
        out.append("data: ");
        out.append(replacement);
        out.append("\n\n");
    }
    if (v == verdict::rewrite && skip_ > 0) {
        // The byte order mark stays where it was: first in the stream.
        out.insert(out_before, "\xEF\xBB\xBF");
    }
    skip_ = 0;
    last_rewritten_ = v == verdict::rewrite;
    pending_.erase(0, end);
    scanned_ -= end;
    line_ = scanned_;
    data_.clear();
    has_data_ = false;
    return true;
}

}  // namespace cordon::proxy::mcp
