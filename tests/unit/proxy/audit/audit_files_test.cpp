// Tests of the audit log's file names and listing.
#include "proxy/audit/audit_files.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace {

using namespace cordon::proxy;
using namespace cordon::proxy::audit;
using namespace cordon::common;
using namespace std::chrono;
namespace fs = std::filesystem;

std::int64_t day_number(year_month_day ymd) { return sys_days{ymd}.time_since_epoch().count(); }

}  // namespace

TEST_CASE("audit files: names", "[audit_files]") {
    const std::int64_t d = day_number(2026y / 11 / 29);
    CHECK(audit_file_name({d, 0}) == "cordon-2026-11-29.jsonl");
    CHECK(audit_file_name({d, 1}) == "cordon-2026-11-29.p0001.jsonl");
    CHECK(audit_file_name({d, 9999}) == "cordon-2026-11-29.p9999.jsonl");
    for (const unsigned part : {0u, 1u, 42u, 9999u}) {
        const auto back = parse_audit_file_name(audit_file_name({d, part}));
        REQUIRE(back);
        CHECK(back->day == d);
        CHECK(back->part == part);
    }
    CHECK(parse_audit_file_name("cordon-1970-01-01.jsonl")->day == 0);
    CHECK(parse_audit_file_name("cordon-2024-02-29.jsonl"));
    for (const char* bad : {"cordon-2026-11-29.jsonl.gz", "cordon-2026-11-29.p0000.jsonl",
                            "cordon-2026-11-29.p1.jsonl", "cordon-2026-11-29.p10000.jsonl",
                            "cordon-2026-11-29.1.jsonl", "cordon-2026-11-29.q0001.jsonl",
                            "cordon-2026-11-29.p00a1.jsonl", "cordon-2026-11-29.p+001.jsonl",
                            "cordon-2026-13-01.jsonl", "cordon-2025-02-29.jsonl",
                            "cordon-+026-11-29.jsonl", "cordon-2026-1-029.jsonl",
                            "cordon-2026-11-29", "other-2026-11-29.jsonl", "cordon-.jsonl", ""}) {
        INFO(bad);
        CHECK_FALSE(parse_audit_file_name(bad));
    }
}

TEST_CASE("audit files: names sort in write order", "[audit_files]") {
    std::vector<std::string> names;
    for (const std::int64_t d :
         {day_number(2026y / 11 / 28), day_number(2026y / 11 / 29), day_number(2026y / 12 / 1)}) {
        for (const unsigned part : {0u, 1u, 2u, 10u, 123u, 9999u}) {
            names.push_back(audit_file_name({d, part}));
        }
    }
    std::vector<std::string> sorted = names;
    std::sort(sorted.begin(), sorted.end());
    CHECK(sorted == names);
}

TEST_CASE("audit files: listing", "[audit_files]") {
    std::string tmpl = "/tmp/cordon-audit-files-XXXXXX";
    REQUIRE(::mkdtemp(tmpl.data()) != nullptr);
    const fs::path dir = tmpl;
    const std::int64_t d = day_number(2026y / 11 / 29);
    for (const auto& name :
         {audit_file_name({d, 2}), audit_file_name({d + 1, 0}), audit_file_name({d, 0}),
          audit_file_name({d, 10}), audit_file_name({d, 1}), std::string("notes.txt")}) {
        std::ofstream(dir / name) << "{}\n";
    }
    fs::create_directory(dir / audit_file_name({d, 3}));                   // a directory
    fs::create_symlink(dir / "notes.txt", dir / audit_file_name({d, 4}));  // a symlink
    std::string error;
    const auto files = list_audit_files(dir.string(), error);
    CHECK(error.empty());
    std::vector<audit_file_id> ids;
    for (const auto& f : files) {
        ids.push_back(f.id);
        CHECK(f.size == 3);
        CHECK(fs::path(f.path).parent_path() == dir);
    }
    CHECK(ids == std::vector<audit_file_id>{{d, 0}, {d, 1}, {d, 2}, {d, 10}, {d + 1, 0}});

    const auto none = list_audit_files((dir / "missing").string(), error);
    CHECK(none.empty());
    CHECK_THAT(error, Catch::Contains("cannot read"));
    fs::remove_all(dir);
}
