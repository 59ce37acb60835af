#pragma once
// The verbs of the `cordon` binary. Each takes the arguments after the verb and returns
// the process exit code: 0 success, 1 failure, 2 usage error.

#include <span>
#include <string_view>

namespace cordon::cli {

/// Arguments after the verb name.
using args = std::span<const std::string_view>;

int check_config(args a);
int serve(args a);
int session(args a);
int status(args a);
int kill(args a);
int revive(args a);
int token(args a);
int audit(args a);
int run(args a);
int worksheet(args a);
int firewall(args a);
int policy(args a);
int ca(args a);
int connect(args a);

/// True when `a` asks for help ("-h" or "--help").
bool wants_help(args a);

}  // namespace cordon::cli
