"""Tests of the deployment files (issue 9): docker/ and deploy/. Docker does not run on the
development machines, so the compose file and the Dockerfile are parsed and their
invariants checked; the systemd units go through `systemd-analyze verify`.

Run: CORDON_BIN=build/cordon python3 -m unittest -v test_deploy   (from tests/integration)

- ComposeTest:     the sandbox network is internal; the agent is on it and on nothing else,
                   uses cordon for DNS and proxy; the admin listener is on mgmt only and
                   nothing of cordon is published; cordon's fixed addresses match the
                   policy's listen addresses; every mounted repository file exists;
                   Prometheus, Alertmanager and Grafana get the repo's scrape config, alert
                   rules, dashboard and provisioning; docker/policy.yaml passes check-config.
- DockerfileTest:  two stages (Debian 12 + scripts/setup, then debian:12-slim); USER
                   non-root, HEALTHCHECK, STOPSIGNAL SIGTERM, `cordon serve` entrypoint whose
                   flags `cordon serve --help` knows; the runtime stage installs exactly the
                   Debian packages of the libraries `ldd` lists for the built binary.
- HealthcheckTest: docker/healthcheck (the image's HEALTHCHECK) against a real cordon.
- SystemdTest:     deploy/*.service pass `systemd-analyze verify`, carry the hardening, and
                   cordon.service's exposure (`systemd-analyze security`) is at most 2.0.

YAML: PyYAML when this Python has it, else Debian's /usr/bin/python3 with python3-yaml
(scripts/setup installs it), so it runs under a pyenv python3 as on a fresh Debian 12.
"""

import json
import os
import re
import shlex
import shutil
import subprocess
import tempfile
import unittest

import harness as H

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DOCKER = os.path.join(REPO, "docker")
COMPOSE = os.path.join(DOCKER, "compose.yaml")
DOCKERFILE = os.path.join(DOCKER, "Dockerfile")
POLICY = os.path.join(DOCKER, "policy.yaml")
DEPLOY = os.path.join(REPO, "deploy")

try:
    import yaml as _yaml
except ImportError:  # a Python without PyYAML (pyenv): Debian's python3 parses for us
    _yaml = None


def load_yaml(path):
    with open(path, encoding="utf-8") as f:
        text = f.read()
    if _yaml is not None:
        return _yaml.safe_load(text)
    r = subprocess.run(
        ["/usr/bin/python3", "-c",
         "import json, sys, yaml; json.dump(yaml.safe_load(sys.stdin), sys.stdout)"],
        input=text.encode(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=30)
    if r.returncode != 0:
        raise AssertionError("no PyYAML here and /usr/bin/python3 could not parse "
                             f"{path} (scripts/setup installs python3-yaml): "
                             + r.stderr.decode(errors="replace"))
    return json.loads(r.stdout)


def serve_help_flags():
    r = subprocess.run([H.CORDON_BIN, "serve", "--help"], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, timeout=10)
    assert r.returncode == 0, r.stderr
    return set(re.findall(r"(?<![\w-])(--[a-z][a-z-]*)", r.stdout.decode()))


def host_port(text):
    host, _, port = text.rpartition(":")
    return host.strip("[]"), int(port)


# --------------------------------------------------------------------------------------
# Dockerfile
# --------------------------------------------------------------------------------------

def dockerfile_stages(path):
    """[(stage name, FROM image, [(INSTRUCTION, args text)])], continuation lines joined,
    comments dropped."""
    with open(path, encoding="utf-8") as f:
        raw = f.read().splitlines()
    lines, cur = [], ""
    for line in raw:
        s = line.strip()
        if not cur and (not s or s.startswith("#")):
            continue
        if cur and s.startswith("#"):
            continue
        if s.endswith("\\"):
            cur += s[:-1] + " "
            continue
        lines.append(cur + s)
        cur = ""
    stages = []
    for line in lines:
        instr, _, args = line.partition(" ")
        instr = instr.upper()
        if instr == "FROM":
            m = re.match(r"(\S+)(?:\s+AS\s+(\S+))?", args.strip(), re.I)
            stages.append((m.group(2) or str(len(stages)), m.group(1), []))
        else:
            stages[-1][2].append((instr, args.strip()))
    return stages


def instr_values(stage, name):
    return [a for i, a in stage[2] if i == name]


def exec_form(args):
    v = json.loads(args)
    assert isinstance(v, list) and all(isinstance(x, str) for x in v), args
    return v


def ldd_packages(binary):
    """The Debian packages (no :arch) owning the shared libraries `ldd binary` lists."""
    r = subprocess.run(["ldd", binary], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       timeout=30, check=True)
    pkgs = set()
    for line in r.stdout.decode().splitlines():
        m = re.search(r"=>\s*(/\S+)", line) or re.match(r"\s*(/\S+)", line)
        if not m:
            continue  # linux-vdso
        path = m.group(1)
        candidates = [path, os.path.realpath(path)]
        # merged /usr: dpkg knows the path the package ships, /lib or /usr/lib
        for p in list(candidates):
            if p.startswith("/usr/"):
                candidates.append(p[4:])
            else:
                candidates.append("/usr" + p)
        for p in candidates:
            q = subprocess.run(["dpkg", "-S", p], stdout=subprocess.PIPE,
                               stderr=subprocess.DEVNULL, timeout=30)
            if q.returncode == 0:
                pkgs.add(q.stdout.decode().split(":")[0].strip())
                break
        else:
            raise AssertionError(f"no Debian package owns {path} (ldd {binary})")
    return pkgs


class DockerfileTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.stages = dockerfile_stages(DOCKERFILE)
        cls.build = cls.stages[0]
        cls.runtime = cls.stages[-1]

    def test_two_stages_debian_12(self):
        self.assertEqual(len(self.stages), 2)
        self.assertEqual(self.build[1], "debian:12")
        self.assertEqual(self.runtime[1], "debian:12-slim")
        runs = " ".join(instr_values(self.build, "RUN"))
        self.assertIn("scripts/setup", runs)
        self.assertIn("--target cordon", runs)
        copies = instr_values(self.runtime, "COPY")
        self.assertTrue(any(c.startswith(f"--from={self.build[0]} ") for c in copies), copies)

    def test_copied_files_exist(self):
        for stage in self.stages:
            for c in instr_values(stage, "COPY"):
                parts = c.split()
                if parts[0].startswith("--from"):
                    continue
                for src in parts[:-1]:
                    if src != ".":
                        self.assertTrue(os.path.exists(os.path.join(REPO, src)), src)

    def test_user_healthcheck_stopsignal(self):
        users = instr_values(self.runtime, "USER")
        self.assertEqual(len(users), 1)
        user = users[0].split(":")[0]
        self.assertNotIn(user, ("0", "root"))
        hc = instr_values(self.runtime, "HEALTHCHECK")
        self.assertEqual(len(hc), 1)
        cmd = exec_form(hc[0].split("CMD", 1)[1].strip())
        copied = {c.split()[-1]: c.split()[-2] for c in instr_values(self.runtime, "COPY")}
        self.assertEqual(copied.get(cmd[0]), "docker/healthcheck")
        with open(os.path.join(DOCKER, "healthcheck")) as f:
            self.assertIn("/healthz", f.read())
        self.assertEqual(instr_values(self.runtime, "STOPSIGNAL"), ["SIGTERM"])

    def test_entrypoint_is_cordon_serve_with_known_flags(self):
        ep = exec_form(instr_values(self.runtime, "ENTRYPOINT")[-1])
        self.assertEqual([os.path.basename(ep[0])] + ep[1:], ["cordon", "serve"])
        cmd = exec_form(instr_values(self.runtime, "CMD")[-1])
        known = serve_help_flags()
        compose_cmd = load_yaml(COMPOSE)["services"]["cordon"].get("command", [])
        for flag in [a for a in cmd + compose_cmd if a.startswith("--")]:
            self.assertIn(flag, known, "not in `cordon serve --help`")

    def test_state_and_audit_are_volumes(self):
        vols = set()
        for v in instr_values(self.runtime, "VOLUME"):
            vols.update(exec_form(v))
        policy = load_yaml(POLICY)
        self.assertIn(policy["state"]["path"], vols)
        self.assertIn(policy["audit"]["path"], vols)

    def test_runtime_libraries_match_ldd(self):
        # The image builds with gcc and no sanitizers; a sanitizer build links more (clang
        # keeps libboost_container, for one), so it says nothing about the image.
        syms = subprocess.run(["nm", "-D", H.CORDON_BIN], stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL, timeout=60).stdout
        if b"__asan_init" in syms or b"__ubsan_handle" in syms:
            self.skipTest("CORDON_BIN is a sanitizer build; the image's library list is "
                          "checked against the main (gcc) build")
        runs = " ".join(instr_values(self.runtime, "RUN"))
        m = re.search(r"apt-get install\s+((?:-\S+\s+)*)([^&;]+)", runs)
        self.assertIsNotNone(m, "no apt-get install in the runtime stage")
        listed = set(m.group(2).split())
        need = ldd_packages(H.CORDON_BIN)
        self.assertEqual(listed, need,
                         f"runtime stage installs {sorted(listed)}; ldd of the binary "
                         f"needs {sorted(need)}")


# --------------------------------------------------------------------------------------
# compose.yaml
# --------------------------------------------------------------------------------------

def service_networks(svc):
    n = svc.get("networks", {})
    return {k: (v or {}) for k, v in n.items()} if isinstance(n, dict) else {k: {} for k in n}


class ComposeTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.c = load_yaml(COMPOSE)
        cls.services = cls.c["services"]
        cls.networks = cls.c["networks"]
        cls.policy = load_yaml(POLICY)
        cls.cordon = cls.services["cordon"]
        cls.cordon_nets = service_networks(cls.cordon)

    def ip_on(self, svc, net):
        return service_networks(self.services[svc])[net]["ipv4_address"]

    def test_networks(self):
        self.assertEqual(set(self.networks), {"sandbox", "egress", "mgmt"})
        self.assertIs(self.networks["sandbox"].get("internal"), True)
        self.assertIs(self.networks["mgmt"].get("internal"), True)
        self.assertFalse(self.networks["egress"].get("internal", False))
        self.assertEqual(set(self.cordon_nets), {"sandbox", "egress", "mgmt"})
        # Fixed addresses lie in their network's subnet.
        import ipaddress
        for net, cfg in self.cordon_nets.items():
            if "ipv4_address" in cfg:
                subnet = self.networks[net]["ipam"]["config"][0]["subnet"]
                self.assertIn(ipaddress.ip_address(cfg["ipv4_address"]),
                              ipaddress.ip_network(subnet))

    def test_agent_is_on_sandbox_only(self):
        agent = self.services["agent"]
        self.assertNotIn("network_mode", agent)
        self.assertEqual(set(service_networks(agent)), {"sandbox"})
        self.assertNotIn("ports", agent)
        self.assertEqual(agent.get("dns"), [self.ip_on("cordon", "sandbox")])
        env = agent.get("environment", {})
        self.assertIn("NO_PROXY", env)
        self.assertIn("no_proxy", env)
        # The proxy variables carry the session token: written by session-init, read here.
        self.assertIn(". /run/cordon-session/proxy.env", " ".join(agent["command"]))
        init = self.services["session-init"]
        init_cmd = " ".join(init["command"])
        for var in ("HTTPS_PROXY", "HTTP_PROXY", "https_proxy", "http_proxy"):
            self.assertIn(f"{var}=", init_cmd)
        self.assertIn("cordon session create agent", init_cmd)
        self.assertIn("agent", self.policy["jobs"])
        vol = lambda s: {m.split(":")[0]: m.split(":")[1] for m in s.get("volumes", [])}
        self.assertEqual(vol(agent).get("session"), "/run/cordon-session")
        self.assertEqual(vol(init).get("session"), "/run/cordon-session")
        self.assertEqual(init["depends_on"]["cordon"]["condition"], "service_healthy")
        self.assertEqual(agent["depends_on"]["session-init"]["condition"],
                         "service_completed_successfully")

    # The fleet profile's cordon replicas (docs/fleet.md) bridge `sandbox` as cordon does.
    REPLICAS = {"cordon-a": "docker/fleet/policy-a.yaml", "cordon-b": "docker/fleet/policy-b.yaml"}

    def test_only_cordon_bridges_sandbox(self):
        cordons = {"cordon"} | set(self.REPLICAS)
        on_sandbox = {n for n, s in self.services.items() if "sandbox" in service_networks(s)}
        self.assertEqual(on_sandbox, {"cordon", "agent"} | set(self.REPLICAS))
        for name, svc in self.services.items():
            nets = service_networks(svc)
            if name not in cordons and "sandbox" in nets:
                self.assertEqual(set(nets), {"sandbox"}, name)

    def test_fleet_replicas_listen_where_their_policies_say(self):
        self.assertNotIn("sandbox", service_networks(self.services["etcd"]))
        self.assertEqual(self.services["etcd"]["profiles"], ["fleet"])
        for name, rel in self.REPLICAS.items():
            svc = self.services[name]
            self.assertEqual(svc["profiles"], ["fleet"], name)
            self.assertEqual(set(service_networks(svc)), {"sandbox", "egress", "mgmt"}, name)
            pol = load_yaml(os.path.join(os.path.dirname(COMPOSE), "..", rel))
            ip = self.ip_on(name, "sandbox")
            self.assertEqual(host_port(pol["listen"]["proxy"])[0], ip, name)
            self.assertNotEqual(host_port(pol["listen"]["admin"])[0], ip, name)
            self.assertEqual(pol["cluster"]["instance"], name, name)
            r = subprocess.run([H.CORDON_BIN, "check-config",
                                os.path.join(os.path.dirname(COMPOSE), "..", rel)],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               timeout=60)
            self.assertEqual(r.returncode, 0, r.stdout)

    def test_listeners_where_the_policy_says(self):
        listen = self.policy["listen"]
        sandbox_ip = self.ip_on("cordon", "sandbox")
        mgmt_ip = self.ip_on("cordon", "mgmt")
        self.assertEqual(host_port(listen["proxy"])[0], sandbox_ip)
        self.assertEqual(host_port(listen["dns"]), (sandbox_ip, 53))  # `dns:` means port 53
        admin_host, admin_port = host_port(listen["admin"])
        self.assertEqual(admin_host, mgmt_ip)
        self.assertNotEqual(admin_host, sandbox_ip)
        self.assertNotIn(admin_host, ("0.0.0.0", "::"))
        # Nothing of cordon is published, and no service publishes the admin port.
        self.assertNotIn("ports", self.cordon)
        for name, svc in self.services.items():
            for p in svc.get("ports", []):
                self.assertFalse(str(p).endswith(f":{admin_port}"), (name, p))
                self.assertTrue(str(p).startswith("127.0.0.1:"), (name, p))
        # The healthcheck asks the admin listener.
        self.assertEqual(self.cordon["environment"]["CORDON_ADMIN"],
                         f"http://{admin_host}:{admin_port}")

    def test_mounted_repo_files_exist(self):
        declared = set(self.c.get("volumes", {}))
        for name, svc in self.services.items():
            for m in svc.get("volumes", []):
                src = m.split(":")[0]
                if src.startswith((".", "/")):
                    path = os.path.normpath(os.path.join(DOCKER, src))
                    self.assertTrue(os.path.exists(path), f"{name}: {src}")
                    self.assertTrue(path.startswith(REPO + os.sep), f"{name}: {src}")
                else:
                    self.assertIn(src, declared, f"{name}: undeclared volume {src}")
            build = svc.get("build")
            if build:
                ctx = os.path.normpath(os.path.join(DOCKER, build["context"]))
                self.assertTrue(os.path.isfile(os.path.join(ctx, build["dockerfile"])))

    def test_prometheus_alertmanager_grafana(self):
        prom = self.services["prometheus"]
        mounts = {m.split(":")[1]: m.split(":")[0] for m in prom["volumes"]}
        self.assertEqual(mounts["/etc/prometheus/prometheus.yml"], "./prometheus.yml")
        self.assertEqual(mounts["/etc/prometheus/alerts.yaml"], "../dashboards/alerts.yaml")
        self.assertEqual(set(service_networks(prom)), {"mgmt"})
        # The scrape config is dashboards/prometheus.yml but for the token file's path, which
        # is the admin-token volume cordon reads its token from.
        mine = load_yaml(os.path.join(DOCKER, "prometheus.yml"))
        theirs = load_yaml(os.path.join(REPO, "dashboards", "prometheus.yml"))
        cred = mine["scrape_configs"][0]["authorization"].pop("credentials_file")
        theirs["scrape_configs"][0]["authorization"].pop("credentials_file")
        self.assertEqual(mine, theirs)
        self.assertEqual(mine["rule_files"], ["alerts.yaml"])
        token_dir = os.path.dirname(self.policy["admin"]["token_file"])
        self.assertEqual(os.path.dirname(cred), token_dir)
        self.assertEqual(mounts[token_dir], "admin-token")
        target = mine["scrape_configs"][0]["static_configs"][0]["targets"][0]
        self.assertEqual(target, f"cordon:{host_port(self.policy['listen']['admin'])[1]}")
        am_target = mine["alerting"]["alertmanagers"][0]["static_configs"][0]["targets"][0]
        self.assertTrue(am_target.startswith("alertmanager:"))
        self.assertIn("mgmt", service_networks(self.services["alertmanager"]))

        graf = self.services["grafana"]
        gm = {m.split(":")[1]: m.split(":")[0] for m in graf["volumes"]}
        self.assertEqual(gm["/etc/grafana/provisioning/datasources"],
                         "../dashboards/provisioning/datasources")
        self.assertEqual(gm["/etc/grafana/provisioning/dashboards"],
                         "../dashboards/provisioning/dashboards")
        prov = load_yaml(os.path.join(REPO, "dashboards/provisioning/dashboards/cordon.yaml"))
        path = prov["providers"][0]["options"]["path"]
        self.assertEqual(gm[path + "/cordon.json"], "../dashboards/cordon.json")
        ds = load_yaml(os.path.join(REPO, "dashboards/provisioning/datasources/prometheus.yaml"))
        self.assertEqual(ds["datasources"][0]["url"], "http://prometheus:9090")
        self.assertIn("mgmt", service_networks(graf))

    @unittest.skipUnless(shutil.which("promtool"), "promtool not found (scripts/setup)")
    def test_prometheus_config_loads(self):
        # As mounted: alerts.yaml beside it; the token file at a path that exists here.
        with tempfile.TemporaryDirectory(prefix="cordon-it-prom-") as d:
            shutil.copy(os.path.join(REPO, "dashboards", "alerts.yaml"), d)
            token = os.path.join(d, "admin.token")
            with open(token, "w") as f:
                f.write("x" * 32)
            with open(os.path.join(DOCKER, "prometheus.yml")) as f:
                text = f.read()
            cred = self.policy["admin"]["token_file"]
            self.assertIn(f"credentials_file: {cred}\n", text)
            with open(os.path.join(d, "prometheus.yml"), "w") as f:
                f.write(text.replace(cred, token))
            r = subprocess.run(["promtool", "check", "config",
                                os.path.join(d, "prometheus.yml")],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=60)
            self.assertEqual(r.returncode, 0, r.stdout.decode())

    def test_policy_passes_check_config(self):
        r = subprocess.run([H.CORDON_BIN, "check-config", POLICY], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, timeout=30)
        self.assertEqual(r.returncode, 0, r.stderr.decode())
        self.assertEqual(self.cordon["volumes"][0], "./policy.yaml:/etc/cordon/policy.yaml:ro")

    def test_firewall_for_the_docker_host(self):
        # docs/deploy.md: the host-side rules for the compose sandbox network, on its bridge
        # (named in compose.yaml) and its prefix, exactly as the docs give the command.
        subnet = self.networks["sandbox"]["ipam"]["config"][0]["subnet"]
        bridge = self.networks["sandbox"]["driver_opts"]["com.docker.network.bridge.name"]
        with open(os.path.join(REPO, "docs", "deploy.md")) as f:
            self.assertIn(f"--sandbox-iface {bridge} \\\n    --sandbox-cidr {subnet} --apply",
                          f.read())
        r = subprocess.run([H.CORDON_BIN, "firewall", "--policy", POLICY, "--sandbox-iface",
                            bridge, "--sandbox-cidr", subnet], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, timeout=30)
        self.assertEqual(r.returncode, 0, r.stderr.decode())
        self.assertNotIn("source address only", r.stderr.decode())
        out = r.stdout.decode()
        self.assertIn(f'iifname "{bridge}" jump sandbox_iface', out)
        ip = self.ip_on("cordon", "sandbox")
        self.assertIn(f"ip daddr {ip} tcp dport 3128 accept", out)
        self.assertIn(f"ct direction reply ip saddr {ip} tcp sport 3128 accept", out)
        self.assertNotIn("9090", out)


# --------------------------------------------------------------------------------------
# docker/healthcheck against a real cordon
# --------------------------------------------------------------------------------------

class HealthcheckTest(unittest.TestCase):

    def test_healthcheck_script(self):
        c = H.Cordon("  web:\n    task: the healthcheck test\n    egress: []\n", dns_port=9)
        try:
            c.start()
            script = os.path.join(DOCKER, "healthcheck")
            host, port = c.admin_addr

            def run(url):
                env = dict(os.environ, CORDON_ADMIN=url)
                return subprocess.run(["bash", script], env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, timeout=15)
            r = run(f"http://{host}:{port}")
            self.assertEqual(r.returncode, 0, r.stderr.decode())
            self.assertNotEqual(run(f"http://{host}:{H.free_port()}").returncode, 0)
            self.assertNotEqual(run("ftp://x").returncode, 0)
        finally:
            c.cleanup()


class ComposeScriptsTest(unittest.TestCase):
    """The one-shot services' shell scripts, run here with their paths moved to a temp dir
    (compose's `$$` is a literal `$`)."""

    @classmethod
    def setUpClass(cls):
        cls.services = load_yaml(COMPOSE)["services"]

    def script(self, service, moves):
        svc = self.services[service]
        self.assertEqual(svc["entrypoint"], ["/bin/sh", "-c"])
        text = svc["command"][0].replace("$$", "$")
        for a, b in moves.items():
            text = text.replace(a, b)
        return text

    @unittest.skipUnless(os.geteuid() == 0, "chown to cordon's uid needs root")
    def test_admin_token(self):
        with tempfile.TemporaryDirectory(prefix="cordon-it-tok-") as d:
            text = self.script("admin-token", {"/run/cordon-admin": d})
            for _ in range(2):  # the second run keeps the token
                r = subprocess.run(["sh", "-c", text], stderr=subprocess.PIPE, timeout=20)
                self.assertEqual(r.returncode, 0, r.stderr.decode())
                st = os.stat(os.path.join(d, "admin.token"))
                with open(os.path.join(d, "admin.token")) as f:
                    token = f.read()
                if _ == 0:
                    first = token
            self.assertEqual(token, first)
            self.assertRegex(token, r"^[0-9a-f]{64}$")
            self.assertEqual((st.st_uid, st.st_gid, st.st_mode & 0o777), (10001, 65534, 0o640))
            dst = os.stat(d)
            self.assertEqual((dst.st_uid, dst.st_gid, dst.st_mode & 0o777),
                             (10001, 65534, 0o750))

    def test_session_init_writes_the_proxy_variables(self):
        c = H.Cordon("  agent:\n    task: the session-init test\n    egress: []\n"
                     "    identity: { ttl: 30m }\n", dns_port=9)
        with tempfile.TemporaryDirectory(prefix="cordon-it-sess-") as d:
            try:
                c.start()
                bindir = os.path.join(d, "bin")
                os.mkdir(bindir)
                os.symlink(os.path.abspath(H.CORDON_BIN), os.path.join(bindir, "cordon"))
                out = os.path.join(d, "session")
                os.mkdir(out)
                text = self.script("session-init", {"/run/cordon-session": out})
                host, port = c.admin_addr
                env = dict(os.environ, PATH=bindir + os.pathsep + os.environ["PATH"],
                           CORDON_ADMIN=f"http://{host}:{port}",
                           CORDON_ADMIN_TOKEN_FILE=c.token_file)
                r = subprocess.run(["sh", "-c", text], env=env, stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, timeout=30)
                self.assertEqual(r.returncode, 0, r.stderr.decode())
                penv = os.path.join(out, "proxy.env")
                self.assertEqual(os.stat(penv).st_mode & 0o777, 0o600)
                # What the agent's command does with it.
                agent = self.services["agent"]["command"][0].replace(
                    "/run/cordon-session", out).replace("exec sleep infinity",
                                                        "env")
                r = subprocess.run(["sh", "-c", agent], stdout=subprocess.PIPE, timeout=10,
                                   env={"PATH": os.environ["PATH"]})
                got = dict(line.split("=", 1) for line in r.stdout.decode().splitlines()
                           if "=" in line)
                url = got["HTTPS_PROXY"]
                pport = c.proxy_addr[1]
                self.assertRegex(url, rf"^http://[^:@]+:[^:@]+@127\.0\.0\.1:{pport}$")
                for var in ("HTTP_PROXY", "https_proxy", "http_proxy"):
                    self.assertEqual(got[var], url)
                sid = url.split("//")[1].split(":")[0]
                self.assertEqual(c.admin("GET", f"/v1/sessions/{sid}")[0], 200)
            finally:
                c.cleanup()


# --------------------------------------------------------------------------------------
# systemd units
# --------------------------------------------------------------------------------------

def unit_settings(path):
    out = {}
    with open(path) as f:
        for line in f:
            s = line.strip()
            if s and not s.startswith(("#", ";", "[")) and "=" in s:
                k, _, v = s.partition("=")
                out.setdefault(k, []).append(v)
    return out


@unittest.skipUnless(shutil.which("systemd-analyze"),
                     "systemd-analyze not found (Debian package systemd: scripts/setup)")
class SystemdTest(unittest.TestCase):

    def setUp(self):
        # The units name /usr/local/bin/cordon, which verify wants to exist: check copies
        # that name the binary under test instead.
        self.tmp = tempfile.mkdtemp(prefix="cordon-it-units-")
        self.addCleanup(shutil.rmtree, self.tmp, True)
        self.units = {}
        for name in ("cordon.service", "cordon-firewall.service"):
            with open(os.path.join(DEPLOY, name)) as f:
                text = f.read()
            path = os.path.join(self.tmp, name)
            with open(path, "w") as f:
                f.write(text.replace("/usr/local/bin/cordon", os.path.abspath(H.CORDON_BIN)))
            self.units[name] = path

    def test_verify(self):
        r = subprocess.run(["systemd-analyze", "verify"] + list(self.units.values()),
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr.decode() + r.stdout.decode())
        self.assertEqual(r.stderr.decode().strip(), "")

    def test_exposure(self):
        r = subprocess.run(["systemd-analyze", "security", "--offline=yes", "--threshold=20",
                            self.units["cordon.service"]],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60)
        self.assertEqual(r.returncode, 0, r.stdout.decode()[-3000:])

    def test_hardening(self):
        s = unit_settings(os.path.join(DEPLOY, "cordon.service"))
        self.assertTrue(s.get("DynamicUser") == ["yes"] or "User" in s)
        for key, want in [("ProtectSystem", "strict"), ("ProtectHome", "yes"),
                          ("NoNewPrivileges", "yes"), ("StateDirectory", "cordon"),
                          ("LogsDirectory", "cordon"), ("PrivateTmp", "yes"),
                          ("KillSignal", "SIGTERM")]:
            self.assertEqual(s.get(key), [want], key)
        self.assertEqual(s["CapabilityBoundingSet"], ["CAP_NET_BIND_SERVICE"])
        self.assertEqual(set(s["RestrictAddressFamilies"][0].split()),
                         {"AF_INET", "AF_INET6", "AF_UNIX"})
        self.assertIn("@system-service", s["SystemCallFilter"])
        # The serve flags exist; the token comes through LoadCredential, not /etc.
        argv = shlex.split(s["ExecStart"][0])
        self.assertEqual(argv[1], "serve")
        known = serve_help_flags()
        for flag in [a for a in argv if a.startswith("--")]:
            self.assertIn(flag, known)
        self.assertEqual(s["LoadCredential"], ["admin.token:/etc/cordon/admin.token"])
        fw = unit_settings(os.path.join(DEPLOY, "cordon-firewall.service"))
        self.assertIn("firewall", fw["ExecStart"][0])
        self.assertIn("--apply", fw["ExecStart"][0])
        self.assertEqual(fw["CapabilityBoundingSet"], ["CAP_NET_ADMIN"])


if __name__ == "__main__":
    unittest.main()
