// webhook_retry: which answers are retried, the backoff schedule, Retry-After.
#include "proxy/alerts/webhook_retry.hpp"  // first: the header must compile on its own

#include <catch2/catch.hpp>
#include "common/time.hpp"

namespace {

using namespace cordon::proxy;
using namespace cordon::proxy::alerts;
using namespace cordon::common;
using namespace std::chrono_literals;
using std::chrono::milliseconds;

TEST_CASE("webhook_retry: outcome of a status", "[webhook_retry]") {
    CHECK(outcome_of_status(200) == delivery_outcome::delivered);
    CHECK(outcome_of_status(204) == delivery_outcome::delivered);
    CHECK(outcome_of_status(429) == delivery_outcome::retry);
    CHECK(outcome_of_status(500) == delivery_outcome::retry);
    CHECK(outcome_of_status(503) == delivery_outcome::retry);
    CHECK(outcome_of_status(301) == delivery_outcome::give_up);  // redirects are not followed
    CHECK(outcome_of_status(400) == delivery_outcome::give_up);
    CHECK(outcome_of_status(403) == delivery_outcome::give_up);
    CHECK(outcome_of_status(404) == delivery_outcome::give_up);
}

TEST_CASE("webhook_retry: exponential backoff with equal jitter", "[webhook_retry]") {
    // unit 0: the fixed half; unit -> 1: the full delay.
    CHECK(retry_delay(1, 0.0, {}) == 500ms);
    CHECK(retry_delay(1, 1.0, {}) == 1000ms);
    CHECK(retry_delay(2, 0.0, {}) == 1000ms);
    CHECK(retry_delay(2, 1.0, {}) == 2000ms);
    CHECK(retry_delay(3, 0.5, {}) == 3000ms);
    CHECK(retry_delay(5, 1.0, {}) == 16'000ms);
    CHECK(retry_delay(6, 1.0, {}) == 30'000ms);  // capped
    CHECK(retry_delay(60, 1.0, {}) == 30'000ms);
    CHECK(retry_delay(60, 0.0, {}) == 15'000ms);
    CHECK(retry_delay(1, 7.0, {}) == 1000ms);  // unit clamped
    // Every delay of a schedule lies within [half, full] of its step.
    for (unsigned attempt = 1; attempt <= 8; ++attempt) {
        for (double u : {0.0, 0.25, 0.5, 0.999}) {
            const auto d = retry_delay(attempt, u, {});
            const auto full = std::min<milliseconds>(30'000ms, 1000ms * (1 << (attempt - 1)));
            CHECK(d >= full / 2);
            CHECK(d <= full);
        }
    }
}

TEST_CASE("webhook_retry: Retry-After wins when longer, up to a cap", "[webhook_retry]") {
    CHECK(retry_delay(1, 0.0, 5s) == 5000ms);
    CHECK(retry_delay(1, 1.0, 100ms) == 1000ms);  // shorter than the backoff: backoff
    CHECK(retry_delay(1, 0.0, 1h) == max_retry_after);
}

TEST_CASE("webhook_retry: parse_retry_after", "[webhook_retry]") {
    const auto now = wall_clock::from_time_t(784'111'777);  // Sun, 06 Nov 1994 08:49:37 GMT
    CHECK(parse_retry_after("120", now) == milliseconds(120'000));
    CHECK(parse_retry_after(" 0 ", now) == milliseconds(0));
    CHECK(parse_retry_after("99999999999", now) == max_retry_after);
    CHECK(parse_retry_after("Sun, 06 Nov 1994 08:49:47 GMT", now) == milliseconds(10'000));
    CHECK(parse_retry_after("Sun, 06 Nov 1994 08:49:00 GMT", now) == milliseconds(0));  // past
    CHECK_FALSE(parse_retry_after("", now).has_value());
    CHECK_FALSE(parse_retry_after("-1", now).has_value());
    CHECK_FALSE(parse_retry_after("1.5", now).has_value());
    CHECK_FALSE(parse_retry_after("soon", now).has_value());
    CHECK_FALSE(parse_retry_after("Sun, 06 Xyz 1994 08:49:47 GMT", now).has_value());
    CHECK_FALSE(parse_retry_after("Sunday, 06-Nov-94 08:49:37 GMT", now).has_value());
}

}  // namespace
