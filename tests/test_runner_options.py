"""The runner's command line (parsed by hand: every start pays for argparse)."""
import pytest

from gpuspawner.backends.runner import UsageError, parse_options


def test_options_and_command():
    args, command = parse_options([
        "--dir", "/a", "--cwd=/w", "--time-limit", "60", "--grace", "5", "--cgroup", "/c1",
        "--cgroup", "/c2", "--groups", "44,45", "--user", "gpuhub-ann", "--make-dir", "/w/ck",
        "--", "python", "--dir", "x"])
    assert (args.dir, args.cwd, args.time_limit, args.grace) == ("/a", "/w", 60.0, 5.0)
    assert (args.cgroup, args.groups, args.user, args.make_dir) == (
        ["/c1", "/c2"], "44,45", "gpuhub-ann", ["/w/ck"])
    assert command == ["python", "--dir", "x"]  # what follows -- is the command's


def test_defaults():
    args, command = parse_options(["--dir", "/a", "--", "true"])
    assert (args.cwd, args.time_limit, args.grace, args.cgroup, args.groups, args.user,
            args.make_dir) == (None, None, 30.0, [], "", None, [])
    # Repeatable options do not share one list between parses.
    args.cgroup.append("/x")
    assert parse_options(["--dir", "/a", "--", "true"])[0].cgroup == []


@pytest.mark.parametrize("argv, says", [
    (["--dir", "/a", "true"], "the command must follow --"),
    (["--dir", "/a", "--"], "no command after --"),
    (["--", "true"], "--dir is required"),
    (["--dir", "/a", "--bogus", "1", "--", "true"], "unrecognized argument: --bogus"),
    (["--dir", "/a", "--grace", "soon", "--", "true"], "--grace: not a number: 'soon'"),
    (["--dir", "/a", "--time-limit=", "--", "true"], "--time-limit: not a number: ''"),
    (["--dir", "/a", "--make-dir", "/w", "--", "true"], "--make-dir goes with --user"),
    (["--dir", "--", "true"], "--dir expects a value"),
    (["--dir", "/a", "--dataset", "no-equals", "--", "true"], "no-equals"),
])
def test_bad_command_lines_say_what_is_wrong(argv, says):
    with pytest.raises(UsageError) as e:
        parse_options(argv)
    assert says in str(e.value)
