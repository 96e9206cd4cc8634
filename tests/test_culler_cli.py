"""Command line of the GPU-aware idle culler: idle-culler compatible flags and the policy file."""
from __future__ import annotations

import textwrap

import pytest

from gpuspawner.culler.cli import (
    IDLE_CULLER_DEFAULTS, PolicyFileError, default_cull_every, load_policy_file, parse_args,
    parse_duration,
)
from gpuspawner.culler.decide import Policy, PolicyRule, Server, resolve_policy, utcnow

M, H = 60, 3600


def parse(*argv, env=None):
    return parse_args(list(argv), env={} if env is None else env)


# ------------------------------------------------------------------------------------- defaults

def test_defaults_equal_jupyterhub_idle_culler():
    # Read from jupyterhub-idle-culler 2.0.0 (IdleCuller traits): timeout 600, cull_every 0 →
    # timeout // 2, concurrency 10, max_age 0, cull_users False, remove_named_servers False,
    # cull_admin_users True, cull_default_servers True, cull_named_servers True, api_page_size 0,
    # internal_certs_location "internal-ssl", ssl_enabled False, url $JUPYTERHUB_API_URL.
    assert IDLE_CULLER_DEFAULTS == {
        "url": None, "timeout": 600, "cull_every": 0, "concurrency": 10, "max_age": 0,
        "cull_users": False, "remove_named_servers": False, "cull_admin_users": True,
        "cull_default_servers": True, "cull_named_servers": True, "api_page_size": 0,
        "internal_certs_location": "internal-ssl", "ssl_enabled": False,
    }
    policy, rules, opts = parse()
    assert rules == []
    assert policy == Policy(idle_timeout=600)
    assert (policy.max_age, policy.cull_users, policy.remove_named_servers,
            policy.cull_admin_users, policy.cull_default_servers,
            policy.cull_named_servers) == (0, False, False, True, True, True)
    assert (policy.gpu_idle_timeout, policy.gpu_idle_threshold_pct, policy.warn_before) == (0, 5, 0)
    assert opts.cull_every == 300 and opts.concurrency == 10 and opts.api_page_size == 0
    assert opts.internal_certs_location == "internal-ssl" and opts.ssl_enabled is False
    assert opts.url is None and opts.dry_run is False and opts.policy_file is None


def test_url_defaults_to_the_hub_environment():
    env = {"JUPYTERHUB_API_URL": "http://hub:8081/hub/api"}
    assert parse(env=env)[2].url == "http://hub:8081/hub/api"
    assert parse("--url=http://other/hub/api", env=env)[2].url == "http://other/hub/api"


# -------------------------------------------------------------------------- both flag syntaxes

VALUE_FLAGS = [
    ("--timeout", "3600", lambda p, r, o: p.idle_timeout, 3600),
    ("--cull-every", "120", lambda p, r, o: o.cull_every, 120),
    ("--concurrency", "4", lambda p, r, o: o.concurrency, 4),
    ("--max-age", "86400", lambda p, r, o: p.max_age, 86400),
    ("--api-page-size", "200", lambda p, r, o: o.api_page_size, 200),
    ("--internal-certs-location", "/srv/ssl", lambda p, r, o: o.internal_certs_location,
     "/srv/ssl"),
    ("--url", "http://127.0.0.1:8081/hub/api", lambda p, r, o: o.url,
     "http://127.0.0.1:8081/hub/api"),
    ("--gpu-timeout", "2h", lambda p, r, o: p.gpu_idle_timeout, 2 * H),
    ("--gpu-threshold", "10", lambda p, r, o: p.gpu_idle_threshold_pct, 10),
    ("--gpu-threshold", "2.5%", lambda p, r, o: p.gpu_idle_threshold_pct, 2.5),
    ("--gpu-max-gap", "90s", lambda p, r, o: p.gpu_max_gap, 90),
    ("--warn-before", "1h30m", lambda p, r, o: p.warn_before, 90 * M),
]


@pytest.mark.parametrize("syntax", ["equals", "space"])
@pytest.mark.parametrize("flag, value, get, expected", VALUE_FLAGS,
                         ids=[f"{f[0]} {f[1]}" for f in VALUE_FLAGS])
def test_value_flags_in_both_syntaxes(syntax, flag, value, get, expected):
    argv = [f"{flag}={value}"] if syntax == "equals" else [flag, value]
    assert get(*parse(*argv)) == expected


BOOL_FLAGS = [
    ("--cull-users", lambda p, o: p.cull_users, False),
    ("--remove-named-servers", lambda p, o: p.remove_named_servers, False),
    ("--cull-admin-users", lambda p, o: p.cull_admin_users, True),
    ("--cull-default-servers", lambda p, o: p.cull_default_servers, True),
    ("--cull-named-servers", lambda p, o: p.cull_named_servers, True),
    ("--ssl-enabled", lambda p, o: o.ssl_enabled, False),
    ("--dry-run", lambda p, o: o.dry_run, False),
]
BOOL_SPELLINGS = [
    ([], None),                       # default
    (["{f}"], True),                  # tornado: bare flag
    (["{f}=True"], True), (["{f}=true"], True), (["{f}=1"], True), (["{f}=yes"], True),
    (["{f}=False"], False), (["{f}=false"], False), (["{f}=0"], False), (["{f}=off"], False),
    (["{f}", "false"], False), (["{f}", "True"], True),
]


@pytest.mark.parametrize("spelling, expected", BOOL_SPELLINGS,
                         ids=[" ".join(s) or "default" for s, _ in BOOL_SPELLINGS])
@pytest.mark.parametrize("flag, get, default", BOOL_FLAGS, ids=[b[0] for b in BOOL_FLAGS])
def test_boolean_flags(flag, get, default, spelling, expected):
    policy, _, opts = parse(*[s.format(f=flag) for s in spelling])
    assert get(policy, opts) is (default if expected is None else expected)


@pytest.mark.parametrize("argv", [
    ["--cull_users", "--cull_admin_users=False", "--max_age=100"],            # tornado.options
    ["--IdleCuller.cull_users=True", "--IdleCuller.cull_admin_users=false",   # traitlets
     "--IdleCuller.max_age=100"],
    ["--cull-users", "--cull-admin-users", "false", "--max-age", "100"],
])
def test_tornado_and_traitlets_spellings(argv):
    policy, _, _ = parse(*argv)
    assert (policy.cull_users, policy.cull_admin_users, policy.max_age) == (True, False, 100)


def test_bare_boolean_followed_by_another_flag():
    policy, _, opts = parse("--cull-users", "--timeout=60", "--dry-run")
    assert policy.cull_users is True and policy.idle_timeout == 60 and opts.dry_run is True


def test_a_hub_services_entry_of_the_stock_culler_parses():
    # the command line from jupyterhub-idle-culler's README
    policy, _, opts = parse("--timeout=3600", "--cull-every=300", "--concurrency=5",
                            "--max-age=0", "--cull-users=False", "--remove-named-servers=True")
    assert (policy.idle_timeout, opts.cull_every, opts.concurrency) == (3600, 300, 5)
    assert policy.remove_named_servers is True and policy.cull_users is False


@pytest.mark.parametrize("argv, cull_every", [
    (["--timeout=1000"], 500),                       # timeout // 2, as idle-culler
    (["--timeout=1001"], 500),
    (["--cull-every=0", "--timeout=100"], 50),
    (["--cull-every=60"], 60),
    (["--timeout=3600", "--gpu-timeout=600"], 300),  # the shortest timeout
    (["--timeout=0", "--max-age=7200"], 3600),
    (["--timeout=0"], 300),
])
def test_cull_every(argv, cull_every):
    assert parse(*argv)[2].cull_every == cull_every


def test_cull_every_considers_rule_timeouts():
    rules = [PolicyRule(pool="h100", idle_timeout=30 * M)]
    assert default_cull_every(Policy(idle_timeout=2 * H), rules) == 15 * M


@pytest.mark.parametrize("argv, message", [
    (["--timeout=abc"], "argument --timeout: expected a duration"),
    (["--timeout=-5"], "argument --timeout: expected a duration >= 0"),
    (["--timeout", "2x"], "argument --timeout: expected a duration"),
    (["--cull-users=maybe"], "argument --cull-users: expected true or false, got 'maybe'"),
    (["--concurrency=0"], "argument --concurrency: expected an integer >= 1"),
    (["--concurrency=two"], "argument --concurrency: expected an integer"),
    (["--api-page-size=-1"], "argument --api-page-size: expected an integer >= 0"),
    (["--gpu-threshold=101"], "argument --gpu-threshold: expected a percentage 0-100"),
    (["--gpu-max-gap=0"], "gpu_max_gap must be > 0"),
    (["--cull"], "unrecognized arguments: --cull"),               # no abbreviations
    (["--cul-users"], "unrecognized arguments: --cul-users"),
    (["--config=idle_culler_config.py"], "--config/--generate-config"),
    (["--generate-config"], "not supported"),
    (["--policy-file=/nonexistent/policy.yaml"], "/nonexistent/policy.yaml: cannot read"),
])
def test_usage_errors_exit_2_naming_the_flag(argv, message, capsys):
    with pytest.raises(SystemExit) as exc:
        parse(*argv)
    assert exc.value.code == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize("text, seconds", [
    (600, 600), (1.5, 1.5), ("600", 600), ("30s", 30), ("15m", 900), ("2h", 7200), ("1d", 86400),
    ("1h30m", 5400), ("1.5h", 5400), (" 2H ", 7200), ("0", 0),
])
def test_parse_duration(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "soon", "-1", "5 minutes", "1m1h", True, None, "nan", "inf"])
def test_parse_duration_rejects(text):
    with pytest.raises(ValueError):
        parse_duration(text)


# ----------------------------------------------------------------------------------- policy file

FULL_POLICY = """\
version: 1
policy:
  idle_timeout: 2h
  gpu_idle_timeout: 1h
  gpu_idle_threshold_pct: 5
  warn_before: 15m
  cull_users: false
exempt:
  users: [admin]
  groups: [platform]
  servers: [long-training]
rules:
  - pool: h100
    idle_timeout: 30m
    gpu_idle_timeout: 30m
  - team: research
    pool: h100
    gpu_idle_timeout: 45m
    exempt: {servers: [sweep]}
  - team: teaching
    max_age: 8h
"""


def write(tmp_path, text):
    path = tmp_path / "policy.yaml"
    path.write_text(textwrap.dedent(text))
    return str(path)


def test_policy_file_sets_base_rules_and_exemptions(tmp_path):
    path = write(tmp_path, FULL_POLICY)
    policy, rules, opts = parse(f"--policy-file={path}")
    assert opts.policy_file == path
    assert (policy.idle_timeout, policy.gpu_idle_timeout, policy.warn_before) == (2 * H, H, 15 * M)
    assert policy.exempt_users == {"admin"} and policy.exempt_groups == {"platform"}
    assert policy.exempt_servers == {"long-training"}
    assert rules == [
        PolicyRule(pool="h100", idle_timeout=30 * M, gpu_idle_timeout=30 * M),
        PolicyRule(team="research", pool="h100", gpu_idle_timeout=45 * M,
                   exempt_servers=frozenset({"sweep"})),
        PolicyRule(team="teaching", max_age=8 * H),
    ]
    assert opts.cull_every == 15 * M                 # half the scarce pool's 30 min

    now = utcnow()
    research_h100 = resolve_policy(policy, rules, Server(user="u", team="research", pool="h100",
                                                         started=now))
    assert (research_h100.idle_timeout, research_h100.gpu_idle_timeout) == (30 * M, 45 * M)
    assert research_h100.exempt_servers == {"long-training", "sweep"}


def test_command_line_flags_override_the_policy_file(tmp_path):
    path = write(tmp_path, FULL_POLICY)
    policy, _, _ = parse("--policy-file", path, "--timeout=60", "--warn-before=0")
    assert policy.idle_timeout == 60 and policy.warn_before == 0
    assert policy.gpu_idle_timeout == H              # not given on the command line: the file's


@pytest.mark.parametrize("text", ["", "# nothing\n", "policy:\nrules: []\nexempt:\n"])
def test_empty_policy_file_changes_nothing(tmp_path, text):
    assert parse("--policy-file", write(tmp_path, text))[:2] == (Policy(idle_timeout=600), [])


POLICY_ERRORS = [
    ("polcy: {}", "polcy: unknown key (did you mean 'policy'?)"),
    ("policy: {idle_timout: 1h}", "policy.idle_timout: unknown key (did you mean 'idle_timeout'?)"),
    ("policy: {idle_timeout: soon}", "policy.idle_timeout: expected a duration"),
    ("policy: {idle_timeout: -5}", "policy.idle_timeout: expected a duration >= 0"),
    ("policy: {max_age: yes}", "policy.max_age: expected a duration, got the boolean True"),
    ("policy: {gpu_idle_threshold_pct: 150}",
     "policy.gpu_idle_threshold_pct: expected a percentage 0-100"),
    ("policy: {gpu_max_gap: 0}", "policy.gpu_max_gap: expected a duration > 0"),
    ("policy: {cull_users: maybe}", "policy.cull_users: expected true or false"),
    ("policy: {exempt_users: [a]}",
     "policy.exempt_users: exemptions go in the top-level 'exempt:'"),
    ("policy: [1, 2]", "policy: expected a mapping"),
    ("exempt: {users: alice}", "exempt.users: expected a list of names"),
    ("exempt: {users: [alice, 3]}", "exempt.users: expected a list of names"),
    ("exempt: {people: [a]}", "exempt.people: unknown key"),
    ("rules: {pool: a}", "rules: expected a list of rules"),
    ("rules: [{idle_timeout: 1h}]", "rules[0]: a rule needs 'team' and/or 'pool'"),
    ("rules: [{pool: h100}]", "rules[0]: the rule overrides nothing"),
    ("rules: [{pool: h100, gpu_timeout: 1h}]",
     "rules[0].gpu_timeout: unknown key (did you mean 'gpu_idle_timeout'?)"),
    ("rules: [{pool: 100, idle_timeout: 1h}]", "rules[0].pool: expected a name (quote it"),
    ("rules: [{team: a, idle_timeout: 1h}, {team: b, warn_before: later}]",
     "rules[1].warn_before: expected a duration"),
    ("rules: [{team: a, exempt: {groups: x}}]", "rules[0].exempt.groups: expected a list"),
    ("rules: [hello]", "rules[0]: expected a mapping"),
    ("version: 2", "version: only version 1 is known"),
    ("policy: {idle_timeout: 1h}\npolicy: {max_age: 1h}", "duplicate key 'policy'"),
    ("policy: {idle_timeout: [1", "invalid YAML"),
    ("- a\n- b\n", "expected a mapping, got list"),
]


@pytest.mark.parametrize("text, message", POLICY_ERRORS, ids=[e[0] for e in POLICY_ERRORS])
def test_policy_file_errors_name_the_key(tmp_path, text, message):
    path = write(tmp_path, text)
    with pytest.raises(PolicyFileError) as exc:
        load_policy_file(path)
    assert str(exc.value).startswith(f"{path}: ")
    assert message in str(exc.value)


def test_policy_file_error_through_the_command_line(tmp_path, capsys):
    path = write(tmp_path, "rules: [{pool: h100, idle_timeout: soon}]")
    with pytest.raises(SystemExit) as exc:
        parse("--policy-file", path)
    assert exc.value.code == 2
    assert f"{path}: rules[0].idle_timeout: expected a duration" in capsys.readouterr().err
