"""`hostaffinity`'s command line: what it refuses before reaching for NATS or the API server,
and how it says so (one line naming the command, exit status 1; a usage error, one line naming
the command and its --help, exits 2)."""

from __future__ import annotations

import pytest

from hostaffinity.cli.main import main
from hostaffinity.schema.version import release_version


def _exit(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as stopped:
        main(argv)
    out, err = capsys.readouterr()
    code = stopped.value.code
    assert isinstance(code, int)
    return code, out, err


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        pytest.param(
            ["events", "--pod", "web-1"], "--pod 'web-1': give NAMESPACE/NAME", id="pod-no-ns"
        ),
        pytest.param(
            ["events", "--type", "vm.moved,vm.teleported"],
            "unknown event types vm.teleported;",
            id="unknown-type",
        ),
        pytest.param(
            ["events", "--since", "soon"],
            "--since 'soon': give a duration (90s, 15m, 2h, 7d, 1w) or a time",
            id="since",
        ),
    ],
)
def test_a_bad_filter_is_one_line_naming_the_command_and_exit_1(
    argv: list[str], said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # No NATS listens on the default URL's port in these tests: the answer comes first.
    code, out, err = _exit([*argv, "--nats", "nats://127.0.0.1:1"], capsys)
    assert (code, out) == (1, "")
    assert err.startswith("hostaffinity events: ")
    assert said in err
    assert err.count("\n") == 1


@pytest.mark.parametrize(
    ("argv", "command", "said"),
    [
        pytest.param(
            [], "hostaffinity", "the following arguments are required: command", id="none"
        ),
        pytest.param(
            ["events", "-o", "xml"],
            "hostaffinity events",
            "argument -o/--output: invalid choice",
            id="output",
        ),
        pytest.param(
            ["seed-vcsim"],
            "hostaffinity seed-vcsim",
            "the following arguments are required: --vcenter",
            id="seed",
        ),
        pytest.param(
            ["teleport"],
            "hostaffinity",
            "argument command: invalid choice: 'teleport'",
            id="unknown",
        ),
        pytest.param(
            ["what-if", "host-failure", "esx-1", "--fast"],
            "hostaffinity what-if host-failure",
            "unrecognized arguments: --fast",
            id="unknown-option",
        ),
    ],
)
def test_a_usage_error_is_one_line_naming_the_command_and_its_help_and_exits_2(
    argv: list[str], command: str, said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = _exit(argv, capsys)
    assert (code, out) == (2, "")
    assert err.startswith(f"{command}: ")
    assert said in err
    assert err.endswith(f"; see `{command} --help`\n")
    assert err.count("\n") == 1


def test_version_is_the_release_s(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _exit(["--version"], capsys)
    assert (code, out) == (0, f"hostaffinity {release_version('hostaffinity-cli')}\n")
