#!/usr/bin/env bash
# Drives the real `cordon` binary: check-config on good and broken policies, --help,
# --version and usage errors. Usage: check_config_test.sh CORDON_BINARY SOURCE_DIR
set -uo pipefail
cordon=$1
src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
checks=0

expect() {  # expect DESCRIPTION CONDITION...
    local what=$1
    shift
    checks=$((checks + 1))
    if ! "$@"; then
        echo "FAIL: $what"
        fails=$((fails + 1))
    fi
}
contains() { grep -qF -- "$2" <<<"$1"; }

# Both examples pass, with a one-line summary on stdout and nothing on stderr.
for f in quickstart agent-fleet; do
    out=$("$cordon" check-config "$src/config/examples/$f.yaml" 2>"$tmp/err")
    rc=$?
    expect "$f.yaml passes" test "$rc" -eq 0
    expect "$f.yaml summary" contains "$out" "$f.yaml: ok:"
    expect "$f.yaml quiet stderr" test ! -s "$tmp/err"
    expect "$f.yaml one line" test "$(wc -l <<<"$out")" -eq 1
done
out=$("$cordon" check-config --config "$src/config/examples/agent-fleet.yaml")
expect "--config FILE form" contains "$out" "3 jobs, 10 egress rules"

# A broken policy: exit 1, every error as FILE:LINE:COL: message, in file order.
cat >"$tmp/broken.yaml" <<'YAML'
listen: { proxy: 127.0.0.1:70000 }
jobs:
  a:
    task: t
    egress:
      - { host: "a*.example.com", ports: [443] }
      - { host: example.com, ports: [] }
      - { cidr: 10.0.0.1/8, ports: [22], protocol: tcp }
      - { host: example.com, ports: [443], protocol: quic }
    identity: { ttl: 25h }
    colour: blue
YAML
"$cordon" check-config "$tmp/broken.yaml" >"$tmp/out" 2>"$tmp/err"
rc=$?
expect "broken exits 1" test "$rc" -eq 1
expect "broken prints nothing on stdout" test ! -s "$tmp/out"
err=$(cat "$tmp/err")
f="$tmp/broken.yaml"
expect "port range" contains "$err" "$f:1:18: listen.proxy: '70000' is not a port"
expect "wildcard" contains "$err" "$f:6:17: jobs.a.egress[0].host: 'a*.example.com'"
expect "empty ports" contains "$err" "$f:7:37: jobs.a.egress[1].ports: empty"
expect "host bits" contains "$err" "$f:8:17: jobs.a.egress[2].cidr: 10.0.0.1/8 has host bits set"
expect "protocol" contains "$err" "$f:9:54: jobs.a.egress[3].protocol: unknown protocol 'quic'"
expect "ttl" contains "$err" "$f:10:22: jobs.a.identity.ttl: '25h' is outside 1m..24h"
expect "unknown key" contains "$err" "$f:11:5: jobs.a: unknown key 'colour'"
expect "count" contains "$err" "$f: 7 errors"
expect "every line has a position" test "$(grep -cE "^$f:[0-9]+:[0-9]+: " <<<"$err")" -eq 7

# Whole-file problems get one clear error.
: >"$tmp/empty.yaml"
"$cordon" check-config "$tmp/empty.yaml" 2>"$tmp/err"
expect "empty exits 1" test $? -eq 1
expect "empty message" contains "$(cat "$tmp/err")" "policy is empty"
printf 'jobs: [unclosed\n' >"$tmp/notyaml.yaml"
"$cordon" check-config "$tmp/notyaml.yaml" 2>"$tmp/err"
expect "not YAML exits 1" test $? -eq 1
expect "not YAML message" contains "$(cat "$tmp/err")" "not valid YAML"
"$cordon" check-config "$tmp/missing.yaml" 2>"$tmp/err"
expect "missing file exits 1" test $? -eq 1
expect "missing file message" contains "$(cat "$tmp/err")" "cannot open"
head -c $((16 * 1024 * 1024 + 1)) /dev/zero | tr '\0' '#' >"$tmp/huge.yaml"
"$cordon" check-config "$tmp/huge.yaml" 2>"$tmp/err"
expect "huge exits 1" test $? -eq 1
expect "huge message" contains "$(cat "$tmp/err")" "larger than 16 MiB"
"$cordon" check-config - <"$src/config/examples/quickstart.yaml" >"$tmp/out"
expect "stdin" contains "$(cat "$tmp/out")" "<stdin>: ok:"

# Rules that open the unspecified range are refused: Linux connects 0.0.0.0 (and ::) to
# this host, so CONNECT 0.0.0.0:ADMIN_PORT reached cordon's own admin API (issue 17).
cat >"$tmp/zero.yaml" <<'YAML'
listen: { proxy: 127.0.0.1:3128, admin: 127.0.0.1:9090 }
admin: { token_file: /etc/cordon/admin.token }
jobs:
  a:
    task: t
    egress:
      - { cidr: 0.0.0.0/32, ports: [9090], protocol: tcp }
      - { cidr: "::/128", ports: [9090], protocol: tcp }
      - { cidr: 0.0.0.0/8, ports: [80], protocol: http }
      - { host: zero.example, ports: [443], resolves_to: [0.0.0.0/32] }
      - { cidr: 0.0.0.0/0, ports: [22], protocol: tcp }
YAML
"$cordon" check-config "$tmp/zero.yaml" >"$tmp/out" 2>"$tmp/err"
rc=$?
err=$(cat "$tmp/err")
f="$tmp/zero.yaml"
expect "unspecified exits 1" test "$rc" -eq 1
expect "0.0.0.0/32" contains "$err" \
    "$f:7:17: jobs.a.egress[0].cidr: 0.0.0.0/32 opens the unspecified range 0.0.0.0/32"
expect "::/128" contains "$err" "$f:8:17: jobs.a.egress[1].cidr: ::/128 opens the unspecified"
expect "0.0.0.0/8" contains "$err" "$f:9:17: jobs.a.egress[2].cidr: 0.0.0.0/8 opens the"
expect "resolves_to" contains "$err" \
    "$f:10:59: jobs.a.egress[3].resolves_to[0]: 0.0.0.0/32 opens the unspecified range"
expect "unspecified count (0.0.0.0/0 is fine)" contains "$err" "$f: 4 errors"
"$cordon" serve --config "$tmp/zero.yaml" >"$tmp/out" 2>"$tmp/err" &
serve_pid=$!
for _ in $(seq 50); do kill -0 "$serve_pid" 2>/dev/null || break; sleep 0.1; done
if kill -0 "$serve_pid" 2>/dev/null; then
    kill "$serve_pid"
    expect "serve refuses the same policy" false
fi
wait "$serve_pid"
expect "serve exits non-zero" test $? -ne 0
expect "serve says why" contains "$(cat "$tmp/err")" "opens the unspecified range"

# A rule an earlier one shadows (first match wins) is a warning, not an error.
cat >"$tmp/shadow.yaml" <<'YAML'
listen: { proxy: 127.0.0.1:3128 }
jobs:
  a:
    task: t
    egress:
      - { host: api.example.com, ports: [443] }
      - { host: api.example.com, ports: [443], protocol: tcp }
      - { host: api.example.com, ports: [80, 443], protocol: tcp }
YAML
out=$("$cordon" check-config "$tmp/shadow.yaml" 2>"$tmp/err")
rc=$?
err=$(cat "$tmp/err")
f="$tmp/shadow.yaml"
expect "shadowed exits 0" test "$rc" -eq 0
expect "shadowed summary" contains "$out" "shadow.yaml: ok: 1 job, 3 egress rules"
expect "shadowed warning" contains "$err" \
    "$f:7:9: warning: jobs.a.egress[1]: never matches: an earlier rule, jobs.a.egress[0] (api.example.com:443/tls, line 6)"
expect "partly shadowed warning" contains "$err" \
    "$f:8:9: warning: jobs.a.egress[2]: port 443 never matches:"
expect "two warnings" test "$(grep -c ': warning: ' <<<"$err")" -eq 2

# Help, version and usage errors.
out=$("$cordon" --help)
expect "--help exits 0" test $? -eq 0
expect "--help lists check-config" contains "$out" "check-config"
out=$("$cordon" check-config --help)
expect "verb --help" contains "$out" "usage: cordon check-config"
out=$("$cordon" --version)
expect "--version" grep -qE '^cordon [0-9]+\.[0-9]+\.[0-9]+$' <<<"$out"
"$cordon" frobnicate 2>"$tmp/err"
expect "unknown verb exits 2" test $? -eq 2
expect "unknown verb message" contains "$(cat "$tmp/err")" "unknown verb 'frobnicate'"
"$cordon" 2>/dev/null
expect "no verb exits 2" test $? -eq 2
"$cordon" check-config 2>"$tmp/err"
expect "missing FILE exits 2" test $? -eq 2
"$cordon" check-config --bogus x 2>"$tmp/err"
expect "unknown option exits 2" test $? -eq 2

echo "check-config: $((checks - fails)) passed, $fails failed"
[ "$fails" -eq 0 ]
