"""The alert rules pass `promtool check rules`, fire and stay quiet as rules_test.yaml says (a
firing and a quiet case of every alert), and each has its runbook in docs/operating.md."""

import re
import shutil
import subprocess
from pathlib import Path

import yaml

from tests.monitoring.monitoring import OPERATING, RULES_TEST, alerts, tool, write_rules


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [tool("promtool"), *args], capture_output=True, text=True, timeout=120, check=False
    )


def test_promtool_check_rules_is_clean(tmp_path: Path) -> None:
    result = promtool("check", "rules", str(write_rules(tmp_path)))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout
    assert "WARNING" not in result.stdout + result.stderr


def test_promtool_unit_tests_pass(tmp_path: Path) -> None:
    write_rules(tmp_path)
    shutil.copy(RULES_TEST, tmp_path / RULES_TEST.name)
    result = promtool("test", "rules", str(tmp_path / RULES_TEST.name))
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_alert_has_a_firing_and_a_quiet_unit_test() -> None:
    firing: set[str] = set()
    quiet: set[str] = set()
    for case in yaml.safe_load(RULES_TEST.read_text(encoding="utf-8"))["tests"]:
        for check in case["alert_rule_test"]:
            (firing if check.get("exp_alerts") else quiet).add(check["alertname"])
    names = {a["alert"] for a in alerts()}
    assert names - firing == set(), "alerts never tested firing"
    assert names - quiet == set(), "alerts never tested quiet"


def test_every_alert_has_a_runbook_heading() -> None:
    """runbook_url's anchor is the heading GitHub renders for `### <AlertName>`."""
    headings = re.findall(r"^### (\S+)$", OPERATING.read_text(encoding="utf-8"), re.MULTILINE)
    for alert in alerts():
        assert alert["alert"] in headings, alert["alert"]
        assert alert["annotations"]["runbook_url"].endswith("#" + alert["alert"].lower())
