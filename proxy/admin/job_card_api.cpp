#include "proxy/admin/job_card_api.hpp"

#include <boost/json.hpp>

#include <algorithm>

namespace cordon::proxy::admin {

boost::json::object job_card_json(const config::job& j) {
    namespace json = boost::json;
    json::object fs;
    fs["scratch"] = j.filesystem.scratch ? json::value(*j.filesystem.scratch) : json::value();
    json::array nw;
    for (const auto& p : j.filesystem.never_write) {
        nw.emplace_back(p);
    }
    fs["never_write"] = std::move(nw);
    fs["landlock"] = j.filesystem.landlock_optional ? "optional" : "required";
    json::array env;
    for (const auto& name : j.env) {
        const bool allow = std::find(j.env_allow_long_lived.begin(), j.env_allow_long_lived.end(),
                                     name) != j.env_allow_long_lived.end();
        env.push_back(json::object{{"name", name}, {"allow_long_lived", allow}});
    }
    json::object id;
    id["ttl_ms"] = j.identity.ttl.count();
    if (j.identity.mint) {
        json::object m{{"command", *j.identity.mint}};
        if (j.identity.mint_file) {
            m["file"] = *j.identity.mint_file;
        } else {
            m["env"] = j.identity.mint_env.value_or("CORDON_IDENTITY");
        }
        id["mint"] = std::move(m);
    } else {
        id["mint"] = nullptr;
    }
    id["revoke"] = j.identity.revoke ? json::value(*j.identity.revoke) : json::value();
    return json::object{{"job", j.name},
                        {"task", j.task},
                        {"mode", config::to_string(j.mode)},
                        {"filesystem", std::move(fs)},
                        {"env", std::move(env)},
                        {"identity", std::move(id)}};
}

}  // namespace cordon::proxy::admin
